"""A loopback stand-in for the two Google surfaces the metrics publisher talks to.

- The metadata server (``/computeMetadata/v1/...``): answers only with ``Metadata-Flavor: Google``,
  like the real one (https://cloud.google.com/compute/docs/metadata/querying-metadata); the zone is
  the full ``projects/<number>/zones/<zone>`` path it really returns; the token document has
  ``access_token``, ``expires_in``, ``token_type``
  (https://cloud.google.com/compute/docs/access/authenticate-workloads#applications).
- Cloud Monitoring's ``POST /v3/projects/{project}/timeSeries``: records each request and answers
  200 with an empty JSON object, the documented success response ("If successful, the response
  body is an empty JSON object",
  https://cloud.google.com/monitoring/api/ref_v3/rest/v3/projects.timeSeries/create).
"""

from __future__ import annotations

import json
import re
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler
from typing import Any

from tests.harness.loopback import serve_on_loopback

PROJECT_ID = "acme-llm-test"
PROJECT_NUMBER = "123456789012"
INSTANCE_ID = "4567890123456789012"
ZONE = "us-central1-b"
TOKEN = "ya29.fake-token"
_CREATE = re.compile(r"^/v3/projects/(?P<project>[^/]+)/timeSeries$")

METADATA = {
    "project/project-id": PROJECT_ID,
    "instance/id": INSTANCE_ID,
    "instance/zone": f"projects/{PROJECT_NUMBER}/zones/{ZONE}",
    "instance/service-accounts/default/token": json.dumps(
        {"access_token": TOKEN, "expires_in": 3599, "token_type": "Bearer"}
    ),
}


@dataclass
class Recorded:
    project: str
    authorization: str
    content_type: str
    body: dict[str, Any]


@dataclass
class GoogleFake:
    url: str = ""
    posts: list[Recorded] = field(default_factory=list)
    metadata_without_flavor: int = 0
    lock: threading.Lock = field(default_factory=threading.Lock)
    posted: threading.Event = field(default_factory=threading.Event)


@contextmanager
def google_fake() -> Iterator[GoogleFake]:
    fake = GoogleFake()

    class Handler(BaseHTTPRequestHandler):
        def log_message(self, format: str, *args: object) -> None:
            pass

        def _send(self, status: int, body: bytes, content_type: str = "application/json") -> None:
            self.send_response(status)
            self.send_header("Content-Type", content_type)
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def do_GET(self) -> None:
            prefix = "/computeMetadata/v1/"
            if not self.path.startswith(prefix):
                self._send(404, b"{}")
                return
            if self.headers.get("Metadata-Flavor") != "Google":
                with fake.lock:
                    fake.metadata_without_flavor += 1
                self._send(403, b"Missing Metadata-Flavor:Google header.", "text/html")
                return
            value = METADATA.get(self.path[len(prefix) :])
            if value is None:
                self._send(404, b"not found", "text/html")
            else:
                self._send(200, value.encode(), "application/text")

        def do_POST(self) -> None:
            match = _CREATE.match(self.path)
            length = int(self.headers.get("Content-Length") or 0)
            raw = self.rfile.read(length)
            if not match:
                self._send(404, b"{}")
                return
            record = Recorded(
                project=match["project"],
                authorization=self.headers.get("Authorization", ""),
                content_type=self.headers.get("Content-Type", ""),
                body=json.loads(raw),
            )
            with fake.lock:
                fake.posts.append(record)
            fake.posted.set()
            self._send(200, b"{}")

    with serve_on_loopback(Handler) as url:
        fake.url = url
        yield fake
