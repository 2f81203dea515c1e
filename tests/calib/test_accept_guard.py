"""The acceptance guard (startup/accept_guard.py).

End to end: the guard runs as the VM runs it (its own process, standard library only, its modules
from its own directory) against the real pinned llama-server serving the random tiny model with MTP
(no draft is ever accepted) while real chat requests flow; the verdict it compares with claims 80 %.
On a compressed window it marks the verdict stale in gcp-storage-emulator, reports under
``qwen36/accept`` on the loopback metadata server and publishes both metrics to the loopback
Cloud Monitoring. The rule itself (the window, the hold, what resets it) on a synthetic clock.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import accept_guard
import calibrate
import httpx
import pytest

from infra import boot_protocol
from infra.config import StackConfig
from infra.server_args import server_args
from tests.calib.conftest import Bucket
from tests.fleet.monitoring_fake import google_fake
from tests.harness.server import LlamaServer, free_port
from tests.idle.vm_fakes import FakeMetadata, fake_metadata

GUARD = Path(__file__).resolve().parents[2] / "startup" / "accept_guard.py"
VM_PYTHON = os.environ.get("QWEN36_VM_PYTHON", sys.executable)
KEY = calibrate.Key(11434, "ab" * 32, "cpu", "none", "N/A", 56320)
VERDICT = "models/m.gguf.verdict.json"


def _verdict(acceptance: float) -> dict:
    winner = calibrate.Candidate(2, True, False)
    samples = {i: calibrate.Sample(64, 700.0, 100, round(100 * acceptance)) for i in range(4)}
    result = calibrate.Result(winner, samples, status="measured")
    return calibrate.Calibration(KEY, [result], calibrate.Noise(), 1.0, 120.0, [], 64).verdict("test")


def _wait(predicate: object, timeout: float, what: str) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if predicate():  # type: ignore[operator]
            return
        time.sleep(0.05)
    raise AssertionError(f"timed out waiting for {what}")


@pytest.fixture
def random_mtp_server(tiny_mtp_model: Path, llama_server_bin: Path) -> Iterator[LlamaServer]:
    cfg = StackConfig(threads=1, backend_sampling=False)
    args = server_args(
        cfg, model_path=str(tiny_mtp_model), api_key_file=None, host="127.0.0.1", port=free_port()
    )
    with LlamaServer(args, binary=llama_server_bin) as server:
        server.wait_healthy()
        yield server


@pytest.mark.llama
def test_live_acceptance_far_below_the_verdicts_marks_it_stale(
    tmp_path: Path, bucket: Bucket, random_mtp_server: LlamaServer
) -> None:
    store = bucket.store(VERDICT)
    store.save(_verdict(0.8), "0")
    (tmp_path / "expect.json").write_text(json.dumps({"candidate": {"n_max": 2}, "acceptance": 0.8}))
    (tmp_path / "key.json").write_text(json.dumps(KEY.as_dict()))
    (tmp_path / "boot_id").write_text("b00t-1\n")
    md = FakeMetadata()
    stop = threading.Event()

    def traffic() -> None:
        with httpx.Client(timeout=60) as client:
            while not stop.is_set():
                client.post(
                    f"{random_mtp_server.base_url}/v1/chat/completions",
                    json={
                        "messages": [{"role": "user", "content": "Say a"}],
                        "max_tokens": 24,
                        "temperature": 0,
                    },
                )

    with fake_metadata(md) as meta, google_fake() as monitoring:
        sender = threading.Thread(target=traffic, daemon=True)
        sender.start()
        argv = [
            VM_PYTHON, "-E", "-s", "-S", str(GUARD),
            "--metrics-url", f"{random_mtp_server.base_url}/metrics",
            "--expect-file", str(tmp_path / "expect.json"), "--key-json", str(tmp_path / "key.json"),
            "--bucket", bucket.name, "--verdict-object", VERDICT, "--gcs-url", bucket.endpoint,
            "--metadata-url", meta, "--monitoring-url", monitoring.url,
            "--acceptance-metric", boot_protocol.ACCEPTANCE_METRIC_TYPE,
            "--decode-metric", boot_protocol.DECODE_RATE_METRIC_TYPE,
            "--poll-seconds", "0.2", "--window-seconds", "1", "--hold-seconds", "1", "--min-drafted", "20",
            "--report-interval-seconds", "0.5", "--boot-id-file", str(tmp_path / "boot_id"),
            "--max-runtime", "30",
        ]  # fmt: skip
        guard = subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
        try:
            _wait(lambda: (store.load()[0] or {}).get("stale"), 25, "the verdict marked stale")
            _wait(
                lambda: any(v.startswith("stale ") for k, v in md.writes if k == "qwen36/accept"), 5, "report"
            )
        finally:
            stop.set()
            guard.terminate()
            out = guard.communicate(timeout=10)[0]
            sender.join(timeout=60)
    doc, _ = store.load()
    assert doc is not None
    stale = doc["stale"]
    assert stale["live_acceptance"] == 0.0 and stale["verdict_acceptance"] == 0.8, out
    assert stale["window_drafted"] >= 20 and stale["boot_id"] == "b00t-1"
    assert calibrate.verdict_problem(doc, KEY).startswith("marked stale: live acceptance 0.0% stayed below")  # type: ignore[union-attr]
    assert "verdict marked stale, the next boot calibrates again" in out
    reports = [boot_protocol.parse_report(v) for k, v in md.writes if k == "qwen36/accept"]
    fields = boot_protocol.detail_fields(reports[-1].detail)
    assert reports[-1].phase == "stale" and reports[-1].boot_id == "b00t-1"
    assert (
        fields["acceptance"] == "0.0000" and float(fields["decode-tps"]) > 0 and fields["expect"] == "0.8000"
    )
    # Each minute with traffic (here each poll): both metrics on this VM's gce_instance, DOUBLE gauges.
    series = [s for post in monitoring.posts for s in post.body["timeSeries"]]
    types = {s["metric"]["type"] for s in series}
    assert types == {boot_protocol.ACCEPTANCE_METRIC_TYPE, boot_protocol.DECODE_RATE_METRIC_TYPE}
    assert all(s["resource"]["type"] == "gce_instance" and s["valueType"] == "DOUBLE" for s in series)
    accepted = [s["points"][0]["value"]["doubleValue"] for s in series if "acceptance" in s["metric"]["type"]]
    assert accepted and set(accepted) == {0.0}
    assert all(p.authorization == "Bearer ya29.fake-vm-token" for p in monitoring.posts)


class _Recorder(accept_guard.Cloud):
    def __init__(self) -> None:
        self.stale: list[tuple[str, dict]] = []
        self.published: list[tuple[float | None, float]] = []

    def report(self, value: str) -> None:
        pass

    def publish(self, acceptance: float | None, decode_tps: float, end: object) -> None:
        self.published.append((acceptance, decode_tps))

    def mark_stale(self, reason: str, details: dict) -> bool:
        self.stale.append((reason, details))
        return True


def _guard(expect: float | None = 0.8) -> tuple[accept_guard.Guard, _Recorder]:
    settings = accept_guard.Settings(
        "http://unused", None, expect, poll_s=60, window_s=1800, hold_s=1800, min_drafted=20_000
    )
    cloud = _Recorder()
    return accept_guard.Guard(settings, cloud, "b00t", clock=lambda: 0.0, wall=lambda: 0.0), cloud


def _feed(
    guard: accept_guard.Guard, minutes: range, drafted_per_min: float, acceptance: float, start: float = 0
):
    for m in minutes:
        n = m - minutes.start + 1
        drafted = start + n * drafted_per_min
        guard.observe(accept_guard.Point(m * 60.0, drafted, drafted * acceptance, drafted / 2, drafted / 200))


def test_low_acceptance_must_last_the_window_and_the_hold() -> None:
    guard, cloud = _guard()
    # 1,000 drafts a minute at 30 %, against 0.6 x 80 % = 48 %: low once 30 minutes hold 20,000+.
    _feed(guard, range(0, 30), 1000, 0.3)
    assert guard.state == "waiting" and not cloud.stale
    _feed(guard, range(30, 59), 1000, 0.3, start=30_000)
    assert guard.state == "low" and not cloud.stale
    _feed(guard, range(59, 62), 1000, 0.3, start=59_000)
    assert guard.state == "stale" and len(cloud.stale) == 1
    reason, details = cloud.stale[0]
    assert "stayed below 0.6 x the verdict's 80.0%" in reason and details["window_drafted"] >= 20_000


def test_a_window_back_above_the_limit_forgets_the_low_spell() -> None:
    guard, cloud = _guard()
    _feed(guard, range(0, 45), 1000, 0.3)
    assert guard.low_since is not None
    # Better traffic: the window's acceptance climbs back over 48 %.
    _feed(guard, range(45, 120), 1000, 0.9, start=45_000)
    assert guard.state == "ok" and guard.low_since is None and not cloud.stale


def test_too_little_traffic_is_no_evidence_either_way() -> None:
    guard, cloud = _guard()
    _feed(guard, range(0, 240), 50, 0.0)  # 1,500 drafts a half hour: never enough to judge
    assert guard.state == "waiting" and not cloud.stale


def test_without_mtp_there_is_nothing_to_guard_but_the_rate_is_published() -> None:
    guard, cloud = _guard(expect=None)
    _feed(guard, range(0, 120), 0, 0.0)
    assert guard.state == "no-mtp" and not cloud.stale
    guard2, cloud2 = _guard(expect=None)
    for m in range(3):
        guard2.observe(accept_guard.Point(m * 60.0, 0, 0, 100.0 * (m + 1), 1.25 * (m + 1)))
    assert cloud2.published == [(None, 80.0), (None, 80.0)]


def test_a_restarted_server_starts_the_window_again() -> None:
    guard, cloud = _guard()
    _feed(guard, range(0, 45), 1000, 0.3)
    guard.observe(accept_guard.Point(45 * 60.0, 10, 3, 5, 0.05))  # counters back near zero
    assert len(guard.history) == 1 and not cloud.stale
