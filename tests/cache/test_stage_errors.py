"""``python -m qwen36 stage`` never ends in a traceback: each failure is one line and an exit code.

Real google-cloud-storage against gcp-storage-emulator (through tests/cache/proxy.py where the
connection must drop); the unreachable GCS is a closed loopback port.
"""

from __future__ import annotations

import random
import socket
import threading
import urllib.request
from http.server import BaseHTTPRequestHandler
from pathlib import Path

import pytest
import yaml
from google.cloud import storage

from qwen36 import stage_gcs
from qwen36.__main__ import main
from qwen36.errors import Exit
from tests.cache.conftest import Blob, Gcs, gguf_header
from tests.cache.hf_server import HfServer
from tests.cache.proxy import CountingProxy
from tests.harness.loopback import serve_on_loopback

STACK = "test"
STALL_WAIT_S = 60.0
DEFAULT_REPO = "unsloth/Qwen3.6-35B-A3B-MTP-GGUF"
DEFAULT_FILE = "Qwen3.6-35B-A3B-UD-Q4_K_XL.gguf"
REPO_FILE = f"{DEFAULT_REPO}@main/{DEFAULT_FILE}"


def _project(tmp_path: Path, **config: object) -> Path:
    project = tmp_path / "project"
    project.mkdir(exist_ok=True)
    values = {"gcp:project": "my-project", **{f"qwen36-mtp-l4:{k}": v for k, v in config.items()}}
    (project / f"Pulumi.{STACK}.yaml").write_text(yaml.safe_dump({"config": values}))
    return project


def _stage(
    capsys: pytest.CaptureFixture[str], project: Path, *extra: str, cache: Path | None = None
) -> tuple[int, str]:
    args = [
        "stage",
        "--stack",
        STACK,
        "--project-dir",
        str(project),
        "--cache-dir",
        str(cache or project / "cache"),
    ]
    code = main([*args, *extra])
    captured = capsys.readouterr()
    out = captured.out + captured.err
    assert "Traceback" not in out
    return code, out


def _closed_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def test_gcs_unreachable_at_the_bucket_check(
    small_file: Blob, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.setenv("STORAGE_EMULATOR_HOST", f"http://127.0.0.1:{_closed_port()}")
    code, out = _stage(capsys, _project(tmp_path), "--from-file", str(small_file.path), "--bucket", "bk1")
    assert code == Exit.UNREACHABLE
    assert "stage: error: cannot reach GCS to check bucket gs://bk1 (ConnectionError" in out
    assert "check the network or proxy and rerun" in out


def test_a_connection_drop_mid_upload_says_rerun_to_resume(
    gcs: Gcs,
    proxy: CountingProxy,
    small_file: Blob,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    monkeypatch.setattr(stage_gcs, "MAX_CHUNK_ATTEMPTS", 2)
    # The library's own retrying of each send and recover, 60 s apiece when unpatched.
    monkeypatch.setattr(stage_gcs, "CHUNK_RETRY_S", 2.0)
    proxy.stall_after(small_file.size // 2)

    def cut() -> None:
        # GCS goes away for good mid-upload: every connection dropped, no new one accepted.
        if proxy.stalled.wait(STALL_WAIT_S):
            proxy.close()

    threading.Thread(target=cut, daemon=True).start()
    code, out = _stage(
        capsys,
        _project(tmp_path, modelSizeBytes=small_file.size),  # no hub here: pinned by size
        "--from-file",
        str(small_file.path),
        "--bucket",
        gcs.bucket.name,
        "--chunk-mib",
        "4",
    )
    assert code == Exit.UNREACHABLE, out
    assert "stage: error: upload stopped at byte " in out
    assert "rerun to resume from there" in out


def test_from_file_that_is_a_directory(gcs: Gcs, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    folder = tmp_path / "models"
    folder.mkdir()
    code, out = _stage(capsys, _project(tmp_path), "--from-file", str(folder), "--bucket", gcs.bucket.name)
    assert code == Exit.USAGE
    assert f"stage: error: --from-file {folder}: a directory; pass the .gguf file itself" in out


def test_cache_dir_that_cannot_be_created(
    gcs: Gcs, small_file: Blob, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    blocker = tmp_path / "not-a-dir"
    blocker.write_text("a file where the cache directory should go")
    code, out = _stage(
        capsys,
        _project(tmp_path),
        "--from-file",
        str(small_file.path),
        "--bucket",
        gcs.bucket.name,
        cache=blocker / "cache",
    )
    assert code == Exit.LOCAL_IO
    assert (
        f"stage: error: cannot create the cache directory {blocker / 'cache'}: Not a directory (--cache-dir)"
        in out
    )


@pytest.mark.parametrize("chunk", ["0", "-3"])
def test_a_chunk_size_of_zero_or_below_is_rejected(
    gcs: Gcs, small_file: Blob, tmp_path: Path, capsys: pytest.CaptureFixture[str], chunk: str
) -> None:
    code, out = _stage(
        capsys,
        _project(tmp_path),
        "--from-file",
        str(small_file.path),
        "--bucket",
        gcs.bucket.name,
        "--chunk-mib",
        chunk,
    )
    assert code == Exit.USAGE
    assert (
        f"stage: error: argument --chunk-mib: --chunk-mib {chunk}: must be a positive "
        "number of MiB up to 1024 (see qwen36 stage --help)"
    ) in out


def test_a_corrupt_object_claiming_the_right_sha256_is_found_by_crc32c_and_replaced(
    gcs: Gcs, small_file: Blob, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    bad = tmp_path / "bad.gguf"
    data = bytearray(small_file.path.read_bytes())
    data[len(data) // 2] ^= 0x04
    bad.write_bytes(bytes(data))
    gcs.put(stage_object(), Blob(bad, small_file.sha256, small_file.size))
    code, out = _stage(
        capsys,
        _project(tmp_path, modelSha256=small_file.sha256),
        "--from-file",
        str(small_file.path),
        "--bucket",
        gcs.bucket.name,
    )
    assert code == 0, out
    assert "(a corrupt cache object): replacing it" in out
    blob = gcs.bucket.get_blob(stage_object())
    assert blob is not None and blob.download_as_bytes() == small_file.path.read_bytes()


def stage_object() -> str:
    return "models/unsloth/Qwen3.6-35B-A3B-MTP-GGUF/Qwen3.6-35B-A3B-UD-Q4_K_XL.gguf"


# --- issue 21: stage refused nothing, and tracebacked on a missing hub or a file as --project-dir ---


def _small(path: Path, head: bytes, size: int = 64 * 1024) -> Path:
    path.write_bytes(head + random.Random(7).randbytes(size - len(head)))
    return path


@pytest.mark.parametrize(
    ("name", "head", "why"),
    [
        ("notes.gguf", b"just some text, not a model\n", "it starts with b'just', not the GGUF magic"),
        ("noise.gguf", b"", "not the GGUF magic"),
        ("cut.gguf", b"GGUF\x03\x00", "the header is cut short"),
    ],
)
def test_a_file_that_is_not_a_gguf_is_refused(
    gcs: Gcs, tmp_path: Path, capsys: pytest.CaptureFixture[str], name: str, head: bytes, why: str
) -> None:
    path = _small(tmp_path / name, head, size=64 * 1024 if head != b"GGUF\x03\x00" else 6)
    code, out = _stage(capsys, _project(tmp_path), "--from-file", str(path), "--bucket", gcs.bucket.name)
    assert code == Exit.VERIFY
    assert f"stage: error: {path} is not a GGUF model file (" in out and why in out
    assert out.rstrip().endswith("; not uploading it (--force stages it anyway)")
    assert list(gcs.bucket.list_blobs()) == []


def test_a_gguf_of_another_architecture_is_refused_unless_forced(
    gcs: Gcs, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    path = _small(tmp_path / "llama.gguf", gguf_header("llama"))
    code, out = _stage(capsys, _project(tmp_path), "--from-file", str(path), "--bucket", gcs.bucket.name)
    assert code == Exit.VERIFY
    assert (
        f"stage: error: {path} is a GGUF of architecture 'llama', not 'qwen35moe' (modelArchitecture); "
        "not uploading it (--force stages it anyway)"
    ) in out
    code, out = _stage(
        capsys, _project(tmp_path), "--from-file", str(path), "--bucket", gcs.bucket.name, "--force"
    )
    assert code == 0, out
    assert f"the hub's {REPO_FILE}" in out  # the hub is a closed port here: said, not fatal


def test_a_file_the_hub_contradicts_is_refused_unless_forced(
    gcs: Gcs, hub: HfServer, small_file: Blob, other_small_file: Blob, tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
) -> None:  # fmt: skip
    hub.add_file(DEFAULT_REPO, DEFAULT_FILE, other_small_file.path)
    args = ("--from-file", str(small_file.path), "--bucket", gcs.bucket.name)
    code, out = _stage(capsys, _project(tmp_path), *args)
    assert code == Exit.VERIFY
    assert (
        f"stage: error: {small_file.path} is not the hub's {REPO_FILE}: sha256 {small_file.sha256}, the "
        f"hub's is {other_small_file.sha256}; stage that file, pin its sha256 as modelSha256, or pass --force"
    ) in out
    assert list(gcs.bucket.list_blobs()) == []
    code, out = _stage(capsys, _project(tmp_path), *args, "--force")
    assert code == 0, out
    assert "differs from the hub's" in out and "staging it anyway (--force)" in out


def test_an_unreachable_hub_is_one_line(gcs: Gcs, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    code, out = _stage(capsys, _project(tmp_path), "--from-hf", "--bucket", gcs.bucket.name)
    assert code == Exit.UNREACHABLE
    (line,) = [x for x in out.splitlines() if ": error: " in x]
    assert line.startswith(f"stage: error: cannot read {REPO_FILE} from the hub (ConnectError: ")
    assert line.endswith("check the network (or HF_ENDPOINT) and rerun")


def test_a_project_dir_that_is_a_file_is_one_line(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    not_a_dir = tmp_path / "Pulumi.yaml"
    not_a_dir.write_text("name: x\n")
    code, out = _stage(capsys, not_a_dir, "--bucket", "bkt")
    assert code == Exit.USAGE
    assert out.strip() == (
        f"stage: error: --project-dir {not_a_dir}: not a directory (the folder holding Pulumi.yaml)"
    )


def test_a_transient_gcs_error_at_the_bucket_check_is_retried(
    gcs: Gcs,
    small_file: Blob,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    """One 503 from GCS in front of the bucket check: retried by the storage client's own policy."""
    answered: list[str] = []

    class Flaky503(BaseHTTPRequestHandler):
        def log_message(self, format: str, *args: object) -> None:
            pass

        def do_GET(self) -> None:
            answered.append(self.path)
            if len(answered) == 1:
                body = b'{"error": {"code": 503, "message": "Backend Error"}}'
                self.send_response(503)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)
                return
            # Then the emulator's own answer, as a proxy would pass it on.
            with urllib.request.urlopen(f"{gcs.endpoint}{self.path}") as upstream:
                body = upstream.read()
            self.send_response(200)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

    with serve_on_loopback(Flaky503) as url:
        monkeypatch.setenv("STORAGE_EMULATOR_HOST", url)
        client = storage.Client()
        bucket = stage_gcs.readable_bucket(client, gcs.bucket.name)
    assert bucket.name == gcs.bucket.name
    assert len(answered) == 2
