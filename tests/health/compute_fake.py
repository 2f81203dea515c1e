"""A local HTTP server playing the three Compute API (REST v1) calls the health gate makes.

The deployer's machine has no GCP here, so the real google-cloud-compute client is pointed at this
server (``api_endpoint``) and exercised end to end: URL layout, query parameters, JSON decoding and
error mapping are the client library's own.
https://cloud.google.com/compute/docs/reference/rest/v1/instances/getGuestAttributes
"""

from __future__ import annotations

import json
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler
from urllib.parse import parse_qs, urlparse

from infra import boot_protocol
from tests.health.stub_http import serve_on_loopback

PREFIX = "/compute/v1/projects/"


@dataclass
class FakeVm:
    """What the fake API reports: each guest-attribute read advances one step of ``reports``."""

    project: str = "proj"
    zone: str = "europe-west4-a"
    name: str = "qwen36-server"
    # (phase, detail) per read; None = nothing written yet (the API answers 404).
    reports: list[tuple[str, str] | None] = field(default_factory=list)
    serial: str = ""
    status: str = "RUNNING"
    requests: list[str] = field(default_factory=list)
    _step: int = 0
    _lock: threading.Lock = field(default_factory=threading.Lock)

    def next_report(self) -> tuple[str, str] | None:
        with self._lock:
            if not self.reports:
                return None
            report = self.reports[min(self._step, len(self.reports) - 1)]
            self._step += 1
            return report


def _handler(vm: FakeVm) -> type[BaseHTTPRequestHandler]:
    base = f"{PREFIX}{vm.project}/zones/{vm.zone}/instances/{vm.name}"

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
            message = f"The resource '{what}' was not found"
            self._json(404, {"error": {"code": 404, "message": message, "errors": [{"reason": "notFound"}]}})

        def do_GET(self) -> None:
            url = urlparse(self.path)
            query = parse_qs(url.query)
            vm.requests.append(self.path)
            if url.path == f"{base}/getGuestAttributes":
                self._guest_attributes(query.get("queryPath", [""])[0])
            elif url.path == f"{base}/serialPort":
                self._json(200, {"kind": "compute#serialPortOutput", "contents": vm.serial, "start": "0"})
            elif url.path == base:
                self._json(200, {"kind": "compute#instance", "name": vm.name, "status": vm.status})
            else:
                self._not_found(url.path)

        def _guest_attributes(self, query_path: str) -> None:
            report = vm.next_report()
            if report is None or query_path != f"{boot_protocol.NAMESPACE}/":
                self._not_found(f"{base}/guestAttributes/{query_path}")
                return
            phase, detail = report
            items = [
                {"namespace": boot_protocol.NAMESPACE, "key": boot_protocol.KEY_PHASE, "value": phase},
                {"namespace": boot_protocol.NAMESPACE, "key": boot_protocol.KEY_DETAIL, "value": detail},
            ]
            self._json(
                200,
                {"kind": "compute#guestAttributes", "queryPath": query_path, "queryValue": {"items": items}},
            )

    return Handler


@contextmanager
def fake_compute_api(vm: FakeVm) -> Iterator[str]:
    """Serves ``vm`` on a free loopback port; yields the endpoint for ``ClientOptions(api_endpoint=...)``."""
    with serve_on_loopback(_handler(vm)) as endpoint:
        yield endpoint
