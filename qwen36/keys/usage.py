"""Each named key's use of the door, from the door's own Cloud Monitoring series (labelled ``key``,
the key's name; door/metrics.json defines them): its requests, prompt and completion tokens over the
last day and the last 30 days, and when it was last used.

One ``projects.timeSeries.list`` per series and window, aligned with ``ALIGN_SUM`` and reduced with
``REDUCE_SUM`` grouped by ``metric.label.key``; a distribution (tokens per request) summed stays a
distribution whose ``count`` is the requests and ``count * mean`` the tokens.
https://cloud.google.com/monitoring/api/ref_v3/rest/v3/projects.timeSeries/list
https://cloud.google.com/monitoring/api/ref_v3/rest/v3/projects.alertPolicies#Aligner (ALIGN_SUM: "valid
for GAUGE and DELTA metrics with numeric and distribution values")
The last day is aligned by the minute (the door's own window), the 30 days by the hour, so the last
use is exact to the minute within a day and to the hour before that. Every point returned is summed,
whatever the alignment periods' edges: each of the door's points lies in exactly one period.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from typing import Any

import requests

from qwen36.errors import ApiError, UnreachableError
from qwen36.keys.store import api_error, session

MONITORING_URL = "https://monitoring.googleapis.com/v3"
REQUEST_TIMEOUT_S = 20.0
# The door's series (door/metrics.json: tests/keys hold these copies equal to it).
REQUESTS = "custom.googleapis.com/qwen36/door/requests"
TOKENS_IN = "custom.googleapis.com/qwen36/door/tokens_in"
TOKENS_OUT = "custom.googleapis.com/qwen36/door/tokens_out"
RESOURCE = "generic_task"
KEY_LABEL = "key"
DAY = timedelta(days=1)
MONTH = timedelta(days=30)
WINDOWS = {"day": (DAY, 60), "month": (MONTH, 3600)}
VIEW_ROLE = "roles/monitoring.viewer"
UNLABELLED = "(no key label)"


@dataclass
class Totals:
    requests: int = 0
    prompt_tokens: int = 0
    completion_tokens: int = 0

    def describe(self) -> str:
        tokens = f"{self.prompt_tokens} prompt + {self.completion_tokens} completion tokens"
        return f"{self.requests} requests, {tokens}"

    def to_json(self) -> dict[str, int]:
        return {
            "requests": self.requests,
            "promptTokens": self.prompt_tokens,
            "completionTokens": self.completion_tokens,
        }


@dataclass
class KeyUsage:
    day: Totals = field(default_factory=Totals)
    month: Totals = field(default_factory=Totals)
    last_use: datetime | None = None

    def describe(self) -> str:
        last = stamp(self.last_use) if self.last_use else "none in 30 days"
        return f"last day {self.day.describe()}; last 30 days {self.month.describe()}; last use {last}"

    def to_json(self) -> dict[str, Any]:
        return {
            "day": self.day.to_json(),
            "month": self.month.to_json(),
            "lastUse": stamp(self.last_use) if self.last_use else None,
        }


def stamp(at: datetime) -> str:
    return at.astimezone(UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def _time(text: str) -> datetime:
    # RFC 3339 with Z and up to nanoseconds (Monitoring's Timestamp JSON); seconds are enough here.
    return datetime.strptime(text[:19], "%Y-%m-%dT%H:%M:%S").replace(tzinfo=UTC)


class Monitoring:
    """``projects.timeSeries.list`` of one project with the user's credentials; ``url`` for a stand-in."""

    def __init__(self, project: str, credentials: Any, url: str | None = None) -> None:
        self.project = project
        self.url = (url or MONITORING_URL).rstrip("/")
        self.http = session(credentials)

    def series(self, metric_type: str, window: timedelta, align_s: int, now: datetime) -> Iterator[dict]:
        what = f"reading the door's {metric_type.rsplit('/', 1)[-1]} series in {self.project}"
        params: dict[str, str] = {
            "filter": f'metric.type="{metric_type}" AND resource.type="{RESOURCE}"',
            "interval.startTime": stamp(now - window),
            "interval.endTime": stamp(now),
            "aggregation.alignmentPeriod": f"{align_s}s",
            "aggregation.perSeriesAligner": "ALIGN_SUM",
            "aggregation.crossSeriesReducer": "REDUCE_SUM",
            "aggregation.groupByFields": f"metric.label.{KEY_LABEL}",
        }
        while True:
            try:
                response = self.http.get(
                    f"{self.url}/projects/{self.project}/timeSeries", params=params, timeout=REQUEST_TIMEOUT_S
                )
            except requests.RequestException as exc:
                raise UnreachableError(
                    f"{what}: Cloud Monitoring did not answer ({type(exc).__name__}); "
                    "check the network and rerun"
                ) from None
            if response.status_code >= 400:
                raise api_error(response.status_code, response.text, what, VIEW_ROLE, "Cloud Monitoring")
            try:
                body = response.json()
            except ValueError:
                raise ApiError(f"{what}: Cloud Monitoring answered without JSON") from None
            yield from body.get("timeSeries") or []
            token = body.get("nextPageToken")
            if not token:
                return
            params["pageToken"] = str(token)


def _key(series: dict) -> str:
    labels = (series.get("metric") or {}).get("labels") or {}
    return str(labels.get(KEY_LABEL) or UNLABELLED)


def _points(series: dict) -> Iterable[tuple[datetime, dict]]:
    for point in series.get("points") or []:
        end = (point.get("interval") or {}).get("endTime")
        if end:
            yield _time(str(end)), point.get("value") or {}


def _count(value: dict) -> int:
    if "int64Value" in value:
        return int(value["int64Value"])
    if "doubleValue" in value:
        return round(float(value["doubleValue"]))
    return 0


def _tokens(value: dict) -> int:
    distribution = value.get("distributionValue") or {}
    return round(int(distribution.get("count") or 0) * float(distribution.get("mean") or 0.0))


def key_usage(monitoring: Monitoring, now: datetime | None = None) -> dict[str, KeyUsage]:
    """Every key that the door's series name in the last 30 days, by name."""
    now = now or datetime.now(UTC)
    out: dict[str, KeyUsage] = {}
    last: dict[tuple[str, str], datetime] = {}
    for window, (span, align_s) in WINDOWS.items():
        for metric_type in (REQUESTS, TOKENS_IN, TOKENS_OUT):
            for series in monitoring.series(metric_type, span, align_s, now):
                name = _key(series)
                totals: Totals = getattr(out.setdefault(name, KeyUsage()), window)
                for end, value in _points(series):
                    if metric_type == REQUESTS:
                        count = _count(value)
                        totals.requests += count
                        if count > 0 and end > last.get((name, window), end - DAY):
                            last[name, window] = end
                    elif metric_type == TOKENS_IN:
                        totals.prompt_tokens += _tokens(value)
                    else:
                        totals.completion_tokens += _tokens(value)
    for name, entry in out.items():
        # The minute-aligned day is exact; the month's hour only when the day saw none.
        entry.last_use = last.get((name, "day")) or last.get((name, "month"))
    return out
