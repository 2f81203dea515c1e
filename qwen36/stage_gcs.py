"""The stage command's GCS side: the bucket check, the idempotency check and the resumable upload.

google-cloud-storage creates the upload session; google-resumable-media (its own dependency) sends
the chunks and, after an interruption, asks GCS which bytes it already holds and seeks there. The
session URL lives in a state file keyed by bucket, object and sha256, so a rerun resumes.
https://cloud.google.com/storage/docs/performing-resumable-uploads#resume-upload
"""

from __future__ import annotations

import hashlib
import http.client
import json
import time
from pathlib import Path
from typing import IO, Any

import urllib3
from google.api_core import exceptions
from google.auth.exceptions import DefaultCredentialsError
from google.cloud import storage
from google.cloud.storage.retry import DEFAULT_RETRY
from google.resumable_media import common
from google.resumable_media.requests import ResumableUpload
from requests import exceptions as http_errors

from qwen36.errors import Exit
from qwen36.stage_common import EXIT_VERIFY, ProgressCallback, Say, StageError, Target, backoff_s

CONTENT_TYPE = "application/octet-stream"
GCS_TIMEOUT_S = 120
# Chunk failures in a row before the run stops (the state file keeps the session for a rerun), and
# the library's own retrying of one chunk, capped well below its 10-minute default.
MAX_CHUNK_ATTEMPTS = 5
CHUNK_RETRY_S = 60.0
# The bucket check is the first request: bounded, so an unreachable GCS is named within seconds
# instead of after the client's default two minutes of retries, yet a transient 429/5xx or a
# dropped connection is still retried (google-cloud-storage's own policy, with a shorter deadline).
BUCKET_CHECK_TIMEOUT_S = 30
BUCKET_RETRY_DEADLINE_S = 10.0
# What a chunk's send or a recover can end in once the library's own retries are spent: it retries
# http.client's and urllib3's errors beside requests' and re-raises the last one as it came
# (google/resumable_media/requests/_request_helpers.py, _CONNECTION_ERROR_CLASSES), and those two
# are neither OSError nor requests' own.
TRANSFER_ERRORS = (
    common.InvalidResponse,
    http_errors.RequestException,
    http.client.HTTPException,
    urllib3.exceptions.HTTPError,
    OSError,
)


def storage_client() -> storage.Client:
    try:
        return storage.Client()
    except DefaultCredentialsError as exc:
        raise StageError(
            f"no Google credentials ({exc}); run `gcloud auth application-default login`",
            Exit.NO_CREDENTIALS,
        ) from None


def readable_bucket(client: storage.Client, name: str) -> storage.Bucket:
    """The bucket, checked up front: a wrong name or a missing permission fails before any download."""
    try:
        retry = DEFAULT_RETRY.with_deadline(BUCKET_RETRY_DEADLINE_S)
        return client.get_bucket(name, timeout=BUCKET_CHECK_TIMEOUT_S, retry=retry)
    except exceptions.NotFound:
        raise StageError(
            f"bucket gs://{name} does not exist; deploy the stack first (`pulumi up`) or pass --bucket",
            Exit.NOT_FOUND,
        ) from None
    except exceptions.Forbidden as exc:
        raise StageError(
            f"the credentials in use cannot read bucket gs://{name}: {exc.message}", Exit.DENIED
        ) from None
    except (exceptions.GoogleAPIError, http_errors.RequestException, OSError) as exc:
        # A spent retry carries the last failure as its cause: that is what to name.
        last = exc.cause if isinstance(exc, exceptions.RetryError) and exc.cause is not None else exc
        spent = f", retried for {BUCKET_RETRY_DEADLINE_S:g} s" if last is not exc else ""
        raise StageError(
            f"cannot reach GCS to check bucket gs://{name} ({last.__class__.__name__}: {last}){spent}; "
            "check the network or proxy and rerun",
            Exit.UNREACHABLE,
        ) from None


def staged_state(
    bucket: storage.Bucket, name: str, sha256: str, size: int, crc32c: str = ""
) -> tuple[bool, str]:
    """Whether the object already holds exactly this file, and what it holds otherwise. With the
    verified file's ``crc32c`` at hand, an object whose bytes differ from it while its metadata
    claims the same sha256 is found out (and then replaced): GCS computed its CRC32C from its bytes."""
    blob = _get_blob(bucket, name)
    if blob is None:
        return False, "not staged yet"
    metadata = blob.metadata or {}
    found_sha = metadata.get("sha256", "")
    found_size = metadata.get("size", "")
    if found_sha == sha256 and blob.size == size and found_size in ("", str(size)):
        if crc32c and blob.crc32c != crc32c:
            return False, (
                f"the object claims sha256 {sha256} but its crc32c {blob.crc32c} is not the verified "
                f"file's {crc32c} (a corrupt cache object): replacing it"
            )
        return True, "already staged"
    return False, (
        f"the object holds sha256 {found_sha or '(none)'}, {blob.size} bytes (metadata size "
        f"{found_size or '(none)'}); expected sha256 {sha256}, {size} bytes: replacing it"
    )


class SessionUpload(ResumableUpload):
    """A ResumableUpload attached to an existing session URL. The library only starts new sessions,
    but its ``recover()`` (ask GCS for the committed offset, seek the stream there) is what a rerun
    needs; the first four fields are what ``initiate()`` would have set."""

    def __init__(self, url: str, stream: IO[bytes], size: int, chunk_size: int) -> None:
        super().__init__(url, chunk_size)
        self._resumable_url = url
        self._stream = self._source = stream
        self._total_bytes = size
        self._content_type = CONTENT_TYPE
        self._retry_strategy = common.RetryStrategy(max_cumulative_retry=CHUNK_RETRY_S)

    def align_stream(self) -> None:
        """Read the next chunk from the first byte GCS has not persisted. A 308 may persist fewer
        bytes than the chunk carried ("you should not assume that the server received all bytes
        sent in any given request",
        https://cloud.google.com/storage/docs/performing-resumable-uploads#chunked-upload); the
        library then records GCS's offset but reads on from where the stream is, and refuses the
        next chunk with a ValueError."""
        if self._source.tell() != self.bytes_uploaded:
            self._source.seek(self.bytes_uploaded)


def _get_blob(bucket: storage.Bucket, name: str) -> storage.Blob | None:
    try:
        return bucket.get_blob(name, timeout=GCS_TIMEOUT_S)
    except (exceptions.GoogleAPIError, http_errors.RequestException, OSError) as exc:
        raise StageError(
            f"cannot read gs://{bucket.name}/{name} ({exc.__class__.__name__}); rerun", Exit.UNREACHABLE
        ) from None


def state_file(cache_dir: Path, target: Target, sha256: str) -> Path:
    key = hashlib.sha256(f"{target.bucket}/{target.name}/{sha256}".encode()).hexdigest()[:24]
    return cache_dir / "uploads" / f"{key}.json"


def upload(
    client: storage.Client,
    bucket: storage.Bucket,
    target: Target,
    path: Path,
    sha256: str,
    size: int,
    crc32c: str,
    cache_dir: Path,
    chunk_size: int,
    say: Say,
    on_progress: ProgressCallback,
) -> str:
    """Resumable upload into ``target``; afterwards the object's size, metadata and crc32c must match."""
    state = state_file(cache_dir, target, sha256)
    transport = client._http
    with path.open("rb") as stream:
        session = _resume(state, stream, size, chunk_size, transport, say)
        resumed_at = session.bytes_uploaded if session else 0
        if session is None:
            url = _new_session(client, bucket, target, sha256, size)
            try:
                state.parent.mkdir(parents=True, exist_ok=True)
                state.write_text(json.dumps({"uri": target.uri, "sha256": sha256, "size": size, "url": url}))
            except OSError as exc:
                raise StageError(
                    f"cannot keep the upload state in {state.parent}: {exc.strerror} (--cache-dir)",
                    Exit.LOCAL_IO,
                ) from None
            session = SessionUpload(url, stream, size, chunk_size)
        on_progress(resumed_at, size)
        _transmit(session, transport, size, on_progress)
    state.unlink(missing_ok=True)
    check_uploaded(bucket, target, sha256, size, crc32c)
    if resumed_at:
        say(f"{target.uri}: resumed at byte {resumed_at}, sent the remaining {size - resumed_at}")
        return "resumed"
    return "uploaded"


def _transmit(session: SessionUpload, transport: Any, size: int, on_progress: ProgressCallback) -> None:
    failures = 0
    while not session.finished:
        try:
            if failures:
                # Ask GCS which bytes it holds, then continue from there.
                session.recover(transport)
            session.align_stream()
            session.transmit_next_chunk(transport, timeout=GCS_TIMEOUT_S)
            failures = 0
        except TRANSFER_ERRORS as exc:
            failures += 1
            if failures >= MAX_CHUNK_ATTEMPTS:
                raise StageError(
                    f"upload stopped at byte {session.bytes_uploaded} of {size} after {failures} failures "
                    f"({exc.__class__.__name__}: {exc}); rerun to resume from there",
                    Exit.UNREACHABLE,
                ) from None
            time.sleep(backoff_s(failures))
        on_progress(session.bytes_uploaded, size)


def _new_session(
    client: storage.Client, bucket: storage.Bucket, target: Target, sha256: str, size: int
) -> str:
    blob = bucket.blob(target.name)
    blob.metadata = {"sha256": sha256, "size": str(size)}
    try:
        url: str = blob.create_resumable_upload_session(
            content_type=CONTENT_TYPE, size=size, client=client, timeout=GCS_TIMEOUT_S, checksum=None
        )
    except (exceptions.GoogleAPIError, http_errors.RequestException, OSError) as exc:
        raise StageError(
            f"cannot start the upload to {target.uri} ({exc.__class__.__name__}); rerun", Exit.UNREACHABLE
        ) from None
    return url


def _resume(
    state: Path, stream: IO[bytes], size: int, chunk_size: int, transport: Any, say: Say
) -> SessionUpload | None:
    """Continue an earlier run's session at the offset GCS reports; None when there is none to continue."""
    try:
        saved = json.loads(state.read_text(encoding="utf-8"))
        url = str(saved["url"])
    except (OSError, ValueError, KeyError):
        return None
    if saved.get("size") != size:
        return None
    session = SessionUpload(url, stream, size, chunk_size)
    try:
        session.recover(transport)
    except TRANSFER_ERRORS as exc:
        status = getattr(getattr(exc, "response", None), "status_code", None)
        if isinstance(exc, common.InvalidResponse) and status not in common.RETRYABLE:
            # Sessions expire after a week, and a finished one no longer answers 308: start anew.
            # https://cloud.google.com/storage/docs/resumable-uploads#session-uris
            say(f"the earlier upload session cannot be resumed (HTTP {status}); starting again")
            state.unlink(missing_ok=True)
            return None
        # GCS out of reach, or busy, says nothing of the session: keep it for the next run.
        why = f"HTTP {status}" if status else type(exc).__name__
        raise StageError(
            f"cannot reach GCS to resume the earlier upload ({why}); the session is kept: rerun to resume",
            Exit.UNREACHABLE,
        ) from None
    say(f"resuming the earlier upload: GCS holds {session.bytes_uploaded} of {size} bytes")
    return session


def check_uploaded(bucket: storage.Bucket, target: Target, sha256: str, size: int, crc32c: str) -> None:
    """What GCS stored must be what was read here; a bad object is deleted, never left for a VM."""
    blob = _get_blob(bucket, target.name)
    if blob is None:
        raise StageError(f"{target.uri} is missing right after its upload finished")
    metadata = blob.metadata or {}
    problems = []
    if blob.size != size:
        problems.append(f"{blob.size} bytes, expected {size} (a truncated upload)")
    if metadata.get("sha256") != sha256 or metadata.get("size") != str(size):
        problems.append(f"metadata {metadata}, expected sha256 {sha256} and size {size}")
    if blob.crc32c != crc32c:
        problems.append(f"crc32c {blob.crc32c}, the local file has {crc32c}")
    if problems:
        blob.delete(timeout=GCS_TIMEOUT_S)
        raise StageError(f"{target.uri} was deleted: it held " + "; ".join(problems), EXIT_VERIFY)
