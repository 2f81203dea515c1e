"""Named keys through the real door in front of the real llama-server, the key set and the program's
key in the Secret Manager fake (google_fakes): two keys both work, a revoked one gets 401 within the
cache bound while the other keeps working, ``default`` replaced and revoked, per-key limits with the
OpenAI SDK retrying a 429 by itself, the web UI's cookie of a revoked key, the grant still pending
(Secret Manager's and Compute's 403), and no key's name or hash in another key's answers or the log."""

from __future__ import annotations

import hashlib
import json
import secrets
import threading
from typing import Any

import httpx
import openai
import pytest

from door import auth
from tests.compute_fake.group import Fault
from tests.door.conftest import API_KEY, AUTH, GROUP, PROJECT, World, WorldFactory, ask, wait_for

pytestmark = pytest.mark.llama

TIMEOUT_S = 60.0
KEYS_SECRET = f"projects/{PROJECT}/secrets/{GROUP}-door-keys"
KEY_SECRET = f"projects/{PROJECT}/secrets/{GROUP}-api-key"
CACHE_S = "1"
# A revocation must show within the cache bound (twice it across a failed read): 1 s here.
REVOKED_WITHIN_S = 5.0
ALICE = "qk-" + secrets.token_urlsafe(32)
BOB = "qk-" + secrets.token_urlsafe(32)


def entry(name: str, key: str, **limits: int) -> dict[str, Any]:
    """One key of contract B's payload: sha256(bytes.fromhex(salt) + key)."""
    salt = secrets.token_hex(16)
    digest = hashlib.sha256(bytes.fromhex(salt) + key.encode()).hexdigest()
    out: dict[str, Any] = {"name": name, "salt": salt, "hash": digest, "created": "2026-12-02T01:02:03Z"}
    if limits:
        out["limits"] = limits
    return out


def publish(world: World, *keys: dict[str, Any]) -> None:
    world.google.add_version(KEYS_SECRET, json.dumps({"version": 1, "keys": list(keys)}).encode())


def chat(world: World, key: str, **kw: Any) -> httpx.Response:
    headers = {"Authorization": f"Bearer {key}"}
    return httpx.post(
        f"{world.url}/v1/chat/completions", headers=headers, json=ask(4, **kw), timeout=TIMEOUT_S
    )


def keyed_world(make_world: WorldFactory, **env: str) -> World:
    return make_world(size=1, keys_secret=KEYS_SECRET, keys_cache_s=CACHE_S, **env)


def test_two_keys_work_and_a_revoked_one_ends_within_the_cache_bound(make_world: WorldFactory) -> None:
    world = keyed_world(make_world)
    # No version of the set yet (404): the program's key alone, as `default`.
    assert chat(world, API_KEY).status_code == 200
    assert chat(world, ALICE).status_code == 401
    alice, bob = entry("alice", ALICE), entry("bob", BOB)
    publish(world, alice, bob)
    wait_for(lambda: chat(world, ALICE).status_code == 200, REVOKED_WITHIN_S, "alice's key to work")
    assert chat(world, BOB).status_code == 200 and chat(world, API_KEY).status_code == 200
    publish(world, {**alice, "revoked": True}, bob)
    wait_for(lambda: chat(world, ALICE).status_code == 401, REVOKED_WITHIN_S, "alice's key to be refused")
    refused, unknown = chat(world, ALICE), chat(world, "qk-" + secrets.token_urlsafe(32))
    # The 401 says nothing of whether the name exists, or existed.
    assert refused.status_code == unknown.status_code == 401
    assert refused.json() == unknown.json() and refused.headers["www-authenticate"] == "Bearer"
    assert chat(world, BOB).status_code == 200
    # Every record names its key; the program's key sees all of them, bob only his own.
    everything = world.door.recent()["requests"]
    assert isinstance(everything, list)
    assert {r["key"] for r in everything if r["status"] == 200} == {"default", "alice", "bob"}
    own = httpx.get(
        f"{world.url}/_qwen36/recent", headers={"Authorization": f"Bearer {BOB}"}, timeout=10
    ).json()
    assert own["requests"] and {r["key"] for r in own["requests"]} == {"bob"}


def test_default_replaced_then_revoked(make_world: WorldFactory) -> None:
    world = keyed_world(make_world)
    new = "qk-" + secrets.token_urlsafe(32)
    publish(world, entry("default", new))
    wait_for(lambda: chat(world, new).status_code == 200, REVOKED_WITHIN_S, "the rotated default to work")
    assert chat(world, API_KEY).status_code == 401
    publish(world, {"name": "default", "revoked": True, "created": "2026-12-02T01:02:03Z"}, entry("bob", BOB))
    wait_for(lambda: chat(world, new).status_code == 401, REVOKED_WITHIN_S, "default to be revoked")
    assert chat(world, API_KEY).status_code == 401 and chat(world, BOB).status_code == 200


def test_over_its_concurrency_limit_a_key_gets_429_and_the_sdk_retry_succeeds(
    make_world: WorldFactory,
) -> None:
    world = keyed_world(make_world)
    publish(world, entry("alice", ALICE, concurrent=1), entry("bob", BOB))
    wait_for(lambda: chat(world, ALICE).status_code == 200, REVOKED_WITHIN_S, "alice's key to work")
    headers = {"Authorization": f"Bearer {ALICE}"}
    result: dict[str, Any] = {}
    with httpx.stream(
        "POST",
        f"{world.url}/v1/chat/completions",
        headers=headers,
        json=ask(20000, stream=True),
        timeout=TIMEOUT_S,
    ) as held:
        lines = held.iter_lines()
        while not next(lines).startswith("data: {"):
            pass
        over = chat(world, ALICE)
        assert over.status_code == 429 and over.headers["retry-after"] == "1"
        assert over.json()["error"]["type"] == "rate_limit_error"
        assert over.json()["error"]["code"] == "rate_limit_exceeded"

        def sdk() -> None:
            client = openai.OpenAI(
                base_url=f"{world.url}/v1", api_key=ALICE, timeout=TIMEOUT_S, max_retries=2
            )
            result["reply"] = client.chat.completions.create(**ask(4))  # type: ignore[call-overload]

        thread = threading.Thread(target=sdk)
        thread.start()
        statuses = lambda: [r["status"] for r in world.door.recent()["requests"] if r["key"] == "alice"]  # noqa: E731
        wait_for(lambda: statuses().count(429) == 2, 10, "the SDK's first attempt to be refused")
    thread.join(TIMEOUT_S)
    assert result["reply"].choices[0].message.content.startswith("a")
    assert statuses()[-1] == 200


def test_over_its_tokens_per_minute_a_key_gets_429_with_the_wait(make_world: WorldFactory) -> None:
    world = keyed_world(make_world)
    publish(world, entry("alice", ALICE, tokensPerMinute=10))
    wait_for(lambda: chat(world, ALICE).status_code in (200, 429), REVOKED_WITHIN_S, "alice's key to work")
    refused = chat(world, ALICE)
    assert refused.status_code == 429
    assert 1 <= int(refused.headers["retry-after"]) <= 60
    assert "tokens per minute" in refused.json()["error"]["message"]


def test_no_key_s_name_or_hash_reaches_another_key_or_the_log(make_world: WorldFactory) -> None:
    world = keyed_world(make_world)
    alice = entry("alice-secret-name", ALICE)
    publish(world, alice, entry("bob", BOB))
    wait_for(lambda: chat(world, BOB).status_code == 200, REVOKED_WITHIN_S, "bob's key to work")
    assert chat(world, ALICE).status_code == 200
    bob = {"Authorization": f"Bearer {BOB}"}
    seen = [
        chat(world, BOB),
        chat(world, BOB, stream=True),
        httpx.get(f"{world.url}/_qwen36/recent", headers=bob, timeout=10),
        httpx.get(f"{world.url}/health", headers=bob, timeout=10),
        httpx.get(f"{world.url}/v1/models", headers=bob, timeout=10),
        httpx.get(f"{world.url}/slots", headers=bob, timeout=10),
        httpx.post(f"{world.url}/v1/chat/completions", headers={"Authorization": "Bearer nope"}, json=ask(4)),
    ]
    for reply in seen:
        text = reply.text + json.dumps(dict(reply.headers))
        for secret in ("alice-secret-name", ALICE, alice["hash"], alice["salt"]):
            assert secret not in text, (reply.url, secret)
    log = "\n".join(world.door.log)
    for secret in ("alice-secret-name", ALICE, BOB, alice["hash"], alice["salt"], API_KEY):
        assert secret not in log


def test_the_web_ui_cookie_names_its_key_and_ends_with_its_revocation(make_world: WorldFactory) -> None:
    world = keyed_world(make_world)
    alice = entry("alice", ALICE)
    publish(world, alice)
    login = lambda: httpx.post(f"{world.url}/_qwen36/login", data={"key": ALICE})  # noqa: E731
    wait_for(lambda: login().status_code == 303, REVOKED_WITHIN_S, "alice's login")
    cookie = login().cookies[auth.COOKIE]
    assert cookie.startswith("alice.") and ALICE not in cookie and alice["hash"] not in cookie
    by_cookie = lambda: httpx.post(  # noqa: E731
        f"{world.url}/v1/chat/completions", cookies={auth.COOKIE: cookie}, json=ask(4), timeout=TIMEOUT_S
    )
    assert by_cookie().status_code == 200
    # Another name on the same MAC is no session.
    forged = httpx.get(f"{world.url}/v1/models", cookies={auth.COOKIE: "default." + cookie.split(".")[1]})
    assert forged.status_code == 401
    publish(world, {**alice, "revoked": True})
    wait_for(lambda: by_cookie().status_code == 401, REVOKED_WITHIN_S, "alice's session to end")


def test_while_the_program_s_key_is_unreadable_keyed_requests_get_503_and_health_stays_200(
    make_world: WorldFactory,
) -> None:
    world = make_world(size=1, api_key="", api_key_secret=KEY_SECRET, keys_cache_s=CACHE_S)
    world.google.denied.add(KEY_SECRET)
    assert httpx.get(f"{world.url}/health", timeout=10).status_code == 200
    reply = httpx.post(f"{world.url}/v1/chat/completions", headers=AUTH, json=ask(4), timeout=TIMEOUT_S)
    assert reply.status_code == 503 and reply.headers["retry-after"] == "7"
    assert reply.json()["error"]["code"] == "door_key_unreadable"
    assert reply.json()["error"]["type"] == "unavailable_error"
    assert httpx.get(f"{world.url}/health", headers=AUTH, timeout=10).json() == {"status": "ok"}
    # Without a key nothing needs the secret: 401 as always.
    assert httpx.post(f"{world.url}/v1/chat/completions", json=ask(4), timeout=TIMEOUT_S).status_code == 401
    assert world.compute_calls() == [] and world.relay.proxied() == []
    # The grant arrives: the key works from the next read on.
    world.google.add_version(KEY_SECRET, (API_KEY + "\n").encode())
    world.google.denied.discard(KEY_SECRET)
    wait_for(
        lambda: httpx.post(f"{world.url}/v1/chat/completions", headers=AUTH, json=ask(4)).status_code == 200,
        REVOKED_WITHIN_S,
        "the key to be read",
    )


def test_a_compute_403_is_grant_pending_not_starting(make_world: WorldFactory) -> None:
    world = make_world(size=1)
    world.group.faults.append(Fault("GET", f"/instanceGroupManagers/{GROUP}", 403, times=2))
    reply = httpx.post(f"{world.url}/v1/chat/completions", headers=AUTH, json=ask(4), timeout=TIMEOUT_S)
    assert reply.status_code == 503 and reply.headers["retry-after"] == "7"
    assert reply.json()["error"]["code"] == "door_grant_pending"
    props = httpx.get(f"{world.url}/props", headers=AUTH, timeout=TIMEOUT_S)
    assert props.status_code == 503 and props.json()["error"]["code"] == "door_grant_pending"
    # The grant has arrived: the next request is served.
    wait_for(
        lambda: httpx.post(f"{world.url}/v1/chat/completions", headers=AUTH, json=ask(4)).status_code == 200,
        10,
        "a request to be served",
    )
