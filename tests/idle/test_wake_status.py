"""``python -m qwen36 wake`` and ``status`` against the loopback Compute API (the real
google-cloud-compute client pointed at it), waking into the real llama-server."""

from __future__ import annotations

import json
from datetime import UTC, datetime
from pathlib import Path

import pytest

from infra.autostop import autostop_output, status_command, wake_command
from qwen36.__main__ import main
from qwen36.group import GroupError, Member
from qwen36.status import (
    IDLE_STOPPED,
    QUOTA_BLOCKED,
    REPAIRING,
    RUNNING,
    STARTING,
    STOCKED_OUT,
    GroupApi,
    Where,
    classify,
    describe,
)
from tests.compute_fake.group import FakeGroup, FakeMember
from tests.compute_fake.server import fake_compute_api
from tests.compute_fake.shapes import STOCKOUT_MESSAGE, attempt_error
from tests.harness.server import LlamaServer
from tests.idle.conftest import API_KEY, idle_group

GROUP_PATH = "/compute/v1/projects/acme-llm-test/regions/us-central1/instanceGroupManagers/qwen36-dev"
WHERE = ["--project", "acme-llm-test", "--region", "us-central1", "--group", "qwen36-dev"]
STOCKOUT = attempt_error(
    "ZONE_RESOURCE_POOL_EXHAUSTED", STOCKOUT_MESSAGE.format(project="acme-llm-test", zone="us-central1-b")
)


@pytest.mark.llama
def test_wake_resizes_back_waits_and_prints_the_urls(
    llama: LlamaServer, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.setenv("QWEN36_API_KEY", API_KEY)
    group = idle_group(target_size=0)
    with fake_compute_api(group) as endpoint:
        rc = main(
            ["wake", *WHERE, "--url", llama.base_url, "--compute-endpoint", endpoint, "--anonymous",
             "--timeout-minutes", "1", "--poll-seconds", "0.1"]
        )  # fmt: skip
    out = capsys.readouterr()
    assert rc == 0, out.err
    (resize,) = group.resizes()
    assert (resize.method, resize.path, resize.query["size"]) == ("POST", f"{GROUP_PATH}/resize", ["1"])
    assert resize.body in (b"", b"{}")
    # The client waited for the operation to be DONE before looking for the member.
    (op_name,) = group.operations
    ops = [c for c in group.calls if c.method == "POST" and c.path.endswith(f"/operations/{op_name}/wait")]
    assert ops and ops[0].t > resize.t
    lists = [c for c in group.calls if c.path == f"{GROUP_PATH}/listManagedInstances"]
    assert lists and lists[0].t > ops[0].t
    assert group.state().target_size == 1
    assert "wake: resized group qwen36-dev from 0 to 1" in out.out
    assert "wake: member qwen36-dev-x1b2 in us-central1-b" in out.out
    assert "ready after" in out.out and "API key accepted" in out.out
    assert f"apiBaseUrl: {llama.base_url}/v1" in out.out
    assert API_KEY not in out.out + out.err


@pytest.mark.llama
def test_wake_of_a_running_group_only_waits(
    llama: LlamaServer, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.setenv("QWEN36_API_KEY", API_KEY)
    group = idle_group(FakeMember("qwen36-dev-a1", "us-central1-a"))
    with fake_compute_api(group) as endpoint:
        rc = main(["wake", *WHERE, "--url", llama.base_url, "--compute-endpoint", endpoint, "--anonymous"])
    out = capsys.readouterr().out
    assert rc == 0
    assert group.resizes() == []
    assert "already at size 1" in out


@pytest.mark.llama
def test_wake_with_the_stack_reads_its_outputs(
    llama: LlamaServer, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """``--stack`` takes the group, the URL and the API key from ``pulumi stack output`` (the CLI is
    not on this machine: a stand-in prints what the program exports)."""
    outputs = {
        "autostop": autostop_output(
            project="acme-llm-test", region="us-central1", group="qwen36-dev", size=1,
            url=llama.base_url, timeout_minutes=1, idle_minutes=30,
        ),
        "apiBaseUrl": f"{llama.base_url}/v1",
        "webUiUrl": f"{llama.base_url}/",
        "apiKey": API_KEY,
        "wakeCommand": wake_command("dev"),
    }  # fmt: skip
    pulumi = tmp_path / "pulumi"
    pulumi.write_text(
        "#!/bin/bash\n"
        f'[[ "$*" == "stack output --json --show-secrets --stack dev" ]] || exit 7\n'
        f"cat <<'EOF'\n{json.dumps(outputs)}\nEOF\n"
    )
    pulumi.chmod(0o755)
    monkeypatch.setenv("PATH", f"{tmp_path}:/usr/bin:/bin")
    monkeypatch.delenv("QWEN36_API_KEY", raising=False)
    group = idle_group(target_size=0)
    with fake_compute_api(group) as endpoint:
        rc = main(
            ["wake", "--stack", "dev", "--compute-endpoint", endpoint, "--anonymous", "--poll-seconds", "0.1"]
        )
    out = capsys.readouterr()
    assert rc == 0, out.err
    assert len(group.resizes()) == 1
    assert "API key accepted" in out.out
    assert f"webUiUrl: {llama.base_url}/" in out.out


def test_wake_and_status_commands_are_exact() -> None:
    assert wake_command("dev") == "qwen36 wake --stack dev"
    assert status_command("my stack") == "qwen36 status --stack 'my stack'"


def _describe(group: FakeGroup, now: datetime | None = None) -> str:
    with fake_compute_api(group) as endpoint:
        api = GroupApi(Where("acme-llm-test", "us-central1", "qwen36-dev"), endpoint, anonymous=True)
        return describe(api, now=now)


def test_status_idle_stopped() -> None:
    assert _describe(idle_group(target_size=0)).startswith(f"{IDLE_STOPPED}: the group is at size 0")


def test_status_running_with_the_time_since_the_last_request() -> None:
    member = FakeMember("qwen36-dev-a1", "us-central1-a")
    member.guest_attributes = {
        "report": "ready 2026-11-30T21:40:00Z b00t llama-server healthy 170 s after boot",
        "idle": "watching 2026-11-30T21:59:30Z b00t last-request=2026-11-30T21:48:00Z idle-minutes=30",
    }
    now = datetime(2026, 11, 30, 22, 0, 0, tzinfo=UTC)
    line = _describe(idle_group(member), now)
    assert (
        line == f"{RUNNING}: qwen36-dev-a1 in us-central1-a; last request 12 min ago (2026-11-30T21:48:00Z)"
    )


def test_status_running_without_requests_or_report() -> None:
    member = FakeMember("qwen36-dev-a1", "us-central1-a")
    assert _describe(idle_group(member)).endswith("no report from the idle watcher yet")
    member.guest_attributes = {"idle": "watching 2026-11-30T21:59:30Z b00t last-request=none idle-minutes=30"}
    assert _describe(idle_group(member)).endswith(
        "no request since the watcher started (report of 2026-11-30T21:59:30Z)"
    )


def test_status_preempted_and_repairing() -> None:
    member = FakeMember("qwen36-dev-a1", "us-central1-a", status="TERMINATED", action="RECREATING")
    assert _describe(idle_group(member)).startswith(
        f"{REPAIRING}: qwen36-dev-a1 is TERMINATED, action RECREATING"
    )


def test_status_stocked_out() -> None:
    member = FakeMember(
        "qwen36-dev-a1", "us-central1-b", status=None, action="CREATING", last_attempt=[STOCKOUT]
    )
    line = _describe(idle_group(member))
    assert line.startswith(f"{STOCKED_OUT}: qwen36-dev-a1: The zone")
    assert "does not have enough resources" in line


def test_status_cli_prints_one_line(capsys: pytest.CaptureFixture[str]) -> None:
    with fake_compute_api(idle_group(target_size=0)) as endpoint:
        assert main(["status", *WHERE, "--compute-endpoint", endpoint, "--anonymous"]) == 0
    assert capsys.readouterr().out.startswith("idle-stopped:")


def test_status_without_a_group_names_what_is_missing(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["status", "--project", "acme-llm"]) == 2
    assert "give --stack, or --region, --group" in capsys.readouterr().err


@pytest.mark.parametrize(
    ("members", "state"),
    [
        ([], STARTING),
        ([Member("m", "z", "STAGING", "CREATING")], STARTING),
        ([Member("m", "z", "STOPPED", "NONE")], REPAIRING),
        ([Member("m", "z", "RUNNING", "VERIFYING")], STARTING),
        (
            [
                Member(
                    "m",
                    "z",
                    "",
                    "CREATING",
                    (GroupError("ZONE_RESOURCE_POOL_EXHAUSTED_WITH_DETAILS", "no L4"),),
                )
            ],
            STOCKED_OUT,
        ),
        # Issue 21: a quota-blocked group was shown as "starting: m is , action CREATING".
        (
            [Member("m", "z", "", "CREATING", (GroupError("QUOTA_EXCEEDED", "GPUS_ALL_REGIONS"),))],
            QUOTA_BLOCKED,
        ),
    ],
)
def test_classify(members: list[Member], state: str) -> None:
    assert classify(1, members).state == state


def test_wake_without_an_http_path_follows_the_vms_report(capsys: pytest.CaptureFixture[str]) -> None:
    """IAP only (no --url): the new member's boot report decides, read through the Compute API."""
    group = idle_group(target_size=0)
    group.new_member.guest_attributes = {
        "report": "ready 2026-11-30T22:03:00Z b00t llama-server healthy 170 s after boot",
    }
    with fake_compute_api(group) as endpoint:
        rc = main(["wake", *WHERE, "--compute-endpoint", endpoint, "--anonymous", "--poll-seconds", "0.1"])
    out = capsys.readouterr()
    assert rc == 0, out.err
    assert len(group.resizes()) == 1
    reads = [c for c in group.calls if c.path.endswith("/instances/qwen36-dev-x1b2/getGuestAttributes")]
    assert reads and reads[0].path.startswith("/compute/v1/projects/acme-llm-test/zones/us-central1-b/")
    assert "ready after" in out.out and "healthy 170 s after boot" in out.out
    assert "IAP tunnel" in out.out
