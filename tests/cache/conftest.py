"""Fixtures for the model-cache tests: gcp-storage-emulator on loopback, the local hub, test files.

The emulator is the real google-cloud-storage JSON API on loopback, in this process, in memory; it
is wiped after every test so the ~128 MB objects do not pile up.
"""

from __future__ import annotations

import hashlib
import json
import random
import socket
import struct
import threading
import uuid
from collections.abc import Iterator
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import pytest
from gcp_storage_emulator.server import Server, create_server
from google.cloud import storage

from tests.cache.hf_server import HfServer
from tests.cache.proxy import CountingProxy

REPO_ROOT = Path(__file__).resolve().parents[2]
MIB = 1024 * 1024
# The issue asks for staging a 100-200 MB file; the other tests use a small one to stay fast.
BIG_FILE_BYTES = 128 * MIB
SMALL_FILE_BYTES = 24 * MIB + 12345
SUBPROCESS_TIMEOUT_S = 120


@dataclass(frozen=True)
class Blob:
    path: Path
    sha256: str
    size: int


def gguf_header(architecture: str = "qwen35moe") -> bytes:
    """The start of a GGUF file: magic, version 3, one tensor, one metadata pair naming the
    architecture (https://github.com/ggml-org/ggml/blob/master/docs/gguf.md). ``stage`` reads no
    further than this, so the rest of a test file can be random."""
    key, value = b"general.architecture", architecture.encode()
    return (
        b"GGUF"
        + struct.pack("<IQQ", 3, 1, 1)
        + struct.pack("<Q", len(key))
        + key
        + struct.pack("<IQ", 8, len(value))
        + value
    )


def _write_random(path: Path, size: int, seed: int) -> Blob:
    """A GGUF header of the stack's architecture, then incompressible, reproducible bytes, written a
    block at a time (no size-sized buffer in memory)."""
    digest = hashlib.sha256()
    rng = random.Random(seed)
    with path.open("wb") as handle:
        header = gguf_header()
        handle.write(header)
        digest.update(header)
        written = len(header)
        while written < size:
            chunk = rng.randbytes(min(MIB, size - written))
            handle.write(chunk)
            digest.update(chunk)
            written += len(chunk)
    return Blob(path, digest.hexdigest(), size)


@pytest.fixture(scope="session")
def big_file(tmp_path_factory: pytest.TempPathFactory) -> Blob:
    return _write_random(tmp_path_factory.mktemp("files") / "big.gguf", BIG_FILE_BYTES, seed=1)


@pytest.fixture(scope="session")
def small_file(tmp_path_factory: pytest.TempPathFactory) -> Blob:
    return _write_random(tmp_path_factory.mktemp("files") / "small.gguf", SMALL_FILE_BYTES, seed=2)


@pytest.fixture(scope="session")
def other_small_file(tmp_path_factory: pytest.TempPathFactory) -> Blob:
    return _write_random(tmp_path_factory.mktemp("files") / "other.gguf", SMALL_FILE_BYTES, seed=3)


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port: int = sock.getsockname()[1]
        return port


@dataclass
class Emulator:
    server: Server
    port: int

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"


@pytest.fixture(scope="session")
def emulator() -> Iterator[Emulator]:
    port = free_port()
    server = create_server("127.0.0.1", port, in_memory=True)
    server.start()
    # A client the tests cut off mid-request (tests/cache/proxy.py's drop) makes socketserver print
    # the handler's traceback to this process's stderr, which the CLI tests capture and read as the
    # command's own output: the emulator's handler errors are the test's doing, not the command's.
    server._api._httpd.handle_error = lambda request, client_address: None
    yield Emulator(server, port)
    server.stop()


@dataclass
class Gcs:
    """A fresh bucket on the emulator, and a client for it, with STORAGE_EMULATOR_HOST set."""

    client: storage.Client
    bucket: storage.Bucket
    endpoint: str

    def put(self, name: str, blob: Blob, metadata: dict[str, str] | None = None) -> storage.Blob:
        obj = self.bucket.blob(name)
        obj.metadata = metadata if metadata is not None else {"sha256": blob.sha256, "size": str(blob.size)}
        obj.upload_from_filename(str(blob.path))
        return obj


@pytest.fixture
def gcs(emulator: Emulator, monkeypatch: pytest.MonkeyPatch) -> Iterator[Gcs]:
    monkeypatch.setenv("STORAGE_EMULATOR_HOST", emulator.url)
    client = storage.Client()
    bucket = client.create_bucket(f"models-{uuid.uuid4().hex[:12]}")
    yield Gcs(client, bucket, emulator.url)
    emulator.server.wipe()


@pytest.fixture
def proxy(emulator: Emulator, monkeypatch: pytest.MonkeyPatch) -> Iterator[CountingProxy]:
    """The emulator seen through a byte-counting proxy: STORAGE_EMULATOR_HOST points at the proxy."""
    counting = CountingProxy(emulator.port)
    monkeypatch.setenv("STORAGE_EMULATOR_HOST", counting.url)
    yield counting
    counting.close()


@pytest.fixture(autouse=True)
def _no_real_hub(monkeypatch: pytest.MonkeyPatch) -> None:
    """No test reaches huggingface.co: the hub is a closed loopback port unless ``hub`` serves one."""
    monkeypatch.setenv("HF_ENDPOINT", f"http://127.0.0.1:{free_port()}")


@pytest.fixture
def hub(monkeypatch: pytest.MonkeyPatch) -> Iterator[HfServer]:
    # The CDN on another host name, as on the real hub (huggingface_hub reads the metadata off the
    # redirect to it).
    with HfServer(cdn_host="localhost") as server:
        monkeypatch.setenv("HF_ENDPOINT", server.base_url)
        monkeypatch.setenv("HF_HUB_DISABLE_TELEMETRY", "1")
        monkeypatch.delenv("HF_TOKEN", raising=False)
        yield server


@dataclass
class Recorder:
    """A stand-in for the metadata server's guest-attribute endpoint: records PUTs."""

    url: str
    puts: list[tuple[str, str, str]] = field(default_factory=list)


@pytest.fixture
def progress_sink() -> Iterator[Recorder]:
    recorder = Recorder("")

    class Handler(BaseHTTPRequestHandler):
        def do_PUT(self) -> None:
            body = self.rfile.read(int(self.headers.get("Content-Length", "0"))).decode()
            recorder.puts.append((self.path, self.headers.get("Metadata-Flavor", ""), body))
            self.send_response(200)
            self.send_header("Content-Length", "0")
            self.end_headers()

        def log_message(self, format: str, *args: object) -> None:
            pass

    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    recorder.url = f"http://127.0.0.1:{server.server_address[1]}/computeMetadata/v1/instance/guest-attributes/qwen36/detail"
    yield recorder
    server.shutdown()
    server.server_close()


@pytest.fixture
def forbidding_gcs(monkeypatch: pytest.MonkeyPatch) -> Iterator[str]:
    """A storage endpoint that refuses everything with 403, as GCS does for credentials without access
    (the emulator has no permissions to deny)."""

    class Handler(BaseHTTPRequestHandler):
        def _deny(self) -> None:
            body = json.dumps(
                {"error": {"code": 403, "message": "caller does not have storage.objects.get access"}}
            ).encode()
            self.send_response(403)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        do_GET = do_POST = do_PUT = _deny

        def log_message(self, format: str, *args: object) -> None:
            pass

    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    url = f"http://127.0.0.1:{server.server_address[1]}"
    monkeypatch.setenv("STORAGE_EMULATOR_HOST", url)
    yield url
    server.shutdown()
    server.server_close()
