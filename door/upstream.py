"""Where llama-server is now, and the wake: at most one resize for any number of waiting requests.

The door keeps the healthy member's internal URL until a connection to it fails (a preemption, a
repair, an idle stop) and then looks again. A look reads the group's ``targetSize``; at 0, a
request that may wake the server starts the one wake task, which resizes the group to 1 with one
``requestId`` (a retried call is the same request to GCE), then polls the group's members until one
is RUNNING, reads its internal IP and polls its ``/health`` until 200. Every waiting request awaits
that same task, each within its own bound. Requests that may not wake the server (a UI tab's polls,
``/v1/models``) only look, and a look that found no server is remembered for a few seconds.
"""

from __future__ import annotations

import asyncio
import logging
import time
import uuid
from collections.abc import Callable
from dataclasses import dataclass

import httpx

from door.config import Settings
from door.gce import Compute, GceError
from door.metrics import Recorder, WakeRecord

HEALTH_TIMEOUT_S = 2.0
# A wake task gives up after this long even if nobody waits for it any more (a stockout can last
# hours; the next request then starts a new wake, which resizes nothing: the size is already 1).
WAKE_TASK_LIMIT_S = 1800.0

log = logging.getLogger("qwen36.door")

UP, ASLEEP, STARTING = "up", "asleep", "starting"
# The door's account cannot read or resize the group yet: a new grant still propagating (IAM changes
# take up to a few minutes: https://cloud.google.com/iam/docs/access-change-propagation).
GRANT_PENDING = "grant_pending"


@dataclass(frozen=True)
class Probe:
    state: str
    url: str | None = None


class Upstream:
    def __init__(
        self,
        settings: Settings,
        compute: Compute,
        client: httpx.AsyncClient,
        recorder: Recorder,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.s = settings
        self.compute = compute
        self.client = client
        self.recorder = recorder
        self.clock = clock
        self.url: str | None = None
        self._wake: asyncio.Task[str] | None = None
        self._probe: asyncio.Task[Probe] | None = None
        self._negative: tuple[float, Probe] | None = None
        self.resizes = 0

    @property
    def waking(self) -> bool:
        return self._wake is not None and not self._wake.done()

    def state(self) -> str:
        if self.url is not None:
            return UP
        if self.waking:
            return STARTING
        return self._negative[1].state if self._negative else "unknown"

    def invalidate(self, url: str | None = None) -> None:
        """Forget the member (a connection to ``url`` failed): the next request looks again."""
        if url is None or url == self.url:
            self.url = None
        self._negative = None

    def stopped(self) -> None:
        """The door itself resized the group to 0 (the idle stop)."""
        self.url = None
        self._negative = (self.clock(), Probe(ASLEEP))

    async def _healthy(self, url: str) -> bool:
        try:
            reply = await self.client.get(f"{url}/health", timeout=HEALTH_TIMEOUT_S)
        except httpx.HTTPError:
            return False
        return reply.status_code == 200

    async def _running_url(self) -> str | None:
        """The URL of a RUNNING member whose llama-server answers /health, if there is one."""
        for member in await self.compute.members():
            if member.status != "RUNNING":
                continue
            url = f"http://{await self.compute.internal_ip(member)}:{self.s.upstream_port}"
            if await self._healthy(url):
                return url
        return None

    async def probe(self) -> Probe:
        """A look that never wakes the server."""
        if self.url is not None:
            return Probe(UP, self.url)
        if self.waking:
            return Probe(STARTING)
        if self._negative and self.clock() - self._negative[0] < self.s.probe_cache_s:
            return self._negative[1]
        if self._probe is None or self._probe.done():
            self._probe = asyncio.create_task(self._look())
        return await asyncio.shield(self._probe)

    async def _look(self) -> Probe:
        try:
            if await self.compute.target_size() == 0:
                result = Probe(ASLEEP)
            else:
                url = await self._running_url()
                if url is not None:
                    self.url = url
                    return Probe(UP, url)
                result = Probe(STARTING)
        except (GceError, httpx.HTTPError) as exc:
            log.warning("could not read the group: %s", exc)
            result = Probe(GRANT_PENDING if isinstance(exc, GceError) and exc.status == 403 else STARTING)
        self._negative = (self.clock(), result)
        return result

    def wake(self) -> asyncio.Task[str]:
        """The one wake task (started if none runs); await it with your own bound, shielded."""
        if self._wake is None or self._wake.done():
            self._wake = asyncio.create_task(self._run_wake())
        return self._wake

    async def _run_wake(self) -> str:
        started = self.clock()
        request_id = str(uuid.uuid4())
        resized = False
        waited = False
        deadline = started + WAKE_TASK_LIMIT_S
        try:
            while self.clock() < deadline:
                try:
                    if not resized and await self.compute.target_size() == 0:
                        await self.compute.resize(1, request_id)
                        resized = True
                        self.resizes += 1
                        log.info("group %s was at 0: resized to 1 (requestId %s)", self.s.group, request_id)
                    url = await self._running_url()
                except (GceError, httpx.HTTPError) as exc:
                    if isinstance(exc, GceError) and exc.status == 403:
                        # Every waiting request gets its answer now; the next one wakes again.
                        self._negative = (self.clock(), Probe(GRANT_PENDING))
                        raise
                    log.warning("wake: %s; trying again", exc)
                    url = None
                if url is not None:
                    self.url = url
                    self._negative = None
                    if waited or resized:
                        self.recorder.wake(WakeRecord(self.clock() - started, resized, "ready"))
                        log.info("server up at %s after %.1f s", url, self.clock() - started)
                    return url
                waited = True
                await asyncio.sleep(self.s.health_poll_s)
            raise TimeoutError(f"no healthy server after {WAKE_TASK_LIMIT_S:.0f} s")
        except BaseException:
            self.recorder.wake(WakeRecord(self.clock() - started, resized, "failed"))
            raise
