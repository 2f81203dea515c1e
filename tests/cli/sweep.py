"""The bad-input sweep of issue 21: many wrong flags, missing tools and failing services, each run
through ``python -m qwen36``'s entry point on loopback stand-ins, and what came out classified.

    python -m tests.cli.sweep [--json PATH] [--only SUBSTRING] [--timeout S]

prints one row per case that did not end as it should, then the table: inputs tried, tracebacks,
unclear messages (the last line does not name the cause), errors of more than one line (argparse's
usage block, a multi-line diagnosis), wrong exit codes, exit-0 failures, hangs, and issue 29's
internal errors (70) and accepted bad values (a case's bad value that a command succeeded with or
went past). ``--pending`` adds the cases that wait on another branch's fix; ``--script PATH`` runs
each case through an installed ``qwen36`` console script instead of a fork of this process.
``tests/cli/test_sweep.py`` runs it and wants every column but the first at 0.

To see the same cases against another tree (today's main), run the sweep from a copy of that tree
with this branch's ``tests/`` laid over it (the stand-ins import nothing of the code under test):

    git archive main infra qwen36 startup Pulumi.yaml | tar -x -C /tmp/before
    cp -r tests /tmp/before/ && cd /tmp/before && /work/main/.venv/bin/python -m tests.cli.sweep

Each case runs in a forked child of this process (the heavy imports are paid once, here), in its own
temporary folder as cwd and HOME, with a PATH holding only a shell, ``cat``, ``sleep`` and the
stand-ins the case asks for. The child shortens the CLI's network timeouts and retry pauses where the
tree has them (the same bounds the fault tests use), so a case takes well under a second unless it
hangs; a case still running after ``--timeout`` seconds is killed and counted as a hang.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import random
import re
import signal
import struct
import sys
import tempfile
import threading
import time
import traceback
from collections.abc import Iterator
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

import yaml

from tests.cli.standins import (
    GOOD_TIMINGS,
    HTML,
    MALFORMED_200S,
    answering,
    closed_port,
    completion,
    fake_llama,
    fake_pulumi,
    never_answers,
)
from tests.compute_fake.group import HANG, FakeGroup, FakeMember, Fault, GroupState
from tests.compute_fake.server import fake_compute_api
from tests.compute_fake.shapes import quota_blocked_group

TRACEBACK = "Traceback (most recent call last)"
CASE_TIMEOUT_S = 40.0
PROJECT = "acme-llm-test"
GROUP_ARGS = ("--project", PROJECT, "--region", "us-central1", "--group", "qwen36-dev")
READY = "ready 2026-11-30T22:03:00Z b00t llama-server healthy 170 s after boot"
TOOLS = ("sh", "cat", "sleep", "echo")


@dataclass(frozen=True)
class Case:
    name: str
    argv: tuple[str, ...]
    code: int
    """The exit code it must end with (0: it must succeed)."""
    expect: str
    """What the error line must contain (naming the cause); for code 0, what stdout must contain."""
    world: str = "plain"
    interrupt_after_s: float | None = None
    bad_value: bool = False
    """The input is a value that must be refused: exit 0 is an accepted bad value."""
    stack_file: str | None = None
    """The text of Pulumi.dev.yaml in the case's folder (with a Pulumi.yaml beside it)."""
    outputs: str | None = None
    """What a stand-in `pulumi stack output --json` prints (its text, so it may be no JSON at all)."""
    env: tuple[tuple[str, str], ...] = ()
    pending: str = ""
    """Whose fix the case needs that this branch lacks ("" for none): such cases are left out of
    ``cases()`` unless ``QWEN36_SWEEP_PENDING=1`` (or ``--pending``); delete the mark to enable one."""


@dataclass
class Outcome:
    case: Case
    code: int | None
    out: str
    err: str
    seconds: float
    verdicts: list[str] = field(default_factory=list)


# ------------------------------------------------------------------------------------------ worlds


@dataclass
class World:
    root: Path
    env: dict[str, str]
    subs: dict[str, str]


def _bin(root: Path) -> Path:
    folder = root / "bin"
    folder.mkdir(exist_ok=True)
    for tool in TOOLS:
        for where in ("/bin", "/usr/bin"):
            if Path(where, tool).exists() and not (folder / tool).exists():
                (folder / tool).symlink_to(Path(where, tool))
    return folder


def _running_group(*faults: Fault) -> FakeGroup:
    member = FakeMember("qwen36-dev-a1", "us-central1-a")
    member.guest_attributes = {"report": READY}
    group = FakeGroup(
        timeline=[(0.0, GroupState(members=[member]))],
        project=PROJECT,
        region="us-central1",
        new_member=FakeMember("qwen36-dev-x1b2", "us-central1-b"),
    )
    group.new_member.guest_attributes = {"report": READY}
    group.faults.extend(faults)
    return group


GROUP_PATH = f"/compute/v1/projects/{PROJECT}/regions/us-central1/instanceGroupManagers/qwen36-dev"


@contextlib.contextmanager
def world(name: str, root: Path) -> Iterator[World]:
    """The stand-ins a case runs against, and the names its argv may use ({compute}, {llama}, ...)."""
    bin_dir = _bin(root)
    env = {
        "PATH": str(bin_dir),
        "HOME": str(root),
        "XDG_CACHE_HOME": str(root / "cache"),
        "HF_ENDPOINT": f"http://127.0.0.1:{closed_port()}",
        "HF_HUB_DISABLE_TELEMETRY": "1",
        "STORAGE_EMULATOR_HOST": f"http://127.0.0.1:{closed_port()}",
        "GOOGLE_APPLICATION_CREDENTIALS": str(root / "no-such-credentials.json"),
        "COLUMNS": "200",
    }
    subs = {
        "tmp": str(root),
        "dir": str(root),
        "missing": str(root / "no" / "such" / "place"),
        "closed": f"http://127.0.0.1:{closed_port()}",
        "file": str(_text_file(root)),
    }
    with contextlib.ExitStack() as stack:
        kind, _, detail = name.partition(":")
        if kind == "compute":
            faults = {
                "503": (Fault("GET", "", 503, times=1000), Fault("POST", "", 503, times=1000)),
                "resize-503": (Fault("POST", "/resize", 503, times=1000),),
                "503-once": (Fault("GET", GROUP_PATH, 503), Fault("POST", "/listManagedInstances", 503)),
                "429-post": (Fault("POST", "", 429, times=1000),),
                "hang": (Fault("GET", "", HANG, times=1000), Fault("POST", "", HANG, times=1000)),
            }.get(detail, ())
            group = _running_group(*faults)
            if detail == "quota":
                group = quota_blocked_group(PROJECT)
            if detail == "no-report":
                group.timeline[0][1].members[0].guest_attributes = {}
            if detail in ("stopped", "resize-503"):
                group.timeline[0][1].members.clear()
                group.timeline[0][1].target_size = 0
            subs["compute"] = stack.enter_context(fake_compute_api(group))
        if kind == "body":
            # Every request answered 200 with one malformed body (standins.MALFORMED_200S).
            body, content_type = MALFORMED_200S[detail]
            subs["body"] = stack.enter_context(answering({}, (200, body, content_type)))
        if kind == "door":
            # A group that serves (the compute fake), and a door that answers /props with `detail`.
            subs["compute"] = stack.enter_context(fake_compute_api(_running_group()))
            status = int(detail)
            message = json.dumps({"error": {"message": f"door says {status}"}}).encode()
            subs["door"] = stack.enter_context(answering({}, (status, message, "application/json")))
        if kind == "llama" and detail in LLAMA_ROUTES:
            subs["llama"] = stack.enter_context(answering(*LLAMA_ROUTES[detail]))
        elif kind == "llama":
            if detail == "hang":
                subs["llama"] = stack.enter_context(never_answers())
            elif detail == "slow-chat":
                # /health says ok; a completion never comes (until the case is over).
                release = threading.Event()
                stack.callback(release.set)
                subs["llama"] = stack.enter_context(
                    fake_llama(completion(), on_chat=lambda: release.wait(CASE_TIMEOUT_S))
                )
            else:
                body, kind_header = {
                    "html": (HTML, "text/html"),
                    "text-timings": (
                        completion({"predicted_per_second": "fast", "predicted_n": "x"}),
                        "application/json",
                    ),
                    "null-timings": (completion({"predicted_per_second": None}), "application/json"),
                    "no-timings": (json.dumps({"choices": []}).encode(), "application/json"),
                    "ok": (completion(), "application/json"),
                }[detail]
                on_chat = None
                if detail == "ok":
                    # The report's folder goes away mid-run: the report must be kept elsewhere.
                    def on_chat() -> None:
                        with contextlib.suppress(OSError):
                            (root / "reports" / "out.json").unlink(missing_ok=True)
                            (root / "reports").rmdir()

                    (root / "reports").mkdir()
                subs["llama"] = stack.enter_context(fake_llama(body, kind_header, on_chat))
        if kind == "pulumi":
            if detail == "unknown":
                fake_pulumi(bin_dir, fail="error: no stack named 'nope' found")
            elif detail == "empty":
                fake_pulumi(bin_dir, outputs={})
            elif detail == "garbage":
                (bin_dir / "pulumi").write_text("#!/bin/sh\necho 'warning: not JSON'\n")
                (bin_dir / "pulumi").chmod(0o755)
        if kind == "gcs":
            # The real storage client against gcp-storage-emulator, with the bucket "bkt".
            from gcp_storage_emulator.server import create_server
            from google.cloud import storage

            port = closed_port()
            emulator = create_server("127.0.0.1", port, in_memory=True)
            emulator.start()
            stack.callback(emulator.stop)
            env["STORAGE_EMULATOR_HOST"] = f"http://127.0.0.1:{port}"
            previous = os.environ.get("STORAGE_EMULATOR_HOST")
            os.environ["STORAGE_EMULATOR_HOST"] = env["STORAGE_EMULATOR_HOST"]
            try:
                storage.Client().create_bucket("bkt")
            finally:
                if previous is None:
                    os.environ.pop("STORAGE_EMULATOR_HOST", None)
                else:
                    os.environ["STORAGE_EMULATOR_HOST"] = previous
            kind = "project"
            subs["noise"] = str(_noise_file(root))
            # A GGUF header alone (73 bytes, no tensor), and a 4 KB GGUF that lists one.
            (root / "header.gguf").write_bytes(gguf(0, 0))
            (root / "small.gguf").write_bytes(gguf(1, 4096))
        if kind == "project":
            (root / "Pulumi.yaml").write_text("name: qwen36-mtp-l4\nruntime: python\n")
            config = {"gcp:project": PROJECT}
            if detail == "bad-value":
                config["qwen36-mtp-l4:ctxSize"] = 262144
            if detail == "bad-yaml":
                (root / "Pulumi.dev.yaml").write_text("config: [unclosed\n")
            else:
                (root / "Pulumi.dev.yaml").write_text(yaml.safe_dump({"config": config}))
        if kind == "tune":
            (root / "bad.yaml").write_text("config: {unclosed\n")
            (root / "model.gguf").write_bytes(b"GGUF")
            hang = root / "slow-server"
            hang.write_text("#!/bin/sh\nexec sleep 300\n")
            hang.chmod(0o755)
            subs["slow_server"] = str(hang)
            # What a llama-server given a bad flag does: say so and exit 1 at once.
            failing = root / "failing-server"
            failing.write_text("#!/bin/sh\necho 'error: invalid argument' >&2\nexit 1\n")
            failing.chmod(0o755)
            subs["server"] = str(failing)
        yield World(root, env, subs)


def _llama(metrics: bytes, timings: dict[str, Any] | None = None) -> tuple[dict[str, Any], Any]:
    """A llama-server stand-in: /health ok, /metrics ``metrics``, completions with ``timings``."""
    ok = (200, b'{"status":"ok"}', "application/json")
    return (
        {
            "/metrics": (200, metrics, "text/plain; version=0.0.4"),
            "/completions": (200, completion(timings), "application/json"),
        },
        ok,
    )


_COUNTERS = b"llamacpp:tokens_predicted_total 100\nllamacpp:tokens_predicted_seconds_total 1\n"
# llama-servers that answer wrongly: a /metrics that is not llama.cpp's text, timings that measure
# nothing (issue 29: exit 70, and -5.0 or 0.0 tok/s with exit 0).
LLAMA_ROUTES: dict[str, tuple[dict[str, Any], Any]] = {
    "metrics-html": _llama(HTML),
    "metrics-junk": _llama(b"\x00\xff not prometheus at all\nllamacpp:tokens_predicted_total many\n"),
    "metrics-label-space": _llama(
        b'llamacpp:tokens_predicted_total{slot="a b"} 100\nllamacpp:tokens_predicted_seconds_total 1\n'
    ),
    "metrics-negative": _llama(
        b"llamacpp:tokens_predicted_total -5\nllamacpp:tokens_predicted_seconds_total 1\n"
    ),
    "negative-timings": _llama(_COUNTERS, {**GOOD_TIMINGS, "predicted_per_second": -5.0}),
    "zero-timings": _llama(_COUNTERS, {**GOOD_TIMINGS, "predicted_per_second": 0.0, "predicted_n": 0}),
    "zero-ms": _llama(_COUNTERS, {**GOOD_TIMINGS, "predicted_ms": 0.0}),
}


def gguf(tensors: int, size: int) -> bytes:
    """A GGUF header naming qwen35moe with ``tensors`` tensors, padded to ``size`` bytes
    (https://github.com/ggml-org/ggml/blob/master/docs/gguf.md)."""
    key, value = b"general.architecture", b"qwen35moe"
    head = (
        b"GGUF" + struct.pack("<IQQ", 3, tensors, 1) + struct.pack("<Q", len(key)) + key
        + struct.pack("<IQ", 8, len(value)) + value
    )  # fmt: skip
    return head + b"\0" * max(0, size - len(head))


def _noise_file(root: Path) -> Path:
    path = root / "noise.gguf"
    path.write_bytes(random.Random(3).randbytes(256 * 1024))
    return path


def _text_file(root: Path) -> Path:
    path = root / "notes.gguf"
    path.write_text("not a model, just text\n" * 100)
    return path


# ------------------------------------------------------------------------------------------- cases

USAGE = 2


PENDING_ENV = "QWEN36_SWEEP_PENDING"


def cases(include_pending: bool | None = None) -> list[Case]:
    """Issue 21's corpus (tests/cli/sweep_issue21.py) and issue 29's (tests/cli/sweep_corpus.py);
    cases marked ``pending`` only with ``include_pending`` (default: ``QWEN36_SWEEP_PENDING``)."""
    from tests.cli import sweep_corpus, sweep_issue21

    if include_pending is None:
        include_pending = os.environ.get(PENDING_ENV, "") not in ("", "0")
    every = [*sweep_issue21.cases(), *sweep_corpus.cases()]
    return [c for c in every if include_pending or not c.pending]


# ------------------------------------------------------------------------------------------ running


def _shorten_timeouts() -> None:
    """The bounds the fault tests use, applied in the child where the tree under test has them."""
    import importlib

    for module, name, value in (
        ("qwen36.group", "COMPUTE_REQUEST_TIMEOUT_S", 1.0),
        ("qwen36.status", "COMPUTE_TIMEOUT_S", 1.0),
        ("qwen36.status", "OPERATION_WAIT_S", 2.0),
        ("qwen36.measure.client", "HEALTH_TIMEOUT_S", 1.0),
        ("qwen36.measure.client", "CONNECT_TIMEOUT_S", 1.0),
        ("qwen36.stage_gcs", "BUCKET_CHECK_TIMEOUT_S", 2),
        ("qwen36.stage_gcs", "BUCKET_RETRY_DEADLINE_S", 1.0),
        ("qwen36.stage", "HUB_TIMEOUT_S", 2.0),
    ):
        with contextlib.suppress(ImportError, AttributeError):
            mod = importlib.import_module(module)
            if hasattr(mod, name):
                setattr(mod, name, value)
    with contextlib.suppress(ImportError):
        retry = importlib.import_module("qwen36.retry")
        retry.POLICY = retry.Policy(attempts=4, initial_s=0.01, max_s=0.05, budget_s=10.0)  # type: ignore[attr-defined]


def _printing_pulumi(bin_dir: Path, text: str) -> None:
    """A `pulumi` that prints ``text`` for every command (a hostile or broken stack output)."""
    (bin_dir / "outputs.txt").write_text(text, encoding="utf-8", errors="surrogateescape")
    script = bin_dir / "pulumi"
    script.write_text(f"#!/bin/sh\ncat {bin_dir / 'outputs.txt'}\n")
    script.chmod(0o755)


def _spawn(script: Path, argv: list[str], env: dict[str, str], cwd: Path, out: Path, err: Path) -> Any:
    import subprocess

    with out.open("wb") as stdout, err.open("wb") as stderr:
        # The script's own shebang names its venv's python, which PATH need not hold.
        return subprocess.Popen([str(script), *argv], cwd=cwd, env=env, stdout=stdout, stderr=stderr)


def _child(argv: list[str], env: dict[str, str], cwd: Path, out: Path, err: Path) -> None:
    """Runs the CLI as ``python -m qwen36`` would, then leaves with its status (never returns)."""
    code = 1
    try:
        os.chdir(cwd)
        os.environ.clear()
        os.environ.update(env)
        fd_out = os.open(out, os.O_WRONLY | os.O_CREAT | os.O_TRUNC)
        fd_err = os.open(err, os.O_WRONLY | os.O_CREAT | os.O_TRUNC)
        sys.stdout.flush()
        sys.stderr.flush()
        os.dup2(fd_out, 1)
        os.dup2(fd_err, 2)
        # The parent may have replaced sys.stdout/stderr (pytest's capture): write to the fds.
        sys.stdout = open(1, "w", buffering=1, encoding="utf-8", errors="replace", closefd=False)  # noqa: SIM115
        sys.stderr = open(2, "w", buffering=1, encoding="utf-8", errors="replace", closefd=False)  # noqa: SIM115
        _shorten_timeouts()
        from qwen36.__main__ import main

        try:
            code = int(main(argv) or 0)
        except SystemExit as done:
            code = done.code if isinstance(done.code, int) else (0 if done.code is None else 1)
        except BaseException:
            # What the interpreter does with an exception that leaves `python -m qwen36`.
            traceback.print_exc()
            code = 1
    finally:
        with contextlib.suppress(Exception):
            sys.stdout.flush()
            sys.stderr.flush()
        os._exit(code)


def run_case(case: Case, timeout_s: float = CASE_TIMEOUT_S, script: Path | None = None) -> Outcome:
    """Runs ``case`` in a forked child of this process, or, with ``script``, through that installed
    ``qwen36`` console script as a process of its own (its own interpreter, its own imports)."""
    with tempfile.TemporaryDirectory(prefix="qwen36-sweep-") as tmp:
        root = Path(tmp)
        kind, _, detail = case.world.partition(":")
        extra_env: dict[str, str] = dict(case.env)
        world_name = case.world
        if kind == "env":
            name, _, value = detail.partition("=")
            extra_env[name] = value
            world_name = "plain"
        with world(world_name, root) as w:
            env = {**w.env, **{k: v.format(**w.subs) if "{" in v else v for k, v in extra_env.items()}}
            argv = [arg.format(**w.subs) if "{" in arg else arg for arg in case.argv]
            if case.stack_file is not None:
                (root / "Pulumi.yaml").write_text("name: qwen36-mtp-l4\nruntime: python\n")
                (root / "Pulumi.dev.yaml").write_text(
                    case.stack_file, encoding="utf-8", errors="surrogateescape"
                )
            if case.outputs is not None:
                _printing_pulumi(root / "bin", case.outputs)
            out, err = root / "stdout", root / "stderr"
            started = time.monotonic()
            if script is not None:
                process = _spawn(script, argv, env, root, out, err)
                pid = process.pid
            else:
                pid = os.fork()
                if pid == 0:
                    _child(argv, env, root, out, err)
            code: int | None = None
            interrupted = False
            while True:
                done, status = os.waitpid(pid, os.WNOHANG)
                elapsed = time.monotonic() - started
                if done:
                    code = os.waitstatus_to_exitcode(status)
                    break
                if (
                    case.interrupt_after_s is not None
                    and not interrupted
                    and elapsed >= case.interrupt_after_s
                ):
                    os.kill(pid, signal.SIGINT)
                    interrupted = True
                if elapsed >= timeout_s:
                    os.kill(pid, signal.SIGKILL)
                    os.waitpid(pid, 0)
                    break
                time.sleep(0.02)
            outcome = Outcome(
                case,
                code,
                out.read_text(errors="replace"),
                err.read_text(errors="replace"),
                time.monotonic() - started,
            )
    outcome.verdicts = judge(outcome)
    return outcome


_PROGRESS = re.compile(r"^(note: |(stage|wake|tune|tunnel|ssh|logs): (?!error: ))|━")


def _error_lines(err: str) -> list[str]:
    """The lines of stderr that report the failure: the last line, and every line before it that is
    not a progress line (``stage: ...``, ``tunnel: <member> in <zone>``, a note, a progress bar)."""
    lines = [line for line in err.splitlines() if line.strip()]
    if not lines:
        return []
    return [line for line in lines[:-1] if not _PROGRESS.search(line)] + [lines[-1]]


def judge(o: Outcome) -> list[str]:
    """The ways an outcome fell short: traceback, hang, exit-0 failure, wrong code, unclear."""
    case = o.case
    verdicts = []
    if o.code is None:
        return ["hang"]
    if TRACEBACK in o.err or TRACEBACK in o.out:
        verdicts.append("traceback")
    if o.code == 70 or "internal error (" in o.err:
        verdicts.append("internal error")
    # A bad value is accepted when the command succeeds with it, or goes on past it to fail for
    # another reason (its line does not name the value's check: a stage that reached GCS).
    last = (_error_lines(o.err) or [""])[-1]
    if case.bad_value and (o.code == 0 or (o.code != case.code and case.expect not in last)):
        verdicts.append("accepted bad value")
    if case.code != 0 and o.code == 0:
        verdicts.append("exit-0 failure")
    elif o.code != case.code:
        verdicts.append("wrong code")
    if case.code == 0:
        if case.expect not in o.out and o.code == 0:
            verdicts.append("unclear")
        return verdicts
    if "traceback" in verdicts:
        return verdicts
    lines = _error_lines(o.err)
    if not lines or case.expect not in lines[-1]:
        verdicts.append("unclear")
    elif len(lines) > 1:
        verdicts.append("not one line")
    return verdicts


def table(outcomes: list[Outcome]) -> dict[str, int]:
    def count(verdict: str) -> int:
        return sum(verdict in o.verdicts for o in outcomes)

    return {
        "inputs tried": len(outcomes),
        "tracebacks": count("traceback"),
        "unclear messages": count("unclear"),
        "more than one line": count("not one line"),
        "wrong exit codes": count("wrong code"),
        "exit-0 failures": count("exit-0 failure"),
        "hangs": count("hang"),
        "internal error (70)": count("internal error"),
        "accepted bad value": count("accepted bad value"),
    }


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m tests.cli.sweep")
    parser.add_argument("--json", type=Path, help="write every outcome here")
    parser.add_argument("--only", help="run the cases whose name contains this")
    parser.add_argument("--timeout", type=float, default=CASE_TIMEOUT_S, help="seconds before a hang")
    parser.add_argument("--pending", action="store_true", help="also the cases marked pending (another fix)")
    parser.add_argument("--script", type=Path, help="run each case through this installed qwen36 script")
    args = parser.parse_args(argv)
    # Paid once in this process, inherited by every forked child.
    import google.cloud.compute_v1
    import google.cloud.storage  # noqa: F401
    import huggingface_hub  # noqa: F401

    import qwen36.__main__  # noqa: F401

    selected = [c for c in cases(args.pending or None) if not args.only or args.only in c.name]
    outcomes = []
    for case in selected:
        outcome = run_case(case, args.timeout, args.script)
        outcomes.append(outcome)
        if outcome.verdicts:
            last = (_error_lines(outcome.err) or outcome.err.splitlines() or [""])[-1]
            print(
                f"{', '.join(outcome.verdicts):<28} {case.name:<44} exit {outcome.code} "
                f"(want {case.code}) {outcome.seconds:5.1f}s | {last[:160]}",
                flush=True,
            )
    summary = table(outcomes)
    print("| " + " | ".join(summary) + " |")
    print("| " + " | ".join("---:" for _ in summary) + " |")
    print("| " + " | ".join(str(v) for v in summary.values()) + " |")
    if args.json:
        rows: list[dict[str, Any]] = [
            {
                **asdict(o.case),
                "code_seen": o.code,
                "verdicts": o.verdicts,
                "seconds": round(o.seconds, 2),
                "stderr": o.err[-2000:],
                "stdout": o.out[-500:],
            }
            for o in outcomes
        ]
        args.json.write_text(json.dumps({"summary": summary, "cases": rows}, indent=1))
    return 0 if all(v == 0 for k, v in summary.items() if k != "inputs tried") else 1


if __name__ == "__main__":
    sys.exit(main())
