"""The few GCS JSON API calls the sandbox makes against gcp-storage-emulator, standard library only:
object metadata, ranged media reads, a multipart upload with custom metadata, a metadata patch.
https://cloud.google.com/storage/docs/json_api/v1/objects

Shared by tests/boot/gcloud_storage.py (the sandbox's `gcloud storage`) and tests/boot/world.py
(staging the model the way `qwen36 stage` leaves it: sha256 and size as custom metadata).
"""

from __future__ import annotations

import json
import urllib.error
import urllib.parse
import urllib.request
from typing import Any

TIMEOUT_S = 60
BOUNDARY = "qwen36-sandbox-boundary"


class GcsError(Exception):
    def __init__(self, status: int, message: str) -> None:
        super().__init__(f"HTTPError {status}: {message}")
        self.status = status


def _object_path(bucket: str, name: str) -> str:
    return f"/storage/v1/b/{bucket}/o/{urllib.parse.quote(name, safe='')}"


def _call(request: urllib.request.Request) -> bytes:
    try:
        with urllib.request.urlopen(request, timeout=TIMEOUT_S) as reply:
            data: bytes = reply.read()
            return data
    except urllib.error.HTTPError as exc:
        raise GcsError(exc.code, exc.read().decode(errors="replace")[:300]) from None


def get_object(endpoint: str, bucket: str, name: str) -> dict[str, Any]:
    data: dict[str, Any] = json.loads(_call(urllib.request.Request(endpoint + _object_path(bucket, name))))
    return data


def read_range(endpoint: str, bucket: str, name: str, generation: str, start: int, end: int) -> bytes:
    """Bytes [start, end) of one generation."""
    query = urllib.parse.urlencode({"alt": "media", "generation": generation})
    request = urllib.request.Request(
        f"{endpoint}/download{_object_path(bucket, name)}?{query}",
        headers={"Range": f"bytes={start}-{end - 1}"},
    )
    data = _call(request)
    if len(data) > end - start:
        # A server that ignored the Range header sent the whole object.
        data = data[start:end]
    return data


def upload(endpoint: str, bucket: str, name: str, data: bytes, metadata: dict[str, str]) -> dict[str, Any]:
    head = json.dumps({"name": name, "metadata": metadata}).encode()
    body = (
        f"--{BOUNDARY}\r\nContent-Type: application/json; charset=UTF-8\r\n\r\n".encode()
        + head
        + f"\r\n--{BOUNDARY}\r\nContent-Type: application/octet-stream\r\n\r\n".encode()
        + data
        + f"\r\n--{BOUNDARY}--\r\n".encode()
    )
    request = urllib.request.Request(
        f"{endpoint}/upload/storage/v1/b/{bucket}/o?uploadType=multipart",
        data=body,
        headers={"Content-Type": f"multipart/related; boundary={BOUNDARY}"},
        method="POST",
    )
    result: dict[str, Any] = json.loads(_call(request))
    return result


def patch_metadata(endpoint: str, bucket: str, name: str, metadata: dict[str, str]) -> dict[str, Any]:
    request = urllib.request.Request(
        endpoint + _object_path(bucket, name),
        data=json.dumps({"metadata": metadata}).encode(),
        headers={"Content-Type": "application/json"},
        method="PATCH",
    )
    result: dict[str, Any] = json.loads(_call(request))
    return result
