"""Streams through the door: the OpenAI SDK as a client, a server that dies mid-answer, and clients
that go away mid-answer, with and without X-Conversation-Id (which makes llama-server b11434 keep
generating for a resume: the door strips it, and closes the upstream request at once)."""

from __future__ import annotations

import signal
import time

import httpx
import openai
import pytest

from tests.door.conftest import ALIAS, API_KEY, AUTH, World, WorldFactory, ask, wait_for

pytestmark = pytest.mark.llama

TIMEOUT_S = 60.0
LONG = 20000
# The slot must be free again this soon after the client closes its connection: the door sees the
# disconnect at once (uvicorn's http.disconnect), closes the upstream connection, and llama-server
# cancels the task at its next token (a token takes ~7 ms on the tiny model here).
FREE_BOUND_S = 2.0


def _busy(world: World) -> float:
    assert world.member.server is not None
    text = httpx.get(f"{world.member.server.base_url}/metrics", headers=AUTH, timeout=10).text
    (line,) = [ln for ln in text.splitlines() if ln.startswith("llamacpp:requests_processing")]
    return float(line.split()[1])


def test_the_openai_sdk_through_the_door_with_the_key(make_world: WorldFactory) -> None:
    world = make_world(size=1)
    client = openai.OpenAI(base_url=f"{world.url}/v1", api_key=API_KEY, timeout=TIMEOUT_S)
    reply = client.chat.completions.create(**ask(16))  # type: ignore[call-overload]
    assert reply.model == ALIAS and reply.choices[0].message.content.startswith("aaaa")
    assert reply.usage is not None and reply.usage.completion_tokens == 16
    pieces = [
        c.choices[0].delta.content or ""
        for c in client.chat.completions.create(**ask(16, stream=True))  # type: ignore[call-overload]
        if c.choices
    ]
    assert len(pieces) > 1 and "".join(pieces).startswith("aaaa")
    assert [m.id for m in client.models.list()] == [ALIAS]
    with pytest.raises(openai.AuthenticationError):
        openai.OpenAI(base_url=f"{world.url}/v1", api_key="nope", max_retries=0).models.list()


def test_the_server_dying_mid_stream_ends_the_stream_with_an_error_event(make_world: WorldFactory) -> None:
    world = make_world(size=1)
    client = openai.OpenAI(base_url=f"{world.url}/v1", api_key=API_KEY, max_retries=0, timeout=TIMEOUT_S)
    received = ""
    with pytest.raises(openai.APIError, match="went away mid-answer"):
        for chunk in client.chat.completions.create(**ask(LONG, stream=True)):  # type: ignore[call-overload]
            if chunk.choices:
                received += chunk.choices[0].delta.content or ""
            if len(received) > 8 and world.member.server and world.member.server.exit_code() is None:
                assert world.member.server.proc is not None
                world.member.server.proc.send_signal(signal.SIGKILL)
    assert 0 < len(received) < LONG
    # And as bytes: the last event is the OpenAI-shaped error, not silence.
    world2 = make_world(size=1)
    with httpx.stream(
        "POST",
        f"{world2.url}/v1/chat/completions",
        headers=AUTH,
        json=ask(LONG, stream=True),
        timeout=TIMEOUT_S,
    ) as reply:
        lines = []
        for line in reply.iter_lines():
            lines.append(line)
            if sum(ln.startswith("data: {") for ln in lines) == 6:
                assert world2.member.server is not None and world2.member.server.proc is not None
                world2.member.server.proc.send_signal(signal.SIGKILL)
    last = [ln for ln in lines if ln.startswith("data: ")][-1]
    assert '"type": "server_error"' in last and '"code": 502' in last, last


@pytest.mark.parametrize("conversation", [None, "8d0f3c2e-webui-conversation"])
def test_a_client_leaving_mid_stream_frees_the_slot(
    make_world: WorldFactory, conversation: str | None
) -> None:
    world = make_world(size=1)
    headers = {**AUTH, **({"X-Conversation-Id": conversation} if conversation else {})}
    with httpx.stream(
        "POST",
        f"{world.url}/v1/chat/completions",
        headers=headers,
        json=ask(LONG, stream=True),
        timeout=TIMEOUT_S,
    ) as reply:
        # Keep the iterator: a dropped one closes the connection (httpcore closes an unread stream).
        lines = reply.iter_lines()
        data = 0
        while data < 5:
            data += next(lines).startswith("data: {")
        assert _busy(world) == 1
        left = time.monotonic()
    wait_for(lambda: _busy(world) == 0, FREE_BOUND_S, "the slot to be free")
    freed = time.monotonic() - left
    assert freed < FREE_BOUND_S
    # llama-server saw the request without the header, so it had nothing to keep generating for.
    assert ("X-Conversation-Id" not in world.member.server.log_text()) if world.member.server else True


def test_the_slot_check_sees_a_slot_kept_busy_by_x_conversation_id(make_world: WorldFactory) -> None:
    """The check above can fail: straight to llama-server, with the header, the slot stays busy."""
    world = make_world(size=1)
    assert world.member.server is not None
    headers = {**AUTH, "X-Conversation-Id": "kept-busy"}
    with httpx.stream(
        "POST",
        f"{world.member.server.base_url}/v1/chat/completions",
        headers=headers,
        json=ask(4000, stream=True),
        timeout=TIMEOUT_S,
    ) as reply:
        lines = reply.iter_lines()
        data = 0
        while data < 5:
            data += next(lines).startswith("data: {")
    time.sleep(FREE_BOUND_S)
    assert _busy(world) == 1
