"""Wake on request: a request that finds the group at 0 makes one resize, is held through the
(compressed) cold start and then answered by the real llama-server, streamed or not; ten at once
make one resize too; past the bound the answer is an OpenAI-shaped 503 with Retry-After."""

from __future__ import annotations

import json
import threading
import uuid

import httpx
import openai
import pytest

from tests.compute_fake.group import FakeMember, GroupState
from tests.door.conftest import API_KEY, AUTH, WorldFactory, ask, streamed_text
from tests.door.relay import Relay

pytestmark = pytest.mark.llama

BOOT_S = 1.5
TIMEOUT_S = 60.0


def _resizes(world: object) -> list[tuple[str, str]]:
    calls = world.group.resizes()  # type: ignore[attr-defined]
    return [(c.query["size"][0], c.query["requestId"][0]) for c in calls]


def test_a_request_at_size_zero_makes_one_resize_is_held_then_answered(make_world: WorldFactory) -> None:
    world = make_world(size=0, boot_s=BOOT_S)
    reply = httpx.post(f"{world.url}/v1/chat/completions", headers=AUTH, json=ask(), timeout=TIMEOUT_S)
    assert reply.status_code == 200, reply.text
    assert reply.json()["choices"][0]["message"]["content"].startswith("aaaa")
    ((size, request_id),) = _resizes(world)
    assert size == "1"
    uuid.UUID(request_id)
    (record,) = [r for r in world.door.recent()["requests"] if r["route"] == "chat"]  # type: ignore[index,union-attr]
    # Held for the boot: at least the injected boot time, and not much more.
    assert BOOT_S <= record["hold_s"] < BOOT_S + 3.0, record
    assert record["hold_outcome"] == "served"


def test_a_streaming_request_gets_heartbeats_while_held_then_the_stream(make_world: WorldFactory) -> None:
    world = make_world(size=0, boot_s=BOOT_S)
    comments, data = [], []
    with httpx.stream(
        "POST", f"{world.url}/v1/chat/completions", headers=AUTH, json=ask(16, stream=True), timeout=TIMEOUT_S
    ) as reply:
        assert reply.status_code == 200
        assert reply.headers["content-type"].startswith("text/event-stream")
        for line in reply.iter_lines():
            if line.startswith(":"):
                comments.append(line)
                assert not data, "heartbeats come before the answer"
            elif line.startswith("data: ") and line != "data: [DONE]":
                data.append(json.loads(line[6:]))
    # A 0.3 s heartbeat through a 1.5 s boot: several comment lines kept the connection busy.
    assert len(comments) >= 3, comments
    text = "".join((c["choices"][0]["delta"].get("content") or "") for c in data if c.get("choices"))
    assert text.startswith("aaaa"), text
    assert len(_resizes(world)) == 1


def test_ten_concurrent_requests_during_one_wake_make_one_resize(make_world: WorldFactory) -> None:
    world = make_world(size=0, boot_s=BOOT_S)
    results: list[str] = []

    def one(i: int) -> None:
        stream = i % 2 == 0
        with httpx.Client(timeout=TIMEOUT_S) as client:
            if stream:
                with client.stream(
                    "POST", f"{world.url}/v1/chat/completions", headers=AUTH, json=ask(8, stream=True)
                ) as reply:
                    text = streamed_text(reply.iter_lines())
                    ok = reply.status_code == 200 and text.startswith("aaaa")
                    results.append("stream-ok" if ok else f"stream {reply.status_code} {text[:200]}")
            else:
                reply = client.post(f"{world.url}/v1/chat/completions", headers=AUTH, json=ask(8))
                ok = reply.status_code == 200 and reply.json()["choices"][0]["message"]["content"].startswith(
                    "a"
                )
                results.append("ok" if ok else f"{reply.status_code} {reply.text[:200]}")

    threads = [threading.Thread(target=one, args=(i,)) for i in range(10)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(TIMEOUT_S)
    assert sorted(results) == ["ok"] * 5 + ["stream-ok"] * 5, results
    assert len(_resizes(world)) == 1
    assert world.member.starts == 1


def test_past_the_bound_an_openai_shaped_503_with_retry_after(make_world: WorldFactory) -> None:
    # The member takes longer to boot than the door holds a request.
    world = make_world(size=0, boot_s=30.0, wake_bound_s="1.0")
    reply = httpx.post(f"{world.url}/v1/chat/completions", headers=AUTH, json=ask(), timeout=TIMEOUT_S)
    assert reply.status_code == 503
    assert reply.headers["retry-after"] == "7"
    error = reply.json()["error"]
    assert error["type"] == "unavailable_error" and error["code"] == 503
    assert "did not come up within 1 s" in error["message"]

    client = openai.OpenAI(base_url=f"{world.url}/v1", api_key=API_KEY, max_retries=0, timeout=TIMEOUT_S)
    with pytest.raises(openai.InternalServerError) as failure:
        client.chat.completions.create(**ask())  # type: ignore[call-overload]
    assert failure.value.status_code == 503
    # A stream already has its 200: the bound comes as an error event, which the SDK raises.
    with pytest.raises(openai.APIError, match="did not come up within"):
        for _ in client.chat.completions.create(**ask(stream=True)):  # type: ignore[call-overload]
            pass
    # Three requests, one wake: the group was resized once.
    assert len(_resizes(world)) == 1


def test_the_door_follows_the_member_a_repair_put_elsewhere(make_world: WorldFactory) -> None:
    """No fixed address (no stateful IP: alternate-zone repair refuses one): a repaired member has a
    new name, zone and internal address, and the door finds it through the group on the next request."""
    world = make_world(size=1)
    first = httpx.post(f"{world.url}/v1/chat/completions", json=ask(), headers=AUTH, timeout=30)
    assert first.status_code == 200, first.text
    # The repair: the old VM's address refuses, the group now lists a member in another zone at
    # another address (the fake's timeline: https://cloud.google.com/compute/docs/instance-groups/about-repair).
    port = world.relay.port
    world.relay.close()
    moved = FakeMember("qwen36-dev-q9z8", "us-central1-c", network_ip="127.0.0.2")
    world.group.timeline.append((world.group.clock(), GroupState(members=[moved], target_size=1)))
    elsewhere = Relay(world.member.port, host="127.0.0.2", listen_port=port)
    try:
        second = httpx.post(f"{world.url}/v1/chat/completions", json=ask(), headers=AUTH, timeout=60)
        assert second.status_code == 200, second.text
        assert [path for _, path in elsewhere.proxied()] == ["/v1/chat/completions"]
        assert not [c for c in world.compute_calls() if c.endswith("/resize")]  # found, not woken
    finally:
        elsewhere.close()
