"""The gate's door look waits out a door whose own grants are new (qwen36/door_probe.py): a fake door
on loopback answers the door's "grant pending" 503s for its first N looks, on a virtual clock, then
llama-server's /props; one that never clears ends the look in one line at its bound; a 401 once the
key is readable ends it at once.

The fake answers what the door answers (the door's contract for issue 28, door/app.py): while
Secret Manager refuses the door its key secret, every keyed request gets 503 with Retry-After and
``{"error": {"message", "type": "unavailable_error", "code": "door_key_unreadable"}}``; while Compute
answers its calls 403 on a new grant, the code is ``door_grant_pending``. Once served, ``/props`` is
llama-server's own answer (tools/server/README.md "GET /props": ``default_generation_settings``)."""

from __future__ import annotations

import json
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from http.server import BaseHTTPRequestHandler

import pytest

from qwen36.door_probe import DOOR_BOUND_S, GRANT_BOUND_S, DoorUnreachable, wait_door
from tests.harness.loopback import serve_on_loopback

KEY = "qk-the-stacks-key"


class Script:
    """What the fake door answers to each look, in order; the last answer repeats."""

    def __init__(self, *answers: tuple[int, dict[str, object]]) -> None:
        self.answers = list(answers)
        self.looks = 0
        self.lock = threading.Lock()

    def next(self) -> tuple[int, dict[str, object]]:
        with self.lock:
            self.looks += 1
            return self.answers[min(self.looks, len(self.answers)) - 1]


def pending(code: str) -> tuple[int, dict[str, object]]:
    return 503, {
        "error": {"message": "the door cannot read its key yet", "type": "unavailable_error", "code": code}
    }


SERVED = (200, {"default_generation_settings": {"n_ctx": 4096}})
REFUSED = (401, {"error": {"message": "Invalid API Key", "type": "authentication_error"}})


@contextmanager
def fake_door(script: Script) -> Iterator[str]:
    class Door(BaseHTTPRequestHandler):
        def log_message(self, *_: object) -> None:
            pass

        def do_GET(self) -> None:
            assert self.path == "/props" and self.headers["Authorization"] == f"Bearer {KEY}"
            status, body = script.next()
            data = json.dumps(body).encode()
            self.send_response(status)
            self.send_header("Content-Type", "application/json")
            if status == 503:
                self.send_header("Retry-After", "10")
            self.send_header("Content-Length", str(len(data)))
            self.end_headers()
            self.wfile.write(data)

    with serve_on_loopback(Door) as url:
        yield url


class VirtualClock:
    def __init__(self) -> None:
        self.now = 0.0

    def __call__(self) -> float:
        return self.now

    def sleep(self, seconds: float) -> None:
        self.now += seconds


@pytest.mark.parametrize("code", ["door_key_unreadable", "door_grant_pending"])
def test_a_door_whose_grants_are_new_is_waited_for_past_the_plain_bound(code: str) -> None:
    # 30 looks 10 s apart: 300 s of "pending", past the 180 s a plain door gets, within ~10 min.
    script = Script(*[pending(code)] * 30, SERVED)
    clock, lines = VirtualClock(), []
    with fake_door(script) as url:
        summary = wait_door(
            url, KEY, poll_s=10, heartbeat_s=120, emit=lines.append, clock=clock, sleep=clock.sleep
        )
    assert clock.now == 300 > DOOR_BOUND_S and script.looks == 31
    assert (
        summary == f"door {url} reaches the server after 300 s: llama-server answered /props through the door"
    )
    what = "its key secret" if code == "door_key_unreadable" else "the Compute API"
    assert lines == [
        f"door grant-pending (the door's new grants are not in effect yet ({code}: {what} refuses it); "
        "IAM takes 2 to 7+ min, waiting up to 10 min)",
        "door grant-pending (still waiting, 120 s)",
        "door grant-pending (still waiting, 240 s)",
        summary,
    ]


def test_grants_that_never_take_effect_end_the_look_in_one_line_at_the_bound() -> None:
    clock = VirtualClock()
    with fake_door(Script(pending("door_key_unreadable"))) as url, pytest.raises(DoorUnreachable) as failure:
        wait_door(
            url, KEY, poll_s=10, emit=lambda _: None, clock=clock, sleep=clock.sleep, logs_command="logs"
        )
    assert clock.now == GRANT_BOUND_S
    assert failure.value.message == (
        f"the server serves, but {url} did not reach it within 600 s (last: grant-pending: the door's new "
        "grants are not in effect yet (door_key_unreadable: its key secret refuses it); IAM takes 2 to 7+ "
        "min, waiting up to 10 min); its grants are still not in effect: check that the door's account "
        "holds them; `logs` says why"
    )
    assert "\n" not in failure.value.message


def test_a_401_once_the_key_is_readable_ends_the_look_at_once() -> None:
    clock, script = (
        VirtualClock(),
        Script(pending("door_key_unreadable"), pending("door_key_unreadable"), REFUSED),
    )
    with fake_door(script) as url, pytest.raises(DoorUnreachable) as failure:
        wait_door(url, KEY, poll_s=10, emit=lambda _: None, clock=clock, sleep=clock.sleep)
    assert (script.looks, clock.now) == (3, 20)
    assert failure.value.message == (
        f"the server serves, but {url}: the door reads its key and refuses the stack's API key (401): the "
        "key set's `default` entry replaces or revokes it, or the secret's latest version is not the "
        "stack's apiKey (`pulumi up` writes it)"
    )


def test_a_plain_503_keeps_the_plain_bound() -> None:
    """Only the door's grant codes extend the look: another 503 (the door finding the member) ends at
    DOOR_BOUND_S as before."""
    busy = (503, {"error": {"message": "the server is starting", "type": "unavailable_error"}})
    clock = VirtualClock()
    with (
        fake_door(Script(busy)) as url,
        pytest.raises(DoorUnreachable, match=r"within 180 s \(last: http-503"),
    ):
        wait_door(url, KEY, poll_s=10, emit=lambda _: None, clock=clock, sleep=clock.sleep)
    assert clock.now == DOOR_BOUND_S
