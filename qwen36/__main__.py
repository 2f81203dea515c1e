"""``qwen36 <command>`` (or ``python -m qwen36``): the project's commands, one module each.

Every module in ``COMMANDS`` has ``register(subparsers)``, which adds its subparser and sets
``func`` (``args -> exit code``) as its default. Modules import their heavy dependencies inside
``func`` so that ``--help`` and the other commands stay fast.
"""

from __future__ import annotations

import argparse
import importlib
import sys

COMMANDS = (
    "qwen36.stage",
    "qwen36.measure",
    "qwen36.wait_cmd",
    "qwen36.tunnel",
    "qwen36.wake",
    "qwen36.status",
    "qwen36.check",
)


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="qwen36", description=__doc__.splitlines()[0] if __doc__ else None)
    subparsers = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")
    for name in COMMANDS:
        importlib.import_module(name).register(subparsers)
    return parser


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    return int(args.func(args))


if __name__ == "__main__":
    sys.exit(main())
