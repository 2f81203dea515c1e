"""Per-request and per-wake figures, batched into Cloud Monitoring custom metrics off the request
path.

A request's figures go into the current window in memory (a list append); a background task turns
each finished window into one point per time series and sends them with ``timeSeries.create``
(https://cloud.google.com/monitoring/api/ref_v3/rest/v3/projects.timeSeries/create), at most 200
series a call. Points are GAUGE distributions or counts of the window, on the ``generic_task``
resource with the Cloud Run instance as ``task_id``: user-defined metrics take GAUGE or CUMULATIVE
kinds only, and a series accepts at most one point every 5 seconds
(https://cloud.google.com/monitoring/quotas#custom_metrics_quotas), so one point a window per
instance keeps every series within it. The metric types come from ``metrics.json`` beside this
file, which the dashboard reads too.

With Cloud Run's request-based billing the CPU is only guaranteed while a request is in flight
and during shutdown (https://cloud.google.com/run/docs/configuring/billing-settings): a window that
closes while the door is idle is sent at the next request or at the SIGTERM before the instance
goes, whichever comes first.
"""

from __future__ import annotations

import asyncio
import json
import logging
import math
import time
from collections import deque
from collections.abc import Awaitable, Callable
from dataclasses import asdict, dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import httpx

DEFINITIONS_PATH = Path(__file__).with_name("metrics.json")
MAX_SERIES_PER_CALL = 200
# Windows not yet sent are kept up to this many (a Monitoring outage must not grow memory forever).
MAX_PENDING_WINDOWS = 60
RECENT = 200
WRITE_TIMEOUT_S = 20.0

log = logging.getLogger("qwen36.door")


def definitions() -> dict[str, Any]:
    doc: dict[str, Any] = json.loads(DEFINITIONS_PATH.read_text(encoding="utf-8"))
    return doc


@dataclass
class RequestRecord:
    route: str
    stream: bool
    status: int = 0
    key: str = "-"
    """The name of the key it came with ("-" for none, or none the door could check); never the key."""
    arrived: float = 0.0
    """time.time() of arrival (wall clock, for the recent-requests view)."""
    ttft_s: float | None = None
    hold_s: float | None = None
    hold_outcome: str = ""
    queue_s: float | None = None
    tokens_in: int | None = None
    tokens_out: int | None = None
    decode_rate: float | None = None
    total_s: float | None = None


@dataclass
class WakeRecord:
    duration_s: float
    resized: bool
    outcome: str


@dataclass
class Window:
    end: float = 0.0
    requests: list[RequestRecord] = field(default_factory=list)
    wakes: list[WakeRecord] = field(default_factory=list)


def _label(value: bool) -> str:
    return "true" if value else "false"


def distribution(values: list[float], buckets: dict[str, float]) -> dict[str, Any]:
    """A Monitoring Distribution with exponential buckets: bucket 0 is the underflow (< scale),
    bucket i in 1..N holds [scale*g^(i-1), scale*g^i), bucket N+1 the overflow.
    https://cloud.google.com/monitoring/api/ref_v3/rest/v3/TypedValue#distribution"""
    n, g, scale = int(buckets["numFiniteBuckets"]), float(buckets["growthFactor"]), float(buckets["scale"])
    counts = [0] * (n + 2)
    for v in values:
        if v < scale:
            counts[0] += 1
        else:
            i = math.floor(math.log(v / scale, g)) + 1
            counts[min(max(i, 1), n + 1)] += 1
    mean = sum(values) / len(values)
    return {
        "count": str(len(values)),
        "mean": mean,
        "sumOfSquaredDeviation": sum((v - mean) ** 2 for v in values),
        "bucketOptions": {"exponentialBuckets": {"numFiniteBuckets": n, "growthFactor": g, "scale": scale}},
        "bucketCounts": [str(c) for c in counts],
    }


def rfc3339(ts: float) -> str:
    return datetime.fromtimestamp(ts, UTC).strftime("%Y-%m-%dT%H:%M:%S.%fZ")


class Recorder:
    """Collects records into windows; ``series`` turns a closed window into time series."""

    def __init__(self, window_s: float, clock: Callable[[], float] = time.time) -> None:
        self.window_s = window_s
        self.clock = clock
        self.defs = {m["name"]: m for m in definitions()["metrics"]}
        self.current = Window()
        self.closed: deque[Window] = deque(maxlen=MAX_PENDING_WINDOWS)
        self.recent: deque[dict[str, Any]] = deque(maxlen=RECENT)
        self.recent_wakes: deque[dict[str, Any]] = deque(maxlen=RECENT)

    def request(self, record: RequestRecord) -> None:
        self.current.requests.append(record)
        self.recent.append(asdict(record))

    def wake(self, record: WakeRecord) -> None:
        self.current.wakes.append(record)
        self.recent_wakes.append(asdict(record))

    def close_window(self) -> None:
        if self.current.requests or self.current.wakes:
            self.current.end = self.clock()
            self.closed.append(self.current)
        self.current = Window()

    def _dist(
        self, name: str, groups: dict[tuple[tuple[str, str], ...], list[float]]
    ) -> list[dict[str, Any]]:
        d = self.defs[name]
        return [
            {
                "metric": {"type": d["type"], "labels": dict(labels)},
                "valueType": "DISTRIBUTION",
                "value": {"distributionValue": distribution(values, d["buckets"])},
            }
            for labels, values in groups.items()
            if values
        ]

    def series(self, window: Window, resource: dict[str, Any]) -> list[dict[str, Any]]:
        by: dict[str, dict[tuple[tuple[str, str], ...], list[float]]] = {
            name: {}
            for name in ("ttft", "hold", "server_queue", "tokens_in", "tokens_out", "decode_rate", "wake")
        }

        def add(name: str, value: float | None, **labels: str) -> None:
            if value is not None:
                by[name].setdefault(tuple(sorted(labels.items())), []).append(float(value))

        counts: dict[tuple[tuple[str, str], ...], int] = {}
        for r in window.requests:
            add("ttft", r.ttft_s, stream=_label(r.stream), held=_label(r.hold_s is not None))
            add("hold", r.hold_s, outcome=r.hold_outcome or "served")
            add("server_queue", r.queue_s)
            add("tokens_in", r.tokens_in, key=r.key)
            add("tokens_out", r.tokens_out, key=r.key)
            add("decode_rate", r.decode_rate)
            key = tuple(
                sorted(
                    {
                        "status": str(r.status),
                        "route": r.route,
                        "stream": _label(r.stream),
                        "key": r.key,
                    }.items()
                )
            )
            counts[key] = counts.get(key, 0) + 1
        for w in window.wakes:
            add("wake", w.duration_s, resized=_label(w.resized), outcome=w.outcome)
        out: list[dict[str, Any]] = []
        for name, groups in by.items():
            out += self._dist(name, groups)
        out += [
            {
                "metric": {"type": self.defs["requests"]["type"], "labels": dict(labels)},
                "valueType": "INT64",
                "value": {"int64Value": str(n)},
            }
            for labels, n in counts.items()
        ]
        end = rfc3339(window.end)
        for s in out:
            value = s.pop("value")
            s.update(
                resource=resource, metricKind="GAUGE", points=[{"interval": {"endTime": end}, "value": value}]
            )
        return out


class MonitoringWriter:
    """Closes a window every ``window_s`` and sends the closed ones; never called on a request."""

    def __init__(
        self,
        recorder: Recorder,
        client: httpx.AsyncClient,
        token: Callable[[], Awaitable[str]],
        resource: Callable[[], Awaitable[dict[str, Any]]],
        url: str,
    ) -> None:
        self.recorder = recorder
        self.client = client
        self.token = token
        self.resource = resource
        self.url = url

    async def run(self) -> None:
        while True:
            await asyncio.sleep(self.recorder.window_s)
            self.recorder.close_window()
            await self.flush()

    async def flush(self) -> None:
        """Sends every closed window, oldest first; a failed call keeps its window for the next try."""
        while self.recorder.closed:
            window = self.recorder.closed[0]
            try:
                series = self.recorder.series(window, await self.resource())
                for i in range(0, len(series), MAX_SERIES_PER_CALL):
                    reply = await self.client.post(
                        self.url,
                        json={"timeSeries": series[i : i + MAX_SERIES_PER_CALL]},
                        headers={"Authorization": f"Bearer {await self.token()}"},
                        timeout=WRITE_TIMEOUT_S,
                    )
                    if reply.status_code != 200:
                        # A 400 (a point rejected) would fail the same way again: log it and drop it.
                        log.warning("timeSeries.create answered %s: %s", reply.status_code, reply.text[:300])
                        if reply.status_code < 500 and reply.status_code != 429:
                            break
                        raise httpx.HTTPStatusError("retry later", request=reply.request, response=reply)
            except (httpx.HTTPError, OSError, RuntimeError, ValueError) as exc:
                log.warning("metrics not sent (%s); kept for the next window", exc)
                return
            self.recorder.closed.popleft()
