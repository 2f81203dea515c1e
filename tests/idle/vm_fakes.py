"""Loopback stand-ins for what the watcher reaches from the VM besides Compute: the metadata server
and Cloud Logging's ``entries:write``.
"""

from __future__ import annotations

import json
import threading
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler
from typing import Any
from urllib.parse import parse_qs

from tests.harness.loopback import serve_on_loopback

TOKEN = "ya29.fake-vm-token"


@dataclass
class FakeMetadata:
    """The instance's metadata as a managed member sees it (an empty value is an unset key: 404)."""

    # GCE sets created-by on every managed instance, with the project NUMBER.
    # https://cloud.google.com/compute/docs/instance-groups/getting-info-about-migs#checking_if_a_vm_instance_is_part_of_a_mig
    created_by: str = "projects/123456789012/regions/us-central1/instanceGroupManagers/qwen36-dev"
    project_id: str = "acme-llm-test"
    instance_id: str = "5521896410023442211"
    zone: str = "projects/123456789012/zones/us-central1-b"
    token_expires_in: int = 3599
    identity: Callable[[str], str] | None = None
    """Mints the service account's ID token for an audience (GET .../identity?audience=...):
    https://cloud.google.com/compute/docs/instances/verifying-instance-identity#request_signature"""
    audiences: list[str] = field(default_factory=list)
    reads: list[str] = field(default_factory=list)
    writes: list[tuple[str, str]] = field(default_factory=list)
    refused: int = 0
    _lock: threading.Lock = field(default_factory=threading.Lock)

    def idle_reports(self) -> list[str]:
        return [value for key, value in self.writes if key == "qwen36/idle"]


def _metadata_handler(md: FakeMetadata) -> type[BaseHTTPRequestHandler]:
    base = "/computeMetadata/v1/"
    values = {
        "instance/attributes/created-by": lambda: md.created_by,
        "project/project-id": lambda: md.project_id,
        "instance/id": lambda: md.instance_id,
        "instance/zone": lambda: md.zone,
        # https://cloud.google.com/compute/docs/access/authenticate-workloads#applications
        "instance/service-accounts/default/token": lambda: json.dumps(
            {"access_token": TOKEN, "expires_in": md.token_expires_in, "token_type": "Bearer"}
        ),
    }

    class Handler(BaseHTTPRequestHandler):
        def log_message(self, format: str, *args: object) -> None:
            pass

        def _reply(self, status: int, body: str = "") -> None:
            data = body.encode()
            self.send_response(status)
            self.send_header("Content-Length", str(len(data)))
            self.end_headers()
            self.wfile.write(data)

        def _allowed(self) -> bool:
            # The real server refuses any request without this header.
            # https://cloud.google.com/compute/docs/metadata/querying-metadata
            if self.headers.get("Metadata-Flavor") != "Google":
                md.refused += 1
                self._reply(403, "Missing Metadata-Flavor:Google header.")
                return False
            return True

        def do_GET(self) -> None:
            if not self._allowed():
                return
            key, _, query = self.path.partition("?")
            key = key.removeprefix(base)
            with md._lock:
                md.reads.append(key)
            value = values[key]() if key in values else ""
            if key == "instance/service-accounts/default/identity" and md.identity is not None:
                audience = parse_qs(query).get("audience", [""])[0]
                md.audiences.append(audience)
                value = md.identity(audience) if audience else ""
            if value:
                self._reply(200, value)
            else:
                self._reply(404, "not found")

        def do_PUT(self) -> None:
            if not self._allowed():
                return
            length = int(self.headers.get("Content-Length") or 0)
            value = self.rfile.read(length).decode()
            key = self.path.removeprefix(base + "instance/guest-attributes/")
            with md._lock:
                md.writes.append((key, value))
            self._reply(200)

    return Handler


@dataclass
class FakeLogging:
    entries: list[dict[str, Any]] = field(default_factory=list)
    auth: list[str] = field(default_factory=list)


def _logging_handler(sink: FakeLogging) -> type[BaseHTTPRequestHandler]:
    class Handler(BaseHTTPRequestHandler):
        def log_message(self, format: str, *args: object) -> None:
            pass

        def do_POST(self) -> None:
            # https://cloud.google.com/logging/docs/reference/v2/rest/v2/entries/write: the response
            # body of a successful write is an empty JSON object.
            length = int(self.headers.get("Content-Length") or 0)
            body = json.loads(self.rfile.read(length))
            status = 404
            if self.path == "/v2/entries:write":
                sink.entries.extend(body["entries"])
                sink.auth.append(self.headers.get("Authorization", ""))
                status = 200
            data = b"{}"
            self.send_response(status)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(data)))
            self.end_headers()
            self.wfile.write(data)

    return Handler


@contextmanager
def fake_metadata(md: FakeMetadata) -> Iterator[str]:
    with serve_on_loopback(_metadata_handler(md)) as url:
        yield url


@contextmanager
def fake_logging(sink: FakeLogging) -> Iterator[str]:
    """Yields the Logging REST base (``<url>/v2``)."""
    with serve_on_loopback(_logging_handler(sink)) as url:
        yield f"{url}/v2"
