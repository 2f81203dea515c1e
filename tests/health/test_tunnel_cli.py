"""``python -m qwen36 tunnel|ssh|logs`` find the group's current member through the real client."""

from __future__ import annotations

import shlex
import time

import pytest

from qwen36.__main__ import main
from tests.compute_fake.group import FakeGroup, FakeMember, GroupState
from tests.compute_fake.server import fake_compute_api

SERIAL = "boot line\nstartup-script: qwen36: phase=ready\n"
PROJECT = "proj-test"  # a project id the flags accept (6-30 characters)


def run_cli(capsys: pytest.CaptureFixture[str], group: FakeGroup, *argv: str) -> tuple[int, str, str]:
    with fake_compute_api(group) as endpoint:
        code = main(
            [
                *argv,
                f"--project={group.project}",
                f"--region={group.region}",
                f"--group={group.name}",
                f"--compute-endpoint={endpoint}",
                "--anonymous",
            ]
        )
    out, err = capsys.readouterr()
    return code, out, err


def repaired_group() -> FakeGroup:
    """One member, repaired from zone a into zone b: only the running one counts."""
    gone = FakeMember("qwen36-dev-x1", "europe-west4-a", status="TERMINATED", action="RECREATING")
    here = FakeMember("qwen36-dev-x2", "europe-west4-b", serial=SERIAL)
    return FakeGroup(timeline=[(0, GroupState(members=[gone, here]))], clock=time.monotonic, project=PROJECT)


def test_tunnel_goes_to_the_running_member_in_its_current_zone(capsys: pytest.CaptureFixture[str]) -> None:
    code, out, err = run_cli(capsys, repaired_group(), "tunnel", "--print")
    assert code == 0, err
    assert shlex.split(out) == [
        "gcloud", "compute", "start-iap-tunnel", "qwen36-dev-x2", "8080",
        "--local-host-port=localhost:8080", "--zone=europe-west4-b", "--project=proj-test",
    ]  # fmt: skip
    assert "qwen36-dev-x2 in europe-west4-b" in err


def test_ssh_and_container_logs_follow_the_member(capsys: pytest.CaptureFixture[str]) -> None:
    group = repaired_group()
    code, out, _ = run_cli(capsys, group, "ssh", "--print")
    assert code == 0
    assert out.strip() == (
        "gcloud compute ssh qwen36-dev-x2 --zone=europe-west4-b --project=proj-test --tunnel-through-iap"
    )
    code, out, _ = run_cli(capsys, group, "logs", "--print")
    assert code == 0
    assert shlex.split(out)[-2:] == ["--command", "sudo docker logs -f llama-server"]


def test_serial_logs_come_through_the_api(capsys: pytest.CaptureFixture[str]) -> None:
    code, out, _ = run_cli(capsys, repaired_group(), "logs", "--serial")
    assert code == 0 and out == SERIAL


def test_no_running_member_says_so_and_how_to_watch(capsys: pytest.CaptureFixture[str]) -> None:
    creating = FakeMember("qwen36-dev-x1", "europe-west4-a", status=None, action="CREATING")
    group = FakeGroup(timeline=[(0, GroupState(members=[creating]))], clock=time.monotonic, project=PROJECT)
    code, out, err = run_cli(capsys, group, "tunnel", "--print")
    assert code == 1 and out == ""
    assert "no RUNNING member now (qwen36-dev-x1 is CREATING)" in err
    assert "gcloud compute instance-groups managed list-instances qwen36-dev --region=europe-west4" in err
