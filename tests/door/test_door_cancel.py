"""Every dropped request frees the slot, a non-streaming one too, against the real llama-server with
``--parallel 1`` (the product's arguments): the door streams a non-streaming chat or completion
upstream and assembles llama-server's own answer (door/assemble.py), so a client going away cancels
it at the next token. The control: straight to llama-server, a dropped non-streaming request keeps
its slot while anything reads ``/slots`` (each read is a task result that restarts the handler's
one-second wait before it looks at its connection). And the assembled answer is llama-server's own,
field by field, for the same seed; a dropped keep-alive connection is retried once on a fresh one
without a look at the group."""

from __future__ import annotations

import http.client
import json
import time
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

import httpx
import pytest

from tests.door.conftest import ALIAS, AUTH, World, WorldFactory, wait_for
from tests.harness import models

pytestmark = pytest.mark.llama

TIMEOUT_S = 60.0
LONG = 20000
# The README's claim: a client that goes away frees the server within 2 s.
FREE_BOUND_S = 2.0
# The control keeps its slot at least this long after the drop (it would for the whole answer).
CONTROL_S = 3.0
# Timing fields of llama-server's answer: the same keys, but each run's own milliseconds.
TIMED = {"prompt_ms", "prompt_per_token_ms", "prompt_per_second", "predicted_ms", "predicted_per_token_ms",
         "predicted_per_second"}  # fmt: skip


def _slot_busy(world: World) -> bool:
    assert world.member.server is not None
    slots = httpx.get(f"{world.member.server.base_url}/slots", headers=AUTH, timeout=10).json()
    assert len(slots) == 1  # --parallel 1
    return bool(slots[0]["is_processing"])


def _drop_after_start(url: str, world: World, body: dict[str, Any]) -> None:
    """Sends a non-streaming request and, once the slot works on it, closes the connection."""
    parts = urlsplit(url)
    conn = http.client.HTTPConnection(parts.hostname or "", parts.port, timeout=TIMEOUT_S)
    conn.request(
        "POST", parts.path, body=json.dumps(body), headers={**AUTH, "Content-Type": "application/json"}
    )
    try:
        wait_for(lambda: _slot_busy(world), TIMEOUT_S, "the slot to start on the request")
    finally:
        conn.close()


def _long(path: str) -> dict[str, Any]:
    if path == "/v1/completions":
        return {"model": ALIAS, "prompt": "Say a", "max_tokens": LONG, "temperature": 0}
    return {
        "model": ALIAS,
        "messages": [{"role": "user", "content": "Say a"}],
        "max_tokens": LONG,
        "temperature": 0,
    }


def _post(base: str, path: str, body: dict[str, Any]) -> httpx.Response:
    return httpx.post(f"{base}{path}", headers=AUTH, json=body, timeout=TIMEOUT_S)


@pytest.mark.parametrize("path", ["/v1/chat/completions", "/v1/completions"])
def test_a_dropped_non_streaming_request_frees_the_slot(make_world: WorldFactory, path: str) -> None:
    world = make_world(size=1)
    _drop_after_start(f"{world.url}{path}", world, _long(path))
    left = time.monotonic()
    # Read /slots all the while: the reads that kept the slot busy before (the control below).
    wait_for(lambda: not _slot_busy(world), FREE_BOUND_S, "the slot to be idle")
    assert time.monotonic() - left < FREE_BOUND_S
    reply = httpx.post(
        f"{world.url}{path}", headers=AUTH, json={**_long(path), "max_tokens": 4}, timeout=TIMEOUT_S
    )
    assert reply.status_code == 200


def test_straight_to_llama_server_a_dropped_non_streaming_request_keeps_its_slot(
    make_world: WorldFactory,
) -> None:
    world = make_world(size=1)
    assert world.member.server is not None
    _drop_after_start(
        f"{world.member.server.base_url}/v1/chat/completions", world, _long("/v1/chat/completions")
    )
    deadline = time.monotonic() + CONTROL_S
    while time.monotonic() < deadline:
        assert _slot_busy(world)
        time.sleep(0.05)


def _same_answer(direct: dict[str, Any], assembled: dict[str, Any]) -> None:
    assert set(assembled) == set(direct)
    for field in direct:
        if field == "id":
            assert assembled["id"].startswith("chatcmpl-") and direct["id"].startswith("chatcmpl-")
        elif field == "created":
            assert abs(assembled["created"] - direct["created"]) <= 5
        elif field == "timings":
            assert set(assembled["timings"]) == set(direct["timings"])
            for name, value in direct["timings"].items():
                if name not in TIMED:
                    assert assembled["timings"][name] == value, name
        else:
            assert assembled[field] == direct[field], field


@pytest.mark.parametrize("path", ["/v1/chat/completions", "/v1/completions"])
def test_the_assembled_answer_is_llama_server_s_own(
    make_world: WorldFactory, tmp_path: Path, path: str
) -> None:
    # The thinking model answers in reasoning_content as well as content.
    world = make_world(size=1, model=models.tiny_mtp_model(tmp_path, agree=True, thinking=True))
    assert world.member.server is not None
    body = {**_long(path), "max_tokens": 24, "temperature": 0.9, "seed": 1234, "cache_prompt": False}
    direct = httpx.post(world.member.server.base_url + path, headers=AUTH, json=body, timeout=TIMEOUT_S)
    through = httpx.post(world.url + path, headers=AUTH, json=body, timeout=TIMEOUT_S)
    assert direct.status_code == through.status_code == 200
    assert through.headers["content-type"] == direct.headers["content-type"]
    _same_answer(direct.json(), through.json())
    if path == "/v1/chat/completions":
        assert through.json()["choices"][0]["message"]["reasoning_content"]
    # The door asked for a stream in the client's place.
    assert world.relay.proxied()[-1] == ("POST", path)
    # An error is llama-server's own too: a prompt past the context.
    too_long = {
        **body,
        "max_tokens": 1,
        "messages": [{"role": "user", "content": "a " * 60000}],
        "prompt": "a " * 60000,
    }
    direct_error = httpx.post(
        f"{world.member.server.base_url}{path}", headers=AUTH, json=too_long, timeout=TIMEOUT_S
    )
    through_error = httpx.post(f"{world.url}{path}", headers=AUTH, json=too_long, timeout=TIMEOUT_S)
    assert through_error.status_code == direct_error.status_code == 400
    assert through_error.json()["error"]["type"] == direct_error.json()["error"]["type"]


def test_a_dropped_keep_alive_connection_is_retried_on_a_fresh_one(make_world: WorldFactory) -> None:
    world = make_world(size=1)
    body = {**_long("/v1/chat/completions"), "max_tokens": 4}
    # A whole answer leaves its connection open (llama-server closes one after a stream).
    assert httpx.get(f"{world.url}/v1/models", headers=AUTH, timeout=TIMEOUT_S).status_code == 200
    looks = len(world.compute_calls())
    world.relay.drop_reused = 1
    assert _post(world.url, "/v1/chat/completions", body).status_code == 200
    assert world.relay.dropped == 1
    assert world.door.recent()["reconnects"] == 1
    assert len(world.compute_calls()) == looks  # no look at the group
