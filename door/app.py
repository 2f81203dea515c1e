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
from door.keys import KeyState, KeyStore, KeyUnreadable, SecretManager
from door.keyset import DEFAULT
from door.limits import Limiter
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
        self.keys = KeyStore(
            plain_key=settings.api_key,
            key_secret=settings.api_key_secret,
            set_secret=settings.keys_secret,
            secrets=None,
            max_age_s=settings.keys_cache_s,
            clock=clock,
        )
        self.limiter = Limiter(clock)
        self.clock = clock
        self.wall = wall
        self.recorder = Recorder(settings.metrics_interval_s, clock=wall)
        self.busy = 0
        self.stopping: asyncio.Event | None = None
        self.api: httpx.AsyncClient | None = None
        self.upstream_client: httpx.AsyncClient | None = None
        self.fresh_client: httpx.AsyncClient | None = None
        self.reconnects = 0
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
        # An idle connection is dropped before llama-server's own keep-alive timeout (5 s) closes
        # it, so a request seldom meets a connection the server is closing; one that does is retried
        # on fresh_client, which keeps no connection (proxy.Exchange._send_upstream).
        self.upstream_client = httpx.AsyncClient(
            trust_env=False,
            limits=httpx.Limits(max_connections=1000, max_keepalive_connections=100, keepalive_expiry=4.0),
        )
        self.fresh_client = httpx.AsyncClient(
            trust_env=False, limits=httpx.Limits(max_keepalive_connections=0)
        )
        self.metadata = Metadata(self.api, self.s.metadata_url)
        self.compute = Compute(self.api, self.metadata, self.s.compute_url, self.s.group_path)
        self.keys.secrets = SecretManager(self.api, self.metadata, self.s.secret_manager_url)
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
        for client in (self.api, self.upstream_client, self.fresh_client):
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
        if path == "/health" and method == "GET":
            await self._health(headers, scope, receive, send)
            return
        if path == STOP_PATH and method == "POST":
            await self._idle_stop(headers, scope, receive, send)
            return
        if path == LOGIN_PATH and method == "POST":
            await self._login(headers, scope, receive, send)
            return
        shown = scope["path"] if path is None else path
        try:
            found = await self.keys.identify(headers)
        except KeyUnreadable as exc:
            await self._keys_unreadable(method, shown, str(exc), scope, receive, send)
            return
        if found is None:
            await self._unauthorized(method, shown, headers, scope, receive, send)
            return
        name, state = found
        if path == RECENT_PATH and method == "GET":
            await self._recent(name, scope, receive, send)
        elif path is None or not allowed(method, path):
            await self._not_served(method, shown, name, scope, receive, send)
        else:
            await self._proxy(name, state, method, path, headers, scope, receive, send)

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
        try:
            found = await self.keys.identify(headers)
        except KeyUnreadable:
            found = None
        if found is not None and self.upstream is not None:
            body.update(server=self.upstream.state(), busy=self.busy, resizes=self.upstream.resizes)
        await JSONResponse(body)(scope, receive, send)

    async def _recent(self, name: str, scope: Scope, receive: Receive, send: Send) -> None:
        """The door's recent requests: all of them for the program's key, a named key's own otherwise
        (no key's name reaches another key's holder)."""
        records = [r for r in self.recorder.recent if name == DEFAULT or r.get("key") == name]
        body = {
            "requests": records,
            "wakes": list(self.recorder.recent_wakes),
            "server": self.upstream.state() if self.upstream else "unknown",
            "resizes": self.upstream.resizes if self.upstream else 0,
            "stops": self.stops,
            "reconnects": self.reconnects,
            "busy": self.busy,
        }
        await JSONResponse(body)(scope, receive, send)

    async def _login(self, headers: dict[str, str], scope: Scope, receive: Receive, send: Send) -> None:
        """The key page's form: any valid key opens the UI, with a session cookie naming that key."""
        body = await read_body(receive, 64 * 1024)
        key = (parse_qs((body or b"").decode("utf-8", "replace")).get("key") or [""])[0].strip()
        try:
            state = await self.keys.state()
        except KeyUnreadable:
            page = pages.key_page("The door cannot read its keys yet; try again in a minute.")
            headers_out = {"Retry-After": str(self.s.retry_after_s)}
            await HTMLResponse(page, status_code=503, headers=headers_out)(scope, receive, send)
            return
        name = state.match(key) if key else None
        if name is None:
            await HTMLResponse(pages.key_page("That is not the key."), status_code=401)(scope, receive, send)
            return
        response = RedirectResponse("/", status_code=303)
        secure = headers.get("x-forwarded-proto", scope.get("scheme", "http")) == "https"
        response.set_cookie(
            auth.COOKIE, state.cookie(name), httponly=True, secure=secure, samesite="strict", path="/"
        )
        await response(scope, receive, send)

    async def _keys_unreadable(
        self, method: str, path: str, why: str, scope: Scope, receive: Receive, send: Send
    ) -> None:
        """A keyed request while the door cannot read its keys (a new grant still propagating)."""
        self.recorder.request(RequestRecord(route_of(method, path), False, 503, arrived=self.wall(), key="-"))
        error = openai_error(503, f"the door cannot check keys yet: {why}; retry", "unavailable_error")
        error["error"]["code"] = "door_key_unreadable"
        headers = {"Retry-After": str(self.s.retry_after_s)}
        await JSONResponse(error, 503, headers=headers)(scope, receive, send)

    async def _unauthorized(
        self, method: str, path: str, headers: dict[str, str], scope: Scope, receive: Receive, send: Send
    ) -> None:
        self.recorder.request(RequestRecord(route_of(method, path), False, 401, arrived=self.wall(), key="-"))
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

    async def _not_served(
        self, method: str, path: str, name: str, scope: Scope, receive: Receive, send: Send
    ) -> None:
        await JSONResponse(
            openai_error(404, f"{method} {path[:200]} is not served through the door", "not_found_error"), 404
        )(scope, receive, send)
        self.recorder.request(
            RequestRecord(route_of(method, path), False, 404, arrived=self.wall(), key=name)
        )

    async def _proxy(
        self,
        name: str,
        state: KeyState,
        method: str,
        path: str,
        headers: dict[str, str],
        scope: Scope,
        receive: Receive,
        send: Send,
    ) -> None:
        assert self.upstream is not None
        route = route_of(method, path)
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
        record = RequestRecord(route, stream, arrived=self.wall(), key=name)
        limits = state.limits(name)
        refused = self.limiter.admit(name, limits)
        if refused is not None:
            retry_after, why = refused
            record.status = 429
            self.recorder.request(record)
            message = f"this key's limit is {why}: retry after {retry_after} s"
            error = openai_error(429, message, "rate_limit_error", "rate_limit_exceeded")
            await JSONResponse(error, 429, headers={"Retry-After": str(retry_after)})(scope, receive, send)
            return
        exchange = Exchange(self, method, path, scope, headers, body, record, send, state.program)
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
            self.limiter.release(name, limits, (record.tokens_in or 0) + (record.tokens_out or 0))
            record.total_s = self.clock() - exchange.t0
            if record.status:
                self.recorder.request(record)
