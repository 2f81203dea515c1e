"""The path policy against spellings: every blocked route of llama-server, spelled every way a path
can be (dot segments, percent-encoding of any character, repeated slashes, a trailing encoded ``?``
or ``#``, double encoding), sent byte for byte (http.client, no client-side normalisation) to the
door in front of a real llama-server started WITH ``--slots``, ``--props`` and ``--tools all``, so
that only the policy stands between them: none reaches the server. And an allowed route spelled
oddly reaches it as its one canonical path, so the check and the request agree."""

from __future__ import annotations

import http.client
import json
from urllib.parse import urlsplit

import httpx
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from door.policy import allowed, canonical
from tests.door.conftest import AUTH, World, WorldFactory, ask

pytestmark = pytest.mark.llama

TIMEOUT_S = 30.0
# Every management or agent route of llama-server b11434, with the method that does harm.
BLOCKED = [
    ("GET", "/slots"),
    ("POST", "/slots/0?action=erase"),
    ("POST", "/slots/0?action=save"),
    ("GET", "/metrics"),
    ("POST", "/props"),
    ("GET", "/tools"),
    ("POST", "/tools"),
    ("GET", "/cors-proxy?url=http://127.0.0.1:1/"),
    ("POST", "/models/load"),
    ("POST", "/models/unload"),
    ("GET", "/models/sse"),
    ("GET", "/lora-adapters"),
    ("POST", "/lora-adapters"),
    ("GET", "/v1/stream/conv-1"),
    ("POST", "/v1/chat/completions/control"),
    ("DELETE", "/v1/chat/completions"),
    ("PUT", "/v1/chat/completions"),
    ("GET", "/_qwen36/anything"),
]
UNRESERVED = set("abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789-._~")
SERVER_FLAGS = ("--slots", "--props", "--tools", "all")


def _pct(ch: str, upper: bool) -> str:
    code = f"%{ord(ch):02X}"
    return code if upper else code.lower()


@st.composite
def spelling(draw: st.DrawFn, path: str) -> str:
    """One spelling of ``path`` that a server normalising it would read as ``path``."""
    out = ""
    for segment in path.strip("/").split("/"):
        for _ in range(draw(st.integers(0, 2))):
            out += draw(st.sampled_from(["/.", "/%2e", "/%2E", "//", "/x/..", "/x/%2e%2e", "/v1/.."]))
        out += "/" * draw(st.integers(1, 3))
        for ch in segment:
            out += _pct(ch, draw(st.booleans())) if draw(st.booleans()) else ch
    out += draw(st.sampled_from(["", "/", "//", "/.", "%3F", "%3f", "%23", "%3F%23", "/%2e"]))
    return out


def _send(world: World, method: str, target: str) -> int:
    """The request line exactly as given (http.client sends the target unchanged)."""
    parts = urlsplit(world.url)
    conn = http.client.HTTPConnection(parts.hostname or "", parts.port, timeout=TIMEOUT_S)
    try:
        body = json.dumps({"slot_id": 0, "filename": "x.bin"}).encode()
        conn.request(method, target, body=body, headers={**AUTH, "Content-Type": "application/json"})
        return conn.getresponse().status
    finally:
        conn.close()


def test_every_spelling_of_a_blocked_path_reads_as_it_or_is_refused() -> None:
    for method, target in BLOCKED:
        path = target.partition("?")[0]
        assert canonical(path.encode()) == path and not allowed(method, path)
    issue = {
        b"/./slots": "/slots",
        b"/v1/../slots": "/slots",
        b"/./metrics": "/metrics",
        b"/./props": "/props",
    }
    for raw, path in issue.items():
        assert canonical(raw) == path
    assert canonical(b"/slots%3F") == "/slots" and canonical(b"/%2e/tools%23") == "/tools"
    # Double encoding, a backslash, a query or fragment inside the path: no single reading, refused.
    for raw in (b"/%252e/slots", b"/slots%5c", b"/v1/models%3Fx/../../slots", b"/a%23/../slots", b"/\xff"):
        assert canonical(raw) is None, raw


def test_no_spelling_of_a_blocked_path_reaches_llama_server(make_world: WorldFactory) -> None:
    world = make_world(size=1, server_flags=SERVER_FLAGS)
    assert world.member.server is not None
    direct = world.member.server.base_url
    # The server itself serves them: only the door's policy stops them below.
    assert httpx.get(f"{direct}/slots", headers=AUTH, timeout=TIMEOUT_S).status_code == 200
    assert httpx.get(f"{direct}/metrics", headers=AUTH, timeout=TIMEOUT_S).status_code == 200
    assert httpx.get(f"{direct}/tools", headers=AUTH, timeout=TIMEOUT_S).status_code == 200
    assert httpx.post(f"{direct}/props", headers=AUTH, json={}, timeout=TIMEOUT_S).status_code == 200

    @settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
    @given(
        st.sampled_from(BLOCKED).flatmap(lambda b: st.tuples(st.just(b), spelling(b[1].partition("?")[0])))
    )
    def check(case: tuple[tuple[str, str], str]) -> None:
        (method, target), spelled = case
        query = target.partition("?")[2]
        status = _send(world, method, spelled + (f"?{query}" if query else ""))
        assert status in (400, 404), (method, spelled, status)
        assert world.relay.proxied() == [], (method, spelled, world.relay.proxied())

    check()
    assert world.group.resizes() == []


def test_an_allowed_route_spelled_oddly_reaches_the_server_as_its_canonical_path(
    make_world: WorldFactory,
) -> None:
    world = make_world(size=1, server_flags=SERVER_FLAGS)
    assert _send(world, "GET", "/./v1/%6dodels%3F") == 200
    assert _send(world, "GET", "//x/../props") == 200
    reply = httpx.post(f"{world.url}/v1/chat/completions", headers=AUTH, json=ask(4), timeout=TIMEOUT_S)
    assert reply.status_code == 200
    assert [p for _, p in world.relay.proxied()] == ["/v1/models", "/props", "/v1/chat/completions"]


def test_only_an_inference_post_wakes_the_group(make_world: WorldFactory) -> None:
    world = make_world(size=0, boot_s=30.0)
    for method, path in [
        ("POST", "/not-a-route"),
        ("POST", "/props"),
        ("POST", "/./slots/0"),
        ("GET", "/props"),
    ]:
        assert _send(world, method, path) in (404, 503), (method, path)
    assert world.group.resizes() == []
    # A held stream gets its 200 and heartbeats while the wake runs.
    with httpx.stream(
        "POST", f"{world.url}/v1/chat/completions", headers=AUTH, json=ask(4, stream=True), timeout=TIMEOUT_S
    ) as held:
        assert held.status_code == 200
    assert len(world.group.resizes()) == 1
