"""The gate's waiting logic against servers that must never count as ready, and the VM's report
read through the real google-cloud-compute client from a local stand-in of the Compute API."""

from __future__ import annotations

import subprocess
import sys
import time
from pathlib import Path

import pytest
from google.auth.credentials import AnonymousCredentials

from qwen36.health import ComputeApiReader, Target, WaitFailed, WaitSettings, wait_ready
from tests.harness.server import free_port
from tests.health.compute_fake import FakeVm, fake_compute_api
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


def _target(vm: FakeVm) -> Target:
    return Target(project=vm.project, zone=vm.zone, instance=vm.name)


def test_guest_attributes_path_follows_phases_to_ready() -> None:
    vm = FakeVm(
        reports=[
            None,
            ("boot", "boot script started 12 s after boot"),
            ("model", "fetching: 1.2 of 22.1 GB"),
            ("model", "fetching: 9.8 of 22.1 GB"),
            ("server", "waiting for http://127.0.0.1:8080/health"),
            ("ready", "llama-server healthy"),
        ]
    )
    lines: list[str] = []
    with fake_compute_api(vm) as endpoint:
        summary = wait_ready(
            settings=WaitSettings(timeout_s=30, poll_s=0.01, heartbeat_s=30),
            target=_target(vm),
            reader=_reader(endpoint),
            emit=lines.append,
        )
    assert summary.startswith("ready after") and "llama-server healthy" in summary
    phases = [line.split("] vm ", 1)[1].split(" ", 1)[0] for line in lines if "] vm " in line]
    # One line per change of phase, in order; the detail (model bytes) rides along.
    assert phases == ["no-report", "boot", "model", "server", "ready"]
    assert any("1.2 of 22.1 GB" in line for line in lines)
    assert all(request.endswith("getGuestAttributes?queryPath=qwen36%2F") for request in vm.requests)


def test_guest_attributes_failed_phase_stops_at_once_with_diagnosis() -> None:
    vm = FakeVm(
        reports=[("model", "fetching"), ("failed", "model: sha256 mismatch")],
        serial=SERIAL,
        status="RUNNING",
    )
    with fake_compute_api(vm) as endpoint:
        started = time.monotonic()
        with pytest.raises(WaitFailed) as failure:
            wait_ready(
                settings=WaitSettings(timeout_s=60, poll_s=0.01),
                target=_target(vm),
                reader=_reader(endpoint),
                emit=lambda _line: None,
            )
    assert time.monotonic() - started < 10, "a failed report must not wait for the timeout"
    diagnosis = str(failure.value)
    assert "the VM reported failure: model: sha256 mismatch" in diagnosis
    assert "last vm state: failed" in diagnosis
    assert "instance status: RUNNING" in diagnosis
    # The last 30 serial lines, not the whole console.
    assert "startup-script: line 99" in diagnosis and "startup-script: line 70" in diagnosis
    assert "startup-script: line 69" not in diagnosis
    assert (
        f"gcloud compute instances get-serial-port-output {vm.name} --zone={vm.zone} --project={vm.project}"
        in diagnosis
    )
    assert "sudo docker logs --tail 200 llama-server" in diagnosis


def test_guest_attributes_stuck_phase_times_out_with_heartbeats() -> None:
    vm = FakeVm(reports=[("model", "fetching: 3.0 of 22.1 GB")], serial=SERIAL, status="TERMINATED")
    lines: list[str] = []
    with fake_compute_api(vm) as endpoint:
        started = time.monotonic()
        with pytest.raises(WaitFailed) as failure:
            wait_ready(
                settings=WaitSettings(timeout_s=1.2, poll_s=0.05, heartbeat_s=0.3),
                target=_target(vm),
                reader=_reader(endpoint),
                emit=lines.append,
            )
    assert time.monotonic() - started < 1.2 + BOUND_SLACK_S
    # A heartbeat repeats the phase and detail instead of printing dots.
    assert len(lines) >= 2 and all("vm model (fetching: 3.0 of 22.1 GB)" in line for line in lines)
    assert any(line.endswith("(still waiting)") for line in lines)
    diagnosis = str(failure.value)
    assert "last vm state: model" in diagnosis and "instance status: TERMINATED" in diagnosis


def test_http_mode_stops_when_the_vm_reports_failure() -> None:
    vm = FakeVm(reports=[("failed", "server: llama-server exited 1")], serial=SERIAL)
    with fake_compute_api(vm) as endpoint:
        diagnosis, _lines, elapsed = _wait_expecting_failure(
            url=f"http://127.0.0.1:{free_port()}", target=_target(vm), reader=_reader(endpoint)
        )
    assert elapsed < SHORT.timeout_s
    assert "the VM reported failure: server: llama-server exited 1" in diagnosis
    assert "last http state: unreachable" in diagnosis


def test_http_mode_gives_up_early_when_the_vm_is_ready_but_the_port_unreachable() -> None:
    vm = FakeVm(reports=[("ready", "healthy 95 s after boot")], serial=SERIAL)
    settings = WaitSettings(timeout_s=30.0, poll_s=0.05, heartbeat_s=0.5, vm_ready_unreachable_s=0.5)
    lines: list[str] = []
    with fake_compute_api(vm) as endpoint, pytest.raises(WaitFailed) as failure:
        started = time.monotonic()
        wait_ready(
            settings=settings,
            url=f"http://127.0.0.1:{free_port()}",
            target=_target(vm),
            reader=_reader(endpoint),
            emit=lines.append,
        )
    assert time.monotonic() - started < settings.timeout_s
    diagnosis = str(failure.value)
    assert "the VM reports ready (healthy 95 s after boot)" in diagnosis
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
