"""The commands through the project's real entry point, `python -m qwen36`."""

from __future__ import annotations

import subprocess
import sys

from qwen36.errors import Exit
from tests.harness.server import free_port

CLI_TIMEOUT_S = 60


def _qwen36(*argv: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "qwen36", *argv],
        capture_output=True,
        text=True,
        timeout=CLI_TIMEOUT_S,
        check=False,
    )


def test_bench_load_and_tune_are_registered() -> None:
    for command in ("bench", "load", "tune"):
        done = _qwen36(command, "--help")
        assert done.returncode == 0, done.stderr
        assert f"usage: qwen36 {command}" in done.stdout


def test_unreachable_server_is_one_line_and_the_unreachable_code() -> None:
    done = _qwen36("bench", "--url", f"http://127.0.0.1:{free_port()}", "--reps", "1")
    assert done.returncode == Exit.UNREACHABLE
    assert done.stdout == ""
    lines = done.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("bench: error: no server answers at")


def test_bad_arguments_exit_two() -> None:
    assert _qwen36("bench", "--reps", "0").returncode == 2
    assert _qwen36("load", "--clients", "-1").returncode == 2
