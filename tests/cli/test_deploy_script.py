"""scripts/deploy.sh on its bad inputs: each is one line and the CLI's exit code for its cause.

The script runs from a copy of the repo's layout (scripts/ and two stack files) with stand-ins for
`pulumi` and `gcloud` that record their arguments; no real tool is called.
"""

from __future__ import annotations

import os
import shutil
import signal
import subprocess
import time
from pathlib import Path

import pytest

from qwen36.errors import Exit

ROOT = Path(__file__).resolve().parents[2]
TIMEOUT_S = 30
LINE_TAIL = " [deploy] error: "
BASICS = (
    "bash", "sh", "date", "dirname", "mkdir", "chmod", "head", "tail", "grep", "base64", "cat", "sleep",
    "printf",
)  # fmt: skip


@pytest.fixture
def repo(tmp_path: Path) -> Path:
    (tmp_path / "scripts").mkdir()
    shutil.copy(ROOT / "scripts" / "deploy.sh", tmp_path / "scripts" / "deploy.sh")
    for stack in ("dev", "europe-west4"):
        (tmp_path / f"Pulumi.{stack}.yaml").write_text("config: {}\n")
    return tmp_path


def _tools(repo: Path, *, pulumi: str | None = "", gcloud: str | None = "") -> dict[str, str]:
    """A PATH with bash's basics and stand-ins: ``pulumi``/``gcloud`` run their given body (None: absent)."""
    bin_dir = repo / "bin"
    bin_dir.mkdir(exist_ok=True)
    for tool in BASICS:
        found = shutil.which(tool)
        if found and not (bin_dir / tool).exists():
            (bin_dir / tool).symlink_to(found)
    for name, body in (("pulumi", pulumi), ("gcloud", gcloud)):
        (bin_dir / name).unlink(missing_ok=True)
        if body is not None:
            script = bin_dir / name
            # `pulumi version` answers as tests/deploy/pulumi_stub.py does (a version the deploy accepts).
            version = 'if [ "$1" = version ]; then echo v3.210.0; exit 0; fi\n' if name == "pulumi" else ""
            script.write_text(f'#!/bin/sh\n{version}echo "{name} $*" >> "{repo}/calls"\n{body}\n')
            script.chmod(0o755)
    # The policy pack's venv there already; the command install and the preflight have their own tests.
    pack = repo / "policy" / ".venv" / "bin" / "python"
    if not pack.exists():
        pack.parent.mkdir(parents=True)
        pack.write_text("#!/bin/sh\n")
        pack.chmod(0o755)
    return {
        "PATH": str(bin_dir),
        "HOME": str(repo / "home"),
        "QWEN36_SKIP_CLI": "1",
        "QWEN36_SKIP_CHECK": "1",
    }


def _deploy(repo: Path, env: dict[str, str], *args: str) -> tuple[int, str, str]:
    done = subprocess.run(
        ["bash", str(repo / "scripts" / "deploy.sh"), *args],
        env=env,
        capture_output=True,
        text=True,
        timeout=TIMEOUT_S,
        check=False,
    )
    return done.returncode, done.stdout, done.stderr


def _line(err: str) -> str:
    (line,) = err.splitlines()
    assert LINE_TAIL in line, line
    return line.split(LINE_TAIL, 1)[1]


def test_help(repo: Path) -> None:
    code, out, err = _deploy(repo, _tools(repo), "--help")
    assert (code, err) == (0, "")
    assert out.startswith("usage: scripts/deploy.sh [--skip-check] [stack] [pulumi up args...]")


def test_a_flag_where_the_stack_goes(repo: Path) -> None:
    code, _, err = _deploy(repo, _tools(repo), "--yes")
    assert code == Exit.USAGE
    assert _line(err).startswith(
        "the first argument is the stack (one of: dev europe-west4); pulumi up's flags go after it."
    )


@pytest.mark.parametrize("stack", ["", "../x", "my stack", "dev;rm"])
def test_a_stack_name_pulumi_would_refuse(repo: Path, stack: str) -> None:
    code, _, err = _deploy(repo, _tools(repo), stack)
    assert code == Exit.USAGE
    assert "is not a stack name (letters, digits, '-', '_', '.')" in _line(err)
    assert not (repo / "calls").exists(), "nothing was run"


def test_a_stack_without_its_file(repo: Path) -> None:
    code, _, err = _deploy(repo, _tools(repo), "nope")
    assert (code, _line(err)) == (Exit.NOT_FOUND, "no stack file Pulumi.nope.yaml; stacks: dev europe-west4")


def test_missing_tools(repo: Path) -> None:
    code, _, err = _deploy(repo, _tools(repo, pulumi=None), "dev")
    assert (code, _line(err)) == (
        Exit.MISSING_TOOL,
        "the Pulumi CLI is not installed: https://www.pulumi.com/docs/install/",
    )
    code, _, err = _deploy(repo, _tools(repo, gcloud=None), "dev")
    assert code == Exit.MISSING_TOOL and _line(err).startswith("gcloud is not installed")


def test_no_credentials(repo: Path) -> None:
    code, _, err = _deploy(repo, _tools(repo, gcloud="exit 1"), "dev")
    assert (code, _line(err)) == (
        Exit.NO_CREDENTIALS,
        "no application-default credentials: run 'gcloud auth application-default login'",
    )


def test_gclouds_unset_project_is_not_taken_for_a_project(repo: Path) -> None:
    """`gcloud config get-value project` prints "(unset)" when there is none."""
    pulumi = 'case "$*" in "config get gcp:project") exit 1 ;; "whoami") exit 0 ;; esac'
    gcloud = 'case "$*" in "config get-value project") echo "(unset)" ;; esac'
    code, _, err = _deploy(repo, _tools(repo, pulumi=pulumi, gcloud=gcloud), "dev")
    assert (code, _line(err)) == (
        Exit.CONFIG,
        "no project: run 'gcloud config set project <id>' (or: pulumi config set gcp:project <id> -s dev)",
    )
    assert "pulumi config set gcp:project (unset)" not in (repo / "calls").read_text()


def test_a_good_run_hands_over_to_pulumi_up(repo: Path) -> None:
    gcloud = 'case "$*" in "config get-value project") echo acme-llm ;; esac'
    code, _, err = _deploy(repo, _tools(repo, gcloud=gcloud), "europe-west4", "--diff")
    assert code == 0, err
    assert (repo / "calls").read_text().splitlines()[-1] == "pulumi up --yes --policy-pack policy --diff"


def test_ctrl_c_is_one_line_and_130(repo: Path) -> None:
    env = _tools(repo, gcloud="sleep 30")
    process = subprocess.Popen(
        ["bash", str(repo / "scripts" / "deploy.sh"), "dev"],
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        start_new_session=True,
    )
    deadline = time.monotonic() + TIMEOUT_S
    while not (repo / "calls").exists() and time.monotonic() < deadline:
        time.sleep(0.02)
    time.sleep(0.2)
    # As a terminal's Ctrl-C: SIGINT to the whole foreground process group.
    os.killpg(process.pid, signal.SIGINT)
    _, err = process.communicate(timeout=TIMEOUT_S)
    assert (process.returncode, _line(err)) == (Exit.INTERRUPTED, "interrupted (Ctrl-C)")
