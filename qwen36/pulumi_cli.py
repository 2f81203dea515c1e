"""The Pulumi CLI as ``tunnel``, ``ssh``, ``logs``, ``wake``, ``status`` and ``verify`` call it to find
a stack's group: each failure is one typed error whose line says what to pass instead."""

from __future__ import annotations

import shutil
import subprocess
from collections.abc import Mapping
from pathlib import Path

from qwen36.errors import MissingToolError, NotFoundError, UnreachableError

PULUMI_TIMEOUT_S = 60
INSTEAD = "pass --project, --region and --group"


def pulumi_run(
    args: list[str],
    *,
    shown: str,
    timeout_s: float = PULUMI_TIMEOUT_S,
    timeout_note: str = "",
    env: Mapping[str, str] | None = None,
    cwd: Path | None = None,
    missing_fix: str = f"{INSTEAD} instead",
) -> subprocess.CompletedProcess[str]:
    """``pulumi <args>`` run to its end, whatever its exit code (``env``: the whole environment it
    gets, None for this one's). Only a missing CLI and a run past ``timeout_s`` raise."""
    pulumi = shutil.which("pulumi", path=env.get("PATH") if env is not None else None)
    if pulumi is None:
        raise MissingToolError(f"the pulumi CLI is not on PATH; {missing_fix}")
    try:
        return subprocess.run(
            [pulumi, *args],
            capture_output=True,
            text=True,
            timeout=timeout_s,
            check=False,
            env=None if env is None else dict(env),
            cwd=cwd,
        )
    except subprocess.TimeoutExpired:
        raise UnreachableError(
            f"`{shown}` took over {timeout_s:g} s (is the state backend reachable? `pulumi whoami`)"
            + timeout_note
        ) from None


def last_line(done: subprocess.CompletedProcess[str]) -> str:
    """The last line of a run's stderr (Pulumi's ``error: ...``), or its exit code."""
    return (done.stderr.strip().splitlines() or [f"exit {done.returncode}"])[-1][:300]


def pulumi_stdout(args: list[str], *, shown: str, timeout_note: str = "") -> str:
    """``pulumi <args>``'s stdout. ``shown`` is the command as the error lines name it;
    ``timeout_note`` ends the line of a run that outlived PULUMI_TIMEOUT_S."""
    done = pulumi_run(args, shown=shown, timeout_note=timeout_note)
    if done.returncode != 0:
        raise NotFoundError(
            f"`{shown}` failed ({last_line(done)}); check the stack name (`pulumi stack ls`), or {INSTEAD}"
        )
    return done.stdout
