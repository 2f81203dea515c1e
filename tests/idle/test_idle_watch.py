"""The idle watcher against the real pinned llama-server (tiny MTP model, the product's arguments
and API key) on a compressed clock, with the stop going to a loopback Compute API.

A window of a second or two stands for ``idleStopMinutes``; the watcher polls every 0.1 s.
"""

from __future__ import annotations

import re
import threading
import time
import uuid
from datetime import UTC, datetime
from pathlib import Path

import httpx
import pytest

from infra import boot_protocol
from startup import idle_watch
from tests.compute_fake.group import Call
from tests.harness.server import LlamaServer, free_port
from tests.idle.conftest import (
    API_KEY,
    Cloud,
    WatcherProcess,
    production_server,
    start_watcher,
    wait_for,
)
from tests.idle.vm_fakes import TOKEN

pytestmark = pytest.mark.llama

AUTH = {"Authorization": f"Bearer {API_KEY}"}
GROUP_PATH = "/compute/v1/projects/acme-llm-test/regions/us-central1/instanceGroupManagers/qwen36-dev"
REQUEST_TIMEOUT_S = 60.0
# A poll, a request and a process start on a loaded 2-core machine: slack for timing assertions.
SLACK_S = 1.0


def _watch(cloud: Cloud, llama: LlamaServer, key_file: Path, tmp_path: Path, watchers: list[WatcherProcess],
           **kw: float) -> WatcherProcess:  # fmt: skip
    w = start_watcher(cloud, f"{llama.base_url}/metrics", key_file, tmp_path, **kw)  # type: ignore[arg-type]
    watchers.append(w)
    # The first report is written at the first poll: from then on the counters have a baseline.
    wait_for(lambda: cloud.metadata.idle_reports(), 10, "the watcher's first report")
    return w


def _chat(llama: LlamaServer, max_tokens: int = 8) -> None:
    reply = httpx.post(
        f"{llama.base_url}/v1/chat/completions",
        headers=AUTH,
        json={"messages": [{"role": "user", "content": "Say a"}], "max_tokens": max_tokens, "temperature": 0},
        timeout=REQUEST_TIMEOUT_S,
    )
    assert reply.status_code == 200, reply.text


def _assert_one_resize_to_zero(cloud: Cloud) -> Call:
    (resize,) = cloud.group.resizes()
    assert resize.method == "POST"
    assert resize.path == f"{GROUP_PATH}/resize"
    assert resize.query["size"] == ["0"]
    uuid.UUID(resize.query["requestId"][0])  # a valid UUID, as the API requires
    assert resize.body == b""
    assert resize.headers["Authorization"] == f"Bearer {TOKEN}"
    return resize


def test_metrics_and_health_polls_do_not_move_the_counters(llama: LlamaServer) -> None:
    def sample() -> idle_watch.Sample:
        text = httpx.get(f"{llama.base_url}/metrics", headers=AUTH, timeout=REQUEST_TIMEOUT_S).text
        return idle_watch.parse_metrics(text)

    before = sample()
    for _ in range(20):
        assert httpx.get(f"{llama.base_url}/health", timeout=REQUEST_TIMEOUT_S).status_code == 200
        sample()
    assert sample() == before
    assert before.busy == 0
    _chat(llama)
    after = sample()
    assert all(a > b for a, b in zip(after.counters, before.counters, strict=True)), (before, after)


def test_silence_leads_to_exactly_one_stop(
    cloud: Cloud, llama: LlamaServer, key_file: Path, tmp_path: Path, watchers: list[WatcherProcess]
) -> None:
    w = _watch(cloud, llama, key_file, tmp_path, watchers, idle_s=1.5)
    assert w.wait_exit() == 0, w.output()
    resize = _assert_one_resize_to_zero(cloud)
    assert resize.t - w.started >= 1.5
    assert cloud.group.state().target_size == 0
    # Check before act: the group was read first (its size decides whether to stop at all).
    gets = [c for c in cloud.group.calls if c.method == "GET" and c.path == GROUP_PATH]
    assert gets and gets[0].t < resize.t
    assert "idle stop: resized group qwen36-dev to 0" in w.output()

    stop = boot_protocol.parse_report(cloud.metadata.idle_reports()[-1])
    assert stop.phase == "idle-stop"
    assert stop.boot_id == "6b1c0f4e-4d55-4a3c-9f0e-0d1a2b3c4d5e"
    assert "last request none" in stop.detail and re.search(r"idle \d+\.\d min", stop.detail)
    (entry,) = cloud.logging.entries
    assert entry["logName"] == "projects/acme-llm-test/logs/qwen36-autostop"
    # An insertId and a timestamp: what makes the write safe to retry (Logging dedups on both).
    assert re.fullmatch(r"[0-9a-f]{32}", entry["insertId"])
    assert re.fullmatch(r"\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{6}Z", entry["timestamp"])
    assert entry["resource"] == {
        "type": "gce_instance",
        "labels": {
            "instance_id": "5521896410023442211",
            "zone": "us-central1-b",
            "project_id": "acme-llm-test",
        },
    }
    assert entry["jsonPayload"]["event"] == "idle-stop"
    assert entry["jsonPayload"]["lastRequest"] == "none"
    assert entry["jsonPayload"]["idleMinutes"] >= 1.5 / 60


def test_a_request_in_the_window_resets_the_timer(
    cloud: Cloud, llama: LlamaServer, key_file: Path, tmp_path: Path, watchers: list[WatcherProcess]
) -> None:
    idle_s = 3.0
    w = _watch(cloud, llama, key_file, tmp_path, watchers, idle_s=idle_s)
    time.sleep(idle_s / 2)
    _chat(llama)
    answered = time.monotonic()
    answered_wall = time.time()
    assert cloud.group.resizes() == [], "stopped while a request was in the window"
    assert w.wait_exit(timeout=idle_s + 10) == 0, w.output()
    resize = _assert_one_resize_to_zero(cloud)
    # Not before a whole window after the request, though silence alone would have stopped earlier.
    assert resize.t >= answered + idle_s - SLACK_S / 2
    assert resize.t - w.started >= idle_s * 1.5 - SLACK_S / 2
    stop = boot_protocol.parse_report(cloud.metadata.idle_reports()[-1])
    seen = re.search(r"last request (\d{4}-\d\d-\d\dT\d\d:\d\d:\d\dZ)", stop.detail)
    assert seen, stop.detail
    last = datetime.strptime(seen[1], boot_protocol.TIME_FORMAT).replace(tzinfo=UTC).timestamp()
    assert abs(last - answered_wall) <= 2 + SLACK_S


def test_a_long_stream_in_progress_keeps_it_up(
    cloud: Cloud, llama: LlamaServer, key_file: Path, tmp_path: Path, watchers: list[WatcherProcess]
) -> None:
    idle_s = 1.0
    w = _watch(cloud, llama, key_file, tmp_path, watchers, idle_s=idle_s)
    times: dict[str, float] = {}

    def stream() -> None:
        body = {
            "messages": [{"role": "user", "content": "Say a"}],
            "max_tokens": 800,
            "temperature": 0,
            "ignore_eos": True,
            "stream": True,
        }
        url = f"{llama.base_url}/v1/chat/completions"
        with httpx.stream("POST", url, headers=AUTH, json=body, timeout=REQUEST_TIMEOUT_S) as reply:
            assert reply.status_code == 200
            for _ in reply.iter_lines():
                times.setdefault("first", time.monotonic())
        times["end"] = time.monotonic()

    thread = threading.Thread(target=stream)
    thread.start()
    thread.join(timeout=REQUEST_TIMEOUT_S)
    assert "end" in times
    streamed = times["end"] - times["first"]
    # The test means something only if the stream outlasts the window well.
    assert streamed >= 2 * idle_s + SLACK_S, f"the stream took only {streamed:.1f} s: make it longer"
    early = [c for c in cloud.group.resizes() if c.t < times["end"]]
    assert early == [], "stopped during a stream"
    assert w.wait_exit(timeout=idle_s + 10) == 0, w.output()
    resize = _assert_one_resize_to_zero(cloud)
    assert resize.t >= times["end"] + idle_s - SLACK_S / 2


def test_health_and_metrics_polls_do_not_reset_the_timer(
    cloud: Cloud, llama: LlamaServer, key_file: Path, tmp_path: Path, watchers: list[WatcherProcess]
) -> None:
    idle_s = 2.0
    done = threading.Event()

    def poll() -> None:
        # A load balancer's health checks, the deploy gate and a Prometheus scrape, at once.
        with httpx.Client(timeout=REQUEST_TIMEOUT_S) as client:
            while not done.is_set():
                client.get(f"{llama.base_url}/health")
                client.get(f"{llama.base_url}/metrics", headers=AUTH)
                time.sleep(0.05)

    poller = threading.Thread(target=poll)
    poller.start()
    try:
        w = _watch(cloud, llama, key_file, tmp_path, watchers, idle_s=idle_s)
        assert w.wait_exit(timeout=idle_s + 10) == 0, w.output()
    finally:
        done.set()
        poller.join()
    resize = _assert_one_resize_to_zero(cloud)
    assert resize.t - w.started <= idle_s + 2 * SLACK_S, "the polls delayed the stop"


def test_a_server_that_does_not_answer_is_not_idle(
    cloud: Cloud,
    tiny_mtp_model_agreeing: Path,
    key_file: Path,
    llama_server_bin: Path,
    tmp_path: Path,
    watchers: list[WatcherProcess],
) -> None:
    idle_s = 1.0
    with production_server(tiny_mtp_model_agreeing, key_file, llama_server_bin) as srv:
        srv.wait_healthy()
        w = _watch(cloud, srv, key_file, tmp_path, watchers, idle_s=idle_s)
        srv.stop()  # the crash, halfway through nothing
        time.sleep(idle_s * 3)
    assert w.running(), w.output()
    assert cloud.group.resizes() == []
    assert "not answering /metrics" in w.output()
    assert w.output().count("not answering") == 1, "logged once per outage, not every poll"


def test_a_rejected_key_is_not_idle(
    cloud: Cloud, llama: LlamaServer, tmp_path: Path, watchers: list[WatcherProcess]
) -> None:
    wrong = tmp_path / "wrong-key"
    wrong.write_text("not-the-key\n")
    w = start_watcher(cloud, f"{llama.base_url}/metrics", wrong, tmp_path, idle_s=1.0)
    watchers.append(w)
    time.sleep(3.0)
    assert w.running(), w.output()
    assert cloud.group.resizes() == []
    assert "/metrics answered 401" in w.output()


def test_nothing_listening_is_not_idle(cloud: Cloud, tmp_path: Path, watchers: list[WatcherProcess]) -> None:
    w = start_watcher(cloud, f"http://127.0.0.1:{free_port()}/metrics", None, tmp_path, idle_s=0.5)
    watchers.append(w)
    time.sleep(2.0)
    assert w.running(), w.output()
    assert cloud.group.resizes() == []


def test_a_failed_stop_is_retried_within_its_bound_and_logged(
    cloud: Cloud, llama: LlamaServer, key_file: Path, tmp_path: Path, watchers: list[WatcherProcess]
) -> None:
    cloud.group.resize_failures = [503, 500]
    w = _watch(cloud, llama, key_file, tmp_path, watchers, idle_s=1.0, stop_attempts=3, retry_pause_s=0.2)
    assert w.wait_exit() == 0, w.output()
    tries = cloud.group.resizes()
    assert len(tries) == 3
    # One request id for all tries: GCE treats a retry of a call that did land as the same call.
    assert len({c.query["requestId"][0] for c in tries}) == 1
    assert tries[1].t - tries[0].t >= 0.2 and tries[2].t - tries[1].t >= 0.4  # the pause doubles
    out = w.output()
    assert "stop attempt 1/3 failed: resize answered 503" in out
    assert "stop attempt 2/3 failed: resize answered 500" in out
    assert "idle stop: resized group qwen36-dev to 0" in out
    assert cloud.group.state().target_size == 0


def test_a_stop_that_keeps_failing_gives_up_and_waits_another_window(
    cloud: Cloud, llama: LlamaServer, key_file: Path, tmp_path: Path, watchers: list[WatcherProcess]
) -> None:
    idle_s = 1.5
    cloud.group.resize_failures = [503, 503]
    w = _watch(cloud, llama, key_file, tmp_path, watchers, idle_s=idle_s, stop_attempts=2, retry_pause_s=0.1)
    assert w.wait_exit(timeout=2 * idle_s + 10) == 0, w.output()
    first, second, third = cloud.group.resizes()
    assert "stop failed after 2 attempts" in w.output()
    assert third.t - second.t >= idle_s - 0.2, "retried before another idle window"
    assert first.query["requestId"] != third.query["requestId"]


def test_a_group_of_several_members_is_left_alone(
    cloud: Cloud, llama: LlamaServer, key_file: Path, tmp_path: Path, watchers: list[WatcherProcess]
) -> None:
    cloud.group.state().target_size = 2
    w = _watch(cloud, llama, key_file, tmp_path, watchers, idle_s=0.5)
    wait_for(lambda: "only a one-member group stops" in w.output(), 10, "the refusal")
    assert w.running()
    assert cloud.group.resizes() == []


def test_a_group_already_at_zero_is_not_resized(
    cloud: Cloud, llama: LlamaServer, key_file: Path, tmp_path: Path, watchers: list[WatcherProcess]
) -> None:
    cloud.group.state().target_size = 0
    w = _watch(cloud, llama, key_file, tmp_path, watchers, idle_s=0.5)
    assert w.wait_exit() == 0
    assert cloud.group.resizes() == []
    assert "already at size 0" in w.output()


def test_a_vm_outside_a_group_exits_cleanly(
    cloud: Cloud, llama: LlamaServer, key_file: Path, tmp_path: Path, watchers: list[WatcherProcess]
) -> None:
    """No created-by (a plain VM): nothing to resize, and exit 0 so systemd does not restart it."""
    cloud.metadata.created_by = ""
    w = start_watcher(cloud, f"{llama.base_url}/metrics", key_file, tmp_path, idle_s=0.5)
    watchers.append(w)
    assert w.wait_exit() == 0
    assert "not in a managed instance group" in w.output()
    assert cloud.group.calls == []
