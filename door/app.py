"""The door as an ASGI application: the key check, the routes, the hold and the proxy.

Order of every request: the key (``auth.KeyCheck``) before anything else, so a request without it
never looks at the group, never wakes the server and never reaches the VM; then the path policy;
then, for a request that needs the server, the hold and the proxy.

What wakes the server: a POST to an inference path, and a browser's navigation to a page (answered
with a page that reloads itself while the server starts). What never does: any other GET (a UI
tab's polls, ``/v1/models``, assets), ``/health``, a request without the key. So a closed or idle
UI tab, a dead client or a health poll cannot keep the server up, and the VM's idle watcher (the
one clock of idleness: every request reaches llama-server through here) sees no use from them.

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
import logging
import time
import uuid
from collections.abc import Callable
from typing import Any
from urllib.parse import parse_qs

import httpx
from starlette.responses import HTMLResponse, JSONResponse, RedirectResponse, Response
from starlette.types import Message, Receive, Scope, Send

from door import auth, pages
from door.config import MAX_REQUEST_BYTES, MAX_RESPONSE_BYTES, Settings
from door.gce import Compute, GceError, Metadata
from door.idtoken import TokenError, Verifier
from door.metrics import MonitoringWriter, Recorder, RequestRecord
from door.upstream import ASLEEP, Upstream

log = logging.getLogger("qwen36.door")


STOP_PATH = "/_qwen36/idle-stop"
LOGIN_PATH = "/_qwen36/login"
RECENT_PATH = "/_qwen36/recent"
# llama-server's management and agent endpoints: never through the door. /tools runs shell commands
# on the VM (facts.md), /slots saves, restores and erases slots, /cors-proxy fetches any URL, the
# router's /models/* load and unload models, /lora-adapters changes the model, /metrics is for the
# VM's own agents. /v1/stream and /v1/chat/completions/control belong to the resumable streams the
# door turns off (X-Conversation-Id, below).
BLOCKED_PREFIXES = (
    "/tools",
    "/slots",
    "/cors-proxy",
    "/models/load",
    "/models/unload",
    "/models/sse",
    "/lora-adapters",
    "/metrics",
    "/v1/stream",
    "/v1/chat/completions/control",
)
STREAM_LOOKUP = "/v1/streams/lookup"
MODEL_LISTS = ("/v1/models", "/models")
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


def openai_error(status: int, message: str, kind: str) -> dict[str, Any]:
    # The shape llama-server and OpenAI answer errors in: {"error": {"message", "type", "code"}}.
    return {"error": {"message": message, "type": kind, "code": status}}


def route_of(method: str, path: str) -> str:
    if path in ("/v1/chat/completions", "/chat/completions"):
        return "chat"
    if path in ("/v1/completions", "/completions", "/completion", "/infill"):
        return "completions"
    if path in ("/v1/responses", "/responses"):
        return "responses"
    if path.startswith("/v1/messages"):
        return "messages"
    if path in ("/v1/embeddings", "/embeddings", "/embedding"):
        return "embeddings"
    if path in MODEL_LISTS:
        return "models"
    if path == "/health" or path.startswith("/_qwen36/"):
        return "door"
    return "ui" if method == "GET" else "other"


def _blocked(method: str, path: str) -> bool:
    if method == "DELETE" or (method == "POST" and path == "/props") or path.startswith("/_qwen36/"):
        return True
    return any(path == p or path.startswith(p + "/") for p in BLOCKED_PREFIXES) and path != STREAM_LOOKUP


def _navigation(method: str, headers: dict[str, str]) -> bool:
    """A browser loading a page (not a script's fetch): the one GET that may wake the server."""
    if method != "GET":
        return False
    mode = headers.get("sec-fetch-mode")
    if mode is not None:
        return mode == "navigate"
    return "text/html" in headers.get("accept", "")


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


class Door:
    def __init__(
        self,
        settings: Settings,
        *,
        clock: Callable[[], float] = time.monotonic,
        wall: Callable[[], float] = time.time,
    ) -> None:
        self.s = settings
        self.keys = auth.KeyCheck(settings.api_key)
        self.clock = clock
        self.wall = wall
        self.recorder = Recorder(settings.metrics_interval_s, clock=wall)
        self.busy = 0
        self.stopping: asyncio.Event | None = None
        self.api: httpx.AsyncClient | None = None
        self.upstream_client: httpx.AsyncClient | None = None
        self.upstream: Upstream | None = None
        self.verifier: Verifier | None = None
        self.writer: MonitoringWriter | None = None
        self._writer_task: asyncio.Task[None] | None = None
        self._task_id: str | None = None
        self.stops = 0

    # --- lifespan ---------------------------------------------------------------------------

    async def startup(self) -> None:
        # trust_env=False: no proxy variables from the environment between the door and Google or the VM.
        self.api = httpx.AsyncClient(trust_env=False)
        self.upstream_client = httpx.AsyncClient(
            trust_env=False, limits=httpx.Limits(max_connections=1000, max_keepalive_connections=100)
        )
        self.metadata = Metadata(self.api, self.s.metadata_url)
        self.compute = Compute(self.api, self.metadata, self.s.compute_url, self.s.group_path)
        self.upstream = Upstream(self.s, self.compute, self.upstream_client, self.recorder, clock=self.clock)
        self.verifier = Verifier(
            self._fetch_certs,
            audiences=self.s.stop_audiences,
            service_account=self.s.stop_service_account,
            service_account_id=self.s.stop_service_account_id,
        )
        if self.s.metrics:
            url = f"{self.s.monitoring_url}/projects/{self.s.project}/timeSeries"
            self.writer = MonitoringWriter(self.recorder, self.api, self.metadata.token, self._resource, url)
            self._writer_task = asyncio.create_task(self.writer.run())

    async def shutdown(self) -> None:
        if self._writer_task is not None:
            self._writer_task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._writer_task
        if self.writer is not None:
            # Cloud Run gives a stopping instance 10 s after SIGTERM: the last window goes now.
            self.recorder.close_window()
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self.writer.flush(), 5.0)
        for client in (self.api, self.upstream_client):
            if client is not None:
                await client.aclose()

    async def _fetch_certs(self) -> tuple[bytes, str]:
        assert self.api is not None
        reply = await self.api.get(self.s.certs_url, timeout=15.0)
        reply.raise_for_status()
        return reply.content, reply.headers.get("cache-control", "")

    async def _resource(self) -> dict[str, Any]:
        if self._task_id is None:
            try:
                self._task_id = (await self.metadata.get("instance/id")).strip()
            except (GceError, httpx.HTTPError):
                self._task_id = uuid.uuid4().hex
        return {
            "type": "generic_task",
            "labels": {
                "project_id": self.s.project,
                "location": self.s.region,
                "namespace": "qwen36",
                "job": self.s.service,
                "task_id": self._task_id,
            },
        }

    # --- ASGI -------------------------------------------------------------------------------

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] == "lifespan":
            await self._lifespan(receive, send)
            return
        if scope["type"] != "http":
            return
        headers = {k.decode("latin-1").lower(): v.decode("latin-1") for k, v in scope["headers"]}
        method, path = scope["method"], scope["path"]
        if path == "/health" and method == "GET":
            await self._health(headers, scope, receive, send)
        elif path == STOP_PATH and method == "POST":
            await self._idle_stop(headers, scope, receive, send)
        elif path == LOGIN_PATH and method == "POST":
            await self._login(headers, scope, receive, send)
        elif not self.keys.allows(headers):
            await self._unauthorized(method, path, headers, scope, receive, send)
        elif path == RECENT_PATH and method == "GET":
            await self._recent(scope, receive, send)
        else:
            await self._proxy(method, path, headers, scope, receive, send)

    async def _lifespan(self, receive: Receive, send: Send) -> None:
        while True:
            message = await receive()
            if message["type"] == "lifespan.startup":
                try:
                    await self.startup()
                except Exception as exc:
                    await send({"type": "lifespan.startup.failed", "message": str(exc)})
                    return
                await send({"type": "lifespan.startup.complete"})
            elif message["type"] == "lifespan.shutdown":
                await self.shutdown()
                await send({"type": "lifespan.shutdown.complete"})
                return

    # --- the door's own endpoints -----------------------------------------------------------

    async def _health(self, headers: dict[str, str], scope: Scope, receive: Receive, send: Send) -> None:
        """Always 200 while the door runs; looks at nothing, so it wakes nothing. With the key it also
        says what the door last knew of the server."""
        body: dict[str, Any] = {"status": "ok"}
        if self.keys.allows(headers) and self.upstream is not None:
            body.update(server=self.upstream.state(), busy=self.busy, resizes=self.upstream.resizes)
        await JSONResponse(body)(scope, receive, send)

    async def _recent(self, scope: Scope, receive: Receive, send: Send) -> None:
        body = {
            "requests": list(self.recorder.recent),
            "wakes": list(self.recorder.recent_wakes),
            "server": self.upstream.state() if self.upstream else "unknown",
            "resizes": self.upstream.resizes if self.upstream else 0,
            "stops": self.stops,
            "busy": self.busy,
        }
        await JSONResponse(body)(scope, receive, send)

    async def _login(self, headers: dict[str, str], scope: Scope, receive: Receive, send: Send) -> None:
        body = await _read_body(receive, 64 * 1024)
        key = (parse_qs((body or b"").decode("utf-8", "replace")).get("key") or [""])[0].strip()
        if not key or not self.keys.key_matches(key):
            await HTMLResponse(pages.key_page("That is not the key."), status_code=401)(scope, receive, send)
            return
        response = RedirectResponse("/", status_code=303)
        secure = headers.get("x-forwarded-proto", scope.get("scheme", "http")) == "https"
        response.set_cookie(
            auth.COOKIE,
            auth.cookie_value(self.s.api_key),
            httponly=True,
            secure=secure,
            samesite="strict",
            path="/",
        )
        await response(scope, receive, send)

    async def _unauthorized(
        self, method: str, path: str, headers: dict[str, str], scope: Scope, receive: Receive, send: Send
    ) -> None:
        self.recorder.request(RequestRecord(route_of(method, path), False, 401, arrived=self.wall()))
        if _navigation(method, headers):
            await HTMLResponse(pages.key_page(), status_code=401)(scope, receive, send)
            return
        await JSONResponse(
            openai_error(401, "Invalid API Key", "authentication_error"),
            status_code=401,
            headers={"WWW-Authenticate": "Bearer"},
        )(scope, receive, send)

    async def _idle_stop(self, headers: dict[str, str], scope: Scope, receive: Receive, send: Send) -> None:
        """The VM's idle watcher asks for the stop; the door resizes its group to 0 unless it holds or
        streams a request (then 409, and the watcher's idle window starts again)."""
        assert self.verifier is not None and self.upstream is not None
        token = auth.presented_key({"authorization": headers.get("authorization", "")}) or ""
        try:
            claims = await self.verifier.verify(token)
        except (TokenError, httpx.HTTPError, ValueError) as exc:
            await JSONResponse(openai_error(401, f"idle stop refused: {exc}", "authentication_error"), 401)(
                scope, receive, send
            )
            return
        if self.busy or self.upstream.waking or self.stopping is not None:
            message = f"the door holds or streams {self.busy} request(s); not idle"
            await JSONResponse(openai_error(409, message, "busy"), 409)(scope, receive, send)
            return
        self.stopping = asyncio.Event()
        try:
            self.upstream.stopped()
            operation = await self.compute.resize(0, str(uuid.uuid4()))
        except (GceError, httpx.HTTPError) as exc:
            self.upstream.invalidate()
            await JSONResponse(openai_error(502, f"resize to 0 failed: {exc}", "server_error"), 502)(
                scope, receive, send
            )
            return
        finally:
            self.stopping.set()
            self.stopping = None
        self.stops += 1
        log.info("idle stop for %s: group %s resized to 0", claims.get("email"), self.s.group)
        await JSONResponse({"stopped": True, "operation": operation.get("name")})(scope, receive, send)

    # --- the proxy --------------------------------------------------------------------------

    async def _proxy(
        self, method: str, path: str, headers: dict[str, str], scope: Scope, receive: Receive, send: Send
    ) -> None:
        assert self.upstream is not None
        route = route_of(method, path)
        if _blocked(method, path):
            await JSONResponse(
                openai_error(404, f"{path} is not served through the door", "not_found_error"), 404
            )(scope, receive, send)
            self.recorder.request(RequestRecord(route, False, 404, arrived=self.wall()))
            return
        if path == STREAM_LOOKUP and method == "POST":
            # The door turns resumable streams off, so none is ever live: the UI reads [] as "nothing
            # to resume" (llama-server's own answer for unknown conversation ids).
            await _read_body(receive, MAX_REQUEST_BYTES)
            await JSONResponse([])(scope, receive, send)
            return
        body = await _read_body(receive, MAX_REQUEST_BYTES)
        if body is None:
            await JSONResponse(openai_error(413, "request body too large", "invalid_request_error"), 413)(
                scope, receive, send
            )
            return
        stream = method == "POST" and _wants_stream(body)
        record = RequestRecord(route, stream, arrived=self.wall())
        exchange = Exchange(self, method, path, scope, headers, body, record, send)
        wakes = method == "POST" or _navigation(method, headers)
        self.busy += 1
        try:
            async with _cancel_on_disconnect(receive):
                await (exchange.run() if wakes else exchange.run_without_wake())
        except _ClientGone:
            record.status = 499
            if record.hold_s is None and exchange.holding_since is not None:
                record.hold_s, record.hold_outcome = self.clock() - exchange.holding_since, "gone"
        finally:
            self.busy -= 1
            record.total_s = self.clock() - exchange.t0
            if record.status:
                self.recorder.request(record)


class _ClientGone(Exception):
    pass


@contextlib.asynccontextmanager
async def _cancel_on_disconnect(receive: Receive) -> Any:
    """Runs the body; the moment the client's connection goes, cancels it (and so the upstream
    request, whose connection the cancelled stream closes) and raises ``_ClientGone``."""
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
            raise _ClientGone() from None
        raise
    finally:
        watcher.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await watcher


async def _read_body(receive: Receive, limit: int) -> bytes | None:
    chunks: list[bytes] = []
    size = 0
    while True:
        message = await receive()
        if message["type"] == "http.disconnect":
            raise _ClientGone()
        chunk = message.get("body", b"")
        size += len(chunk)
        if size > limit:
            return None
        chunks.append(chunk)
        if not message.get("more_body", False):
            return b"".join(chunks)


def _wants_stream(body: bytes) -> bool:
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
    ) -> None:
        self.door = door
        self.s = door.s
        self.method, self.path, self.scope = method, path, scope
        self.headers, self.body, self.record, self._send = headers, body, record, send
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
        out["authorization"] = f"Bearer {self.s.api_key}"
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
        message = (
            "the server is stopped while idle; a completion request wakes it"
            if probe.state == ASLEEP
            else "the server is starting"
        )
        await self._fail(503, message, "unavailable_error")

    async def _await_server(self) -> str | None:
        """The server's URL, holding the request while it starts; None when an answer was sent."""
        upstream = self.door.upstream
        assert upstream is not None
        while self.door.stopping is not None:
            await self.door.stopping.wait()
        if upstream.url is not None:
            return upstream.url
        task = upstream.wake()
        if _navigation(self.method, self.headers):
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

    async def _fail(self, status: int, message: str, kind: str, *, retry_after: bool = False) -> None:
        self.record.status = status
        error = openai_error(status, message, kind)
        if self.sse_started:
            await self._end_with_event(error)
            return
        headers = {"Retry-After": str(self.s.retry_after_s)} if retry_after or status == 503 else None
        await self.respond(JSONResponse(error, status, headers=headers))

    async def _end_with_event(self, error: dict[str, Any]) -> None:
        """Ends a stream whose 200 already went out with the error as its last event."""
        event = b"data: " + json.dumps(error).encode() + b"\n\n"
        await self.send({"type": "http.response.body", "body": event, "more_body": False})

    async def _forward(self, url: str) -> None:
        client = self.door.upstream_client
        assert client is not None
        query = self.scope.get("query_string", b"").decode("latin-1")
        target = f"{url}{self.path}" + (f"?{query}" if query else "")
        request = client.build_request(
            self.method, target, headers=self._upstream_headers(), content=self.body, timeout=UPSTREAM_TIMEOUT
        )
        sent = self.door.clock()
        try:
            response = await client.send(request, stream=True)
        except (httpx.ConnectError, httpx.ConnectTimeout, httpx.RemoteProtocolError) as exc:
            raise _Unreachable(str(exc)) from exc
        try:
            if self.sse_started:
                await self._stream_into_sse(response, sent)
            elif self.record.stream and response.headers.get("content-type", "").startswith(
                "text/event-stream"
            ):
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
