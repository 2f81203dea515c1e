"""A local HTTP server playing the Compute API (REST v1) calls the health gate and the CLI make.

The deployer's machine has no GCP here, so the real google-cloud-compute client is pointed at this
server (``api_endpoint``) and exercised end to end: URL layout, HTTP verbs, query parameters, JSON
decoding and error mapping are the client library's own. What GCE answers is a timeline of group
states, each taking over at a time of the test's clock, so a test can stage a stockout, a repair or
a late report and run the gate on a virtual clock. Every response body follows the documented
shape of its method (the source is cited at each).
"""

from __future__ import annotations

import json
import threading
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from http.server import BaseHTTPRequestHandler
from typing import Any
from urllib.parse import parse_qs, urlparse

from infra import boot_protocol
from tests.health.stub_http import serve_on_loopback

PREFIX = "/compute/v1/projects/"
API = "https://www.googleapis.com/compute/v1/projects"
# The virtual clock's zero, as wall time: instance start times and report times are written against it.
EPOCH = datetime(2026, 11, 30, 22, 0, 0, tzinfo=UTC)
STOCKOUT_MESSAGE = (
    "The zone 'projects/{project}/zones/{zone}' does not have enough resources available to fulfill "
    "the request.  Try a different zone, or try again later."
)


def at(seconds: float) -> datetime:
    return EPOCH + timedelta(seconds=seconds)


def rfc3339(when: datetime) -> str:
    # GCE writes timestamps with milliseconds and the zone offset, e.g. "2026-11-30T14:02:03.123-08:00".
    return when.astimezone(UTC).isoformat(timespec="milliseconds")


def report(phase: str, seconds: float, detail: str = "", boot_id: str = "boot-1") -> str:
    """A report value as the VM writes it (the shared contract's own formatter)."""
    return boot_protocol.format_report(boot_protocol.Report(phase, at(seconds), boot_id, detail))


@dataclass
class FakeMember:
    name: str
    zone: str
    status: str | None = "RUNNING"
    """``instanceStatus``; None while the group has not created the VM (CREATING after a stockout)."""
    action: str = "NONE"
    started: float = 0.0
    """``lastStartTimestamp`` as a time of the test's clock."""
    report: str | None = None
    serial: str = ""
    last_attempt: list[dict[str, Any]] = field(default_factory=list)
    """``lastAttempt.errors.errors``: the Operation error shape (code, message, errorDetails)."""


@dataclass
class GroupState:
    members: list[FakeMember] = field(default_factory=list)
    errors: list[dict[str, Any]] = field(default_factory=list)
    """``listErrors`` items, as built by :func:`list_error`."""
    target_size: int = 1


@dataclass
class FakeGroup:
    """A regional group whose state follows ``timeline`` [(from time, state)] on ``clock``."""

    timeline: list[tuple[float, GroupState]]
    clock: Callable[[], float]
    project: str = "proj"
    region: str = "europe-west4"
    name: str = "qwen36-dev"
    requests: list[tuple[float, str, str]] = field(default_factory=list)
    """(clock time, HTTP verb, path) of every request."""
    _lock: threading.Lock = field(default_factory=threading.Lock)

    def state(self) -> GroupState:
        now = self.clock()
        current = self.timeline[0][1]
        for start, state in self.timeline:
            if start <= now:
                current = state
        return current

    def record(self, verb: str, path: str) -> None:
        with self._lock:
            self.requests.append((self.clock(), verb, path))

    def reads(self, suffix: str) -> list[float]:
        """Clock times of the requests whose path (without query) ends with ``suffix``."""
        return [t for t, _verb, path in self.requests if urlparse(path).path.endswith(suffix)]

    def instance_url(self, member: FakeMember) -> str:
        return f"{API}/{self.project}/zones/{member.zone}/instances/{member.name}"


def list_error(
    group: FakeGroup, member: FakeMember, code: str, message: str, seconds: float
) -> dict[str, Any]:
    # https://cloud.google.com/compute/docs/reference/rest/v1/regionInstanceGroupManagers/listErrors
    # items[]: {error: {code, message}, instanceActionDetails: {action, instance, version}, timestamp}
    return {
        "error": {"code": code, "message": message},
        "instanceActionDetails": {
            "action": "CREATING",
            "instance": group.instance_url(member),
            "version": {
                "instanceTemplate": f"{API}/{group.project}/regions/{group.region}/instanceTemplates/t-1"
            },
        },
        "timestamp": rfc3339(at(seconds)),
    }


def stockout(
    group: FakeGroup, member: FakeMember, seconds: float, *, zones_available: str = ""
) -> dict[str, Any]:
    code = "ZONE_RESOURCE_POOL_EXHAUSTED_WITH_DETAILS" if zones_available else "ZONE_RESOURCE_POOL_EXHAUSTED"
    message = STOCKOUT_MESSAGE.format(project=group.project, zone=member.zone)
    return list_error(group, member, code, message, seconds)


def attempt_error(code: str, message: str, details: list[dict[str, Any]] | None = None) -> dict[str, Any]:
    # lastAttempt.errors.errors[] is the Operation error shape:
    # https://cloud.google.com/compute/docs/reference/rest/v1/regionInstanceGroupManagers/listManagedInstances
    # errorDetails[] carry errorInfo {reason, domain, metadatas} and quotaInfo {metricName, limitName,
    # dimensions, limit}: https://cloud.google.com/compute/docs/reference/rest/v1/regionOperations
    error: dict[str, Any] = {"code": code, "message": message}
    if details:
        error["errorDetails"] = details
    return error


def _handler(group: FakeGroup) -> type[BaseHTTPRequestHandler]:
    base = f"{PREFIX}{group.project}"
    manager = f"{base}/regions/{group.region}/instanceGroupManagers/{group.name}"

    class Handler(BaseHTTPRequestHandler):
        def log_message(self, format: str, *args: object) -> None:
            pass

        def _json(self, status: int, body: dict[str, object]) -> None:
            data = json.dumps(body).encode()
            self.send_response(status)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(data)))
            self.end_headers()
            self.wfile.write(data)

        def _not_found(self, what: str) -> None:
            # https://cloud.google.com/compute/docs/reference/rest/v1 (errors: the JSON error body)
            message = f"The resource '{what}' was not found"
            self._json(404, {"error": {"code": 404, "message": message, "errors": [{"reason": "notFound"}]}})

        def do_POST(self) -> None:
            url = urlparse(self.path)
            group.record("POST", self.path)
            length = int(self.headers.get("Content-Length") or 0)
            self.rfile.read(length)
            if url.path == f"{manager}/listManagedInstances":
                self._managed_instances()
            else:
                self._not_found(url.path)

        def do_GET(self) -> None:
            url = urlparse(self.path)
            query = parse_qs(url.query)
            group.record("GET", self.path)
            if url.path == manager:
                # The fields the gate reads: https://cloud.google.com/compute/docs/reference/rest/v1/regionInstanceGroupManagers/get
                body = {
                    "kind": "compute#instanceGroupManager",
                    "name": group.name,
                    "targetSize": group.state().target_size,
                }
                self._json(200, body)
                return
            if url.path == f"{manager}/listErrors":
                # https://cloud.google.com/compute/docs/reference/rest/v1/regionInstanceGroupManagers/listErrors
                self._json(200, {"items": group.state().errors})
                return
            member, rest = self._member(url.path)
            if member is None:
                self._not_found(url.path)
            elif rest == "":
                self._instance(member)
            elif rest == "/getGuestAttributes":
                self._guest_attributes(member, query.get("queryPath", [""])[0])
            elif rest == "/serialPort":
                # https://cloud.google.com/compute/docs/reference/rest/v1/instances/getSerialPortOutput
                body = {
                    "kind": "compute#serialPortOutput",
                    "contents": member.serial,
                    "start": "0",
                    "next": "0",
                }
                self._json(200, body)
            else:
                self._not_found(url.path)

        def _member(self, path: str) -> tuple[FakeMember | None, str]:
            for member in group.state().members:
                prefix = f"{base}/zones/{member.zone}/instances/{member.name}"
                if member.status is not None and (path == prefix or path.startswith(prefix + "/")):
                    return member, path[len(prefix) :]
            return None, ""

        def _managed_instances(self) -> None:
            # https://cloud.google.com/compute/docs/reference/rest/v1/regionInstanceGroupManagers/listManagedInstances
            # managedInstances[]: {instance, id, instanceStatus, currentAction, name, version, lastAttempt}
            items = []
            for i, member in enumerate(group.state().members):
                item: dict[str, Any] = {
                    "instance": group.instance_url(member),
                    "id": str(1000 + i),
                    "currentAction": member.action,
                    "name": member.name,
                    "version": {"name": "primary"},
                }
                if member.status is not None:
                    item["instanceStatus"] = member.status
                if member.last_attempt:
                    item["lastAttempt"] = {"errors": {"errors": member.last_attempt}}
                items.append(item)
            self._json(200, {"managedInstances": items})

        def _instance(self, member: FakeMember) -> None:
            # https://cloud.google.com/compute/docs/reference/rest/v1/instances/get
            # (status, lastStartTimestamp in RFC 3339 text)
            body = {
                "kind": "compute#instance",
                "name": member.name,
                "zone": f"{API}/{group.project}/zones/{member.zone}",
                "status": member.status,
                "lastStartTimestamp": rfc3339(at(member.started)),
            }
            self._json(200, body)

        def _guest_attributes(self, member: FakeMember, query_path: str) -> None:
            # https://cloud.google.com/compute/docs/reference/rest/v1/instances/getGuestAttributes
            # {kind, queryPath, queryValue: {items: [{namespace, key, value}]}}; 404 before any write.
            if member.report is None or query_path != f"{boot_protocol.NAMESPACE}/":
                self._not_found(f"{self.path}")
                return
            items = [
                {
                    "namespace": boot_protocol.NAMESPACE,
                    "key": boot_protocol.KEY_REPORT,
                    "value": member.report,
                }
            ]
            self._json(
                200,
                {"kind": "compute#guestAttributes", "queryPath": query_path, "queryValue": {"items": items}},
            )

    return Handler


@contextmanager
def fake_compute_api(group: FakeGroup) -> Iterator[str]:
    """Serves ``group`` on a free loopback port; yields the endpoint for ``ClientOptions(api_endpoint=)``."""
    with serve_on_loopback(_handler(group)) as endpoint:
        yield endpoint


class VirtualClock:
    """Time that moves only when the code under test sleeps: a 20-minute wait runs in moments."""

    def __init__(self) -> None:
        self.now = 0.0
        self._lock = threading.Lock()

    def __call__(self) -> float:
        with self._lock:
            return self.now

    def sleep(self, seconds: float) -> None:
        with self._lock:
            self.now += max(seconds, 0.0)

    def wall(self) -> datetime:
        return at(self())
