"""``python -m qwen36 stage`` never ends in a traceback: each failure is one line and an exit code.

Real google-cloud-storage against gcp-storage-emulator (through tests/cache/proxy.py where the
connection must drop); the unreachable GCS is a closed loopback port.
"""

from __future__ import annotations

import socket
import threading
from pathlib import Path

import pytest
import yaml

from qwen36 import stage_gcs
from qwen36.__main__ import main
from qwen36.stage_common import EXIT_ERROR
from tests.cache.conftest import Blob, Gcs
from tests.cache.proxy import CountingProxy

STACK = "test"
STALL_WAIT_S = 60.0


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
    code, out = _stage(capsys, _project(tmp_path), "--from-file", str(small_file.path), "--bucket", "b1")
    assert code == EXIT_ERROR
    assert "stage: error: cannot reach GCS to check bucket gs://b1 (ConnectionError" in out
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
    proxy.stall_after(small_file.size // 2)

    def cut() -> None:
        # GCS goes away for good mid-upload: every connection dropped, no new one accepted.
        if proxy.stalled.wait(STALL_WAIT_S):
            proxy.close()

    threading.Thread(target=cut, daemon=True).start()
    code, out = _stage(
        capsys,
        _project(tmp_path),
        "--from-file",
        str(small_file.path),
        "--bucket",
        gcs.bucket.name,
        "--chunk-mib",
        "4",
    )
    assert code == EXIT_ERROR
    assert "stage: error: upload stopped at byte " in out
    assert "rerun to resume from there" in out


def test_from_file_that_is_a_directory(gcs: Gcs, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    folder = tmp_path / "models"
    folder.mkdir()
    code, out = _stage(capsys, _project(tmp_path), "--from-file", str(folder), "--bucket", gcs.bucket.name)
    assert code == EXIT_ERROR
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
    assert code == EXIT_ERROR
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
    assert code == EXIT_ERROR
    assert f"stage: error: --chunk-mib {chunk}: must be a positive number of MiB" in out


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
