#!/usr/bin/env python3
"""Fetch, verify and upload the model file: the VM's model step and the stage command's transfer code.

Standard library only and Python 3.10-compatible on purpose: the boot script embeds this file and runs
it with the VM image's system python3 before anything else is installed. The stage command imports the
same functions, so the VM and the workstation verify a model the same way.

    fetch.py gcs    --bucket B --object O --dest PATH [--sha256 HEX] [--size N] [--slices N]
                    [--progress-url URL]
    fetch.py hf     --repo R --revision REV --file F --dest PATH [--sha256 HEX] [--size N] [--slices N]
                    [--progress-url URL]
    fetch.py upload --bucket B --object O --src PATH --sha256 HEX
    fetch.py verify --path P --sha256 HEX [--size N]

Exit codes: 0 verified and in place; 3 not found (a cache miss); 4 verification failed (nothing is left at
PATH, the partial file is removed); 1 any other error, with a one-line message on stderr.

A download goes into ``PATH.partial``: preallocated, written with pwrite by ``--slices`` threads that
take consecutive byte ranges in order, and hashed as its gap-free prefix grows. Progress is
checkpointed in ``PATH.partial.json`` (only bytes already fsynced); a rerun continues from there. Only a
file whose size and sha256 match is renamed to PATH. On success stdout gets one line ending in
``verified sha256 <hex>``.
"""

from __future__ import annotations

import argparse
import base64
import functools
import hashlib
import http.client
import json
import os
import random
import re
import signal
import sys
import threading
import time
import urllib.parse
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Protocol

EXIT_OK = 0
EXIT_ERROR = 1
EXIT_NOT_FOUND = 3
EXIT_VERIFY = 4
EXIT_INTERRUPTED = 130

# Socket timeout for every request: a stalled connection is dropped and its range retried.
HTTP_TIMEOUT_S = 60.0
# Progress PUTs to the metadata server must never hold up the download.
PROGRESS_TIMEOUT_S = 2.0
# Attempts without progress before a range (or an upload chunk) gives up; backoff doubles to a cap.
MAX_ATTEMPTS = 6
BACKOFF_BASE_S = 1.0
BACKOFF_MAX_S = 30.0
MAX_REDIRECTS = 5

# Parallel ranges ("slices") work through the file in order, one piece at a time, so the bytes on
# disk grow as a prefix and the sha256 follows right behind the download instead of re-reading
# 22 GB after it (~45 s at the ~0.5 GB/s one core hashed on the 2-core build machine).
DEFAULT_SLICES = 8
PIECES_PER_SLICE = 4
MIN_PIECE_BYTES = 4 * 1024 * 1024
MAX_PIECE_BYTES = 64 * 1024 * 1024
HASH_POLL_S = 0.2
READ_BLOCK = 1024 * 1024
HASH_BLOCK = 8 * 1024 * 1024
# GCS resumable uploads take chunks in multiples of 256 KiB (this is 128 of them).
# https://cloud.google.com/storage/docs/performing-resumable-uploads#chunked-upload
UPLOAD_CHUNK = 32 * 1024 * 1024

TICK_S = 0.5
# How long an interrupted or failed download waits for its other ranges to stop writing.
STOP_GRACE_S = 2.0
CHECKPOINT_INTERVAL_S = 3.0
PROGRESS_INTERVAL_S = 5.0
LOG_INTERVAL_S = 15.0
TOKEN_REFRESH_MARGIN_S = 300.0

GCS_ENDPOINT = "https://storage.googleapis.com"
HF_ENDPOINT = "https://huggingface.co"
METADATA_URL = "http://metadata.google.internal"
TOKEN_PATH = "/computeMetadata/v1/instance/service-accounts/default/token"  # noqa: S105 (a URL path)
STATE_VERSION = 1
USER_AGENT = "qwen36-fetch/1"

_SHA256_RE = re.compile(r"^[0-9a-f]{64}$")
_RETRYABLE_STATUS = {408, 429, 500, 502, 503, 504}


class FetchError(Exception):
    """A failure with a one-line message; ``exit_code`` is what the CLI returns for it."""

    exit_code = EXIT_ERROR


class NotFoundError(FetchError):
    exit_code = EXIT_NOT_FOUND


class BucketNotFoundError(NotFoundError):
    pass


class VerifyError(FetchError):
    exit_code = EXIT_VERIFY


class TransientError(FetchError):
    """A 5xx, 429 or a dropped connection: retried with backoff."""


class SourceChangedError(FetchError):
    """The server's content no longer matches what the partial file was started from."""


class Interrupted(FetchError):
    exit_code = EXIT_INTERRUPTED


# --------------------------------------------------------------------------------------------- HTTP


@dataclass
class Reply:
    status: int
    headers: http.client.HTTPMessage
    response: http.client.HTTPResponse
    connection: http.client.HTTPConnection
    url: str

    def header(self, name: str) -> str:
        return self.headers.get(name, "") or ""

    def body(self, limit: int = 1024 * 1024) -> bytes:
        try:
            return self.response.read(limit)
        finally:
            self.close()

    def close(self) -> None:
        self.connection.close()


def request(
    method: str,
    url: str,
    headers: dict[str, str] | None = None,
    body: bytes | None = None,
    timeout: float = HTTP_TIMEOUT_S,
) -> Reply:
    """One request on a fresh connection; redirects are not followed (callers decide)."""
    parts = urllib.parse.urlsplit(url)
    conn_type = http.client.HTTPSConnection if parts.scheme == "https" else http.client.HTTPConnection
    if parts.scheme not in ("http", "https") or not parts.hostname:
        raise FetchError(f"not an http(s) URL: {url}")
    connection = conn_type(parts.hostname, parts.port, timeout=timeout)
    target = parts.path or "/"
    if parts.query:
        target += "?" + parts.query
    all_headers = {"User-Agent": USER_AGENT, "Accept-Encoding": "identity", **(headers or {})}
    try:
        connection.request(method, target, body=body, headers=all_headers)
        response = connection.getresponse()
    except (OSError, http.client.HTTPException) as exc:
        connection.close()
        raise TransientError(f"{method} {_redact(url)}: {exc.__class__.__name__}: {exc}") from exc
    return Reply(response.status, response.headers, response, connection, url)


def _redact(url: str) -> str:
    """Signed CDN URLs carry credentials in the query string: never print it."""
    parts = urllib.parse.urlsplit(url)
    return urllib.parse.urlunsplit((parts.scheme, parts.netloc, parts.path, "", ""))


def _error_text(reply: Reply) -> str:
    raw = reply.body(4096).decode("utf-8", "replace").strip()
    try:
        message = json.loads(raw)["error"]["message"]
        return str(message)
    except (ValueError, KeyError, TypeError):
        return raw.splitlines()[0][:200] if raw else reply.response.reason


def raise_for_status(reply: Reply, what: str) -> None:
    """Map a non-2xx reply to the error class the CLI turns into an exit code; closes the reply."""
    if 200 <= reply.status < 300:
        return
    text = _error_text(reply)
    message = f"{what}: HTTP {reply.status} {text}".rstrip()
    if reply.status in _RETRYABLE_STATUS:
        raise TransientError(message)
    if reply.status == 404:
        raise NotFoundError(message)
    if reply.status in (401, 403):
        raise FetchError(f"{message} (the credentials in use may not read it)")
    raise FetchError(message)


def backoff_s(attempt: int) -> float:
    """Exponential backoff with jitter so parallel ranges do not retry in lockstep."""
    base: float = min(BACKOFF_MAX_S, BACKOFF_BASE_S * 2 ** (attempt - 1))
    return base / 2 + random.uniform(0, base / 2)


def with_retries(what: str, call: Callable[[], Any]) -> Any:
    for attempt in range(1, MAX_ATTEMPTS + 1):
        try:
            return call()
        except TransientError as exc:
            if attempt == MAX_ATTEMPTS:
                raise FetchError(f"{what}: gave up after {MAX_ATTEMPTS} attempts: {exc}") from exc
            time.sleep(backoff_s(attempt))
    raise AssertionError("unreachable")


def read_json(reply: Reply, what: str) -> dict[str, Any]:
    raise_for_status(reply, what)
    raw = reply.body(16 * 1024 * 1024)
    try:
        data = json.loads(raw)
    except ValueError as exc:
        raise FetchError(f"{what}: the reply is not JSON: {raw[:120]!r}") from exc
    if not isinstance(data, dict):
        raise FetchError(f"{what}: unexpected reply {raw[:120]!r}")
    return data


# --------------------------------------------------------------------------------------- GCS access


class GcsAuth:
    """Bearer tokens from the metadata server; none at all when talking to an emulator."""

    def __init__(self, use_token: bool, metadata_url: str) -> None:
        self._use_token = use_token
        self._metadata_url = metadata_url.rstrip("/")
        self._token = ""
        self._expires_at = 0.0
        self._lock = threading.Lock()

    def headers(self) -> dict[str, str]:
        if not self._use_token:
            return {}
        with self._lock:
            if time.monotonic() > self._expires_at - TOKEN_REFRESH_MARGIN_S:
                self._refresh()
            return {"Authorization": f"Bearer {self._token}"}

    def _refresh(self) -> None:
        url = self._metadata_url + TOKEN_PATH
        what = "get an access token from the metadata server"

        def call() -> dict[str, Any]:
            return read_json(request("GET", url, {"Metadata-Flavor": "Google"}, timeout=10), what)

        data = with_retries(what, call)
        self._token = str(data["access_token"])
        self._expires_at = time.monotonic() + float(data.get("expires_in", 3599))


@dataclass(frozen=True)
class Gcs:
    endpoint: str
    auth: GcsAuth

    @classmethod
    def from_env(cls) -> Gcs:
        # The same variable and forms google-cloud-storage accepts ("host:port" or a URL).
        emulator = os.environ.get("STORAGE_EMULATOR_HOST", "").strip()
        metadata_url = os.environ.get("QWEN36_METADATA_URL", METADATA_URL)
        if emulator:
            endpoint = emulator if "://" in emulator else "http://" + emulator
            return cls(endpoint.rstrip("/"), GcsAuth(False, metadata_url))
        return cls(GCS_ENDPOINT, GcsAuth(True, metadata_url))

    def object_url(self, bucket: str, name: str) -> str:
        return f"{self.endpoint}/storage/v1/b/{_q(bucket)}/o/{_q(name)}"

    def media_url(self, bucket: str, name: str, generation: str) -> str:
        query = urllib.parse.urlencode({"alt": "media", "generation": generation})
        return f"{self.endpoint}/download/storage/v1/b/{_q(bucket)}/o/{_q(name)}?{query}"

    def upload_url(self, bucket: str, name: str) -> str:
        query = urllib.parse.urlencode({"uploadType": "resumable", "name": name})
        return f"{self.endpoint}/upload/storage/v1/b/{_q(bucket)}/o?{query}"


def _q(value: str) -> str:
    return urllib.parse.quote(value, safe="")


@dataclass(frozen=True)
class ObjectInfo:
    """An object's real size and generation, and the sha256/size our staging stored beside it."""

    bucket: str
    name: str
    size: int
    generation: str
    sha256: str
    meta_size: int | None
    md5: str = ""

    @property
    def uri(self) -> str:
        return f"gs://{self.bucket}/{self.name}"


def gcs_object_info(gcs: Gcs, bucket: str, name: str) -> ObjectInfo:
    """Read an object's resource; a missing object or bucket raises NotFoundError saying which."""
    what = f"read gs://{bucket}/{name}"

    def call() -> dict[str, Any]:
        return read_json(request("GET", gcs.object_url(bucket, name), gcs.auth.headers()), what)

    try:
        data = with_retries(what, call)
    except NotFoundError:
        if _bucket_missing(gcs, bucket):
            raise BucketNotFoundError(f"bucket gs://{bucket} does not exist (looked for {name})") from None
        raise NotFoundError(f"object gs://{bucket}/{name} not found") from None
    metadata = data.get("metadata") or {}
    meta_size = str(metadata.get("size", "")).strip()
    return ObjectInfo(
        bucket=bucket,
        name=name,
        size=int(data.get("size") or 0),
        generation=str(data.get("generation", "")),
        sha256=str(metadata.get("sha256", "")).strip().lower(),
        meta_size=int(meta_size) if meta_size.isdigit() else None,
        md5=str(data.get("md5Hash", "")),
    )


def _bucket_missing(gcs: Gcs, bucket: str) -> bool:
    """GCS answers 404 for a missing bucket too; ask the bucket (which may itself be forbidden)."""
    try:
        reply = request("GET", f"{gcs.endpoint}/storage/v1/b/{_q(bucket)}", gcs.auth.headers(), timeout=10)
    except FetchError:
        return False
    reply.close()
    return reply.status == 404


def expected_from_object(info: ObjectInfo, sha256: str, size: int | None) -> tuple[str, int]:
    """Reconcile --sha256/--size with what the object says; any disagreement is a VerifyError."""
    if info.meta_size is not None and info.meta_size != info.size:
        raise VerifyError(
            f"{info.uri}: metadata says size {info.meta_size} but the object holds {info.size} bytes "
            "(a truncated or replaced upload); refusing it"
        )
    if size is not None and size != info.size:
        raise VerifyError(f"{info.uri}: expected size {size}, object holds {info.size} bytes")
    if sha256 and info.sha256 and sha256 != info.sha256:
        raise VerifyError(f"{info.uri}: expected sha256 {sha256}, object says {info.sha256}")
    expected = sha256 or info.sha256
    if not expected:
        raise VerifyError(
            f"{info.uri} has no sha256 metadata and no --sha256 was given: nothing to verify it against"
        )
    if not _SHA256_RE.match(expected):
        raise VerifyError(f"{info.uri}: sha256 metadata {expected!r} is not 64 hex digits")
    return expected, info.size


# ------------------------------------------------------------------------------------ Hugging Face


@dataclass(frozen=True)
class HfFile:
    """What the hub's resolve URL says about a file, read from its first (redirect) response."""

    resolve_url: str
    download_url: str
    sha256: str
    size: int | None
    commit: str


def hf_endpoint() -> str:
    return os.environ.get("HF_ENDPOINT", HF_ENDPOINT).rstrip("/")


def hf_resolve_url(repo: str, revision: str, filename: str) -> str:
    path = urllib.parse.quote(filename)
    return f"{hf_endpoint()}/{repo}/resolve/{_q(revision)}/{path}"


def _hf_headers(url: str) -> dict[str, str]:
    """The token goes to the hub only, never to the CDN host the hub redirects to."""
    token = os.environ.get("HF_TOKEN", "")
    same_host = urllib.parse.urlsplit(url).netloc == urllib.parse.urlsplit(hf_endpoint()).netloc
    return {"Authorization": f"Bearer {token}"} if token and same_host else {}


def _strip_etag(value: str) -> str:
    value = value.strip()
    if value.startswith("W/"):
        value = value[2:]
    return value.strip('"').lower()


def hf_resolve(repo: str, revision: str, filename: str) -> HfFile:
    """HEAD the resolve URL without following the CDN redirect, as huggingface_hub does.

    For an LFS file the hub answers 302 with X-Linked-Etag (the file's sha256) and X-Linked-Size;
    relative redirects (a renamed repo) are followed, the absolute one to the CDN is the download URL.
    https://huggingface.co/docs/hub/en/api#get-apimodelsrepoidresolverevisionfilename
    """
    url = hf_resolve_url(repo, revision, filename)
    resolve_url = url
    what = f"resolve {repo}@{revision}/{filename}"
    for _ in range(MAX_REDIRECTS + 1):
        try:
            reply: Reply = with_retries(what, functools.partial(_checked_head, url, what))
        except NotFoundError as exc:
            raise NotFoundError(f"{exc} (no such repo, revision or file on the hub)") from None
        linked = _strip_etag(reply.header("X-Linked-Etag")) or _strip_etag(reply.header("ETag"))
        # A redirect's Content-Length is its own small body's, never the file's.
        size_text = reply.header("X-Linked-Size") or (
            reply.header("Content-Length") if reply.status < 300 else ""
        )
        commit = reply.header("X-Repo-Commit")
        location = reply.header("Location")
        reply.close()
        sha = linked if _SHA256_RE.match(linked) else ""
        size = int(size_text) if size_text.isdigit() else None
        if 300 <= reply.status < 400 and location:
            target = urllib.parse.urljoin(url, location)
            if urllib.parse.urlsplit(target).netloc == urllib.parse.urlsplit(url).netloc and not sha:
                url = target
                continue
            return HfFile(resolve_url, target, sha, size, commit)
        return HfFile(resolve_url, url, sha, size, commit)
    raise FetchError(f"{what}: more than {MAX_REDIRECTS} redirects")


def _checked_head(url: str, what: str) -> Reply:
    reply = request("HEAD", url, _hf_headers(url))
    if reply.status < 300 or (reply.status < 400 and reply.header("Location")):
        return reply
    raise_for_status(reply, what)
    return reply


def expected_from_hub(hf: HfFile, sha256: str, size: int | None, label: str) -> tuple[str, int]:
    if sha256 and hf.sha256 and sha256 != hf.sha256:
        raise VerifyError(f"{label}: expected sha256 {sha256}, the hub says {hf.sha256}")
    if size is not None and hf.size is not None and size != hf.size:
        raise VerifyError(f"{label}: expected size {size}, the hub says {hf.size} bytes")
    expected = sha256 or hf.sha256
    if not expected:
        raise VerifyError(f"{label}: the hub gives no LFS sha256 and no --sha256 was given")
    total = size if size is not None else hf.size
    if total is None:
        raise FetchError(f"{label}: the hub gives no size and no --size was given")
    return expected, total


# ------------------------------------------------------------------------------ ranged download


@dataclass
class Slice:
    start: int
    end: int  # exclusive
    done: int = 0

    @property
    def remaining(self) -> int:
        return self.end - self.start - self.done


@dataclass
class Source:
    """Where the bytes come from. ``refresh`` re-resolves an expired signed URL; ``if_range`` sends
    the first response's ETag on every later range so a file changed underneath restarts cleanly."""

    label: str
    url: str
    headers: Callable[[str], dict[str, str]]
    identity: dict[str, Any]
    refresh: Callable[[], str] | None = None
    if_range: bool = False
    validator: str = ""
    lock: threading.Lock = field(default_factory=threading.Lock)


ProgressCallback = Callable[[int, int], None]


class Reporter:
    """Progress for people (stderr) and for the deployer (a guest attribute PUT via --progress-url)."""

    def __init__(self, label: str, total: int, progress_url: str, callback: ProgressCallback | None) -> None:
        self.label = label
        self.total = total
        self.progress_url = progress_url
        self.callback = callback
        self.started = time.monotonic()
        self.start_bytes = 0
        self._last_put = 0.0
        self._last_log = self.started

    def detail(self, done: int) -> str:
        rate = (done - self.start_bytes) / max(time.monotonic() - self.started, 1e-3) / 1e6
        return f"model {done / 1e9:.1f}/{self.total / 1e9:.1f} GB from {self.label} ({rate:.0f} MB/s)"

    def tick(self, done: int, force: bool = False) -> None:
        now = time.monotonic()
        if self.callback:
            self.callback(done, self.total)
        if self.progress_url and (force or now - self._last_put >= PROGRESS_INTERVAL_S):
            self._last_put = now
            put_progress(self.progress_url, self.detail(done))
        if not self.callback and (force or now - self._last_log >= LOG_INTERVAL_S):
            self._last_log = now
            print(f"fetch: {self.detail(done)}", file=sys.stderr, flush=True)


def put_progress(url: str, text: str) -> None:
    """Best effort: a failed progress report must never fail the download."""
    try:
        reply = request(
            "PUT", url, {"Metadata-Flavor": "Google"}, body=text.encode(), timeout=PROGRESS_TIMEOUT_S
        )
        reply.close()
    except (FetchError, OSError):
        pass


def plan_pieces(size: int, slices: int) -> list[Slice]:
    """Consecutive pieces covering ``size`` bytes: small enough to keep ``slices`` streams busy to the
    end and the hashed prefix close behind, big enough that per-request latency does not matter."""
    if size <= 0:
        return [Slice(0, 0)]
    wanted = -(-size // (max(1, slices) * PIECES_PER_SLICE))
    step = min(MAX_PIECE_BYTES, max(MIN_PIECE_BYTES, wanted))
    return [Slice(start, min(start + step, size)) for start in range(0, size, step)]


def done_prefix(pieces: list[Slice]) -> int:
    """How many bytes from the start of the file are written without a gap."""
    for piece in pieces:
        if piece.remaining > 0:
            return piece.start + piece.done
    return pieces[-1].end if pieces else 0


def _state_path(dest: str) -> str:
    return dest + ".partial.json"


def _partial_path(dest: str) -> str:
    return dest + ".partial"


def _load_state(dest: str, source: Source, size: int) -> list[Slice] | None:
    """The checkpoint, if it belongs to this very content and the partial file is still there."""
    try:
        state = json.loads(Path(_state_path(dest)).read_text(encoding="utf-8"))
        if (
            state.get("version") != STATE_VERSION
            or state.get("identity") != source.identity
            or state.get("size") != size
            or Path(_partial_path(dest)).stat().st_size != size
        ):
            return None
        source.validator = str(state.get("validator", ""))
        return [Slice(int(s), int(e), int(d)) for s, e, d in state["slices"]]
    except (OSError, ValueError, KeyError, TypeError):
        return None


def _save_state(dest: str, source: Source, size: int, slices: list[Slice], fd: int) -> None:
    """Record progress only for bytes already on disk: snapshot the counters, then fsync, then write."""
    snapshot = [[s.start, s.end, s.done] for s in slices]
    os.fsync(fd)
    state = {
        "version": STATE_VERSION,
        "identity": source.identity,
        "size": size,
        "validator": source.validator,
        "slices": snapshot,
    }
    tmp = Path(_state_path(dest) + ".tmp")
    with tmp.open("w", encoding="utf-8") as handle:
        json.dump(state, handle)
        handle.flush()
        os.fsync(handle.fileno())
    tmp.replace(_state_path(dest))


def remove_partial(dest: str) -> None:
    for path in (_partial_path(dest), _state_path(dest), _state_path(dest) + ".tmp"):
        Path(path).unlink(missing_ok=True)


def _fetch_slice(source: Source, fd: int, piece: Slice, stop: threading.Event) -> None:
    attempts = 0
    while piece.remaining > 0 and not stop.is_set():
        offset = piece.start + piece.done
        url = source.url
        headers = {**source.headers(url), "Range": f"bytes={offset}-{piece.end - 1}"}
        sent_validator = source.validator if source.if_range else ""
        if sent_validator:
            headers["If-Range"] = sent_validator
        try:
            reply = request("GET", url, headers)
            try:
                _check_range_reply(source, reply, offset, piece.end, sent_validator)
                while piece.remaining > 0 and not stop.is_set():
                    # read1: whatever has arrived (up to a block), so progress never waits for a full block.
                    block = reply.response.read1(min(READ_BLOCK, piece.remaining))
                    if not block:
                        raise TransientError(f"{source.label}: connection closed at byte {offset}")
                    _pwrite_all(fd, block, piece.start + piece.done)
                    piece.done += len(block)
                    attempts = 0
            finally:
                reply.close()
        except (TransientError, OSError, http.client.HTTPException) as exc:
            attempts += 1
            if attempts >= MAX_ATTEMPTS:
                raise FetchError(
                    f"{source.label}: range at byte {offset} failed {attempts} times: {exc}"
                ) from exc
            time.sleep(backoff_s(attempts))
        except _ExpiredUrlError as exc:
            attempts += 1
            if source.refresh is None or attempts >= MAX_ATTEMPTS:
                raise FetchError(str(exc)) from exc
            with source.lock:
                if source.url == url:
                    source.url = source.refresh()


class _ExpiredUrlError(FetchError):
    pass


def _check_range_reply(
    source: Source, reply: Reply, offset: int, piece_end: int, sent_validator: str
) -> None:
    if reply.status == 206:
        content_range = reply.header("Content-Range")
        if not content_range.startswith(f"bytes {offset}-"):
            raise FetchError(f"{source.label}: asked for byte {offset}, got Content-Range {content_range!r}")
        etag = reply.header("ETag").strip()
        if source.if_range and etag and not etag.startswith("W/"):
            with source.lock:
                if not source.validator:
                    source.validator = etag
        return
    if reply.status == 200:
        if sent_validator:
            raise SourceChangedError(f"{source.label}: the file changed since the partial download began")
        if offset == 0 and reply.header("Content-Length") == str(piece_end):
            return  # A server without ranges sent the whole file, which is all this range wanted.
        raise FetchError(f"{source.label}: the server ignored the Range header (HTTP 200)")
    if reply.status in (401, 403) and source.refresh is not None:
        reply.close()
        raise _ExpiredUrlError(f"{source.label}: download URL refused (HTTP {reply.status})")
    if reply.status == 416:
        raise SourceChangedError(f"{source.label}: byte {offset} is beyond the end of the file")
    raise_for_status(reply, f"download from {source.label}")


def _pwrite_all(fd: int, data: bytes, offset: int) -> None:
    view = memoryview(data)
    while view:
        written = os.pwrite(fd, view, offset)
        view = view[written:]
        offset += written


@contextmanager
def _terminate_as_interrupt() -> Iterator[None]:
    """SIGTERM (systemd stopping the unit, a spot preemption) ends the download like Ctrl-C."""

    def handler(signum: int, frame: object) -> None:
        raise Interrupted(f"stopped by signal {signum}; rerun to continue from the checkpoint")

    if threading.current_thread() is not threading.main_thread():
        yield
        return
    previous = signal.signal(signal.SIGTERM, handler)
    try:
        yield
    finally:
        signal.signal(signal.SIGTERM, previous)


def download(
    source: Source,
    size: int,
    sha256: str,
    dest: str,
    slices: int = DEFAULT_SLICES,
    progress_url: str = "",
    callback: ProgressCallback | None = None,
) -> None:
    """Fetch ``size`` bytes into ``dest`` through a checkpointed partial file; verify, then rename."""
    for _ in range(2):
        try:
            actual = _download_once(source, size, dest, slices, progress_url, callback)
            break
        except SourceChangedError as exc:
            print(f"fetch: {exc}; starting again", file=sys.stderr, flush=True)
            remove_partial(dest)
            source.validator = ""
    else:
        raise FetchError(f"{source.label}: the file kept changing during the download")
    if actual != sha256:
        remove_partial(dest)
        raise VerifyError(f"{source.label} download: expected sha256 {sha256}, content has {actual}")
    Path(_partial_path(dest)).replace(dest)
    _fsync_dir(Path(dest).resolve().parent)
    remove_partial(dest)


class _PrefixHasher:
    """Hashes the partial file's gap-free prefix as it grows, reading back what the workers wrote
    (from the page cache, moments after), so the digest is of the bytes on disk."""

    def __init__(self, fd: int, pieces: list[Slice], size: int, stop: threading.Event) -> None:
        self._fd = fd
        self._pieces = pieces
        self._size = size
        self._stop = stop
        self._final = threading.Event()
        self._digest = hashlib.sha256()
        self._position = 0
        self._error: BaseException | None = None
        self.thread = threading.Thread(target=self._run, daemon=True)

    def start(self) -> None:
        self.thread.start()

    def _run(self) -> None:
        try:
            while self._position < self._size and not self._stop.is_set():
                target = done_prefix(self._pieces)
                while self._position < target and not self._stop.is_set():
                    block = os.pread(self._fd, min(HASH_BLOCK, target - self._position), self._position)
                    if not block:
                        raise FetchError(f"the partial file ends at byte {self._position}")
                    self._digest.update(block)
                    self._position += len(block)
                if self._position < self._size and not self._final.is_set():
                    self._stop.wait(HASH_POLL_S)
        except BaseException as exc:
            self._error = exc

    def finish(self) -> str:
        """Wait for the rest of the file (all pieces are done by now) and return the hex digest."""
        self._final.set()
        self.thread.join()
        if self._error is not None:
            raise self._error
        if self._position != self._size:
            raise FetchError(f"hashed {self._position} of {self._size} bytes")
        return self._digest.hexdigest()


def _download_once(
    source: Source,
    size: int,
    dest: str,
    slices: int,
    progress_url: str,
    callback: ProgressCallback | None,
) -> str:
    """One pass over the pieces; returns the sha256 of the complete partial file."""
    Path(dest).resolve().parent.mkdir(parents=True, exist_ok=True)
    pieces = _load_state(dest, source, size)
    if pieces is None:
        remove_partial(dest)
        pieces = plan_pieces(size, slices)
    fd = os.open(_partial_path(dest), os.O_RDWR | os.O_CREAT, 0o644)
    threads: list[threading.Thread] = []
    try:
        _preallocate(fd, size, dest)
        _save_state(dest, source, size, pieces, fd)
        reporter = Reporter(source.label, size, progress_url, callback)
        reporter.start_bytes = sum(p.done for p in pieces)
        digest = _run_workers(source, fd, pieces, slices, reporter, dest, size, threads)
        os.fsync(fd)
        return digest
    finally:
        # A worker still blocked in a read could write after close into whatever reuses the fd number.
        if not any(t.is_alive() for t in threads):
            os.close(fd)


def _preallocate(fd: int, size: int, dest: str) -> None:
    """Reserve the whole file up front: a full disk fails here, at once, not mid-download."""
    try:
        if size and hasattr(os, "posix_fallocate"):
            os.posix_fallocate(fd, 0, size)
        else:
            os.ftruncate(fd, size)
    except OSError as exc:
        raise FetchError(f"cannot reserve {size} bytes for {_partial_path(dest)}: {exc.strerror}") from exc


def _run_workers(
    source: Source,
    fd: int,
    pieces: list[Slice],
    slices: int,
    reporter: Reporter,
    dest: str,
    size: int,
    threads: list[threading.Thread],
) -> str:
    stop = threading.Event()
    errors: list[BaseException] = []
    todo = [p for p in pieces if p.remaining > 0]
    lock = threading.Lock()

    def work() -> None:
        try:
            while not stop.is_set():
                with lock:
                    if not todo:
                        return
                    piece = todo.pop(0)
                _fetch_slice(source, fd, piece, stop)
        except BaseException as exc:
            errors.append(exc)
            stop.set()

    hasher = _PrefixHasher(fd, pieces, size, stop)
    hasher.start()
    # Daemon threads: an interrupted run checkpoints and exits without waiting on a stalled socket.
    threads.extend(threading.Thread(target=work, daemon=True) for _ in range(min(max(1, slices), len(todo))))
    for thread in threads:
        thread.start()
    last_checkpoint = time.monotonic()
    with _terminate_as_interrupt():
        try:
            while any(t.is_alive() for t in threads) and not stop.is_set():
                stop.wait(TICK_S)
                reporter.tick(sum(p.done for p in pieces))
                if time.monotonic() - last_checkpoint >= CHECKPOINT_INTERVAL_S:
                    _save_state(dest, source, size, pieces, fd)
                    last_checkpoint = time.monotonic()
            if errors:
                _stop_workers([*threads, hasher.thread], stop)
                _save_state(dest, source, size, pieces, fd)
                raise errors[0]
            reporter.tick(sum(p.done for p in pieces), force=True)
            return hasher.finish()
        except (KeyboardInterrupt, Interrupted):
            _stop_workers([*threads, hasher.thread], stop)
            _save_state(dest, source, size, pieces, fd)
            raise Interrupted("interrupted; rerun to continue from the checkpoint") from None


def _stop_workers(threads: list[threading.Thread], stop: threading.Event) -> None:
    stop.set()
    deadline = time.monotonic() + STOP_GRACE_S
    for thread in threads:
        thread.join(max(0.0, deadline - time.monotonic()))


def _fsync_dir(path: Path) -> None:
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


# ---------------------------------------------------------------------------------- verification


class Hasher(Protocol):
    def update(self, data: bytes, /) -> None: ...


def sha256_file(path: str, callback: ProgressCallback | None = None, also: Sequence[Hasher] = ()) -> str:
    """The file's sha256; ``also`` gets the same bytes (the stage command's crc32c, in the same pass)."""
    digest = hashlib.sha256()
    total = Path(path).stat().st_size
    done = 0
    buffer = bytearray(HASH_BLOCK)
    view = memoryview(buffer)
    with Path(path).open("rb", buffering=0) as handle:
        while True:
            count = handle.readinto(buffer)
            if not count:
                break
            digest.update(view[:count])
            for hasher in also:
                hasher.update(bytes(view[:count]))
            done += count
            if callback:
                callback(done, total)
    return digest.hexdigest()


def verify_file(
    path: str,
    sha256: str,
    size: int | None = None,
    label: str = "",
    callback: ProgressCallback | None = None,
    also: Sequence[Hasher] = (),
) -> None:
    """Raise VerifyError unless the file has exactly this size and sha256."""
    label = label or path
    if not _SHA256_RE.match(sha256):
        raise VerifyError(f"{label}: expected sha256 {sha256!r} is not 64 lowercase hex digits")
    try:
        actual_size = Path(path).stat().st_size
    except OSError as exc:
        raise VerifyError(f"{label}: cannot read {path}: {exc.strerror}") from exc
    if size is not None and actual_size != size:
        raise VerifyError(f"{label}: expected {size} bytes, found {actual_size} (truncated or wrong file)")
    actual = sha256_file(path, callback, also)
    if actual != sha256:
        raise VerifyError(f"{label}: expected sha256 {sha256}, content has {actual}")


# -------------------------------------------------------------------------------------- commands


def fetch_gcs(
    bucket: str,
    name: str,
    dest: str,
    sha256: str = "",
    size: int | None = None,
    slices: int = DEFAULT_SLICES,
    progress_url: str = "",
    callback: ProgressCallback | None = None,
) -> ObjectInfo:
    gcs = Gcs.from_env()
    info = gcs_object_info(gcs, bucket, name)
    expected, total = expected_from_object(info, sha256, size)
    if _already_there(dest, expected, total):
        return info
    source = Source(
        label="gcs",
        url=gcs.media_url(bucket, name, info.generation),
        headers=lambda _url: gcs.auth.headers(),
        identity={"source": "gcs", "object": info.uri, "generation": info.generation, "sha256": expected},
    )
    try:
        download(source, total, expected, dest, slices, progress_url, callback)
    except VerifyError as exc:
        raise VerifyError(f"{exc} (the object's metadata disagrees with its content)") from exc
    except NotFoundError as exc:
        remove_partial(dest)
        raise FetchError(
            f"{info.uri} generation {info.generation} vanished during the download: {exc}"
        ) from exc
    return info


def fetch_hf(
    repo: str,
    revision: str,
    filename: str,
    dest: str,
    sha256: str = "",
    size: int | None = None,
    slices: int = DEFAULT_SLICES,
    progress_url: str = "",
    callback: ProgressCallback | None = None,
) -> HfFile:
    label = f"{repo}@{revision}/{filename}"
    hub = hf_resolve(repo, revision, filename)
    expected, total = expected_from_hub(hub, sha256, size, label)
    if _already_there(dest, expected, total):
        return hub

    def refresh() -> str:
        return hf_resolve(repo, revision, filename).download_url

    source = Source(
        label="huggingface",
        url=hub.download_url,
        headers=_hf_headers,
        identity={"source": "huggingface", "file": label, "sha256": expected},
        refresh=refresh,
        if_range=True,
    )
    download(source, total, expected, dest, slices, progress_url, callback)
    return hub


def _already_there(dest: str, sha256: str, size: int) -> bool:
    """A verified file from an earlier boot is kept; anything else at PATH is replaced."""
    if not Path(dest).exists():
        return False
    try:
        verify_file(dest, sha256, size)
    except VerifyError as exc:
        print(f"fetch: replacing {dest}: {exc}", file=sys.stderr, flush=True)
        return False
    return True


def upload_gcs(
    bucket: str,
    name: str,
    src: str,
    sha256: str,
    callback: ProgressCallback | None = None,
) -> str:
    """Resumable JSON-API upload with sha256 and size as custom metadata; returns what it did.

    The file is verified first and its md5 goes into the session's metadata, so GCS itself refuses
    to finish an upload whose bytes differ from the file's.
    https://cloud.google.com/storage/docs/json_api/v1/objects/insert (md5Hash in the resource)
    """
    gcs = Gcs.from_env()
    size = Path(src).stat().st_size
    state_path = src + ".upload.json"
    try:
        info = gcs_object_info(gcs, bucket, name)
        if info.sha256 == sha256 and info.size == size and info.meta_size in (None, size):
            Path(state_path).unlink(missing_ok=True)
            return "already staged"
    except BucketNotFoundError:
        raise
    except NotFoundError:
        pass
    md5 = hashlib.md5(usedforsecurity=False)
    verify_file(src, sha256, size, label=src, also=[md5])
    md5_b64 = base64.b64encode(md5.digest()).decode("ascii")
    key = {"bucket": bucket, "object": name, "sha256": sha256, "size": size}
    session = _load_upload_session(state_path, key)
    offset = _committed_offset(gcs, session, size) if session else None
    resumed = False
    if session is not None and offset is not None:
        try:
            _send_chunks(gcs, session, src, size, offset, callback)
            resumed = True
        except FetchError as exc:
            print(f"fetch: the earlier upload session failed ({exc}); starting a new one", file=sys.stderr)
    if not resumed:
        session = _start_session(gcs, bucket, name, sha256, size, md5_b64)
        offset = 0
        Path(state_path).write_text(json.dumps({**key, "session": session}), encoding="utf-8")
        _send_chunks(gcs, session, src, size, 0, callback)
    Path(state_path).unlink(missing_ok=True)
    info = gcs_object_info(gcs, bucket, name)
    if info.size != size or info.sha256 != sha256 or (info.md5 and info.md5 != md5_b64):
        raise VerifyError(
            f"gs://{bucket}/{name}: uploaded {size} bytes with sha256 {sha256} and md5 {md5_b64}, the object "
            f"holds {info.size} bytes, sha256 {info.sha256 or '(none)'}, md5 {info.md5 or '(none)'}"
        )
    return "resumed" if offset else "uploaded"


def _load_upload_session(path: str, key: dict[str, Any]) -> str | None:
    try:
        state = json.loads(Path(path).read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None
    if {k: state.get(k) for k in key} != key:
        return None
    return str(state.get("session") or "") or None


def _start_session(gcs: Gcs, bucket: str, name: str, sha256: str, size: int, md5_b64: str) -> str:
    what = f"start an upload to gs://{bucket}/{name}"
    resource = {"name": name, "md5Hash": md5_b64, "metadata": {"sha256": sha256, "size": str(size)}}
    body = json.dumps(resource).encode()
    headers = {
        **gcs.auth.headers(),
        "Content-Type": "application/json; charset=UTF-8",
        "X-Upload-Content-Type": "application/octet-stream",
        "X-Upload-Content-Length": str(size),
    }

    def call() -> str:
        reply = request("POST", gcs.upload_url(bucket, name), headers, body)
        raise_for_status(reply, what)
        location = reply.header("Location")
        reply.close()
        if not location:
            raise FetchError(f"{what}: no session URL in the reply")
        return location

    result: str = with_retries(what, call)
    return result


def _committed_offset(gcs: Gcs, session: str, size: int) -> int | None:
    """Ask the session how much it holds; None when it has expired (sessions last a week)."""
    headers = {**gcs.auth.headers(), "Content-Range": f"bytes */{size}"}
    try:
        reply = with_retries("query the upload session", lambda: request("PUT", session, headers, b""))
    except FetchError:
        return None
    status = reply.status
    committed = _range_end(reply.header("Range"))
    reply.close()
    if status in (200, 201):
        return size
    if status == 308:
        return committed
    return None


def _range_end(value: str) -> int:
    match = re.match(r"bytes=0-(\d+)", value.strip())
    return int(match.group(1)) + 1 if match else 0


def _send_chunks(
    gcs: Gcs, session: str, src: str, size: int, offset: int, callback: ProgressCallback | None
) -> None:
    attempts = 0
    last_log = time.monotonic()
    with Path(src).open("rb") as handle:
        while offset < size:
            handle.seek(offset)
            chunk = handle.read(UPLOAD_CHUNK)
            end = offset + len(chunk)
            headers = {**gcs.auth.headers(), "Content-Range": f"bytes {offset}-{end - 1}/{size}"}
            try:
                committed = _put_chunk(session, headers, chunk, size)
                if committed <= offset:
                    raise TransientError(f"upload a chunk: GCS still holds only {committed} bytes")
                offset = committed
                attempts = 0
            except TransientError as exc:
                attempts += 1
                if attempts >= MAX_ATTEMPTS:
                    raise FetchError(f"upload gave up at byte {offset}: {exc}") from exc
                time.sleep(backoff_s(attempts))
                recovered = _committed_offset(gcs, session, size)
                if recovered is None:
                    raise FetchError(
                        f"upload session expired at byte {offset}; rerun to start again"
                    ) from exc
                offset = recovered
            if callback:
                callback(offset, size)
            elif time.monotonic() - last_log >= LOG_INTERVAL_S:
                last_log = time.monotonic()
                print(f"fetch: uploaded {offset / 1e9:.1f}/{size / 1e9:.1f} GB", file=sys.stderr, flush=True)


def _put_chunk(session: str, headers: dict[str, str], chunk: bytes, size: int) -> int:
    """Send one chunk; returns how many bytes GCS holds afterwards (``size`` once finalized)."""
    reply = request("PUT", session, headers, chunk)
    if reply.status in (200, 201):
        reply.close()
        return size
    if reply.status == 308:
        committed = _range_end(reply.header("Range"))
        reply.close()
        return committed
    raise_for_status(reply, "upload a chunk")
    raise TransientError(f"upload a chunk: unexpected HTTP {reply.status}")


# ------------------------------------------------------------------------------------------- CLI


def _sha256_arg(value: str) -> str:
    value = value.strip().lower()
    if value and not _SHA256_RE.match(value):
        raise argparse.ArgumentTypeError(f"{value!r} is not 64 hex digits")
    return value


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="fetch.py", description=__doc__.split("\n\n")[0])
    sub = parser.add_subparsers(dest="command", required=True)

    gcs = sub.add_parser("gcs", help="download an object from GCS (sliced, resumable, verified)")
    gcs.add_argument("--bucket", required=True)
    gcs.add_argument("--object", required=True)
    hf = sub.add_parser("hf", help="download a file from the Hugging Face hub (resumable, verified)")
    hf.add_argument("--repo", required=True)
    hf.add_argument("--revision", default="main")
    hf.add_argument("--file", required=True)
    for download_parser in (gcs, hf):
        download_parser.add_argument("--dest", required=True)
        download_parser.add_argument("--sha256", type=_sha256_arg, default="")
        download_parser.add_argument("--size", type=int, default=None)
        download_parser.add_argument("--slices", type=int, default=DEFAULT_SLICES)
        download_parser.add_argument("--progress-url", default="")

    upload = sub.add_parser("upload", help="resumable upload with sha256 and size metadata")
    upload.add_argument("--bucket", required=True)
    upload.add_argument("--object", required=True)
    upload.add_argument("--src", required=True)
    upload.add_argument("--sha256", type=_sha256_arg, required=True)

    verify = sub.add_parser("verify", help="check a file's size and sha256")
    verify.add_argument("--path", required=True)
    verify.add_argument("--sha256", type=_sha256_arg, required=True)
    verify.add_argument("--size", type=int, default=None)
    return parser


def main(argv: list[str] | None = None) -> int:
    """Run one command; stdout gets one line on success (with the verified sha256), stderr the rest."""
    args = _parser().parse_args(argv)
    started = time.monotonic()
    try:
        if args.command == "gcs":
            info = fetch_gcs(
                args.bucket, args.object, args.dest, args.sha256, args.size, args.slices, args.progress_url
            )
            what, sha256 = f"gs://{args.bucket}/{args.object}", args.sha256 or info.sha256
        elif args.command == "hf":
            hub = fetch_hf(
                args.repo,
                args.revision,
                args.file,
                args.dest,
                args.sha256,
                args.size,
                args.slices,
                args.progress_url,
            )
            what, sha256 = f"{args.repo}@{args.revision}/{args.file}", args.sha256 or hub.sha256
        elif args.command == "upload":
            outcome = upload_gcs(args.bucket, args.object, args.src, args.sha256)
            print(f"fetch: gs://{args.bucket}/{args.object}: {outcome}, sha256 {args.sha256}", flush=True)
            return EXIT_OK
        else:
            verify_file(args.path, args.sha256, args.size)
            print(f"fetch: {args.path}: verified sha256 {args.sha256}", flush=True)
            return EXIT_OK
    except FetchError as exc:
        print(f"fetch: {exc}", file=sys.stderr, flush=True)
        return exc.exit_code
    except KeyboardInterrupt:
        print("fetch: interrupted", file=sys.stderr, flush=True)
        return EXIT_INTERRUPTED
    except OSError as exc:
        print(f"fetch: {exc.__class__.__name__}: {exc}", file=sys.stderr, flush=True)
        return EXIT_ERROR
    elapsed = time.monotonic() - started
    size = Path(args.dest).stat().st_size
    print(
        f"fetch: {what} -> {args.dest}: {size / 1e9:.2f} GB in {elapsed:.0f} s, verified sha256 {sha256}",
        flush=True,
    )
    return EXIT_OK


if __name__ == "__main__":
    sys.exit(main())
