"""A local stand-in for the fleet's load balancer, and for the Compute API's view of its group.

The reverse proxy forwards each request to the member with the fewest requests in flight (the
backend service's LEAST_REQUEST policy), reads the whole answer, and passes it on. Like Google's
load balancer it does not retry: a member that fails before its answer is complete makes the
request a 502, and a member that refused a connection is taken out of rotation (the health check's
job, done here at once).
https://cloud.google.com/load-balancing/docs/https/troubleshooting-ext-https#http_502_errors

The Compute API stand-in answers ``regionInstanceGroupManagers.listManagedInstances`` (POST) with
the documented ``{"managedInstances": [{"instance", "instanceStatus", "currentAction",
"instanceHealth": [{"healthCheck", "detailedHealthState"}]}]}`` shape.
https://cloud.google.com/compute/docs/reference/rest/v1/regionInstanceGroupManagers/listManagedInstances
"""

from __future__ import annotations

import http.client
import json
import re
import threading
from collections import Counter
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler
from typing import Any
from urllib.parse import urlsplit

from tests.harness.loopback import serve_on_loopback

BACKEND_TIMEOUT_S = 120.0
_HOP_BY_HOP = {"connection", "keep-alive", "transfer-encoding", "content-length", "host"}


@dataclass
class Member:
    url: str
    up: bool = True
    in_flight: int = 0


@dataclass
class Balancer:
    members: list[Member]
    url: str = ""
    statuses: Counter[str] = field(default_factory=Counter)
    received: Counter[str] = field(default_factory=Counter)
    lock: threading.Lock = field(default_factory=threading.Lock)

    def pick(self) -> Member | None:
        with self.lock:
            live = [m for m in self.members if m.up]
            if not live:
                return None
            member = min(live, key=lambda m: m.in_flight)
            member.in_flight += 1
            return member

    def release(self, member: Member, *, failed_to_connect: bool) -> None:
        with self.lock:
            member.in_flight -= 1
            if failed_to_connect:
                member.up = False


@contextmanager
def load_balancer(member_urls: list[str]) -> Iterator[Balancer]:
    balancer = Balancer([Member(u) for u in member_urls])

    class Handler(BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"

        def log_message(self, format: str, *args: object) -> None:
            pass

        def _answer(self, status: int, body: bytes, headers: list[tuple[str, str]] = ()) -> None:  # type: ignore[assignment]
            self.send_response(status)
            for key, value in headers:
                if key.lower() not in _HOP_BY_HOP:
                    self.send_header(key, value)
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)
            with balancer.lock:
                balancer.statuses[f"{self.command} {self.path} {status}"] += 1

        def _forward(self) -> None:
            length = int(self.headers.get("Content-Length") or 0)
            body = self.rfile.read(length) if length else None
            with balancer.lock:
                balancer.received[f"{self.command} {self.path}"] += 1
            member = balancer.pick()
            if member is None:
                self._answer(503, b"no healthy upstream")
                return
            target = urlsplit(member.url)
            connection = http.client.HTTPConnection(target.hostname, target.port, timeout=BACKEND_TIMEOUT_S)
            connected = False
            try:
                connection.connect()
                connected = True
                headers = {k: v for k, v in self.headers.items() if k.lower() not in _HOP_BY_HOP}
                connection.request(self.command, self.path, body=body, headers=headers)
                response = connection.getresponse()
                payload = response.read()
            except (OSError, http.client.HTTPException):
                balancer.release(member, failed_to_connect=not connected)
                self._answer(502, b"backend_connection_closed_before_data_sent_to_client")
                return
            finally:
                connection.close()
            balancer.release(member, failed_to_connect=False)
            self._answer(response.status, payload, response.getheaders())

        do_GET = _forward
        do_POST = _forward

    with serve_on_loopback(Handler) as url:
        balancer.url = url
        yield balancer


_LIST = re.compile(
    r"^/compute/v1/projects/[^/]+/regions/[^/]+/instanceGroupManagers/[^/]+/listManagedInstances"
)


@dataclass
class Group:
    """The members the fake Compute API lists; tests change ``members`` as servers die."""

    members: list[dict[str, Any]]
    calls: int = 0
    lock: threading.Lock = field(default_factory=threading.Lock)


def managed_instance(name: str, *, running: bool) -> dict[str, Any]:
    zone = "https://www.googleapis.com/compute/v1/projects/acme/zones/us-central1-a"
    return {
        "instance": f"{zone}/instances/{name}",
        "name": name,
        "instanceStatus": "RUNNING" if running else "TERMINATED",
        "currentAction": "NONE" if running else "RECREATING",
        "instanceHealth": [
            {
                "healthCheck": "https://www.googleapis.com/compute/v1/projects/acme/global/healthChecks/qwen36-dev",
                "detailedHealthState": "HEALTHY" if running else "UNHEALTHY",
            }
        ],
    }


@contextmanager
def compute_api(group: Group) -> Iterator[str]:
    class Handler(BaseHTTPRequestHandler):
        def log_message(self, format: str, *args: object) -> None:
            pass

        def do_POST(self) -> None:
            self.rfile.read(int(self.headers.get("Content-Length") or 0))
            if not _LIST.match(self.path):
                self.send_response(404)
                self.end_headers()
                return
            with group.lock:
                group.calls += 1
                body = json.dumps({"managedInstances": list(group.members)}).encode()
            self.send_response(200)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

    with serve_on_loopback(Handler) as url:
        yield url
