"""A local stand-in for the Hugging Face hub's file downloads, on loopback, for tests.

It serves files the way the hub's resolve URLs do: ``HEAD|GET /<repo>/resolve/<rev>/<file>`` answers
302 with ``X-Linked-Etag`` (the LFS sha256), ``X-Linked-Size``, ``X-Repo-Commit`` and a Location on a
"CDN" path with a signed-looking query; the CDN path serves the bytes with its own ETag, ``Accept-Ranges``,
single ``Range`` requests (206) and ``If-Range`` (a stale validator gets the whole file, 200).
https://huggingface.co/docs/hub/en/api#get-apimodelsrepoidresolverevisionfilename

Faults for tests: ``stall_after(n)`` holds the CDN stream once ``n`` body bytes have gone out in total
(until ``release()``, then the connection drops), ``fail_next(k, status)`` answers the next ``k`` CDN
requests with an error, ``url_ttl_s`` makes CDN URLs expire (403), and ``replace()`` changes a file
under the same URL. Files are read from disk per request, so large files cost no memory.

Used in-process (``with HfServer() as hub: hub.add_file(...)``) or as a process:
``python tests/cache/hf_server.py --port 0 --file owner/repo:model.gguf:/path/to/file``
(prints the base URL, then serves until killed).
"""

from __future__ import annotations

import argparse
import contextlib
import hashlib
import re
import sys
import threading
import time
import urllib.parse
from dataclasses import dataclass
from http import HTTPStatus
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

READ_BLOCK = 64 * 1024
# A stalled stream waits this long at most for release(), so a forgotten test never hangs the suite.
STALL_LIMIT_S = 120.0
_RESOLVE = re.compile(r"^/(?P<repo>[^/]+/[^/]+)/resolve/(?P<rev>[^/]+)/(?P<file>.+)$")
_CDN = re.compile(r"^/cdn/(?P<key>[0-9a-f]{16})$")


@dataclass
class HubFile:
    repo: str
    revision: str
    filename: str
    path: Path
    sha256: str
    size: int
    lfs: bool
    version: int = 1

    @property
    def key(self) -> str:
        """The CDN path: stable per repo/file, so replace() changes the bytes behind a URL."""
        return hashlib.sha256(f"{self.repo}/{self.filename}".encode()).hexdigest()[:16]

    @property
    def cdn_etag(self) -> str:
        # A CDN's ETag is its own, not the LFS sha256 (as on the real hub's CDN).
        return f'"cdn-{self.sha256[:24]}-v{self.version}"'


@dataclass(frozen=True)
class Logged:
    method: str
    path: str
    status: int
    range: str
    if_range: str
    authorization: str


def sha256_of(path: Path) -> str:
    digest = hashlib.sha256()
    with path.open("rb") as handle:
        while block := handle.read(8 * 1024 * 1024):
            digest.update(block)
    return digest.hexdigest()


class HfServer:
    def __init__(
        self, host: str = "127.0.0.1", port: int = 0, url_ttl_s: float | None = None, cdn_host: str = ""
    ) -> None:
        """``cdn_host`` (e.g. "localhost") puts the CDN on another host name, as on the real hub."""
        self.url_ttl_s = url_ttl_s
        self.cdn_host = cdn_host
        self.files: dict[tuple[str, str, str], HubFile] = {}
        self.log: list[Logged] = []
        self.bytes_served = 0
        self.stalled = threading.Event()
        self._release = threading.Event()
        self._stall_at: int | None = None
        self._failures: list[int] = []
        self._lock = threading.Lock()
        self._httpd = ThreadingHTTPServer((host, port), self._handler_class())
        self._httpd.daemon_threads = True
        self._thread = threading.Thread(target=self._httpd.serve_forever, daemon=True)

    @property
    def base_url(self) -> str:
        host, port = self._httpd.server_address[:2]
        return f"http://{host!s}:{port}"

    def __enter__(self) -> HfServer:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._release.set()
        self._httpd.shutdown()
        self._httpd.server_close()

    # ---- test controls

    def add_file(
        self, repo: str, filename: str, path: Path, revision: str = "main", lfs: bool = True
    ) -> HubFile:
        entry = HubFile(repo, revision, filename, path, sha256_of(path), path.stat().st_size, lfs)
        self.files[(repo, revision, filename)] = entry
        return entry

    def replace(self, repo: str, filename: str, path: Path, revision: str = "main") -> HubFile:
        old = self.files[(repo, revision, filename)]
        entry = HubFile(repo, revision, filename, path, sha256_of(path), path.stat().st_size, old.lfs)
        entry.version = old.version + 1
        self.files[(repo, revision, filename)] = entry
        return entry

    def stall_after(self, nbytes: int) -> None:
        with self._lock:
            self._stall_at = self.bytes_served + nbytes
            self.stalled.clear()
            self._release.clear()

    def release(self) -> None:
        with self._lock:
            self._stall_at = None
        self._release.set()

    def fail_next(self, count: int, status: int = 503) -> None:
        with self._lock:
            self._failures.extend([status] * count)

    def cdn_requests(self) -> list[Logged]:
        return [entry for entry in self.log if entry.path.startswith("/cdn/")]

    # ---- serving

    def _handler_class(self) -> type[BaseHTTPRequestHandler]:
        hub = self

        class Handler(BaseHTTPRequestHandler):
            def do_HEAD(self) -> None:
                hub._route(self, head=True)

            def do_GET(self) -> None:
                hub._route(self, head=False)

            def log_message(self, format: str, *args: object) -> None:
                pass

        return Handler

    def _route(self, handler: BaseHTTPRequestHandler, head: bool) -> None:
        parts = urllib.parse.urlsplit(handler.path)
        path = urllib.parse.unquote(parts.path)
        if match := _RESOLVE.match(path):
            status = self._resolve(handler, match["repo"], match["rev"], match["file"])
        elif match := _CDN.match(path):
            status = self._cdn(handler, match["key"], urllib.parse.parse_qs(parts.query), head)
        else:
            status = self._plain(handler, HTTPStatus.NOT_FOUND, "Not Found")
        self.log.append(
            Logged(
                handler.command,
                path,
                status,
                handler.headers.get("Range", ""),
                handler.headers.get("If-Range", ""),
                handler.headers.get("Authorization", ""),
            )
        )

    def _plain(self, handler: BaseHTTPRequestHandler, status: int, text: str, **headers: str) -> int:
        body = text.encode()
        handler.send_response(status)
        for name, value in headers.items():
            handler.send_header(name.replace("_", "-"), value)
        handler.send_header("Content-Type", "text/plain; charset=utf-8")
        handler.send_header("Content-Length", str(len(body)))
        handler.end_headers()
        if handler.command != "HEAD":
            handler.wfile.write(body)
        return status

    def _resolve(self, handler: BaseHTTPRequestHandler, repo: str, revision: str, filename: str) -> int:
        entry = self.files.get((repo, revision, filename))
        if entry is None:
            return self._plain(handler, HTTPStatus.NOT_FOUND, "Entry not found", X_Error_Code="EntryNotFound")
        commit = hashlib.sha1(f"{repo}@{revision}".encode(), usedforsecurity=False).hexdigest()
        if not entry.lfs:
            # A plain git file: served from the hub itself, its ETag is a git blob id, not a sha256.
            return self._serve(handler, entry, f'"{commit}"', X_Repo_Commit=commit)
        expires = int(time.time() + (self.url_ttl_s if self.url_ttl_s is not None else 3600))
        port = self._httpd.server_address[1]
        cdn = f"http://{self.cdn_host}:{port}" if self.cdn_host else self.base_url
        location = f"{cdn}/cdn/{entry.key}?Expires={expires}&Signature=sig{entry.version}"
        return self._plain(
            handler,
            HTTPStatus.FOUND,
            "Found. Redirecting",
            Location=location,
            ETag=f'"{entry.sha256}"',
            X_Linked_Etag=f'"{entry.sha256}"',
            X_Linked_Size=str(entry.size),
            X_Repo_Commit=commit,
        )

    def _cdn(self, handler: BaseHTTPRequestHandler, key: str, query: dict[str, list[str]], head: bool) -> int:
        entry = next((f for f in self.files.values() if f.key == key), None)
        if entry is None:
            return self._plain(handler, HTTPStatus.NOT_FOUND, "NoSuchKey")
        with self._lock:
            failure = self._failures.pop(0) if self._failures else None
        if failure is not None:
            return self._plain(handler, failure, "injected failure")
        expires = int(query.get("Expires", ["0"])[0])
        if expires < time.time():
            return self._plain(handler, HTTPStatus.FORBIDDEN, "Request has expired")
        return self._serve(handler, entry, entry.cdn_etag)

    def _serve(self, handler: BaseHTTPRequestHandler, entry: HubFile, etag: str, **extra: str) -> int:
        start, end = 0, entry.size
        status = HTTPStatus.OK
        range_header = handler.headers.get("Range", "")
        if_range = handler.headers.get("If-Range")
        match = re.fullmatch(r"bytes=(\d+)-(\d*)", range_header.strip())
        if match and (if_range is None or if_range == etag):
            start = int(match[1])
            end = min(entry.size, int(match[2]) + 1) if match[2] else entry.size
            if start >= entry.size:
                return self._plain(
                    handler,
                    HTTPStatus.REQUESTED_RANGE_NOT_SATISFIABLE,
                    "",
                    Content_Range=f"bytes */{entry.size}",
                )
            status = HTTPStatus.PARTIAL_CONTENT
        handler.send_response(status)
        handler.send_header("Accept-Ranges", "bytes")
        handler.send_header("ETag", etag)
        handler.send_header("Content-Type", "application/octet-stream")
        handler.send_header("Content-Length", str(end - start))
        if status == HTTPStatus.PARTIAL_CONTENT:
            handler.send_header("Content-Range", f"bytes {start}-{end - 1}/{entry.size}")
        for name, value in extra.items():
            handler.send_header(name.replace("_", "-"), value)
        handler.end_headers()
        if handler.command != "HEAD":
            self._stream(handler, entry.path, start, end)
        return status

    def _stream(self, handler: BaseHTTPRequestHandler, path: Path, start: int, end: int) -> None:
        with path.open("rb") as handle:
            handle.seek(start)
            position = start
            while position < end:
                block = handle.read(min(READ_BLOCK, end - position))
                with self._lock:
                    stall_at = self._stall_at
                    allowed = len(block) if stall_at is None else max(0, stall_at - self.bytes_served)
                    block = block[:allowed]
                    self.bytes_served += len(block)
                try:
                    handler.wfile.write(block)
                except OSError:
                    return
                position += len(block)
                if stall_at is not None and self.bytes_served >= stall_at:
                    handler.wfile.flush()
                    self.stalled.set()
                    self._release.wait(STALL_LIMIT_S)
                    handler.close_connection = True
                    return


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description="Serve files like the Hugging Face hub, on loopback.")
    parser.add_argument("--host", default="127.0.0.1")
    parser.add_argument("--port", type=int, default=0)
    parser.add_argument("--file", action="append", default=[], help="REPO:FILENAME:PATH[:REVISION]")
    parser.add_argument("--cdn-host", default="", help="serve the CDN under this host name (e.g. localhost)")
    args = parser.parse_args(argv)
    with HfServer(args.host, args.port, cdn_host=args.cdn_host) as hub:
        for spec in args.file:
            repo, filename, path, *rest = spec.split(":")
            hub.add_file(repo, filename, Path(path), revision=rest[0] if rest else "main")
        print(hub.base_url, flush=True)
        with contextlib.suppress(KeyboardInterrupt):
            threading.Event().wait()
    return 0


if __name__ == "__main__":
    sys.exit(main())
