"""``qwen36 <command>`` (or ``python -m qwen36``): the project's commands, one module each.

Every module in ``COMMANDS`` has ``register(subparsers)``, which adds its subparser and sets
``func`` (``args -> exit code``) as its default, and optionally ``check`` (``args -> None``, raising
:class:`qwen36.errors.UsageError`), which vets the arguments before anything runs. Modules import
their heavy dependencies inside ``func`` so that ``--help`` and the other commands stay fast.

One dispatcher (:func:`main`) ends every run: an expected failure (a :class:`qwen36.errors.QwenError`
or a library error that :func:`qwen36.errors.as_error` knows) is one ``<command>: error: ...`` line on
stderr and its exit code; Ctrl-C is one line and 130, after the ``with`` and ``finally`` blocks of the
command stopped what it started; anything else is a bug: one line, and the traceback only with
``--debug`` or ``QWEN36_DEBUG=1``.
"""

from __future__ import annotations

import argparse
import contextlib
import importlib
import os
import sys
import traceback
from collections.abc import Sequence
from typing import NoReturn

from qwen36.errors import CAUSES, DEBUG_ENV, Exit, QwenError, as_error, detail, one_line

PROG = "qwen36"
COMMANDS = (
    "qwen36.stage",
    "qwen36.measure",
    "qwen36.wait_cmd",
    "qwen36.tunnel",
    "qwen36.wake",
    "qwen36.status",
    "qwen36.check",
    "qwen36.keys",
    "qwen36.verify",
)


class OneLineParser(argparse.ArgumentParser):
    """argparse, but a bad argument is one line (``<command>: error: <what> (see ... --help)``), exit 2.

    Subparsers made through ``add_subparsers`` are of the parser's own class, so every command's
    parser inherits this.
    """

    def error(self, message: str) -> NoReturn:
        # Named as the dispatcher names a command's other errors: "wait: error: ...".
        command = self.prog.removeprefix(PROG).strip() or "qwen36"
        self.exit(Exit.USAGE, f"{command}: error: {one_line(message)} (see {self.prog} --help)\n")


def build_parser() -> argparse.ArgumentParser:
    parser = OneLineParser(prog=PROG, description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument(
        "--debug",
        action="store_true",
        default=os.environ.get(DEBUG_ENV, "") not in ("", "0"),
        help=f"show the traceback of an unexpected error (or set {DEBUG_ENV}=1)",
    )
    # Not "command": a command may have an argument of that name (ssh's remote command).
    subparsers = parser.add_subparsers(dest="cli_command", required=True, metavar="COMMAND")
    for name in COMMANDS:
        importlib.import_module(name).register(subparsers)
    return parser


def parse(argv: Sequence[str] | None = None) -> argparse.Namespace:
    """The parsed and vetted arguments; a bad one raises SystemExit(2) after its one line."""
    args = build_parser().parse_args(None if argv is None else list(argv))
    check = getattr(args, "check", None)
    if check is not None:
        try:
            check(args)
        except QwenError as exc:
            _say(args.cli_command, exc.message)
            raise SystemExit(exc.exit_code) from None
    return args


def main(argv: Sequence[str] | None = None) -> int:
    debug = os.environ.get(DEBUG_ENV, "") not in ("", "0")
    command = "qwen36"
    try:
        try:
            args = parse(argv)
        except SystemExit as done:
            return _code(done.code)
        debug = debug or bool(args.debug)
        command = str(args.cli_command)
        return int(args.func(args))
    except BaseException as exc:  # the one place every failure ends
        if isinstance(exc, SystemExit):
            return _code(exc.code)
        return report(command, exc, debug=debug)


def report(command: str, exc: BaseException, *, debug: bool = False) -> int:
    """One line for ``exc`` on stderr; returns the exit code it maps to."""
    error = as_error(exc)
    if error is None:
        if debug:
            traceback.print_exception(exc, file=sys.stderr)
        _say(command, f"internal error ({type(exc).__name__}: {detail(exc)}); {CAUSES[Exit.BUG][1]}")
        return Exit.BUG
    if error.exit_code == Exit.INTERRUPTED:
        _say(command, "interrupted (Ctrl-C)")
        return Exit.INTERRUPTED
    if debug and error is not exc:
        traceback.print_exception(exc, file=sys.stderr)
    _say(command, error.message)
    return error.exit_code


def _say(command: str, message: str) -> None:
    # A closed stderr: the exit code still says it.
    with contextlib.suppress(OSError, ValueError):
        print(f"{command}: error: {message}", file=sys.stderr, flush=True)


def _code(code: object) -> int:
    if code is None:
        return 0
    if isinstance(code, int):
        return code
    # argparse's own exit(message) paths print and pass an int; anything else was printed already.
    return Exit.USAGE


if __name__ == "__main__":
    sys.exit(main())
