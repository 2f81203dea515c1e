"""The gate against the server group: the real google-cloud-compute client, a fake Compute API on
loopback staging GCE's documented answers, and a virtual clock so minutes of waiting take moments."""

from __future__ import annotations

import itertools
from datetime import timedelta

import pytest
from google.auth.credentials import AnonymousCredentials

from infra import boot_protocol
from infra.boot_protocol import KEY_REPORT
from qwen36.group import ComputeApiReader, GroupTarget, current_report
from qwen36.health import WaitFailed, WaitSettings, wait_ready
from tests.compute_fake.clock import VirtualClock, at
from tests.compute_fake.group import FakeGroup, FakeMember, GroupState, report
from tests.compute_fake.server import fake_compute_api
from tests.compute_fake.shapes import attempt_error, list_error, stockout

SERIAL = "".join(
    f"Nov 30 22:0{i} host google_metadata_script_runner[7]: startup-script: phase {i}\n" for i in range(5)
)


def run_gate(
    group: FakeGroup, clock: VirtualClock, timeout_s: float = 1200
) -> tuple[list[str], str | None, str]:
    """Runs the IAP-mode gate on the virtual clock; returns (lines, summary or None, diagnosis)."""
    lines: list[str] = []
    with fake_compute_api(group) as endpoint:
        reader = ComputeApiReader(api_endpoint=endpoint, credentials=AnonymousCredentials())
        try:
            summary = wait_ready(
                settings=WaitSettings(timeout_s=timeout_s, poll_s=5, heartbeat_s=60),
                group=GroupTarget(group.project, group.region, group.name),
                reader=reader,
                emit=lines.append,
                clock=clock,
                sleep=clock.sleep,
                wall=clock.wall,
            ).summary
        except WaitFailed as failure:
            return lines, None, str(failure)
    return lines, summary, ""


def test_stocked_out_in_two_zones_then_a_member_in_a_third() -> None:
    clock = VirtualClock()
    group = FakeGroup(timeline=[], clock=clock)
    a = FakeMember("qwen36-dev-x1", "europe-west4-a", status=None, action="CREATING")
    b = FakeMember("qwen36-dev-x1", "europe-west4-b", status=None, action="CREATING")
    c = FakeMember(
        "qwen36-dev-x1",
        "europe-west4-c",
        started=200,
        guest_attributes={KEY_REPORT: report("ready", 290, "healthy")},
    )
    b.last_attempt = [
        attempt_error(
            "ZONE_RESOURCE_POOL_EXHAUSTED_WITH_DETAILS",
            "The zone 'projects/proj/zones/europe-west4-b' does not have enough resources available.",
            [
                {
                    "errorInfo": {
                        "reason": "resource_availability",
                        "metadatas": {"zonesAvailable": "europe-west4-c"},
                    }
                }
            ],
        )
    ]
    first = stockout(group, a, 10)
    second = stockout(group, b, 100)
    group.timeline = [
        (0, GroupState(members=[a], errors=[first])),
        (90, GroupState(members=[b], errors=[second, first])),
        (200, GroupState(members=[c], errors=[second, first])),
    ]
    lines, summary, diagnosis = run_gate(group, clock)
    assert summary is not None, diagnosis
    stockouts = [line for line in lines if line.startswith("group: stockout")]
    # One line per new error, each naming every zone tried so far and what the user can do.
    assert len(stockouts) == 2, lines
    assert "in europe-west4-a:" in stockouts[0]
    assert "europe-west4-a, europe-west4-b" in stockouts[1]
    assert "zones with capacity now: europe-west4-c" in stockouts[1]
    for line in stockouts:
        assert "GCE keeps trying" in line and "qwen36-mtp-l4:zones" in line
        assert "provisioningModel to STANDARD" in line and "or wait" in line and "up to 20m00s" in line
    assert "on qwen36-dev-x1 in europe-west4-c: healthy" in summary
    assert any("member creating (qwen36-dev-x1 in europe-west4-a)" in line for line in lines)


def test_quota_error_fails_at_once_naming_metric_region_and_where_to_ask() -> None:
    clock = VirtualClock()
    group = FakeGroup(timeline=[], clock=clock, project="acme")
    member = FakeMember("qwen36-dev-x1", "europe-west4-a", status=None, action="CREATING")
    message = "Quota 'PREEMPTIBLE_NVIDIA_L4_GPUS' exceeded.  Limit: 0.0 in region europe-west4."
    group.timeline = [
        (0, GroupState(members=[member], errors=[list_error(group, member, "QUOTA_EXCEEDED", message, 5)]))
    ]
    _lines, summary, diagnosis = run_gate(group, clock)
    assert summary is None
    assert clock() < boot_protocol.GATE_POLL_MIN_S, "a quota error must not wait for the timeout"
    assert "quota exceeded (QUOTA_EXCEEDED): PREEMPTIBLE_NVIDIA_L4_GPUS in region europe-west4" in diagnosis
    assert "gcloud compute regions describe europe-west4 --project=acme --format='json(quotas)'" in diagnosis
    assert "https://console.cloud.google.com/iam-admin/quotas?project=acme" in diagnosis
    assert "gcloud compute instance-groups managed list-errors qwen36-dev --region=europe-west4" in diagnosis


def test_quota_from_a_members_last_attempt_details_for_all_regions() -> None:
    clock = VirtualClock()
    group = FakeGroup(timeline=[], clock=clock)
    member = FakeMember("qwen36-dev-x1", "europe-west4-a", status=None, action="CREATING")
    member.last_attempt = [
        attempt_error(
            "QUOTA_EXCEEDED",
            "Quota 'GPUS_ALL_REGIONS' exceeded.  Limit: 0.0 globally.",
            [
                {
                    "quotaInfo": {
                        "metricName": "compute.googleapis.com/gpus_all_regions",
                        "limitName": "GPUS-ALL-REGIONS-per-project",
                        "limit": 0,
                    }
                }
            ],
        )
    ]
    group.timeline = [(0, GroupState(members=[member]))]
    _lines, summary, diagnosis = run_gate(group, clock)
    assert summary is None
    assert "GPUS_ALL_REGIONS in all regions" in diagnosis
    assert "gcloud compute project-info describe --project=proj" in diagnosis


def test_an_old_error_from_an_earlier_deploy_is_not_this_waits_business() -> None:
    clock = VirtualClock()
    group = FakeGroup(timeline=[], clock=clock)
    member = FakeMember(
        "qwen36-dev-x1",
        "europe-west4-a",
        started=0,
        guest_attributes={KEY_REPORT: report("ready", 30, "healthy")},
    )
    old = list_error(group, member, "QUOTA_EXCEEDED", "Quota 'NVIDIA_L4_GPUS' exceeded.", -86400)
    group.timeline = [(0, GroupState(members=[member], errors=[old]))]
    lines, summary, diagnosis = run_gate(group, clock)
    assert summary is not None, diagnosis
    assert not any("quota" in line for line in lines)


def test_a_stale_failed_report_from_before_a_repair_is_ignored() -> None:
    clock = VirtualClock()
    group = FakeGroup(timeline=[], clock=clock)
    # The member was repaired (recreated, same name) at t=100; its guest attributes still hold the
    # failed report of the boot before, written at t=40.
    stale = report("failed", 40, "model: sha256 mismatch", boot_id="boot-old")
    before = FakeMember(
        "qwen36-dev-x1", "europe-west4-a", started=100, guest_attributes={KEY_REPORT: stale}, serial=SERIAL
    )
    after = FakeMember(
        "qwen36-dev-x1",
        "europe-west4-a",
        started=100,
        guest_attributes={KEY_REPORT: report("ready", 250, "healthy", boot_id="boot-new")},
    )
    group.timeline = [(0, GroupState(members=[before])), (240, GroupState(members=[after]))]
    lines, summary, diagnosis = run_gate(group, clock)
    assert summary is not None, diagnosis
    assert any("ignored a stale 'failed' report from 22:00:40Z (boot boot-old)" in line for line in lines), (
        lines
    )
    assert any("before this member's last start at 22:01:40Z" in line for line in lines)
    # Without a current report, the boot's last serial line shows how far it got.
    assert any("serial console: phase 4" in line for line in lines)
    assert summary.endswith("on qwen36-dev-x1 in europe-west4-a: healthy")


def test_a_current_failed_report_stops_the_wait_with_a_diagnosis() -> None:
    clock = VirtualClock()
    group = FakeGroup(timeline=[], clock=clock)
    member = FakeMember(
        "qwen36-dev-x1",
        "europe-west4-a",
        started=0,
        guest_attributes={KEY_REPORT: report("failed", 30, "model: sha256 mismatch")},
        serial=SERIAL,
    )
    group.timeline = [(0, GroupState(members=[member]))]
    _lines, summary, diagnosis = run_gate(group, clock)
    assert summary is None and clock() < 60
    assert "the VM reported failure: model: sha256 mismatch" in diagnosis
    assert "instance qwen36-dev-x1 in europe-west4-a: status RUNNING" in diagnosis
    assert "startup-script: phase 4" in diagnosis
    assert "gcloud compute instances get-serial-port-output qwen36-dev-x1 --zone=europe-west4-a" in diagnosis


def test_a_member_repaired_mid_wait_is_followed_into_its_new_zone() -> None:
    clock = VirtualClock()
    group = FakeGroup(timeline=[], clock=clock)
    loading = FakeMember(
        "qwen36-dev-x1",
        "europe-west4-a",
        started=0,
        guest_attributes={KEY_REPORT: report("model", 20, "1.2 of 22.1 GB")},
    )
    # Preempted at t=120: the group recreates it (same name, RECREATE keeps it) in zone b.
    going = FakeMember("qwen36-dev-x1", "europe-west4-a", status="STOPPING", action="RECREATING", started=0)
    coming = FakeMember(
        "qwen36-dev-x1", "europe-west4-b", status="PROVISIONING", action="CREATING", started=0
    )
    booting = FakeMember(
        "qwen36-dev-x1", "europe-west4-b", started=300, guest_attributes={KEY_REPORT: report("boot", 305)}
    )
    ready = FakeMember(
        "qwen36-dev-x1",
        "europe-west4-b",
        started=300,
        guest_attributes={KEY_REPORT: report("ready", 420, "healthy")},
    )
    group.timeline = [
        (0, GroupState(members=[loading])),
        (120, GroupState(members=[going])),
        (200, GroupState(members=[coming])),
        (300, GroupState(members=[booting])),
        (420, GroupState(members=[ready])),
    ]
    lines, summary, diagnosis = run_gate(group, clock)
    assert summary is not None, diagnosis
    # One line per change (heartbeats aside): the member's state and where it is.
    changes = [line for line in lines if "] member " in line and not line.endswith("(still waiting)")]
    members = [line.split("member ", 1)[1].split(";")[0] for line in changes]
    assert members[:4] == [
        "RUNNING (qwen36-dev-x1 in europe-west4-a)",
        "STOPPING (qwen36-dev-x1 in europe-west4-a)",
        "PROVISIONING (qwen36-dev-x1 in europe-west4-b)",
        "RUNNING (qwen36-dev-x1 in europe-west4-b)",
    ], lines
    assert "on qwen36-dev-x1 in europe-west4-b" in summary
    assert 420 <= clock() < 420 + 2 * boot_protocol.GATE_POLL_MIN_S


def test_guest_attributes_are_read_at_most_every_15_seconds() -> None:
    clock = VirtualClock()
    group = FakeGroup(timeline=[], clock=clock)
    member = FakeMember(
        "qwen36-dev-x1",
        "europe-west4-a",
        started=0,
        guest_attributes={KEY_REPORT: report("model", 10, "fetching")},
    )
    group.timeline = [(0, GroupState(members=[member]))]
    lines: list[str] = []
    with fake_compute_api(group) as endpoint, pytest.raises(WaitFailed):
        wait_ready(
            # Asking for a faster Compute poll than the budget allows is clamped to the budget.
            settings=WaitSettings(timeout_s=600, poll_s=0.5, heartbeat_s=60, compute_poll_s=1),
            group=GroupTarget(group.project, group.region, group.name),
            reader=ComputeApiReader(api_endpoint=endpoint, credentials=AnonymousCredentials()),
            emit=lines.append,
            clock=clock,
            sleep=clock.sleep,
            wall=clock.wall,
        )
    reads = group.reads("/getGuestAttributes")
    gaps = [later - earlier for earlier, later in itertools.pairwise(reads)]
    assert len(reads) >= 600 / boot_protocol.GATE_POLL_MIN_S - 1
    assert len(reads) <= 600 / boot_protocol.GATE_POLL_MIN_S + 1
    assert min(gaps) >= boot_protocol.GATE_POLL_MIN_S
    # The heartbeat repeats the phase and detail instead of printing dots.
    assert any(line.endswith("(still waiting)") and "vm model (fetching)" in line for line in lines)


def test_current_report_reads_the_single_key_of_the_current_start() -> None:
    start = at(100)
    fresh = {boot_protocol.KEY_REPORT: report("ready", 130, "healthy", boot_id="b-2")}
    assert current_report(fresh, start)[0] == boot_protocol.Report("ready", at(130), "b-2", "healthy")
    # A report in the same second as the start counts (reports carry whole seconds).
    same_second = {boot_protocol.KEY_REPORT: report("boot", 100)}
    assert current_report(same_second, start + timedelta(milliseconds=700))[0] is not None
    stale = {boot_protocol.KEY_REPORT: report("failed", 60, "no GPU", boot_id="b-1")}
    report_, why = current_report(stale, start)
    assert report_ is None and "stale 'failed' report" in why
    # The first version's three keys are not a report.
    first_version = {"phase": "ready", "time": "2026-11-30T22:02:00Z", "detail": "healthy"}
    assert current_report(first_version, start) == (None, "the VM has not reported yet")
    assert current_report({boot_protocol.KEY_REPORT: "garbage"}, start)[1].startswith("unreadable report")
    assert current_report({}, start) == (None, "the VM has not reported yet")


def test_a_group_stopped_at_size_zero_passes_with_the_wake_command() -> None:
    # Autostop leaves targetSize to the watcher, so a `pulumi up` that changes the template meets a
    # group at 0 that will make no member: the gate says so and passes instead of waiting out 20 min.
    clock = VirtualClock()
    group = FakeGroup(timeline=[], clock=clock)
    group.timeline = [(0, GroupState(members=[], target_size=0))]
    _lines, summary, diagnosis = run_gate(group, clock)
    assert summary is not None, diagnosis
    assert "stopped (size 0" in summary and "`qwen36 wake`" in summary
    assert clock.now < 60, "it passes at its first read, not at the timeout"


def test_a_group_without_members_yet_but_size_one_keeps_waiting() -> None:
    clock = VirtualClock()
    group = FakeGroup(timeline=[], clock=clock)
    member = FakeMember(
        "qwen36-dev-x1",
        "europe-west4-a",
        started=200,
        guest_attributes={KEY_REPORT: report("ready", 290, "healthy")},
    )
    group.timeline = [(0, GroupState(members=[], target_size=1)), (120, GroupState(members=[member]))]
    _lines, summary, diagnosis = run_gate(group, clock)
    assert summary is not None and "healthy" in summary, diagnosis
    assert "stopped" not in summary
