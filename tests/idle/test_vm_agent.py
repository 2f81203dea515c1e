"""startup/vm_agent.py's own behaviour that the agents' tests do not show: the access token is
read from the metadata server once and reused until TOKEN_MARGIN_S before it expires; transient
answers (429, 5xx, a dropped connection) are retried with a bounded, doubling pause where a repeat
is safe."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from http.server import BaseHTTPRequestHandler
from pathlib import Path

import pytest
import vm_agent
from vm_agent import TOKEN_MARGIN_S, Metadata

from tests.harness.loopback import serve_on_loopback
from tests.harness.server import free_port
from tests.idle.vm_fakes import TOKEN, FakeMetadata, fake_metadata

TOKEN_KEY = "instance/service-accounts/default/token"


@pytest.mark.parametrize(
    ("expires_in", "reads"),
    [(3599, 1), (int(TOKEN_MARGIN_S) - 1, 3)],
    ids=["reused", "too-near-expiry-to-reuse"],
)
def test_token_is_reused_until_near_its_expiry(expires_in: int, reads: int) -> None:
    md = FakeMetadata(token_expires_in=expires_in)
    with fake_metadata(md) as url:
        metadata = Metadata(url)
        assert [metadata.token() for _ in range(3)] == [TOKEN] * 3
    assert md.reads.count(TOKEN_KEY) == reads


# --- issue 21: transient answers are retried, boundedly, where a repeat is safe -----------------


class Flaky:
    """Answers each request with the next status of ``statuses`` (then 200), or drops it ("drop")."""

    def __init__(self, statuses: list[int | str], retry_after: str | None = None) -> None:
        self.statuses = list(statuses)
        self.retry_after = retry_after
        self.seen: list[str] = []

    @contextmanager
    def serve(self) -> Iterator[str]:
        flaky = self

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, format: str, *args: object) -> None:
                pass

            def _answer(self) -> None:
                self.rfile.read(int(self.headers.get("Content-Length") or 0))
                flaky.seen.append(self.command)
                status = flaky.statuses.pop(0) if flaky.statuses else 200
                if status == "drop":
                    self.close_connection = True
                    return
                body = b'{"ok": true}' if status == 200 else b'{"error": {"code": %d}}' % int(status)
                self.send_response(int(status))
                if flaky.retry_after is not None and status != 200:
                    self.send_header("Retry-After", flaky.retry_after)
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

            do_GET = do_PUT = do_POST = _answer

        with serve_on_loopback(Handler) as url:
            yield url


@pytest.fixture
def pauses(monkeypatch: pytest.MonkeyPatch) -> list[float]:
    slept: list[float] = []
    monkeypatch.setattr(vm_agent, "_sleep", slept.append)
    return slept


@pytest.mark.parametrize("method", ["GET", "PUT"])
def test_an_idempotent_call_is_retried_through_429_5xx_and_drops(method: str, pauses: list[float]) -> None:
    flaky = Flaky([503, 429, "drop"])
    with flaky.serve() as url:
        assert vm_agent.request(method, url) == (200, b'{"ok": true}')
    assert flaky.seen == [method] * 4
    assert pauses == [0.5, 1.0, 2.0]


def test_the_tries_are_bounded_and_the_last_answer_returned(pauses: list[float]) -> None:
    flaky = Flaky([503] * 10)
    with flaky.serve() as url:
        status, _ = vm_agent.request("GET", url)
    assert status == 503 and len(flaky.seen) == vm_agent.RETRY_ATTEMPTS == 4
    assert sum(pauses) <= 3 * vm_agent.RETRY_PAUSE_MAX_S


def test_an_unreachable_host_raises_after_the_tries(pauses: list[float]) -> None:
    with pytest.raises(OSError):
        vm_agent.request("GET", f"http://127.0.0.1:{free_port()}/x")
    assert len(pauses) == 3


def test_retry_after_is_honoured_within_the_cap(pauses: list[float]) -> None:
    flaky = Flaky([429, 429], retry_after="3")
    with flaky.serve() as url:
        assert vm_agent.request("GET", url)[0] == 200
    assert pauses == [3.0, 3.0]
    flaky = Flaky([503], retry_after="3600")
    with flaky.serve() as url:
        assert vm_agent.request("GET", url)[0] == 200
    assert pauses[-1] == vm_agent.RETRY_PAUSE_MAX_S


def test_a_post_is_tried_once_unless_its_caller_says_a_repeat_is_safe(pauses: list[float]) -> None:
    flaky = Flaky([503, 503])
    with flaky.serve() as url:
        assert vm_agent.request("POST", url, body=b"{}")[0] == 503
        assert flaky.seen == ["POST"]
        assert vm_agent.request("POST", url, body=b"{}", idempotent=True)[0] == 200
    assert flaky.seen == ["POST", "POST", "POST"]


def test_a_metrics_read_is_tried_once(pauses: list[float], tmp_path: Path) -> None:
    flaky = Flaky([503])
    with flaky.serve() as url, pytest.raises(vm_agent.AgentError, match="answered 503"):
        vm_agent.read_metrics(url, None)
    assert flaky.seen == ["GET"] and pauses == []
