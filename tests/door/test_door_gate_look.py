"""The health gate's last look through the real door (qwen36/door_probe.py): the door's URL must
reach the real llama-server, it never wakes the group, and what cannot clear ends the look at once."""

from __future__ import annotations

import time
from http.server import BaseHTTPRequestHandler

import pytest

from qwen36.door_probe import DoorUnreachable, wait_door
from tests.door.conftest import API_KEY, WRONG_KEY, WorldFactory
from tests.harness.loopback import serve_on_loopback

pytestmark = pytest.mark.llama

FAST = {"poll_s": 0.2, "heartbeat_s": 60.0}


def test_the_doors_url_reaches_the_server_and_wakes_nothing(make_world: WorldFactory) -> None:
    world = make_world(size=1)
    lines: list[str] = []
    summary = wait_door(world.url, API_KEY, bound_s=20.0, emit=lines.append, **FAST)
    assert summary.startswith(f"door {world.url} reaches the server after ")
    assert summary.endswith(": llama-server answered /props through the door")
    assert ("GET", "/props") in world.relay.proxied(), "the answer came from the server, through the relay"
    assert world.group.resizes() == []


def test_a_key_the_door_refuses_ends_the_look_at_once(make_world: WorldFactory) -> None:
    world = make_world(size=1)
    started = time.monotonic()
    with pytest.raises(DoorUnreachable) as failure:
        wait_door(world.url, WRONG_KEY, bound_s=60.0, emit=lambda _: None, **FAST)
    assert time.monotonic() - started < 5.0
    assert failure.value.message == (
        f"the server serves, but {world.url}: the door reads its key and refuses the stack's API key "
        "(401): the key set's `default` entry replaces or revokes it, or the secret's latest version is "
        "not the stack's apiKey (`pulumi up` writes it)"
    )
    assert world.relay.proxied() == [] and world.group.resizes() == []


def test_a_door_that_cannot_reach_a_server_fails_at_its_bound_naming_the_last_answer(
    make_world: WorldFactory,
) -> None:
    world = make_world(size=0)
    lines: list[str] = []
    with pytest.raises(DoorUnreachable) as failure:
        wait_door(
            world.url,
            API_KEY,
            bound_s=1.0,
            logs_command="gcloud run services logs read d",
            emit=lines.append,
            **FAST,
        )
    assert failure.value.message == (
        f"the server serves, but {world.url} did not reach it within 1 s (last: http-503: the server is "
        "stopped while idle; a completion request wakes it); `gcloud run services logs read d` says why"
    )
    assert lines == ["door http-503 (the server is stopped while idle; a completion request wakes it)"]
    assert world.group.resizes() == [], "a read never wakes the server"


def test_for_a_group_stopped_while_idle_the_doors_own_answer_is_the_proof(make_world: WorldFactory) -> None:
    world = make_world(size=0)
    summary = wait_door(world.url, API_KEY, server_stopped=True, bound_s=10.0, emit=lambda _: None, **FAST)
    assert summary.endswith(
        "the door answers for the stopped server: the server is stopped while idle; a completion "
        "request wakes it"
    )
    assert world.group.resizes() == []


class _CloudRunForbidden(BaseHTTPRequestHandler):
    """Cloud Run's front end when the invoker check is on and the caller has no Google identity: 403
    before the container sees the request
    (https://cloud.google.com/run/docs/troubleshooting#unauthorized-client). Only the status is relied on."""

    def log_message(self, *_: object) -> None:
        pass

    def do_GET(self) -> None:
        body = b"<html><head><title>403 Forbidden</title></head><body>Error: Forbidden</body></html>"
        self.send_response(403)
        self.send_header("Content-Type", "text/html; charset=UTF-8")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)


def test_cloud_runs_invoker_check_ends_the_look_at_once_naming_the_constraint() -> None:
    with serve_on_loopback(_CloudRunForbidden) as url, pytest.raises(DoorUnreachable) as failure:
        wait_door(url, API_KEY, bound_s=60.0, emit=lambda _: None, **FAST)
    assert failure.value.message == (
        f"the server serves, but {url}: Cloud Run refused the request before the door (403): the "
        "service's invoker check is on, as the organization policy "
        "constraints/run.managed.requireInvokerIam enforces; `qwen36 check` reads it"
    )
