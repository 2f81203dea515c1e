"""The Pulumi CLI as ``tunnel``, ``ssh``, ``logs``, ``wake`` and ``status`` call it to find a stack's
group: each failure is one typed error whose line says what to pass instead."""

from __future__ import annotations

import shutil
import subprocess

from qwen36.errors import MissingToolError, NotFoundError, UnreachableError

PULUMI_TIMEOUT_S = 60
INSTEAD = "pass --project, --region and --group"


def pulumi_stdout(args: list[str], *, shown: str, timeout_note: str = "") -> str:
    """``pulumi <args>``'s stdout. ``shown`` is the command as the error lines name it;
    ``timeout_note`` ends the line of a run that outlived PULUMI_TIMEOUT_S."""
    pulumi = shutil.which("pulumi")
    if pulumi is None:
        raise MissingToolError(f"the pulumi CLI is not on PATH; {INSTEAD} instead")
    try:
        done = subprocess.run(
            [pulumi, *args], capture_output=True, text=True, timeout=PULUMI_TIMEOUT_S, check=False
        )
    except subprocess.TimeoutExpired:
        raise UnreachableError(
            f"`{shown}` took over {PULUMI_TIMEOUT_S} s (is the state backend reachable? `pulumi whoami`)"
            + timeout_note
        ) from None
    if done.returncode != 0:
        last = (done.stderr.strip().splitlines() or [f"exit {done.returncode}"])[-1]
        raise NotFoundError(
            f"`{shown}` failed ({last[:300]}); check the stack name (`pulumi stack ls`), or {INSTEAD}"
        )
    return done.stdout
