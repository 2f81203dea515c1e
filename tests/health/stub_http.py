"""Tiny local HTTP servers that answer /health wrongly: what the gate must never call ready."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from http.server import BaseHTTPRequestHandler

from tests.harness.loopback import serve_on_loopback


@contextmanager
def stub_server(status: int, body: bytes, content_type: str = "application/json") -> Iterator[str]:
    """Answers every GET with ``status`` and ``body``; yields the base URL."""

    class Handler(BaseHTTPRequestHandler):
        def log_message(self, format: str, *args: object) -> None:
            pass

        def do_GET(self) -> None:
            self.send_response(status)
            self.send_header("Content-Type", content_type)
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

    with serve_on_loopback(Handler) as url:
        yield url
