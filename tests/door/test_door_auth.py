"""The key before anything else: without it, no Compute call, no resize, no byte to the VM. And what
never wakes the server: /health, a UI tab's GETs, /v1/models; what the door never passes: /tools,
/slots and llama-server's other management endpoints."""

from __future__ import annotations

import httpx
import pytest

from door import auth
from tests.door.conftest import ALIAS, API_KEY, AUTH, WRONG_KEY, WorldFactory, ask

pytestmark = pytest.mark.llama

TIMEOUT_S = 30.0
NO_KEY: list[dict[str, str]] = [
    {},
    {"Authorization": f"Bearer {WRONG_KEY}"},
    {"X-Api-Key": WRONG_KEY},
    {"Authorization": f"Basic {API_KEY}"},
    {"Cookie": f"{auth.COOKIE}={API_KEY}"},  # the key itself is not the session cookie
    {"Authorization": "Bearer"},
]


@pytest.mark.parametrize("size", [0, 1])
def test_without_the_key_401_and_nothing_reaches_the_group_or_the_vm(
    make_world: WorldFactory, size: int
) -> None:
    world = make_world(size=size)
    before = world.compute_calls()
    for headers in NO_KEY:
        for stream in (False, True):
            reply = httpx.post(
                f"{world.url}/v1/chat/completions",
                headers=headers,
                json=ask(stream=stream),
                timeout=TIMEOUT_S,
            )
            assert reply.status_code == 401, (headers, reply.text)
            assert reply.json() == {
                "error": {"message": "Invalid API Key", "type": "authentication_error", "code": 401}
            }
            assert reply.headers["www-authenticate"] == "Bearer"
        for path in ("/v1/models", "/props", "/", "/slots", "/tools", "/_qwen36/recent"):
            assert httpx.get(f"{world.url}{path}", headers=headers, timeout=TIMEOUT_S).status_code == 401, (
                path
            )
    # The metadata server's token is fetched only for a Compute call: none was made.
    assert world.compute_calls() == before == []
    assert world.group.resizes() == []
    assert world.relay.requests == []


def test_the_key_works_in_either_header(make_world: WorldFactory) -> None:
    world = make_world(size=1)
    for headers in (AUTH, {"X-Api-Key": API_KEY}, {"authorization": f"bearer {API_KEY}"}):
        reply = httpx.post(f"{world.url}/v1/chat/completions", headers=headers, json=ask(), timeout=TIMEOUT_S)
        assert reply.status_code == 200, reply.text


def test_a_browser_without_the_key_gets_the_key_page_and_a_session_cookie(make_world: WorldFactory) -> None:
    world = make_world(size=1)
    page = httpx.get(f"{world.url}/", headers={"Accept": "text/html", "Sec-Fetch-Mode": "navigate"})
    assert page.status_code == 401 and 'action="/_qwen36/login"' in page.text
    wrong = httpx.post(f"{world.url}/_qwen36/login", data={"key": WRONG_KEY})
    assert wrong.status_code == 401 and "set-cookie" not in wrong.headers
    login = httpx.post(f"{world.url}/_qwen36/login", data={"key": API_KEY})
    assert login.status_code == 303 and login.headers["location"] == "/"
    cookie = login.headers["set-cookie"]
    assert "HttpOnly" in cookie and "SameSite=strict" in cookie and API_KEY not in cookie
    value = login.cookies[auth.COOKIE]
    reply = httpx.post(
        f"{world.url}/v1/chat/completions", cookies={auth.COOKIE: value}, json=ask(), timeout=TIMEOUT_S
    )
    assert reply.status_code == 200, reply.text
    assert not world.relay.requests or all(p != "/_qwen36/login" for _, p in world.relay.requests)


def test_health_and_read_only_gets_never_wake_the_server(make_world: WorldFactory) -> None:
    world = make_world(size=0)
    assert httpx.get(f"{world.url}/health").json() == {"status": "ok"}
    assert httpx.get(f"{world.url}/health", headers=AUTH).json()["server"] in ("unknown", "asleep")
    # /v1/models while asleep: the door answers from the alias the server serves.
    models = httpx.get(f"{world.url}/v1/models", headers=AUTH, timeout=TIMEOUT_S)
    assert models.status_code == 200 and [m["id"] for m in models.json()["data"]] == [ALIAS]
    # A UI tab's poll while asleep: 503, and it wakes nothing.
    props = httpx.get(f"{world.url}/props", headers={**AUTH, "Sec-Fetch-Mode": "cors"}, timeout=TIMEOUT_S)
    assert props.status_code == 503 and props.json()["error"]["type"] == "unavailable_error"
    assert "stopped while idle" in props.json()["error"]["message"]
    assert world.group.resizes() == []
    assert world.relay.requests == []


def test_a_page_navigation_while_asleep_wakes_and_shows_the_waking_page(make_world: WorldFactory) -> None:
    world = make_world(size=0, boot_s=30.0)
    page = httpx.get(f"{world.url}/", headers={**AUTH, "Sec-Fetch-Mode": "navigate"}, timeout=TIMEOUT_S)
    assert page.status_code == 503 and "Waking the server" in page.text
    assert 'http-equiv="refresh"' in page.text
    assert len(world.group.resizes()) == 1


def test_management_endpoints_are_never_proxied(make_world: WorldFactory) -> None:
    world = make_world(size=1)
    for method, path in [
        ("GET", "/slots"),
        ("POST", "/slots/0?action=erase"),
        ("GET", "/tools"),
        ("POST", "/tools"),
        ("GET", "/cors-proxy?url=http://example.com"),
        ("POST", "/models/load"),
        ("GET", "/metrics"),
        ("POST", "/props"),
        ("GET", "/v1/stream/conv-1"),
        ("DELETE", "/v1/stream"),
        ("POST", "/lora-adapters"),
        ("POST", "/v1/chat/completions/control"),
        ("GET", "/_qwen36/anything"),
    ]:
        reply = httpx.request(method, f"{world.url}{path}", headers=AUTH, json={}, timeout=TIMEOUT_S)
        assert reply.status_code == 404, (method, path, reply.text)
        assert reply.json()["error"]["type"] == "not_found_error"
    lookup = httpx.post(f"{world.url}/v1/streams/lookup", headers=AUTH, json={"conversation_ids": ["c1"]})
    assert lookup.status_code == 200 and lookup.json() == []
    assert world.relay.proxied() == []
