"""One proxied request (``Exchange``): the wait for the server (held or not), the upstream call, and
the answer passed on as it comes (a stream) or whole (its status and timings known first).

A held streaming request gets its 200 and SSE comment lines every ``heartbeat_s``; past the bound it
gets an OpenAI-shaped error event (the SDK raises ``APIError``). A held non-streaming request gets
nothing until its answer: its status must say how it went (a 200, llama-server's own 400, or a 503
with ``Retry-After`` past the bound), and HTTP sends one status only, so bytes sent early (whitespace
before a JSON body, as some proxies do) would turn every later failure into a 200.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
from collections.abc import Callable
from typing import Any, Protocol

import httpx
from starlette.responses import HTMLResponse, JSONResponse, Response
from starlette.types import Message, Receive, Scope, Send

from door import pages
from door.assemble import Assembler, streamed_body
from door.config import MAX_RESPONSE_BYTES, Settings
from door.gce import GceError
from door.metrics import RequestRecord
from door.policy import MODEL_LISTS, navigation
from door.upstream import ASLEEP, GRANT_PENDING, Upstream


class Door(Protocol):
    """What an exchange reads of the door (door/app.py's ``Door``)."""

    s: Settings
    clock: Callable[[], float]
    stopping: asyncio.Event | None
    upstream: Upstream | None
    upstream_client: httpx.AsyncClient | None
    fresh_client: httpx.AsyncClient | None
    reconnects: int


# Request headers that never go upstream: hop-by-hop ones (RFC 9110 section 7.6.1), the client's
# credentials (the door sends its own key), and X-Conversation-Id: with it llama-server b11434 keeps
# generating after the client has gone, to let it resume (measured: a disconnected stream with the
# header kept the slot busy for as long as it was watched, one without was cancelled at once).
DROP_REQUEST = frozenset(
    {
        "host", "connection", "keep-alive", "proxy-authorization", "proxy-connection", "te", "trailer",
        "transfer-encoding", "upgrade", "content-length", "authorization", "x-api-key", "cookie",
        "x-conversation-id", "accept-encoding",
    }
)  # fmt: skip
DROP_RESPONSE = frozenset({"connection", "keep-alive", "transfer-encoding", "content-length", "server"})
SSE_HEADERS = [
    (b"content-type", b"text/event-stream"),
    (b"cache-control", b"no-cache"),
    (b"x-accel-buffering", b"no"),
]
UPSTREAM_TIMEOUT = httpx.Timeout(connect=5.0, read=3600.0, write=60.0, pool=10.0)
WAKING_REFRESH_S = 5


def openai_error(status: int, message: str, kind: str, code: str | None = None) -> dict[str, Any]:
    # The shape llama-server and OpenAI answer errors in: {"error": {"message", "type", "code"}};
    # llama-server's code is the status, OpenAI's a string where one names the case.
    return {"error": {"message": message, "type": kind, "code": status if code is None else code}}


class SseScan:
    """Reads llama-server's SSE lines as they pass: the first token's time and the final timings."""

    def __init__(self) -> None:
        self.buffer = b""
        self.first_token: float | None = None
        self.timings: dict[str, Any] | None = None

    def feed(self, chunk: bytes, now: float) -> None:
        self.buffer += chunk
        *lines, self.buffer = self.buffer.split(b"\n")
        for line in lines:
            if not line.startswith(b"data: {"):
                continue
            if self.first_token is not None and b'"timings"' not in line:
                continue
            try:
                event = json.loads(line[6:])
            except ValueError:
                continue
            if self.first_token is None and _has_token(event):
                self.first_token = now
            if isinstance(event.get("timings"), dict):
                self.timings = event["timings"]


def _has_token(event: dict[str, Any]) -> bool:
    if event.get("content"):  # /completion
        return True
    for choice in event.get("choices") or []:
        delta = choice.get("delta") or {}
        if (
            delta.get("content")
            or delta.get("reasoning_content")
            or delta.get("tool_calls")
            or choice.get("text")
        ):
            return True
    return False


def _apply_timings(record: RequestRecord, timings: dict[str, Any] | None) -> None:
    if not timings:
        return
    try:
        record.tokens_in = int(timings.get("prompt_n", 0)) + int(timings.get("cache_n", 0))
        record.tokens_out = int(timings.get("predicted_n", 0))
        rate = float(timings.get("predicted_per_second", 0.0))
        record.decode_rate = rate if rate > 0 else None
    except (TypeError, ValueError):
        pass


class ClientGone(Exception):
    pass


@contextlib.asynccontextmanager
async def cancel_on_disconnect(receive: Receive) -> Any:
    """Runs the body; the moment the client's connection goes, cancels it (and so the upstream
    request, whose connection the cancelled stream closes) and raises ``ClientGone``."""
    task = asyncio.current_task()
    assert task is not None
    gone = False

    async def watch() -> None:
        nonlocal gone
        while True:
            message = await receive()
            if message["type"] == "http.disconnect":
                gone = True
                task.cancel()
                return

    watcher = asyncio.create_task(watch())
    try:
        yield
    except asyncio.CancelledError:
        if gone:
            task.uncancel()
            raise ClientGone() from None
        raise
    finally:
        watcher.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await watcher


async def read_body(receive: Receive, limit: int) -> bytes | None:
    chunks: list[bytes] = []
    size = 0
    while True:
        message = await receive()
        if message["type"] == "http.disconnect":
            raise ClientGone()
        chunk = message.get("body", b"")
        size += len(chunk)
        if size > limit:
            return None
        chunks.append(chunk)
        if not message.get("more_body", False):
            return b"".join(chunks)


def wants_stream(body: bytes) -> bool:
    if b'"stream"' not in body:
        return False
    try:
        doc = json.loads(body)
    except ValueError:
        return False
    return isinstance(doc, dict) and doc.get("stream") is True


class _Unreachable(Exception):
    """No answer from the member's address (gone, or not listening): nothing was served."""


class _Bound(Exception):
    """The wake took longer than the bound."""


class Exchange:
    """One proxied request: the wait for the server (held or not), then the upstream call."""

    def __init__(
        self,
        door: Door,
        method: str,
        path: str,
        scope: Scope,
        headers: dict[str, str],
        body: bytes,
        record: RequestRecord,
        send: Send,
        upstream_key: str,
    ) -> None:
        self.door = door
        self.s = door.s
        self.method, self.path, self.scope = method, path, scope
        self.headers, self.body, self.record, self._send = headers, body, record, send
        # A non-streaming chat or completion goes upstream as a stream, so a client going away
        # cancels it at llama-server's next token (door/assemble.py says why).
        self.streamed = streamed_body(path, body) if method == "POST" and not record.stream else None
        self.upstream_key = upstream_key
        self.t0 = door.clock()
        self.deadline = self.t0 + self.s.wake_bound_s
        self.holding_since: float | None = None
        self.sse_started = False

    async def send(self, message: Message) -> None:
        await self._send(message)

    async def respond(self, response: Response) -> None:
        async def no_receive() -> Message:
            return {"type": "http.request", "body": b"", "more_body": False}

        await response(self.scope, no_receive, self.send)

    def _upstream_headers(self) -> dict[str, str]:
        out = {k: v for k, v in self.headers.items() if k not in DROP_REQUEST}
        out["authorization"] = f"Bearer {self.upstream_key}"
        return out

    # A request that may wake the server.
    async def run(self) -> None:
        assert self.door.upstream is not None
        for _attempt in range(2):
            url = await self._await_server()
            if url is None:
                return
            try:
                await self._forward(url)
                return
            except _Unreachable:
                # The member went away (preempted, repaired, stopped): no answer came, so look again.
                self.door.upstream.invalidate(url)
        await self._fail(502, "llama-server did not accept the connection", "server_error")

    async def run_without_wake(self) -> None:
        """A GET that only reads: served when the server is up, answered by the door when it is not."""
        upstream = self.door.upstream
        assert upstream is not None
        probe = await upstream.probe()
        if probe.url is not None:
            try:
                await self._forward(probe.url)
                return
            except _Unreachable:
                upstream.invalidate(probe.url)
                probe = await upstream.probe()
        if self.path in MODEL_LISTS and self.s.model_alias:
            # What llama-server answers for /v1/models, from the alias it serves (--alias).
            models = {
                "object": "list",
                "data": [{"id": self.s.model_alias, "object": "model", "owned_by": "llamacpp"}],
            }
            self.record.status = 200
            await self.respond(JSONResponse(models))
            return
        if probe.state == GRANT_PENDING:
            await self._grant_pending()
            return
        message = (
            "the server is stopped while idle; a completion request wakes it"
            if probe.state == ASLEEP
            else "the server is starting"
        )
        await self._fail(503, message, "unavailable_error")

    async def _grant_pending(self) -> None:
        message = "the door's account cannot reach the server's group yet (a new grant); retry"
        await self._fail(503, message, "unavailable_error", retry_after=True, code="door_grant_pending")

    async def _await_server(self) -> str | None:
        """The server's URL, holding the request while it starts; None when an answer was sent."""
        upstream = self.door.upstream
        assert upstream is not None
        while self.door.stopping is not None:
            await self.door.stopping.wait()
        if upstream.url is not None:
            return upstream.url
        task = upstream.wake()
        if navigation(self.method, self.headers):
            # A browser gets a page that reloads itself; the wake runs on without it.
            with contextlib.suppress(TimeoutError):
                return await asyncio.wait_for(asyncio.shield(task), self.s.stream_grace_s)
            self.record.status = 503
            page = pages.waking_page(self.door.clock() - self.t0, WAKING_REFRESH_S)
            await self.respond(HTMLResponse(page, 503, headers={"Retry-After": str(WAKING_REFRESH_S)}))
            return None
        self.holding_since = self.t0
        try:
            if self.record.stream:
                url = await self._hold_streaming(task)
            else:
                url = await self._wait(task, self.deadline)
        except _Bound:
            self.record.hold_s, self.record.hold_outcome = self.door.clock() - self.t0, "bound"
            await self._fail(
                503,
                f"the server did not come up within {self.s.wake_bound_s:.0f} s; it is still starting: retry",
                "unavailable_error",
                retry_after=True,
            )
            return None
        except (TimeoutError, GceError, httpx.HTTPError) as exc:
            self.record.hold_s, self.record.hold_outcome = self.door.clock() - self.t0, "failed"
            if isinstance(exc, GceError) and exc.status == 403:
                await self._grant_pending()
                return None
            await self._fail(
                503, f"the server could not be started: {exc}", "unavailable_error", retry_after=True
            )
            return None
        self.record.hold_s, self.record.hold_outcome = self.door.clock() - self.t0, "served"
        return url

    async def _wait(self, task: asyncio.Task[str], until: float) -> str:
        remaining = until - self.door.clock()
        if remaining <= 0:
            raise _Bound()
        try:
            return await asyncio.wait_for(asyncio.shield(task), remaining)
        except TimeoutError:
            if task.done() and task.exception() is not None:
                raise
            raise _Bound() from None

    async def _hold_streaming(self, task: asyncio.Task[str]) -> str:
        with contextlib.suppress(_Bound):
            return await self._wait(task, min(self.deadline, self.t0 + self.s.stream_grace_s))
        await self.send({"type": "http.response.start", "status": 200, "headers": SSE_HEADERS})
        self.sse_started = True
        while True:
            beat = min(self.deadline, self.door.clock() + self.s.heartbeat_s)
            waited = f"{self.door.clock() - self.t0:.0f}"
            comment = f": waking the server ({waited} s); the answer follows\n\n".encode()
            await self.send({"type": "http.response.body", "body": comment, "more_body": True})
            with contextlib.suppress(_Bound):
                return await self._wait(task, beat)
            if self.door.clock() >= self.deadline:
                raise _Bound()

    async def _fail(
        self, status: int, message: str, kind: str, *, retry_after: bool = False, code: str | None = None
    ) -> None:
        self.record.status = status
        error = openai_error(status, message, kind, code)
        if self.sse_started:
            await self._end_with_event(error)
            return
        headers = {"Retry-After": str(self.s.retry_after_s)} if retry_after or status == 503 else None
        await self.respond(JSONResponse(error, status, headers=headers))

    async def _end_with_event(self, error: dict[str, Any]) -> None:
        """Ends a stream whose 200 already went out with the error as its last event."""
        event = b"data: " + json.dumps(error).encode() + b"\n\n"
        await self.send({"type": "http.response.body", "body": event, "more_body": False})

    async def _send_upstream(self, url: str) -> tuple[httpx.Response, float]:
        """The upstream answer's head. llama-server b11434 sometimes closes a kept-alive connection
        as the next request arrives on it (its keep-alive timeout is 5 s: ``Keep-Alive: timeout=5``),
        which reads as a disconnect or a reset before any answer: that is retried once on a fresh
        connection (a client that keeps none), before the door looks at the group again."""
        clients = (self.door.upstream_client, self.door.fresh_client)
        for attempt, client in enumerate(clients):
            assert client is not None
            request = client.build_request(
                self.method,
                upstream_url(url, self.path, self.scope.get("query_string", b"")),
                headers=self._upstream_headers(),
                content=self.streamed if self.streamed is not None else self.body,
                timeout=UPSTREAM_TIMEOUT,
            )
            sent = self.door.clock()
            try:
                return await client.send(request, stream=True), sent
            except (httpx.RemoteProtocolError, httpx.ReadError) as exc:
                if attempt == 0:
                    self.door.reconnects += 1
                    continue
                raise _Unreachable(str(exc)) from exc
            except (httpx.ConnectError, httpx.ConnectTimeout) as exc:
                raise _Unreachable(str(exc)) from exc
        raise AssertionError("unreachable")

    async def _forward(self, url: str) -> None:
        response, sent = await self._send_upstream(url)
        try:
            if self.streamed is not None and _is_sse(response):
                await self._pass_assembled(response)
            elif self.sse_started:
                await self._stream_into_sse(response, sent)
            elif self.record.stream and _is_sse(response):
                await self.send(
                    {
                        "type": "http.response.start",
                        "status": response.status_code,
                        "headers": _headers(response),
                    }
                )
                self.sse_started = True
                await self._pass_stream(response, sent)
            else:
                await self._pass_whole(response, sent)
        finally:
            await response.aclose()

    async def _stream_into_sse(self, response: httpx.Response, sent: float) -> None:
        """The upstream answer of a stream whose 200 already went out (after a hold)."""
        if response.status_code != 200:
            body = await _read_limited(response)
            self.record.status = response.status_code
            try:
                error = json.loads(body)
                assert isinstance(error, dict) and "error" in error
            except (ValueError, AssertionError):
                error = openai_error(
                    response.status_code, body[:500].decode("utf-8", "replace"), "server_error"
                )
            await self._end_with_event(error)
            return
        await self._pass_stream(response, sent)

    async def _pass_stream(self, response: httpx.Response, sent: float) -> None:
        scan = SseScan()
        self.record.status = response.status_code
        try:
            async for chunk in response.aiter_raw():
                scan.feed(chunk, self.door.clock())
                await self.send({"type": "http.response.body", "body": chunk, "more_body": True})
        except httpx.HTTPError as exc:
            # llama-server died or the VM went away mid-answer: say so in the stream, don't just stop.
            assert self.door.upstream is not None
            self.door.upstream.invalidate()
            await self._fail(502, f"the server went away mid-answer ({type(exc).__name__})", "server_error")
            return
        finally:
            if scan.first_token is not None:
                self.record.ttft_s = scan.first_token - self.t0
                if scan.timings is not None:
                    prompt_s = float(scan.timings.get("prompt_ms", 0.0)) / 1000
                    self.record.queue_s = max(0.0, scan.first_token - sent - prompt_s)
            _apply_timings(self.record, scan.timings)
        await self.send({"type": "http.response.body", "body": b"", "more_body": False})

    async def _pass_assembled(self, response: httpx.Response) -> None:
        """The stream asked for in the client's place, answered as one JSON body."""
        assembler = Assembler(self.path)
        first: float | None = None
        buffer = b""
        try:
            async for chunk in response.aiter_raw():
                buffer += chunk
                if len(buffer) > MAX_RESPONSE_BYTES:
                    raise httpx.ReadError("the answer is larger than the door passes whole")
                *lines, buffer = buffer.split(b"\n")
                for line in lines:
                    if not line.startswith(b"data: {"):
                        continue
                    with contextlib.suppress(ValueError):
                        event = json.loads(line[6:])
                        assembler.feed(event)
                        if first is None and _has_token(event):
                            first = self.door.clock()
        except httpx.HTTPError as exc:
            assert self.door.upstream is not None
            self.door.upstream.invalidate()
            await self._fail(502, f"the server went away mid-answer ({type(exc).__name__})", "server_error")
            return
        status, body = assembler.answer()
        self.record.status = status
        _apply_timings(self.record, assembler.timings)
        if first is not None:
            self.record.ttft_s = first - self.t0
        data = json.dumps(body, ensure_ascii=False, separators=(",", ":")).encode()
        headers = [
            *((k, v) for k, v in _headers(response) if k not in (b"content-type", b"x-accel-buffering")),
            (b"content-type", b"application/json; charset=utf-8"),
            (b"content-length", str(len(data)).encode()),
        ]
        await self.send({"type": "http.response.start", "status": status, "headers": headers})
        await self.send({"type": "http.response.body", "body": data, "more_body": False})

    async def _pass_whole(self, response: httpx.Response, sent: float) -> None:
        try:
            body = await _read_limited(response)
        except httpx.HTTPError as exc:
            assert self.door.upstream is not None
            self.door.upstream.invalidate()
            await self._fail(502, f"the server went away mid-answer ({type(exc).__name__})", "server_error")
            return
        done = self.door.clock()
        self.record.status = response.status_code
        if response.headers.get("content-type", "").startswith("application/json") and b'"timings"' in body:
            with contextlib.suppress(ValueError, TypeError, AttributeError):
                timings = json.loads(body).get("timings")
                if isinstance(timings, dict):
                    _apply_timings(self.record, timings)
                    self.record.ttft_s = max(
                        0.0, done - self.t0 - float(timings.get("predicted_ms", 0.0)) / 1000
                    )
        headers = [*_headers(response), (b"content-length", str(len(body)).encode())]
        await self.send({"type": "http.response.start", "status": response.status_code, "headers": headers})
        await self.send({"type": "http.response.body", "body": body, "more_body": False})


def upstream_url(base: str, path: str, query: bytes) -> httpx.URL:
    """The member's URL for ``path`` (policy.canonical's answer, the path the policy allowed) with the
    client's query as sent; refuses one whose path would come out other than the one checked."""
    url = httpx.URL(base).copy_with(path=path, query=query or None)
    if url.raw_path.partition(b"?")[0] != path.encode("ascii"):
        raise ValueError(f"the upstream path of {path!r} would be {url.raw_path!r}")
    return url


def _is_sse(response: httpx.Response) -> bool:
    return response.status_code == 200 and response.headers.get("content-type", "").startswith(
        "text/event-stream"
    )


def _headers(response: httpx.Response) -> list[tuple[bytes, bytes]]:
    return [
        (k.lower().encode("latin-1"), v.encode("latin-1"))
        for k, v in response.headers.multi_items()
        if k.lower() not in DROP_RESPONSE
    ]


async def _read_limited(response: httpx.Response) -> bytes:
    chunks: list[bytes] = []
    size = 0
    async for chunk in response.aiter_raw():
        size += len(chunk)
        if size > MAX_RESPONSE_BYTES:
            raise httpx.ReadError("the answer is larger than the door passes whole")
        chunks.append(chunk)
    return b"".join(chunks)
