"""A loopback Compute API (REST v1) for one regional managed instance group: what autostop, wake
and status call.

It answers the watcher's urllib requests and the google-cloud-compute client (REST transport,
``api_endpoint`` pointed here) alike, with the shapes of the real API's reference pages (cited at
each answer), and records every request (method, path, query, body, headers) for the tests.
"""

from __future__ import annotations

import dataclasses
import itertools
import json
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any
from urllib.parse import parse_qs, urlparse

PREFIX = "/compute/v1"
# How often a serving thread checks for shutdown; http.server's 0.5 s default costs every test
# half a second per server at teardown.
SHUTDOWN_POLL_S = 0.02


@contextmanager
def serve_on_loopback(handler: type[BaseHTTPRequestHandler]) -> Iterator[str]:
    """Serves ``handler`` on a free loopback port in a thread; yields the base URL."""
    server = ThreadingHTTPServer(("127.0.0.1", 0), handler)
    server.daemon_threads = True
    thread = threading.Thread(target=server.serve_forever, args=(SHUTDOWN_POLL_S,), daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}"
    finally:
        server.shutdown()
        server.server_close()
        thread.join()


@dataclass(frozen=True)
class Call:
    method: str
    path: str
    query: dict[str, list[str]]
    body: bytes
    headers: dict[str, str]
    t: float  # time.monotonic() at arrival


@dataclass
class Member:
    """One managed instance as listManagedInstances reports it."""

    name: str
    zone: str
    instance_status: str = "RUNNING"
    current_action: str = "NONE"
    errors: list[dict[str, str]] = field(default_factory=list)
    guest_attributes: dict[str, str] = field(default_factory=dict)
    # instances.get's lastStartTimestamp: the gate counts only reports written after it.
    last_start: str = "2026-11-30T22:00:30.000-00:00"


@dataclass
class FakeGroup:
    project: str = "acme-llm-test"
    region: str = "us-central1"
    name: str = "qwen36-dev"
    target_size: int = 1
    members: list[Member] = field(default_factory=list)
    # Answers for the next resize calls, in order: an HTTP status (error) or None (accepted).
    resize_failures: list[int] = field(default_factory=list)
    # A resize up creates members with this state (a test edits it to play a stockout).
    new_member: Member = field(default_factory=lambda: Member("qwen36-dev-x1b2", "us-central1-b"))
    calls: list[Call] = field(default_factory=list)
    operations: dict[str, dict[str, Any]] = field(default_factory=dict)
    _ids: Iterator[int] = field(default_factory=lambda: itertools.count(1))
    _lock: threading.Lock = field(default_factory=threading.Lock)

    @property
    def path(self) -> str:
        return f"{PREFIX}/projects/{self.project}/regions/{self.region}/instanceGroupManagers/{self.name}"

    @property
    def self_link(self) -> str:
        return f"https://www.googleapis.com{self.path}"

    def resizes(self) -> list[Call]:
        return [c for c in self.calls if c.method == "POST" and c.path == f"{self.path}/resize"]


def _instance_url(project: str, member: Member) -> str:
    return (
        f"https://www.googleapis.com{PREFIX}/projects/{project}/zones/{member.zone}/instances/{member.name}"
    )


def _handler(group: FakeGroup) -> type[BaseHTTPRequestHandler]:
    class Handler(BaseHTTPRequestHandler):
        def log_message(self, format: str, *args: object) -> None:
            pass

        def _json(self, status: int, body: dict[str, Any]) -> None:
            data = json.dumps(body).encode()
            self.send_response(status)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(data)))
            self.end_headers()
            self.wfile.write(data)

        def _error(self, status: int, reason: str, message: str) -> None:
            # The JSON error body of Google APIs: https://cloud.google.com/apis/design/errors#http_mapping
            self._json(
                status, {"error": {"code": status, "message": message, "errors": [{"reason": reason}]}}
            )

        def _record(self) -> tuple[str, dict[str, list[str]], bytes]:
            url = urlparse(self.path)
            length = int(self.headers.get("Content-Length") or 0)
            body = self.rfile.read(length) if length else b""
            query = parse_qs(url.query)
            with group._lock:
                group.calls.append(
                    Call(self.command, url.path, query, body, dict(self.headers.items()), time.monotonic())
                )
            return url.path, query, body

        def do_GET(self) -> None:
            path, query, _ = self._record()
            ops = f"{PREFIX}/projects/{group.project}/regions/{group.region}/operations/"
            if path == group.path:
                self._json(200, self._group())
            elif path.startswith(ops):
                self._operation(path, path[len(ops) :])
            elif path.endswith("/getGuestAttributes"):
                self._guest_attributes(path, query.get("queryPath", [""])[0])
            elif path == f"{group.path}/listErrors":
                # No errors: https://cloud.google.com/compute/docs/reference/rest/v1/regionInstanceGroupManagers/listErrors
                self._json(200, {"items": []})
            elif "/instances/" in path and self._instance(path):
                pass
            else:
                self._error(404, "notFound", f"The resource '{path}' was not found")

        def do_POST(self) -> None:
            path, query, _ = self._record()
            ops = f"{PREFIX}/projects/{group.project}/regions/{group.region}/operations/"
            if path.startswith(ops) and path.endswith("/wait"):
                self._operation(path, path[len(ops) : -len("/wait")])
            elif path == f"{group.path}/resize":
                self._resize(int(query["size"][0]))
            elif path == f"{group.path}/listManagedInstances":
                self._list_managed_instances()
            else:
                self._error(404, "notFound", f"The resource '{path}' was not found")

        def _operation(self, path: str, name: str) -> None:
            # regionOperations.get and .wait both answer the Operation; wait returns once it is DONE.
            # https://cloud.google.com/compute/docs/reference/rest/v1/regionOperations/wait
            op = group.operations.get(name)
            if op is None:
                self._error(404, "notFound", f"The resource '{path}' was not found")
                return
            op.update(status="DONE", progress=100, endTime="2026-11-30T22:00:05.000-08:00")
            self._json(200, op)

        def _group(self) -> dict[str, Any]:
            # https://cloud.google.com/compute/docs/reference/rest/v1/regionInstanceGroupManagers#resource:-instancegroupmanager
            actions = {
                a: sum(m.current_action == a.upper() for m in group.members)
                for a in ("none", "creating", "recreating", "deleting", "verifying")
            }
            return {
                "kind": "compute#instanceGroupManager",
                "id": "4102349781350275419",
                "name": group.name,
                "region": f"https://www.googleapis.com{PREFIX}/projects/{group.project}/regions/{group.region}",
                "baseInstanceName": group.name,
                "targetSize": group.target_size,
                "currentActions": actions,
                "status": {"isStable": all(m.current_action == "NONE" for m in group.members)},
                "selfLink": group.self_link,
            }

        def _resize(self, size: int) -> None:
            # https://cloud.google.com/compute/docs/reference/rest/v1/regionInstanceGroupManagers/resize
            with group._lock:
                failure = group.resize_failures.pop(0) if group.resize_failures else None
            if failure is not None:
                self._error(
                    failure, "backendError", "Internal error. Please try again or contact Google Support."
                )
                return
            group.target_size = size
            if size == 0:
                group.members.clear()
            while len(group.members) < size:
                group.members.append(
                    dataclasses.replace(
                        group.new_member,
                        errors=list(group.new_member.errors),
                        guest_attributes=dict(group.new_member.guest_attributes),
                    )
                )
            op_id = next(group._ids)
            name = f"operation-1764568800000-{op_id:04d}-resize"
            # The Operation resource: https://cloud.google.com/compute/docs/reference/rest/v1/regionOperations#resource:-operation
            op = {
                "kind": "compute#operation",
                "id": str(7000 + op_id),
                "name": name,
                "operationType": "compute.instanceGroupManagers.resize",
                "targetLink": group.self_link,
                "targetId": "4102349781350275419",
                "status": "RUNNING",
                "user": "qwen36-dev@acme-llm-test.iam.gserviceaccount.com",
                "progress": 0,
                "insertTime": "2026-11-30T22:00:00.000-08:00",
                "startTime": "2026-11-30T22:00:00.100-08:00",
                "selfLink": (
                    f"https://www.googleapis.com{PREFIX}/projects/{group.project}/regions/{group.region}"
                    f"/operations/{name}"
                ),
                "region": f"https://www.googleapis.com{PREFIX}/projects/{group.project}/regions/{group.region}",
            }
            group.operations[name] = dict(op)
            self._json(200, op)

        def _list_managed_instances(self) -> None:
            # https://cloud.google.com/compute/docs/reference/rest/v1/regionInstanceGroupManagers/listManagedInstances
            listed = []
            for m in group.members:
                item: dict[str, Any] = {
                    "instance": _instance_url(group.project, m),
                    "name": m.name,
                    "instanceStatus": m.instance_status,
                    "currentAction": m.current_action,
                }
                if m.errors:
                    item["lastAttempt"] = {"errors": {"errors": m.errors}}
                listed.append(item)
            self._json(200, {"managedInstances": listed})

        def _instance(self, path: str) -> bool:
            # The fields the gate reads: https://cloud.google.com/compute/docs/reference/rest/v1/instances/get
            member = next(
                (m for m in group.members if path.endswith(f"/zones/{m.zone}/instances/{m.name}")), None
            )
            if member is None:
                return False
            self._json(
                200,
                {
                    "kind": "compute#instance",
                    "name": member.name,
                    "status": member.instance_status,
                    "lastStartTimestamp": member.last_start,
                },
            )
            return True

        def _guest_attributes(self, path: str, query_path: str) -> None:
            # https://cloud.google.com/compute/docs/reference/rest/v1/instances/getGuestAttributes
            name = path.rsplit("/", 2)[-2]
            member = next((m for m in group.members if m.name == name), None)
            namespace = query_path.rstrip("/")
            if member is None or not member.guest_attributes:
                self._error(404, "notFound", f"The resource '{path}' was not found")
                return
            items = [
                {"namespace": namespace, "key": k, "value": v} for k, v in member.guest_attributes.items()
            ]
            self._json(
                200,
                {"kind": "compute#guestAttributes", "queryPath": query_path, "queryValue": {"items": items}},
            )

    return Handler


@contextmanager
def fake_group_api(group: FakeGroup) -> Iterator[str]:
    """Serves ``group``; yields the endpoint (``<endpoint>/compute/v1`` is the REST base)."""
    with serve_on_loopback(_handler(group)) as endpoint:
        yield endpoint
