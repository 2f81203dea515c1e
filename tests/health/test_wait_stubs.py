"""The gate's HTTP mode against servers that must never count as ready, and against a group read
through the real google-cloud-compute client from a local stand-in of the Compute API."""

from __future__ import annotations

import subprocess
import sys
import time
from pathlib import Path

import pytest
from google.auth.credentials import AnonymousCredentials

from infra.boot_protocol import KEY_REPORT
from qwen36.group import ComputeApiReader, GroupTarget
from qwen36.health import WaitFailed, WaitSettings, wait_ready
from tests.compute_fake.group import FakeGroup, FakeMember, GroupState, report
from tests.compute_fake.server import fake_compute_api
from tests.harness.server import free_port
from tests.health.stub_http import stub_server

ROOT = Path(__file__).resolve().parents[2]
SHORT = WaitSettings(timeout_s=1.5, poll_s=0.05, heartbeat_s=0.5)
# Generous slack for a loaded 2-core machine; the point is "bounded", not "precise".
BOUND_SLACK_S = 5.0
SERIAL = "\n".join(f"startup-script: line {i}" for i in range(100)) + "\n"


def _wait_expecting_failure(**kwargs: object) -> tuple[str, list[str], float]:
    lines: list[str] = []
    started = time.monotonic()
    with pytest.raises(WaitFailed) as failure:
        wait_ready(settings=SHORT, emit=lines.append, **kwargs)  # type: ignore[arg-type]
    return str(failure.value), lines, time.monotonic() - started


@pytest.mark.parametrize(
    ("status", "body", "state"),
    [
        (
            401,
            b'{"error":{"message":"Invalid API Key","type":"authentication_error","code":401}}',
            "http-401",
        ),
        (200, b"<html>garbage</html>", "unexpected"),
        (200, b'{"status":"loading"}', "unexpected"),
        (503, b'{"error":{"message":"Loading model","type":"unavailable_error","code":503}}', "loading"),
        (500, b"", "http-500"),
    ],
)
def test_wrong_health_answers_are_never_ready(status: int, body: bytes, state: str) -> None:
    with stub_server(status, body) as url:
        diagnosis, lines, elapsed = _wait_expecting_failure(url=url)
    assert elapsed < SHORT.timeout_s + BOUND_SLACK_S
    assert f"last http state: {state}" in diagnosis
    assert not any(line.startswith("ready") for line in lines)


def test_nothing_listening_is_not_ready_and_bounded() -> None:
    diagnosis, _lines, elapsed = _wait_expecting_failure(url=f"http://127.0.0.1:{free_port()}")
    assert elapsed < SHORT.timeout_s + BOUND_SLACK_S
    assert "last http state: unreachable (connection refused)" in diagnosis
    assert "not ready after 0m01s (the timeout)" in diagnosis


def _reader(endpoint: str) -> ComputeApiReader:
    return ComputeApiReader(api_endpoint=endpoint, credentials=AnonymousCredentials())


def _group(member: FakeMember) -> FakeGroup:
    # Real time here: the HTTP stubs answer in real time, and the group's first read is at t=0.
    return FakeGroup(timeline=[(0, GroupState(members=[member]))], clock=time.monotonic)


def _target(group: FakeGroup) -> GroupTarget:
    return GroupTarget(project=group.project, region=group.region, group=group.name)


def test_http_ok_counts_only_with_a_running_member() -> None:
    member = FakeMember("qwen36-dev-x1", "europe-west4-a", status=None, action="CREATING")
    group = _group(member)
    with stub_server(200, b'{"status":"ok"}') as url, fake_compute_api(group) as endpoint:
        diagnosis, _lines, elapsed = _wait_expecting_failure(
            url=url, group=_target(group), reader=_reader(endpoint)
        )
    assert elapsed < SHORT.timeout_s + BOUND_SLACK_S
    assert "last member state: creating (qwen36-dev-x1 in europe-west4-a)" in diagnosis
    assert "last http state: ok" in diagnosis


def test_http_mode_passes_with_a_running_member() -> None:
    member = FakeMember("qwen36-dev-x1", "europe-west4-a")
    group = _group(member)
    lines: list[str] = []
    with stub_server(200, b'{"status":"ok"}') as url, fake_compute_api(group) as endpoint:
        summary = wait_ready(
            settings=SHORT, url=url, group=_target(group), reader=_reader(endpoint), emit=lines.append
        ).summary
    assert summary.startswith("ready after") and "on qwen36-dev-x1 in europe-west4-a: /health ok" in summary


def test_http_mode_stops_when_the_vm_reports_failure() -> None:
    member = FakeMember(
        "qwen36-dev-x1", "europe-west4-a", started=0, serial=SERIAL,
        guest_attributes={KEY_REPORT: report("failed", 1, "server: llama-server exited 1")},
    )  # fmt: skip
    group = _group(member)
    with fake_compute_api(group) as endpoint:
        diagnosis, _lines, elapsed = _wait_expecting_failure(
            url=f"http://127.0.0.1:{free_port()}", group=_target(group), reader=_reader(endpoint)
        )
    assert elapsed < SHORT.timeout_s
    assert "the VM reported failure: server: llama-server exited 1" in diagnosis
    assert "last http state: unreachable" in diagnosis
    assert "startup-script: line 99" in diagnosis and "startup-script: line 69" not in diagnosis


def test_http_mode_gives_up_early_when_the_vm_is_ready_but_the_port_unreachable() -> None:
    member = FakeMember(
        "qwen36-dev-x1",
        "europe-west4-a",
        started=0,
        guest_attributes={KEY_REPORT: report("ready", 1, "healthy 95 s")},
    )
    group = _group(member)
    settings = WaitSettings(timeout_s=30.0, poll_s=0.05, heartbeat_s=0.5, vm_ready_unreachable_s=0.5)
    lines: list[str] = []
    with fake_compute_api(group) as endpoint, pytest.raises(WaitFailed) as failure:
        started = time.monotonic()
        wait_ready(
            settings=settings,
            url=f"http://127.0.0.1:{free_port()}",
            group=_target(group),
            reader=_reader(endpoint),
            emit=lines.append,
        )
    assert time.monotonic() - started < settings.timeout_s
    diagnosis = str(failure.value)
    assert "the VM reports ready (healthy 95 s)" in diagnosis
    assert "qwen36-mtp-l4:sourceRanges" in diagnosis
    assert not any(line.startswith("ready") for line in lines)


def test_cli_is_registered_under_python_m_qwen36() -> None:
    out = subprocess.run(
        [sys.executable, "-m", "qwen36", "wait", "--help"],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert out.returncode == 0, out.stderr
    assert "--mode" in out.stdout and "guest-attributes" in out.stdout


def test_http_alone_decides_when_the_group_was_never_readable() -> None:
    group = _group(FakeMember("qwen36-dev-x1", "europe-west4-a"))
    elsewhere = GroupTarget(project=group.project, region=group.region, group="not-this-group")
    lines: list[str] = []
    with stub_server(200, b'{"status":"ok"}') as url, fake_compute_api(group) as endpoint:
        summary = wait_ready(
            settings=SHORT, url=url, group=elsewhere, reader=_reader(endpoint), emit=lines.append
        ).summary
    assert summary.startswith("ready after") and "/health ok" in summary
    assert "member unreadable (group unreadable: GroupNotFound: no group not-this-group" in lines[0]
