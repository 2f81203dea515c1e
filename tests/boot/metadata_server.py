"""A loopback stand-in for the GCE metadata server: guest attributes (PUT and GET) and an access token.

Like the real one it refuses requests without ``Metadata-Flavor: Google``.
https://cloud.google.com/compute/docs/metadata/querying-metadata
Every guest-attribute write (every PUT, whoever makes it: the boot script or the model download's
progress) is kept with its arrival time and writer, so tests read the whole sequence of reports a
boot made, count the writes against GCE's documented rate (tests/boot/rate.py), and cut the power
the moment a given phase is reported.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

GUEST_ATTRIBUTES = "/computeMetadata/v1/instance/guest-attributes/"
TOKEN = "/computeMetadata/v1/instance/service-accounts/default/token"


@dataclass(frozen=True)
class Write:
    t: float
    namespace: str
    key: str
    value: str
    agent: str = ""
    """The writer's User-Agent: curl for the boot script, the fetch tool's own for its progress."""


class MetadataServer:
    def __init__(self) -> None:
        self.writes: list[Write] = []
        self.attributes: dict[tuple[str, str], str] = {}
        self.on_write: Callable[[Write], None] | None = None
        self.refused = 0
        self._lock = threading.Lock()
        self._httpd = ThreadingHTTPServer(("127.0.0.1", 0), self._handler())
        self._httpd.daemon_threads = True
        self._thread = threading.Thread(target=self._httpd.serve_forever, daemon=True)

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self._httpd.server_address[1]}"

    def __enter__(self) -> MetadataServer:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._httpd.shutdown()
        self._httpd.server_close()

    def _handler(self) -> type[BaseHTTPRequestHandler]:
        server = self

        class Handler(BaseHTTPRequestHandler):
            def _reply(self, status: int, body: bytes = b"", content_type: str = "text/plain") -> None:
                self.send_response(status)
                self.send_header("Content-Type", content_type)
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

            def _flavored(self) -> bool:
                if self.headers.get("Metadata-Flavor") == "Google":
                    return True
                server.refused += 1
                self._reply(403, b"Missing Metadata-Flavor:Google header.")
                return False

            def do_PUT(self) -> None:
                if not self._flavored():
                    return
                length = int(self.headers.get("Content-Length") or 0)
                value = self.rfile.read(length).decode()
                if not self.path.startswith(GUEST_ATTRIBUTES):
                    self._reply(404)
                    return
                namespace, _, key = self.path[len(GUEST_ATTRIBUTES) :].partition("/")
                write = Write(time.time(), namespace, key, value, self.headers.get("User-Agent", ""))
                with server._lock:
                    server.writes.append(write)
                    server.attributes[(namespace, key)] = value
                if server.on_write is not None:
                    server.on_write(write)
                self._reply(200)

            def do_GET(self) -> None:
                if not self._flavored():
                    return
                if self.path == TOKEN:
                    body = b'{"access_token":"sandbox-token","expires_in":3599,"token_type":"Bearer"}'
                    self._reply(200, body, "application/json")
                    return
                namespace, _, key = self.path[len(GUEST_ATTRIBUTES) :].partition("/")
                value = server.attributes.get((namespace, key))
                if not self.path.startswith(GUEST_ATTRIBUTES) or value is None:
                    self._reply(404)
                    return
                self._reply(200, value.encode())

            def log_message(self, format: str, *args: object) -> None:
                pass

        return Handler
