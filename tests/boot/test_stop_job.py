"""stop_job, the boot script's way to end a parallel job (a failure elsewhere, or the early jobs
before an ECC reboot), run as rendered under real bash on real processes.

A job's children outlive its subshell by a moment and go to the nearest reaper, which on a VM is
systemd and here may be a PID 1 that reaps late or never. Until reaped they are zombies, and a
zombie still answers `kill -0`. The bash runs under a reaper that reaps only once the bash has
exited, so these tests see that case on every machine.
"""

from __future__ import annotations

import subprocess
import sys
import time
from pathlib import Path

from infra.boot_script import render_boot_script
from infra.config import StackConfig

# A grace far longer than a stop should take, so a stop that waits it out is plain to see.
GRACE_POLLS = 100
GRACE_POLL_S = 0.1
RUN_TIMEOUT_S = 60

# Runs argv as a child subreaper (prctl PR_SET_CHILD_SUBREAPER = 36) that waits for argv alone, then
# reaps the orphans it was left.
SLOW_REAPER = """
import ctypes, os, subprocess, sys
ctypes.CDLL(None, use_errno=True).prctl(36, 1, 0, 0, 0)
rc = subprocess.run(sys.argv[1:]).returncode
while True:
    try:
        os.waitpid(-1, 0)
    except ChildProcessError:
        break
sys.exit(rc)
"""


def _functions() -> str:
    """The rendered script with its last line (`main "$@"`) left off: every helper, nothing run."""
    script = render_boot_script(StackConfig(), bucket="b", api_key_secret="k", project="p")
    return script[: script.rindex('main "$@"')]


def _run(tmp_path: Path, *jobs: str, polls: int = GRACE_POLLS) -> tuple[float, str, list[int]]:
    """Start ``jobs`` the way the script starts its jobs, stop them together; (seconds, log, pids
    still alive)."""
    starts = "".join(f"(JOB_PID=$BASHPID && {job}) &\njobs+=($!)\n" for job in jobs)
    snippet = f"""
set +e
TIME_SCALE=1 STOP_JOB_POLLS={polls} STOP_JOB_POLL_S={GRACE_POLL_S}
jobs=()
{starts}sleep 0.3
for job in "${{jobs[@]}}"; do process_tree "$job"; done >tree
stop_job "${{jobs[@]}}"
"""
    # From a file: the rendered script is longer than one command-line argument may be (128 KiB).
    functions = tmp_path / "functions.sh"
    functions.write_text(_functions())
    started = time.monotonic()
    result = subprocess.run(
        [sys.executable, "-c", SLOW_REAPER, "bash", "-c", f"source {functions}\n{snippet}"],
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=RUN_TIMEOUT_S,
    )
    took = time.monotonic() - started
    pids = [int(p) for p in (tmp_path / "tree").read_text().split()]
    alive = [p for p in pids if Path(f"/proc/{p}").exists() and _state(p) != "Z"]
    return took, result.stdout + result.stderr, alive


def _state(pid: int) -> str:
    try:
        return Path(f"/proc/{pid}/stat").read_text().rsplit(") ", 1)[1].split()[0]
    except (OSError, IndexError):
        return "gone"


def test_a_job_that_ends_at_sigterm_is_not_waited_on_for_the_grace(tmp_path: Path) -> None:
    # Its child, orphaned, is a zombie until reaped: a liveness test that counts a zombie as running
    # waits out the whole grace (10 s in production) before the ECC reboot.
    took, log, alive = _run(tmp_path, "sleep 300 & wait; echo never", "sleep 200 & wait")
    assert "stopping the other parallel job" in log, log
    assert "outlived SIGTERM" not in log, log
    assert len(log.split("stopping the other parallel job: processes ")[1].split()) >= 4, log
    assert alive == []
    assert took < GRACE_POLLS * GRACE_POLL_S / 2, f"{took:.1f} s: the stop waited out the grace"


def test_a_job_that_ignores_sigterm_is_killed_after_the_grace(tmp_path: Path) -> None:
    took, log, alive = _run(tmp_path, "trap '' TERM; sleep 300 & wait; echo never", polls=5)
    assert "outlived SIGTERM (5 polls" in log, log
    assert alive == []
    assert took >= 5 * GRACE_POLL_S
