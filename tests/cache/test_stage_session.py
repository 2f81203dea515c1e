"""The upload's session protocol where gcp-storage-emulator cannot go: a chunk GCS persists only in
part, and a rerun that cannot reach GCS to resume.

The session endpoint here answers the shapes of the JSON API's resumable upload
(https://cloud.google.com/storage/docs/performing-resumable-uploads#chunked-upload): a chunk is a
``PUT`` with ``Content-Range: bytes FIRST-LAST/TOTAL``; until the last byte the answer is ``308``
with ``Range: bytes=0-N`` naming what is persisted, which the page says may be less than was sent;
the last byte's answer is ``200`` with the object's resource. The emulator always persists a whole
chunk, so it cannot show the first case.
"""

from __future__ import annotations

import io
import json
import random
import re
import socket
import threading
from http.server import BaseHTTPRequestHandler
from pathlib import Path

import pytest
import requests

from qwen36 import stage_gcs
from qwen36.errors import Exit
from qwen36.stage_common import StageError, Target
from tests.harness.loopback import JsonHandler, serve_on_loopback

CHUNK = 256 * 1024  # the chunk size the JSON API requires a multiple of
SIZE = 4 * CHUNK + 1000
_RANGE = re.compile(r"bytes (\d+)-(\d+)/(\d+)")


class _Session:
    def __init__(self) -> None:
        self.persisted = bytearray()
        self.lock = threading.Lock()
        self.short_chunks = 1  # chunks of which only the first half is kept
        self.refused: list[str] = []


def _session_handler(session: _Session) -> type[BaseHTTPRequestHandler]:
    class Handler(JsonHandler):
        def do_PUT(self) -> None:
            body = self.rfile.read(int(self.headers.get("Content-Length", "0")))
            with session.lock:
                match = _RANGE.fullmatch(self.headers.get("Content-Range", ""))
                if match:
                    first, last, total = (int(g) for g in match.groups())
                    if first != len(session.persisted) or last - first + 1 != len(body):
                        # GCS takes a chunk only from the first byte it lacks.
                        session.refused.append(self.headers["Content-Range"])
                        self._answer(400)
                        return
                    if session.short_chunks and last + 1 < total:
                        session.short_chunks -= 1
                        body = body[: len(body) // 2]
                    session.persisted += body
                    if len(session.persisted) == total:
                        self._json(200, {"name": "model.gguf", "size": str(total)})
                        return
                if session.persisted:
                    self._answer(308, headers={"Range": f"bytes=0-{len(session.persisted) - 1}"})
                else:
                    self._answer(308)

        def _answer(self, status: int, headers: dict[str, str] | None = None) -> None:
            self.send_response(status)
            for name, value in (headers or {}).items():
                self.send_header(name, value)
            self.send_header("Content-Length", "0")
            self.end_headers()

    return Handler


def test_a_chunk_gcs_persists_in_part_is_sent_again_from_where_gcs_stopped() -> None:
    data = random.Random(5).randbytes(SIZE)
    session = _Session()
    with serve_on_loopback(_session_handler(session)) as url:
        upload = stage_gcs.SessionUpload(f"{url}/upload/session", io.BytesIO(data), SIZE, CHUNK)
        seen: list[int] = []
        stage_gcs._transmit(upload, requests.Session(), SIZE, lambda done, _total: seen.append(done))
    assert upload.finished
    assert session.refused == [], "every chunk started at the first byte GCS lacked"
    assert bytes(session.persisted) == data
    assert seen[0] == CHUNK // 2, "the first chunk's progress is what GCS kept, not what was sent"


def _closed_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def test_a_rerun_that_cannot_reach_gcs_keeps_the_session_to_resume_later(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(stage_gcs, "CHUNK_RETRY_S", 0.5)
    target = Target(bucket="b", name="model.gguf")
    state = stage_gcs.state_file(tmp_path, target, "ab" * 32)
    state.parent.mkdir(parents=True)
    url = f"http://127.0.0.1:{_closed_port()}/upload/session"
    state.write_text(json.dumps({"uri": target.uri, "sha256": "ab" * 32, "size": SIZE, "url": url}))

    with pytest.raises(StageError) as failure:
        stage_gcs._resume(state, io.BytesIO(bytes(SIZE)), SIZE, CHUNK, requests.Session(), print)

    assert failure.value.exit_code == Exit.UNREACHABLE
    assert failure.value.message == (
        "cannot reach GCS to resume the earlier upload (ConnectionError); "
        "the session is kept: rerun to resume"
    )
    assert json.loads(state.read_text())["url"] == url


def test_a_session_gcs_no_longer_knows_is_started_again(tmp_path: Path) -> None:
    class Gone(JsonHandler):
        def do_PUT(self) -> None:
            self.send_response(410)
            self.send_header("Content-Length", "0")
            self.end_headers()

    said: list[str] = []
    target = Target(bucket="b", name="model.gguf")
    state = stage_gcs.state_file(tmp_path, target, "cd" * 32)
    state.parent.mkdir(parents=True)
    with serve_on_loopback(Gone) as base:
        state.write_text(json.dumps({"size": SIZE, "url": f"{base}/upload/session"}))
        stream = io.BytesIO(bytes(SIZE))
        resumed = stage_gcs._resume(state, stream, SIZE, CHUNK, requests.Session(), said.append)
    assert resumed is None
    assert said == ["the earlier upload session cannot be resumed (HTTP 410); starting again"]
    assert not state.exists()
