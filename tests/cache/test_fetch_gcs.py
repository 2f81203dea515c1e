"""qwen36/fetch.py against gcp-storage-emulator: the VM's GCS model step and its refusals."""

from __future__ import annotations

import ast
import base64
import hashlib
import itertools
import json
import re
import shutil
import subprocess
import sys
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import pytest

from qwen36 import fetch
from tests.cache.conftest import FETCH_PY, Blob, Gcs, Recorder, run_fetch, start_fetch
from tests.cache.proxy import CountingProxy

MODEL_OBJECT = "models/unsloth/repo/model.gguf"
MIB = 1024 * 1024
STALL_WAIT_S = 60.0


def _leftovers(dest: Path) -> list[str]:
    return sorted(p.name for p in dest.parent.iterdir()) if dest.parent.exists() else []


@pytest.mark.parametrize("slices", [1, 8])
def test_sliced_download_is_byte_identical(
    gcs: Gcs, proxy: CountingProxy, small_file: Blob, tmp_path: Path, slices: int
) -> None:
    gcs.put(MODEL_OBJECT, small_file)
    dest = tmp_path / "models" / "model.gguf"
    proxy.reset_count()

    done = run_fetch(
        "gcs",
        "--bucket",
        gcs.bucket.name,
        "--object",
        MODEL_OBJECT,
        "--dest",
        str(dest),
        "--slices",
        str(slices),
    )

    assert done.returncode == 0, done.stderr
    assert dest.read_bytes() == small_file.path.read_bytes()
    assert _leftovers(dest) == ["model.gguf"], "the partial file and its checkpoint are cleaned up"
    # The boot script reads the verified sha256 (the object's, when none is pinned) from stdout.
    assert done.stdout.strip().endswith(f"verified sha256 {small_file.sha256}")
    pieces = fetch.plan_pieces(small_file.size, slices)
    assert len(pieces) == (4 if slices == 1 else 7)
    assert proxy.connections == 1 + len(pieces), "one metadata request, then one request per piece"


@pytest.mark.parametrize(
    ("size", "slices"), [(24 * MIB + 12345, 8), (24 * MIB + 12345, 1), (100, 8), (0, 4), (22_900_000_000, 8)]
)
def test_pieces_cover_every_byte_once_in_order(size: int, slices: int) -> None:
    pieces = fetch.plan_pieces(size, slices)

    assert pieces[0].start == 0
    assert pieces[-1].end == size
    assert all(a.end == b.start for a, b in itertools.pairwise(pieces))
    assert all(p.end - p.start <= fetch.MAX_PIECE_BYTES for p in pieces)
    assert len(pieces) >= min(slices, -(-size // fetch.MIN_PIECE_BYTES)), "enough pieces to keep streams busy"


def test_done_prefix_stops_at_the_first_gap() -> None:
    pieces = fetch.plan_pieces(40 * MIB, 8)
    assert fetch.done_prefix(pieces) == 0
    pieces[0].done = pieces[0].end
    pieces[1].done = 5
    pieces[2].done = pieces[2].end - pieces[2].start
    assert fetch.done_prefix(pieces) == pieces[1].start + 5
    for piece in pieces:
        piece.done = piece.end - piece.start
    assert fetch.done_prefix(pieces) == 40 * MIB


def test_object_sha256_metadata_is_the_default_expectation(
    gcs: Gcs, small_file: Blob, tmp_path: Path
) -> None:
    gcs.put(MODEL_OBJECT, small_file)
    dest = tmp_path / "model.gguf"

    info = fetch.fetch_gcs(gcs.bucket.name, MODEL_OBJECT, str(dest), slices=4)

    assert info.sha256 == small_file.sha256
    assert info.size == small_file.size
    fetch.verify_file(str(dest), small_file.sha256, small_file.size)


def test_missing_object_is_a_cache_miss(gcs: Gcs, tmp_path: Path) -> None:
    done = run_fetch(
        "gcs", "--bucket", gcs.bucket.name, "--object", "models/none.gguf", "--dest", str(tmp_path / "m")
    )

    assert done.returncode == fetch.EXIT_NOT_FOUND
    assert f"object gs://{gcs.bucket.name}/models/none.gguf not found" in done.stderr


def test_missing_bucket_says_so(gcs: Gcs, tmp_path: Path) -> None:
    done = run_fetch(
        "gcs", "--bucket", "no-such-bucket-x", "--object", MODEL_OBJECT, "--dest", str(tmp_path / "m")
    )

    assert done.returncode == fetch.EXIT_NOT_FOUND
    assert "bucket gs://no-such-bucket-x does not exist" in done.stderr


def test_unreadable_bucket_is_an_error_naming_the_credentials(forbidding_gcs: str, tmp_path: Path) -> None:
    done = run_fetch("gcs", "--bucket", "b", "--object", MODEL_OBJECT, "--dest", str(tmp_path / "m"))

    assert done.returncode == fetch.EXIT_ERROR
    assert "HTTP 403" in done.stderr
    assert "credentials" in done.stderr
    assert not (tmp_path / "m").exists()


def test_configured_sha256_must_match_the_object_metadata(gcs: Gcs, small_file: Blob, tmp_path: Path) -> None:
    gcs.put(MODEL_OBJECT, small_file)
    wrong = "ab" * 32
    dest = tmp_path / "model.gguf"

    done = run_fetch(
        "gcs", "--bucket", gcs.bucket.name, "--object", MODEL_OBJECT, "--dest", str(dest), "--sha256", wrong
    )

    assert done.returncode == fetch.EXIT_VERIFY
    assert f"expected sha256 {wrong}, object says {small_file.sha256}" in done.stderr
    assert _leftovers(dest) == []


def test_metadata_that_disagrees_with_the_content_is_refused(
    gcs: Gcs, small_file: Blob, other_small_file: Blob, tmp_path: Path
) -> None:
    # The bytes of one file under the sha256 of another: only hashing the download can tell.
    gcs.put(MODEL_OBJECT, small_file, {"sha256": other_small_file.sha256, "size": str(small_file.size)})
    dest = tmp_path / "model.gguf"

    done = run_fetch("gcs", "--bucket", gcs.bucket.name, "--object", MODEL_OBJECT, "--dest", str(dest))

    assert done.returncode == fetch.EXIT_VERIFY
    assert f"expected sha256 {other_small_file.sha256}, content has {small_file.sha256}" in done.stderr
    assert "metadata disagrees with its content" in done.stderr
    assert _leftovers(dest) == [], "neither the model nor a partial file is left behind"


def test_truncated_object_is_refused_before_download(gcs: Gcs, small_file: Blob, tmp_path: Path) -> None:
    truncated = tmp_path / "truncated.gguf"
    truncated.write_bytes(small_file.path.read_bytes()[: small_file.size // 2])
    gcs.put(
        MODEL_OBJECT,
        Blob(truncated, small_file.sha256, small_file.size // 2),
        {
            "sha256": small_file.sha256,
            "size": str(small_file.size),
        },
    )
    dest = tmp_path / "out" / "model.gguf"

    done = run_fetch("gcs", "--bucket", gcs.bucket.name, "--object", MODEL_OBJECT, "--dest", str(dest))

    assert done.returncode == fetch.EXIT_VERIFY
    assert (
        f"metadata says size {small_file.size} but the object holds {small_file.size // 2} bytes"
        in done.stderr
    )
    assert _leftovers(dest) == []


def test_object_without_sha256_is_not_trusted(gcs: Gcs, small_file: Blob, tmp_path: Path) -> None:
    gcs.put(MODEL_OBJECT, small_file, {})

    done = run_fetch(
        "gcs", "--bucket", gcs.bucket.name, "--object", MODEL_OBJECT, "--dest", str(tmp_path / "m")
    )

    assert done.returncode == fetch.EXIT_VERIFY
    assert "no sha256 metadata" in done.stderr


def test_progress_is_put_to_the_metadata_server(
    gcs: Gcs, small_file: Blob, tmp_path: Path, progress_sink: Recorder
) -> None:
    gcs.put(MODEL_OBJECT, small_file)

    done = run_fetch(
        "gcs",
        "--bucket",
        gcs.bucket.name,
        "--object",
        MODEL_OBJECT,
        "--dest",
        str(tmp_path / "m"),
        "--progress-url",
        progress_sink.url,
    )

    assert done.returncode == 0, done.stderr
    assert progress_sink.puts, "at least the final progress report"
    path, flavor, body = progress_sink.puts[-1]
    assert path.endswith("/guest-attributes/qwen36/detail")
    assert flavor == "Google"
    assert re.match(r"^model (\d+\.\d)/\1 GB from gcs", body), body


def test_unreachable_progress_url_does_not_fail_the_download(
    gcs: Gcs, small_file: Blob, tmp_path: Path
) -> None:
    gcs.put(MODEL_OBJECT, small_file)

    done = run_fetch(
        "gcs",
        "--bucket",
        gcs.bucket.name,
        "--object",
        MODEL_OBJECT,
        "--dest",
        str(tmp_path / "m"),
        "--progress-url",
        "http://127.0.0.1:9/nothing-listens-here",
    )

    assert done.returncode == 0, done.stderr


def test_a_verified_file_already_in_place_is_kept(gcs: Gcs, small_file: Blob, tmp_path: Path) -> None:
    gcs.put(MODEL_OBJECT, small_file)
    dest = tmp_path / "model.gguf"
    shutil.copyfile(small_file.path, dest)
    before = dest.stat().st_mtime_ns

    done = run_fetch("gcs", "--bucket", gcs.bucket.name, "--object", MODEL_OBJECT, "--dest", str(dest))

    assert done.returncode == 0, done.stderr
    assert dest.stat().st_mtime_ns == before


def test_a_corrupt_file_in_place_is_replaced(gcs: Gcs, small_file: Blob, tmp_path: Path) -> None:
    gcs.put(MODEL_OBJECT, small_file)
    dest = tmp_path / "model.gguf"
    dest.write_bytes(b"\0" * small_file.size)

    done = run_fetch("gcs", "--bucket", gcs.bucket.name, "--object", MODEL_OBJECT, "--dest", str(dest))

    assert done.returncode == 0, done.stderr
    assert "replacing" in done.stderr
    fetch.verify_file(str(dest), small_file.sha256, small_file.size)


def test_upload_stores_sha256_and_size_and_is_idempotent(gcs: Gcs, small_file: Blob) -> None:
    args = ("upload", "--bucket", gcs.bucket.name, "--object", MODEL_OBJECT, "--src", str(small_file.path))

    first = run_fetch(*args, "--sha256", small_file.sha256)
    second = run_fetch(*args, "--sha256", small_file.sha256)

    assert first.returncode == 0, first.stderr
    assert first.stdout.strip().endswith(f": uploaded, sha256 {small_file.sha256}")
    assert second.returncode == 0, second.stderr
    assert second.stdout.strip().endswith(f": already staged, sha256 {small_file.sha256}")
    blob = gcs.bucket.get_blob(MODEL_OBJECT)
    assert blob is not None
    assert blob.metadata == {"sha256": small_file.sha256, "size": str(small_file.size)}
    assert blob.size == small_file.size
    assert (
        blob.md5_hash
        == base64.b64encode(
            hashlib.md5(small_file.path.read_bytes(), usedforsecurity=False).digest()
        ).decode()
    )


def test_upload_refuses_a_file_that_is_not_the_expected_one(
    gcs: Gcs, small_file: Blob, other_small_file: Blob
) -> None:
    done = run_fetch(
        "upload",
        "--bucket",
        gcs.bucket.name,
        "--object",
        MODEL_OBJECT,
        "--src",
        str(small_file.path),
        "--sha256",
        other_small_file.sha256,
    )

    assert done.returncode == fetch.EXIT_VERIFY
    assert f"expected sha256 {other_small_file.sha256}, content has {small_file.sha256}" in done.stderr
    assert gcs.bucket.get_blob(MODEL_OBJECT) is None


def test_verify_command(small_file: Blob) -> None:
    ok = run_fetch(
        "verify",
        "--path",
        str(small_file.path),
        "--sha256",
        small_file.sha256,
        "--size",
        str(small_file.size),
    )
    short = run_fetch("verify", "--path", str(small_file.path), "--sha256", small_file.sha256, "--size", "7")
    wrong = run_fetch("verify", "--path", str(small_file.path), "--sha256", "0" * 64)

    assert ok.returncode == 0, ok.stderr
    assert short.returncode == fetch.EXIT_VERIFY
    assert f"expected 7 bytes, found {small_file.size}" in short.stderr
    assert wrong.returncode == fetch.EXIT_VERIFY
    assert f"expected sha256 {'0' * 64}, content has {small_file.sha256}" in wrong.stderr


def test_fetch_py_is_stdlib_only_and_python_3_10_syntax() -> None:
    """The VM runs it with the image's system python3 (3.10 on Ubuntu 22.04) before installing anything."""
    tree = ast.parse(FETCH_PY.read_text(), feature_version=(3, 10))
    imported = {
        alias.name.split(".")[0]
        for node in ast.walk(tree)
        if isinstance(node, ast.Import)
        for alias in node.names
    } | {
        node.module.split(".")[0]
        for node in ast.walk(tree)
        if isinstance(node, ast.ImportFrom) and node.module
    }

    assert imported <= set(sys.stdlib_module_names) | {"__future__"}, imported - set(sys.stdlib_module_names)


def test_fetch_py_runs_on_python_3_10(small_file: Blob) -> None:
    python310 = shutil.which("python3.10")
    probe = subprocess.run([python310 or "false", "-c", "pass"], capture_output=True, check=False)
    if python310 is None or probe.returncode != 0:
        pytest.skip("no python3.10 on PATH")
    done = subprocess.run(
        [python310, str(FETCH_PY), "verify", "--path", str(small_file.path), "--sha256", small_file.sha256],
        capture_output=True,
        text=True,
        check=False,
    )
    assert done.returncode == 0, done.stderr


def test_interrupted_vm_upload_resumes(gcs: Gcs, proxy: CountingProxy, big_file: Blob) -> None:
    """Self-staging from the VM: a killed upload continues from what GCS holds on the next boot."""
    args = ("upload", "--bucket", gcs.bucket.name, "--object", MODEL_OBJECT, "--src", str(big_file.path))
    proxy.reset_count()
    proxy.stall_after(big_file.size // 2)
    first = start_fetch(*args, "--sha256", big_file.sha256)
    try:
        assert proxy.stalled.wait(STALL_WAIT_S), "the upload never reached the stall point"
        first.kill()
        first.communicate(timeout=STALL_WAIT_S)
    finally:
        if first.poll() is None:
            first.kill()
            first.communicate()
    proxy.drop()
    assert gcs.bucket.get_blob(MODEL_OBJECT) is None
    proxy.reset_count()

    done = run_fetch(*args, "--sha256", big_file.sha256)

    assert done.returncode == 0, done.stderr
    assert done.stdout.strip().endswith(f": resumed, sha256 {big_file.sha256}")
    assert proxy.sent_upstream < big_file.size * 0.6, "only the part GCS lacks is sent again"
    blob = gcs.bucket.get_blob(MODEL_OBJECT)
    assert blob is not None
    assert blob.size == big_file.size
    assert blob.metadata == {"sha256": big_file.sha256, "size": str(big_file.size)}
    assert not Path(str(big_file.path) + ".upload.json").exists()


def test_gcs_token_comes_from_the_metadata_server_and_is_reused() -> None:
    """On the VM there is no emulator: the service account's token comes from the metadata server
    (a stand-in here, the one boundary this machine cannot reach)."""
    requests: list[tuple[str, str]] = []

    class Handler(BaseHTTPRequestHandler):
        def do_GET(self) -> None:
            requests.append((self.path, self.headers.get("Metadata-Flavor", "")))
            body = json.dumps(
                {"access_token": "ya29.token", "expires_in": 3599, "token_type": "Bearer"}
            ).encode()
            self.send_response(200)
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def log_message(self, format: str, *args: object) -> None:
            pass

    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    try:
        auth = fetch.GcsAuth(True, f"http://127.0.0.1:{server.server_address[1]}")
        first = auth.headers()
        second = auth.headers()
    finally:
        server.shutdown()
        server.server_close()

    assert first == second == {"Authorization": "Bearer ya29.token"}
    assert requests == [("/computeMetadata/v1/instance/service-accounts/default/token", "Google")]


def test_without_an_emulator_the_real_endpoint_and_a_token_are_used(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("STORAGE_EMULATOR_HOST", raising=False)
    monkeypatch.setenv("QWEN36_METADATA_URL", "http://169.254.169.254")

    gcs = fetch.Gcs.from_env()

    assert gcs.endpoint == "https://storage.googleapis.com"
    assert gcs.media_url("b", "models/a/b.gguf", "7") == (
        "https://storage.googleapis.com/download/storage/v1/b/b/o/models%2Fa%2Fb.gguf?alt=media&generation=7"
    )


def test_a_file_that_changes_during_the_upload_never_becomes_the_object(
    gcs: Gcs, proxy: CountingProxy, big_file: Blob, tmp_path: Path
) -> None:
    """The md5 of the verified file goes into the session; GCS refuses bytes that do not match it."""
    src = tmp_path / "model.gguf"
    shutil.copyfile(big_file.path, src)
    proxy.reset_count()
    proxy.stall_after(big_file.size // 2)
    upload = start_fetch(
        "upload",
        "--bucket",
        gcs.bucket.name,
        "--object",
        MODEL_OBJECT,
        "--src",
        str(src),
        "--sha256",
        big_file.sha256,
    )
    try:
        assert proxy.stalled.wait(STALL_WAIT_S)
        with src.open("r+b") as handle:
            handle.seek(big_file.size - 4096)
            handle.write(b"\xff" * 4096)
        proxy.drop()  # the connection breaks; the tool resumes from what GCS holds, with the new bytes
        _, stderr = upload.communicate(timeout=STALL_WAIT_S)
    finally:
        if upload.poll() is None:
            upload.kill()
            upload.communicate()

    assert upload.returncode == fetch.EXIT_ERROR, stderr
    assert "MD5" in stderr
    assert gcs.bucket.get_blob(MODEL_OBJECT) is None
