"""The Pulumi CLI the deploy needs: on PATH, and at least ``MINIMUM``.

The program adopts the kept VPC, subnet and bucket with ``import_`` and then updates them to its
inputs ("import, then update"), which the engine does only since pulumi/pulumi #19339 (commit
961156bb35, first released in v3.174.0); before it, an import whose inputs differ fails. Pulumi.yaml's
``options.refresh: always`` needs v3.14.0 (pulumi/pulumi #8071), which the first bound covers.
``scripts/deploy.sh`` checks the same bound (its ``PULUMI_MIN``; tests/check keep the two equal).
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess

from qwen36.check.report import Fact, block, ok, unread

MINIMUM = (3, 174, 0)
WHY = "import-then-update of the kept VPC, subnet and bucket (pulumi/pulumi#19339)"
INSTALL = "https://www.pulumi.com/docs/install/"
TIMEOUT_S = 20.0
# `pulumi version` prints the version alone, e.g. "v3.210.0" (a dev build: "v3.211.0-alpha.x").
_VERSION = re.compile(r"v?(\d+)\.(\d+)\.(\d+)\b")


def minimum() -> str:
    return "v" + ".".join(map(str, MINIMUM))


def parse(text: str) -> tuple[int, int, int] | None:
    """The first ``vX.Y.Z`` of ``pulumi version``'s output, or None."""
    for line in text.splitlines():
        match = _VERSION.match(line.strip())
        if match:
            return int(match[1]), int(match[2]), int(match[3])
    return None


def check() -> tuple[Fact, bool]:
    """The fact, and whether the tool is missing or too old (the check then exits 9)."""
    pulumi = shutil.which("pulumi")
    if pulumi is None:
        return block(
            "pulumi", "the Pulumi CLI is not installed (not on PATH)", f"install it: {INSTALL}"
        ), True
    # No update check: it would reach the network and print a warning of its own.
    env = {**os.environ, "PULUMI_SKIP_UPDATE_CHECK": "true"}
    try:
        done = subprocess.run(
            [pulumi, "version"], capture_output=True, text=True, timeout=TIMEOUT_S, env=env, check=False
        )
    except subprocess.TimeoutExpired:
        return unread(
            "pulumi", f"`pulumi version` did not answer within {TIMEOUT_S:g} s", "rerun the check"
        ), False
    except OSError as exc:
        return unread(
            "pulumi", f"`pulumi version` did not run ({exc.strerror or exc})", f"reinstall it: {INSTALL}"
        ), False
    found = parse(done.stdout) if done.returncode == 0 else None
    if found is None:
        said = " ".join((done.stdout + done.stderr).split())[:120] or f"nothing (exit {done.returncode})"
        return unread(
            "pulumi", f"`pulumi version` printed {said!r}, not a version", f"reinstall it: {INSTALL}"
        ), False
    shown = "v" + ".".join(map(str, found))
    if found < MINIMUM:
        return (
            block(
                "pulumi",
                f"{shown} is older than {minimum()}, which the deploy needs for {WHY}",
                f"upgrade it: {INSTALL}",
            ),
            True,
        )
    return ok("pulumi", f"{shown} (the deploy needs {minimum()} or later)"), False
