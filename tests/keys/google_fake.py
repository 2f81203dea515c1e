"""A loopback stand-in for the two Google APIs ``qwen36 keys`` calls, with the OAuth token endpoint, so
google-auth's own refresh runs against it. Each answer is in the documented shape of its method:

* ``POST /token``: the refresh-token grant's answer (tests/gcp_fake/shapes.py ``token``).
* ``GET /v1/projects/{p}/secrets/{s}``: a ``Secret`` {name, replication, createTime, labels}
  (https://cloud.google.com/secret-manager/docs/reference/rest/v1/projects.secrets/get,
  https://cloud.google.com/secret-manager/docs/reference/rest/v1/projects.secrets#Secret).
* ``GET /v1/projects/{p}/secrets/{s}/versions/{v}:access``: an ``AccessSecretVersionResponse``
  {name, payload: {data (base64), dataCrc32c (int64 as a string)}}; ``latest`` is "an alias to the
  most recently created SecretVersion"
  (https://cloud.google.com/secret-manager/docs/reference/rest/v1/projects.secrets.versions/access).
  A secret without a version, or one that does not exist, answers 404 NOT_FOUND (the message of
  a missing secret is Secret Manager's own, as terraform-provider-google-beta's recorded calls show:
  "Secret [projects/<number>/secrets/<id>] not found."); names are by project number, as the API answers.
* ``POST /v1/projects/{p}/secrets/{s}:addVersion`` {payload: {data, dataCrc32c}}: the new
  ``SecretVersion`` {name, createTime, state: ENABLED, etag, clientSpecifiedPayloadChecksum}
  (https://cloud.google.com/secret-manager/docs/reference/rest/v1/projects.secrets/addVersion); "SecretVersion
  IDs in a Secret start at 1 and are incremented for each subsequent version"
  (https://cloud.google.com/secret-manager/docs/reference/rest/v1/projects.secrets.versions). A
  checksum that disagrees with the data is refused 400 INVALID_ARGUMENT (the documented purpose of
  dataCrc32c: https://cloud.google.com/secret-manager/docs/reference/rest/v1/SecretPayload).
* ``GET /v3/projects/{p}/timeSeries``: a ``ListTimeSeriesResponse`` {timeSeries: [{metric: {type,
  labels}, resource, metricKind, valueType, points: [{interval: {startTime, endTime}, value}]}],
  nextPageToken} (https://cloud.google.com/monitoring/api/ref_v3/rest/v3/projects.timeSeries/list);
  points "in reverse time order". ALIGN_SUM sums a period's points, a distribution's by count and
  mean; REDUCE_SUM adds the series grouped by ``metric.label.key``
  (https://cloud.google.com/monitoring/api/ref_v3/rest/v3/projects.alertPolicies#Aligner,
  #Reducer). Where the alignment periods' edges fall is not settled by what we read: the fake ends
  them at ``interval.endTime``, and the CLI sums every point it gets, so it does not depend on it.
* ``add_unavailable`` answers 503 UNAVAILABLE (https://cloud.google.com/apis/design/errors#http_mapping)
  to an addVersion that landed anyway: an answer lost on the way. addVersion takes no request id, so
  the CLI does not retry it and says the version may be there.
* A denied permission answers 403 PERMISSION_DENIED in Google's error body
  (https://cloud.google.com/apis/design/errors#http_mapping); its message is IAM's usual
  "Permission '<p>' denied on resource '<r>' (or it may not exist)." form, which the CLI only quotes.
"""

from __future__ import annotations

import base64
import json
import re
import threading
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from http.server import BaseHTTPRequestHandler
from typing import Any
from urllib.parse import parse_qs, urlparse

import google_crc32c

from tests.gcp_fake import shapes
from tests.gcp_fake.project import ACCESS_TOKEN
from tests.harness.loopback import JsonHandler, serve_on_loopback

PROJECT = "acme-llm"
PROJECT_NUMBER = "123456789012"
SECRET_ID = "qwen36-dev-door-keys"
SECRET = f"projects/{PROJECT}/secrets/{SECRET_ID}"
_SECRET = re.compile(r"/v1/projects/(?P<p>[^/]+)/secrets/(?P<s>[A-Za-z0-9_-]+)")
_ACCESS = re.compile(r"/v1/projects/(?P<p>[^/]+)/secrets/(?P<s>[A-Za-z0-9_-]+)/versions/(?P<v>[^/:]+):access")
_ADD = re.compile(r"/v1/projects/(?P<p>[^/]+)/secrets/(?P<s>[A-Za-z0-9_-]+):addVersion")
_SERIES = re.compile(r"/v3/projects/(?P<p>[^/]+)/timeSeries")
_FILTER = re.compile(r'^metric\.type="(?P<type>[^"]+)" AND resource\.type="generic_task"$')
PAGE_SIZE = 2  # series per page: small, so that the CLI's paging runs


@dataclass(frozen=True)
class DoorPoint:
    """One point as the door writes it: a 60-s window of one key (door/metrics.json)."""

    metric: str
    key: str | None
    end: datetime
    count: int
    mean: float = 0.0


@dataclass
class FakeGoogle:
    url: str = ""
    project: str = PROJECT
    secrets: dict[str, list[bytes]] = field(default_factory=lambda: {SECRET_ID: []})
    """Secret id -> its versions' payloads, version 1 first."""
    denied: set[str] = field(default_factory=set)
    """Permissions the caller lacks: secretmanager.versions.access, .add, monitoring.timeSeries.list."""
    points: list[DoorPoint] = field(default_factory=list)
    before_add: list[Callable[[FakeGoogle], None]] = field(default_factory=list)
    """Run once each, in order, as an addVersion arrives and before it lands: another user's edit."""
    add_unavailable: int = 0
    """How many addVersion calls to answer 503 UNAVAILABLE, after the version landed (a lost answer)."""
    calls: list[tuple[str, str, dict[str, list[str]]]] = field(default_factory=list)
    lock: threading.RLock = field(default_factory=threading.RLock)

    def add_version(self, secret: str, data: bytes) -> int:
        with self.lock:
            self.secrets[secret].append(data)
            return len(self.secrets[secret])

    def latest(self, secret: str = SECRET_ID) -> bytes:
        return self.secrets[secret][-1]


def _stamp(at: datetime) -> str:
    return at.strftime("%Y-%m-%dT%H:%M:%SZ")


def _time(text: str) -> datetime:
    return datetime.strptime(text, "%Y-%m-%dT%H:%M:%SZ").replace(tzinfo=UTC)


def _denied(permission: str, resource: str) -> dict[str, Any]:
    return shapes.status_error(
        403,
        "PERMISSION_DENIED",
        f"Permission '{permission}' denied on resource '{resource}' (or it may not exist).",
    )


def _not_found(what: str) -> dict[str, Any]:
    return shapes.status_error(404, "NOT_FOUND", f"{what} not found.")


def _aligned(google: FakeGoogle, query: dict[str, list[str]]) -> tuple[int, dict[str, Any]]:
    def one(name: str) -> str:
        return query.get(name, [""])[0]

    wanted = _FILTER.match(one("filter"))
    if (
        wanted is None
        or one("aggregation.perSeriesAligner") != "ALIGN_SUM"
        or one("aggregation.crossSeriesReducer") != "REDUCE_SUM"
        or one("aggregation.groupByFields") != "metric.label.key"
        or not one("aggregation.alignmentPeriod").endswith("s")
    ):
        return 400, shapes.status_error(400, "INVALID_ARGUMENT", f"the fake reads no query {query}")
    start, end = _time(one("interval.startTime")), _time(one("interval.endTime"))
    period = timedelta(seconds=int(one("aggregation.alignmentPeriod")[:-1]))
    metric = wanted["type"]
    groups: dict[str | None, dict[int, list[DoorPoint]]] = {}
    for point in google.points:
        if point.metric == metric and start < point.end <= end:
            index = int((end - point.end) / period)
            groups.setdefault(point.key, {}).setdefault(index, []).append(point)
    distribution = not metric.endswith("/requests")
    series = []
    for key, periods in sorted(groups.items(), key=lambda kv: str(kv[0])):
        points = []
        for index in sorted(periods):  # newest period first: reverse time order
            members = periods[index]
            interval = {
                "startTime": _stamp(end - (index + 1) * period),
                "endTime": _stamp(end - index * period),
            }
            if distribution:
                count = sum(p.count for p in members)
                mean = sum(p.count * p.mean for p in members) / count if count else 0.0
                value: dict[str, Any] = {"distributionValue": {"count": str(count), "mean": mean}}
            else:
                value = {"int64Value": str(sum(p.count for p in members))}
            points.append({"interval": interval, "value": value})
        series.append(
            {
                "metric": {"type": metric, "labels": {} if key is None else {"key": key}},
                "resource": {"type": "generic_task", "labels": {"project_id": google.project}},
                "metricKind": "GAUGE",
                "valueType": "DISTRIBUTION" if distribution else "INT64",
                "points": points,
            }
        )
    offset = int(one("pageToken") or 0)
    body: dict[str, Any] = {"timeSeries": series[offset : offset + PAGE_SIZE]}
    if offset + PAGE_SIZE < len(series):
        body["nextPageToken"] = str(offset + PAGE_SIZE)
    return 200, body


def _handler(google: FakeGoogle) -> type[BaseHTTPRequestHandler]:
    class Handler(JsonHandler):
        def _serve(self, method: str) -> None:
            url = urlparse(self.path)
            query = parse_qs(url.query)
            length = int(self.headers.get("Content-Length") or 0)
            body = self.rfile.read(length) if length else b""
            with google.lock:
                google.calls.append((method, url.path, query))
            if method == "POST" and url.path == "/token":
                self._json(200, shapes.token())
                return
            if self.headers.get("Authorization") != f"Bearer {ACCESS_TOKEN}":
                self._json(401, shapes.unauthenticated())
                return
            if method == "GET" and (match := _ACCESS.fullmatch(url.path)):
                self._access(match)
            elif method == "GET" and (match := _SECRET.fullmatch(url.path)):
                self._secret(match)
            elif method == "POST" and (match := _ADD.fullmatch(url.path)):
                self._add(match, body)
            elif method == "GET" and (match := _SERIES.fullmatch(url.path)):
                if "monitoring.timeSeries.list" in google.denied:
                    self._json(403, _denied("monitoring.timeSeries.list", f"projects/{match['p']}"))
                    return
                self._json(*_aligned(google, query))
            else:
                self._json(404, shapes.status_error(404, "NOT_FOUND", f"the fake has no {method} {url.path}"))

        def do_GET(self) -> None:
            self._serve("GET")

        def do_POST(self) -> None:
            self._serve("POST")

        def _name(self, secret: str) -> str:
            return f"projects/{PROJECT_NUMBER}/secrets/{secret}"

        def _known(self, match: re.Match[str]) -> bool:
            return match["p"] == google.project and match["s"] in google.secrets

        def _secret(self, match: re.Match[str]) -> None:
            if not self._known(match):
                self._json(
                    404,
                    shapes.status_error(404, "NOT_FOUND", f"Secret [{self._name(match['s'])}] not found."),
                )
                return
            self._json(
                200,
                {
                    "name": self._name(match["s"]),
                    "replication": {"automatic": {}},
                    "createTime": "2026-12-01T10:00:00.000000Z",
                    "labels": {"app": "qwen36-mtp-l4"},
                    "etag": '"16220d5a3a0e1c"',
                },
            )

        def _access(self, match: re.Match[str]) -> None:
            resource = f"{self._name(match['s'])}/versions/{match['v']}"
            if "secretmanager.versions.access" in google.denied:
                self._json(403, _denied("secretmanager.versions.access", resource))
                return
            with google.lock:
                versions = google.secrets.get(match["s"], []) if self._known(match) else []
                number = len(versions) if match["v"] == "latest" else int(match["v"])
                if not 1 <= number <= len(versions):
                    self._json(404, _not_found(f"Secret Version [{resource}]"))
                    return
                data = versions[number - 1]
            self._json(
                200,
                {
                    "name": f"{self._name(match['s'])}/versions/{number}",
                    "payload": {
                        "data": base64.b64encode(data).decode(),
                        "dataCrc32c": str(google_crc32c.value(data)),
                    },
                },
            )

        def _add(self, match: re.Match[str], body: bytes) -> None:
            if "secretmanager.versions.add" in google.denied:
                self._json(403, _denied("secretmanager.versions.add", self._name(match["s"])))
                return
            if not self._known(match):
                self._json(
                    404,
                    shapes.status_error(404, "NOT_FOUND", f"Secret [{self._name(match['s'])}] not found."),
                )
                return
            payload = json.loads(body or b"{}").get("payload") or {}
            data = base64.b64decode(payload.get("data", ""))
            checksum = payload.get("dataCrc32c")
            if checksum is not None and int(checksum) != google_crc32c.value(data):
                self._json(400, shapes.status_error(400, "INVALID_ARGUMENT", "Checksum mismatch."))
                return
            with google.lock:
                while google.before_add:
                    google.before_add.pop(0)(google)
                number = google.add_version(match["s"], data)
                if google.add_unavailable:
                    google.add_unavailable -= 1
                    self._json(
                        503, shapes.status_error(503, "UNAVAILABLE", "The service is currently unavailable.")
                    )
                    return
            self._json(
                200,
                {
                    "name": f"{self._name(match['s'])}/versions/{number}",
                    "createTime": _stamp(datetime.now(UTC)),
                    "state": "ENABLED",
                    "etag": f'"{number:014x}"',
                    "clientSpecifiedPayloadChecksum": checksum is not None,
                },
            )

    return Handler


@contextmanager
def fake_google(google: FakeGoogle | None = None) -> Iterator[FakeGoogle]:
    google = google or FakeGoogle()
    with serve_on_loopback(_handler(google)) as url:
        google.url = url
        yield google
