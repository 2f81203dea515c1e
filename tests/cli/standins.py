"""Loopback stand-ins for what the CLI talks to and this machine lacks: a llama-server that answers
wrongly, a `pulumi` executable, a server that accepts and never answers.

Shapes: llama-server's /health is ``200 {"status": "ok"}`` once loaded, and a chat completion carries
``timings`` (docs' facts, "llama.cpp (the pinned build)"); ``pulumi stack output --json`` prints the
outputs as one JSON object and exits non-zero with ``error: ...`` on stderr for an unknown stack
(https://www.pulumi.com/docs/iac/cli/commands/pulumi_stack_output/).
"""

from __future__ import annotations

import contextlib
import json
import socket
import threading
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from http.server import BaseHTTPRequestHandler
from pathlib import Path
from typing import Any

from tests.harness.loopback import serve_on_loopback

GOOD_TIMINGS = {
    "prompt_n": 12,
    "prompt_ms": 20.0,
    "prompt_per_second": 600.0,
    "predicted_n": 16,
    "predicted_ms": 160.0,
    "predicted_per_second": 100.0,
}
HTML = b"<!doctype html><html><head><title>Sign in</title></head><body>Please sign in</body></html>"


def completion(timings: dict[str, Any] | None = None) -> bytes:
    body = {
        "choices": [
            {"index": 0, "message": {"role": "assistant", "content": "ok"}, "finish_reason": "length"}
        ],
        "timings": GOOD_TIMINGS if timings is None else timings,
    }
    return json.dumps(body).encode()


@contextmanager
def fake_llama(
    chat: bytes, content_type: str = "application/json", on_chat: Callable[[], None] | None = None
) -> Iterator[str]:
    """/health ok; every POST answers 200 with ``chat`` (``on_chat`` runs first)."""

    class Handler(BaseHTTPRequestHandler):
        def log_message(self, format: str, *args: object) -> None:
            pass

        def _send(self, body: bytes, kind: str) -> None:
            # The client may be gone (interrupted, timed out): nothing to answer then.
            with contextlib.suppress(OSError):
                self.send_response(200)
                self.send_header("Content-Type", kind)
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

        def do_GET(self) -> None:
            self._send(b'{"status":"ok"}', "application/json")

        def do_POST(self) -> None:
            self.rfile.read(int(self.headers.get("Content-Length") or 0))
            if on_chat is not None:
                on_chat()
            self._send(chat, content_type)

    with serve_on_loopback(Handler) as url:
        yield url


@contextmanager
def never_answers() -> Iterator[str]:
    """A port that accepts connections and never sends a byte: the bounded timeouts must end it."""
    listener = socket.socket()
    listener.bind(("127.0.0.1", 0))
    listener.listen(64)
    held: list[socket.socket] = []
    stop = threading.Event()

    def accept() -> None:
        listener.settimeout(0.05)
        while not stop.is_set():
            try:
                conn, _ = listener.accept()
            except OSError:
                continue
            held.append(conn)

    thread = threading.Thread(target=accept, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{listener.getsockname()[1]}"
    finally:
        stop.set()
        thread.join()
        for conn in held:
            conn.close()
        listener.close()


def closed_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def fake_pulumi(bin_dir: Path, *, outputs: dict[str, Any] | None = None, fail: str | None = None) -> Path:
    """A `pulumi` on PATH: prints ``outputs`` for `stack output --json` (and gcp:project for
    `config get`), or fails every command with ``fail`` on stderr and exit 255."""
    bin_dir.mkdir(parents=True, exist_ok=True)
    script = bin_dir / "pulumi"
    if fail is not None:
        script.write_text(f"#!/bin/sh\necho {json.dumps(fail)} >&2\nexit 255\n")
    else:
        doc = json.dumps(outputs or {})
        script.write_text(
            "#!/bin/sh\n"
            'case "$*" in\n'
            '  "config get gcp:project"*) echo acme-llm-test ;;\n'
            # `qwen36 check` asks the CLI's version (qwen36/check/pulumi_version.py): a current one.
            "  version) echo v3.210.0 ;;\n"
            f"  *) cat <<'EOF'\n{doc}\nEOF\n ;;\n"
            "esac\n"
        )
    script.chmod(0o755)
    return script


# Wrong answers with a 200, as a captive portal, a proxy's error page or a broken middlebox sends
# them in place of any API's JSON (issue 29: each raised inside a client library). No API documents
# these; they are what the network can put in front of one.
MALFORMED_200S: dict[str, tuple[bytes, str]] = {
    "html": (HTML, "text/html"),
    "empty": (b"", "application/json"),
    "binary": (b"\x00\xff\xfe\x80junk", "application/octet-stream"),
    "list": (b"[1, 2, 3]", "application/json"),
    "null": (b"null", "application/json"),
    "wrong-shape": (
        b'{"kind": "compute#operation", "items": "not a list", "targetSize": "many"}',
        "application/json",
    ),
}


@contextmanager
def answering(
    routes: dict[str, tuple[int, bytes, str]], default: tuple[int, bytes, str] = (200, b"", "text/plain")
) -> Iterator[str]:
    """Every request answered by the first route whose key the path ends with (or ``default``), for
    any method: a stand-in for an API that answers wrongly (a malformed 200) or refuses."""

    class Handler(BaseHTTPRequestHandler):
        def log_message(self, format: str, *args: object) -> None:
            pass

        def _answer(self) -> None:
            self.rfile.read(int(self.headers.get("Content-Length") or 0))
            path = self.path.split("?", 1)[0]
            status, body, kind = next(
                (answer for suffix, answer in routes.items() if path.endswith(suffix)), default
            )
            with contextlib.suppress(OSError):
                self.send_response(status)
                self.send_header("Content-Type", kind)
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

        do_GET = do_POST = do_PUT = do_PATCH = do_DELETE = _answer

    with serve_on_loopback(Handler) as url:
        yield url
