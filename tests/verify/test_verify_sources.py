"""What ``verify`` copies from the rooms it cannot import (the door, the VM), held equal here; how it
reads the ECC step's journal; and its exit codes when it cannot run (no llama-server needed)."""

from __future__ import annotations

import re
import sys
from pathlib import Path

import idle_watch
import pytest

from door.app import STOP_PATH
from qwen36.__main__ import main
from qwen36.errors import Exit
from qwen36.verify import boot_phases, cloud, door_checks
from tests.verify.conftest import ECC_REBOOT, ECC_RESET, STUB, journal

REPO = Path(__file__).resolve().parents[2]


def test_the_copied_constants_are_the_originals() -> None:
    assert door_checks.STOP_PATH == STOP_PATH == idle_watch.DOOR_STOP_PATH
    assert cloud.AUTOSTOP_LOG == idle_watch.LOG_NAME
    model_sh = (REPO / "startup" / "model.sh").read_text()
    assert re.search(rf"^GCS_COMPONENTS={boot_phases.GCS_COMPONENTS}$", model_sh, re.M)
    assert re.search(rf"^GCS_COMPONENT_MIB={boot_phases.GCS_COMPONENT_MIB}$", model_sh, re.M)


def test_the_ecc_lines_read_are_the_ones_the_boot_writes() -> None:
    boot = (REPO / "startup" / "boot.sh").read_text()
    lib = (REPO / "startup" / "lib.sh").read_text()
    assert "printf '%s qwen36: phase=%s %s\\n'" in lib and "printf '%s qwen36: %s\\n'" in lib
    for text in (
        'report "$PHASE_ECC" "ECC disabled for the next boot on $gpu; rebooting"',
        "ECC reboot path: from the reboot request to this boot's ECC check took $(($(date +%s) - asked)) s",
        "by a GPU reset in $((SECONDS - started)) s, no reboot",
        'report "$PHASE_ECC" "degraded: ',
        'report "$PHASE_ECC" "ECC $mode on $gpu"',
    ):
        assert text in boot, text


@pytest.mark.parametrize(
    ("serial", "path", "seconds"),
    [
        (ECC_REBOOT, "reboot", 71.0),
        (ECC_RESET, "gpu-reset", 9.0),
        (journal("phase=ecc ECC Disabled on GPU-1b2c"), "off-at-boot", None),
        (journal("phase=ecc degraded: nvidia-smi -e 0 was refused on GPU-1b2c; serving with ctx-size 16384"),
         "degraded", None),
        (journal("phase=driver GPU visible: NVIDIA L4, driver 580.95.05"), "unknown", None),
    ],
)  # fmt: skip
def test_the_ecc_path_from_the_journal(serial: str, path: str, seconds: float | None) -> None:
    found = boot_phases.ecc_path(serial.splitlines())
    assert (found.path, found.seconds) == (path, seconds)


def _project(tmp_path: Path, stack_exists: bool) -> tuple[Path, Path]:
    home, project, bin_dir = tmp_path / "home", tmp_path / "project", tmp_path / "bin"
    for folder in (home, project, bin_dir):
        folder.mkdir()
    (project / "Pulumi.yaml").write_text(
        "name: qwen36-mtp-l4\nruntime: python\nbackend:\n  url: file://~/state\n"
    )
    (project / "Pulumi.dev.yaml").write_text("config:\n  gcp:project: acme-llm-test\n")
    stacks = home / "state" / ".pulumi" / "stacks" / "qwen36-mtp-l4"
    stacks.mkdir(parents=True)
    if stack_exists:
        (stacks / "dev.json").write_text("{}")
    wrapper = bin_dir / "pulumi"
    wrapper.write_text(f'#!/bin/sh\nVERIFY_STUB_DIR={tmp_path} exec {sys.executable} {STUB} "$@"\n')
    wrapper.chmod(0o755)
    return project, bin_dir


def test_no_pulumi_cli_is_exit_9(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    project, _ = _project(tmp_path, stack_exists=True)
    monkeypatch.setenv("PATH", str(tmp_path / "nothing"))
    assert main(["verify", "--project-dir", str(project)]) == Exit.MISSING_TOOL
    (line,) = capsys.readouterr().err.splitlines()
    assert line.startswith("verify: error: the pulumi CLI is not on PATH")


def test_an_unknown_stack_is_exit_8(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    project, bin_dir = _project(tmp_path, stack_exists=False)
    monkeypatch.setenv("PATH", f"{bin_dir}:/usr/bin:/bin")
    monkeypatch.setenv("HOME", str(tmp_path / "home"))
    assert main(["verify", "--stack", "dev", "--project-dir", str(project)]) == Exit.NOT_FOUND
    (line,) = capsys.readouterr().err.splitlines()
    assert "no stack named 'dev' found" in line and "pulumi stack ls" in line


def test_a_json_path_that_cannot_be_written_is_exit_2(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    assert main(["verify", "--json", str(tmp_path / "no-such-dir" / "v.json")]) == Exit.USAGE
    assert "does not exist" in capsys.readouterr().err


def test_a_calibrated_boot_whose_verdict_is_another_writers_fails() -> None:
    """The serving boot measured, but the object in the bucket is older: its write did not land."""
    from datetime import UTC, datetime

    from tests.verify.conftest import verdict_doc

    when = datetime(2026, 12, 1, 9, 0, 0, tzinfo=UTC)
    boot = {"verdict": "calibrated", "boot_id": "boot-9"}
    later = datetime(2026, 12, 1, 12, 0, 0, tzinfo=UTC)
    check = cloud.verdict_check(verdict_doc("boot boot-0"), "", "gs://b/v.json", boot, when, later)
    assert check.state == "FAIL" and "not boot boot-9's" in check.saw and ".tmp-" in check.fix
    no_winner = {**verdict_doc("boot boot-9"), "winner": None}
    check = cloud.verdict_check(no_winner, "", "gs://b/v.json", boot, when, later)
    assert check.state == "FAIL" and "names no winner" in check.saw
    mine = cloud.verdict_check(verdict_doc("boot boot-9"), "", "gs://b/v.json", boot, when, later)
    assert mine.state == "ok" and "written by the VM" in mine.saw
