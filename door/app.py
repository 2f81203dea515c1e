"""The door as an ASGI application: the key check, the door's own endpoints, and the dispatch of
every other request to the path policy (``door/policy.py``) and the proxy (``door/proxy.py``).

Order of every request: the key (``auth.KeyCheck``) before anything else, so a request without it
never looks at the group, never wakes the server and never reaches the VM; then the path policy;
then, for a request that needs the server, the hold and the proxy.

What wakes the server: a POST to an inference path, and a browser's navigation to a page (answered
with a page that reloads itself while the server starts). What never does: any other GET (a UI
tab's polls, ``/v1/models``, assets), ``/health``, a request without the key. So a closed or idle
UI tab, a dead client or a health poll cannot keep the server up, and the VM's idle watcher (the
one clock of idleness: every request reaches llama-server through here) sees no use from them.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
import uuid
from collections.abc import Callable
from typing import Any
from urllib.parse import parse_qs

import httpx
from starlette.responses import HTMLResponse, JSONResponse, RedirectResponse
from starlette.types import Receive, Scope, Send

from door import auth, pages, policy
from door.config import MAX_REQUEST_BYTES, Settings
from door.gce import Compute, GceError, Metadata
from door.idtoken import TokenError, Verifier
from door.metrics import MonitoringWriter, Recorder, RequestRecord
from door.policy import (
    LOGIN_PATH,
    RECENT_PATH,
    STOP_PATH,
    STREAM_LOOKUP,
    allowed,
    canonical,
    navigation,
    route_of,
)
from door.proxy import (
    ClientGone,
    Exchange,
    cancel_on_disconnect,
    openai_error,
    read_body,
    upstream_url,
    wants_stream,
)
from door.upstream import Upstream

log = logging.getLogger("qwen36.door")


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
            self._fetch_certs, audiences=self.s.stop_audiences, service_account=self.s.stop_service_account
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
        method = scope["method"]
        # Every decision below is made on the path as llama-server would see it (door/policy.py).
        path = canonical(scope.get("raw_path") or scope["path"].encode("utf-8"))
        if path is None:
            path = scope["path"]
            if not self.keys.allows(headers):
                await self._unauthorized(method, path, headers, scope, receive, send)
            else:
                await self._not_served(method, path, scope, receive, send)
            return
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
        body = await read_body(receive, 64 * 1024)
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
        if navigation(method, headers):
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

    async def _not_served(self, method: str, path: str, scope: Scope, receive: Receive, send: Send) -> None:
        await JSONResponse(
            openai_error(404, f"{method} {path[:200]} is not served through the door", "not_found_error"), 404
        )(scope, receive, send)
        self.recorder.request(RequestRecord(route_of(method, path), False, 404, arrived=self.wall()))

    async def _proxy(
        self, method: str, path: str, headers: dict[str, str], scope: Scope, receive: Receive, send: Send
    ) -> None:
        assert self.upstream is not None
        route = route_of(method, path)
        if not allowed(method, path):
            await self._not_served(method, path, scope, receive, send)
            return
        try:
            upstream_url("http://127.0.0.1", path, scope.get("query_string", b""))
        except (ValueError, httpx.InvalidURL):
            await JSONResponse(
                openai_error(400, "the query cannot be passed on", "invalid_request_error"), 400
            )(scope, receive, send)
            return
        if path == STREAM_LOOKUP and method == "POST":
            # The door turns resumable streams off, so none is ever live: the UI reads [] as "nothing
            # to resume" (llama-server's own answer for unknown conversation ids).
            await read_body(receive, MAX_REQUEST_BYTES)
            await JSONResponse([])(scope, receive, send)
            return
        body = await read_body(receive, MAX_REQUEST_BYTES)
        if body is None:
            await JSONResponse(openai_error(413, "request body too large", "invalid_request_error"), 413)(
                scope, receive, send
            )
            return
        stream = method == "POST" and wants_stream(body)
        record = RequestRecord(route, stream, arrived=self.wall())
        exchange = Exchange(self, method, path, scope, headers, body, record, send)
        wakes = policy.wakes(method, path, headers)
        self.busy += 1
        try:
            async with cancel_on_disconnect(receive):
                await (exchange.run() if wakes else exchange.run_without_wake())
        except ClientGone:
            record.status = 499
            if record.hold_s is None and exchange.holding_since is not None:
                record.hold_s, record.hold_outcome = self.clock() - exchange.holding_since, "gone"
        finally:
            self.busy -= 1
            record.total_s = self.clock() - exchange.t0
            if record.status:
                self.recorder.request(record)
