"""``python -m qwen36 stage`` with the real google-cloud-storage client against gcp-storage-emulator."""

from __future__ import annotations

import hashlib
import json
import os
import signal
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from qwen36.__main__ import main
from qwen36.errors import Exit
from qwen36.stage_common import EXIT_VERIFY
from tests.cache.conftest import REPO_ROOT, SUBPROCESS_TIMEOUT_S, Blob, Gcs
from tests.cache.hf_server import HfServer
from tests.cache.proxy import CountingProxy

STACK = "test"
DEFAULT_REPO = "unsloth/Qwen3.6-35B-A3B-MTP-GGUF"
DEFAULT_FILE = "Qwen3.6-35B-A3B-UD-Q4_K_XL.gguf"
OBJECT = f"models/{DEFAULT_REPO}/{DEFAULT_FILE}"
STALL_WAIT_S = 60.0


def _project(tmp_path: Path, **config: object) -> Path:
    project = tmp_path / "project"
    project.mkdir(exist_ok=True)
    values = {"gcp:project": "my-project", **{f"qwen36-mtp-l4:{k}": v for k, v in config.items()}}
    (project / f"Pulumi.{STACK}.yaml").write_text(yaml.safe_dump({"config": values}))
    return project


def _stage_args(project: Path, *extra: str) -> list[str]:
    return [
        "stage",
        "--stack",
        STACK,
        "--project-dir",
        str(project),
        "--cache-dir",
        str(project / "cache"),
        *extra,
    ]


def _stage(capsys: pytest.CaptureFixture[str], project: Path, *extra: str) -> tuple[int, str]:
    code = main(_stage_args(project, *extra))
    captured = capsys.readouterr()
    return code, captured.out + captured.err


def _sha256_of(blob_bytes: bytes) -> str:
    return hashlib.sha256(blob_bytes).hexdigest()


def test_stage_a_128_mb_file_then_read_it_back_sliced(
    gcs: Gcs, big_file: Blob, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    project = _project(tmp_path, modelSha256=big_file.sha256, modelSizeBytes=big_file.size)

    code, out = _stage(capsys, project, "--from-file", str(big_file.path), "--bucket", gcs.bucket.name)

    assert code == 0, out
    assert f"gs://{gcs.bucket.name}/{OBJECT}: uploaded" in out
    blob = gcs.bucket.get_blob(OBJECT)
    assert blob is not None
    assert blob.metadata == {"sha256": big_file.sha256, "size": str(big_file.size)}
    assert blob.size == big_file.size
    generation = blob.generation

    # Sliced ranged reads (what `gcloud storage cp` does on the VM) reassemble the exact bytes.
    from google.cloud.storage import transfer_manager

    dest = tmp_path / "vm" / "model.gguf"
    dest.parent.mkdir()
    transfer_manager.download_chunks_concurrently(
        blob, str(dest), chunk_size=16 * 1024 * 1024, max_workers=8, worker_type=transfer_manager.THREAD
    )
    digest = hashlib.sha256()
    with dest.open("rb") as handle:
        while block := handle.read(8 << 20):
            digest.update(block)
    assert digest.hexdigest() == big_file.sha256

    code, out = _stage(capsys, project, "--from-file", str(big_file.path), "--bucket", gcs.bucket.name)

    assert code == 0, out
    assert f"gs://{gcs.bucket.name}/{OBJECT}: already staged" in out
    again = gcs.bucket.get_blob(OBJECT)
    assert again is not None
    assert again.generation == generation, "an identical object is not rewritten"


def test_interrupted_upload_resumes_from_what_gcs_holds(
    gcs: Gcs, proxy: CountingProxy, big_file: Blob, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    project = _project(tmp_path, modelSha256=big_file.sha256)
    args = _stage_args(
        project, "--from-file", str(big_file.path), "--bucket", gcs.bucket.name, "--chunk-mib", "8"
    )
    proxy.reset_count()
    proxy.stall_after(big_file.size // 2)

    first = subprocess.Popen(
        [sys.executable, "-m", "qwen36", *args],
        cwd=REPO_ROOT,
        env=dict(os.environ),
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        assert proxy.stalled.wait(STALL_WAIT_S), "the upload never reached the stall point"
        first.send_signal(signal.SIGKILL)
        first.communicate(timeout=SUBPROCESS_TIMEOUT_S)
    finally:
        if first.poll() is None:
            first.kill()
            first.communicate()
    # The emulator serves one request at a time: free it from the frozen connection first.
    proxy.drop()
    assert gcs.bucket.get_blob(OBJECT) is None, "a half-sent upload is never an object"
    sent_before = proxy.sent_upstream
    proxy.reset_count()

    code, out = _stage(capsys, project, "--from-file", str(big_file.path), "--bucket", gcs.bucket.name)

    assert code == 0, out
    assert "resuming the earlier upload: GCS holds" in out
    assert f"gs://{gcs.bucket.name}/{OBJECT}: resumed" in out
    # Measured: ~66.9 MB before the kill, ~67.3 MB after (the rest plus request headers).
    assert proxy.sent_upstream < big_file.size * 0.6, "the second run sends only what GCS lacks"
    assert proxy.sent_upstream + sent_before >= big_file.size
    blob = gcs.bucket.get_blob(OBJECT)
    assert blob is not None
    assert blob.size == big_file.size
    assert blob.metadata == {"sha256": big_file.sha256, "size": str(big_file.size)}
    assert not list((project / "cache" / "uploads").iterdir()), "the session state is gone once done"


def test_wrong_sha256_in_config_is_refused_before_upload(
    gcs: Gcs, small_file: Blob, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    wrong = "ef" * 32
    project = _project(tmp_path, modelSha256=wrong)

    code, out = _stage(capsys, project, "--from-file", str(small_file.path), "--bucket", gcs.bucket.name)

    assert code == EXIT_VERIFY
    assert f"expected sha256 {wrong} (modelSha256), the file has {small_file.sha256}; not uploading it" in out
    assert gcs.bucket.get_blob(OBJECT) is None


def test_wrong_size_in_config_is_refused(
    gcs: Gcs, small_file: Blob, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    project = _project(tmp_path, modelSizeBytes=small_file.size + 1)

    code, out = _stage(capsys, project, "--from-file", str(small_file.path), "--bucket", gcs.bucket.name)

    assert code == EXIT_VERIFY
    assert f"expected {small_file.size + 1} bytes (modelSizeBytes), the file has {small_file.size}" in out


def test_without_sha256_in_config_the_hubs_record_is_checked_then_staged(
    gcs: Gcs, hub: HfServer, small_file: Blob, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    hub.add_file(DEFAULT_REPO, DEFAULT_FILE, small_file.path)
    project = _project(tmp_path)

    code, out = _stage(capsys, project, "--from-file", str(small_file.path), "--bucket", gcs.bucket.name)

    assert code == 0, out
    assert f"matches the hub's {DEFAULT_REPO}@main/{DEFAULT_FILE} (sha256 {small_file.sha256})" in out
    assert hub.cdn_requests() == [], "only the metadata is read, never the file"
    blob = gcs.bucket.get_blob(OBJECT)
    assert blob is not None
    assert blob.metadata == {"sha256": small_file.sha256, "size": str(small_file.size)}


def test_an_object_with_other_content_is_replaced(
    gcs: Gcs, small_file: Blob, other_small_file: Blob, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    gcs.put(OBJECT, other_small_file)
    project = _project(tmp_path, modelSha256=small_file.sha256)

    code, out = _stage(capsys, project, "--from-file", str(small_file.path), "--bucket", gcs.bucket.name)

    assert code == 0, out
    assert f"the object holds sha256 {other_small_file.sha256}" in out
    assert "replacing it" in out
    blob = gcs.bucket.get_blob(OBJECT)
    assert blob is not None
    assert blob.metadata is not None
    assert blob.metadata["sha256"] == small_file.sha256
    assert _sha256_of(blob.download_as_bytes()) == small_file.sha256


def test_missing_bucket_is_named(
    gcs: Gcs, small_file: Blob, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    code, out = _stage(
        capsys, _project(tmp_path), "--from-file", str(small_file.path), "--bucket", "nope-bucket"
    )

    assert code == Exit.NOT_FOUND
    assert (
        "bucket gs://nope-bucket does not exist; deploy the stack first (`pulumi up`) or pass --bucket" in out
    )


def test_unreadable_bucket_is_named(
    forbidding_gcs: str, small_file: Blob, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    code, out = _stage(capsys, _project(tmp_path), "--from-file", str(small_file.path), "--bucket", "locked")

    assert code == Exit.DENIED
    assert "the credentials in use cannot read bucket gs://locked" in out


def test_bucket_from_stack_output_needs_the_pulumi_cli(
    small_file: Blob, tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("PATH", str(tmp_path / "empty-path"))

    code, out = _stage(capsys, _project(tmp_path), "--from-file", str(small_file.path))

    assert code == Exit.MISSING_TOOL
    assert "the Pulumi CLI is not installed, so the bucket (--bucket NAME) is unknown" in out


def test_bucket_comes_from_the_stack_output(
    gcs: Gcs,
    small_file: Blob,
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """A stand-in `pulumi` executable (the CLI is not installed here) answers the stack output."""
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    calls = tmp_path / "calls.txt"
    fake = bin_dir / "pulumi"
    fake.write_text(f'#!/bin/sh\necho "$@" >> {calls}\necho {gcs.bucket.name}\n')
    fake.chmod(0o755)
    monkeypatch.setenv("PATH", f"{bin_dir}{os.pathsep}{os.environ['PATH']}")

    # A test file, not the default model: pinned by size, since no hub answers here (stage refuses a
    # file far from the default model's size that nothing pins).
    project = _project(tmp_path, modelSizeBytes=small_file.size)
    code, out = _stage(capsys, project, "--from-file", str(small_file.path))

    assert code == 0, out
    assert calls.read_text().split() == ["stack", "output", "modelBucket", "--stack", STACK]
    assert gcs.bucket.get_blob(OBJECT) is not None


def test_unknown_stack_and_bad_config_are_named(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    project = _project(tmp_path, modelSha256="not-a-sha")

    code, out = _stage(capsys, project, "--bucket", "bkt")
    missing = main(["stage", "--stack", "other", "--project-dir", str(project), "--bucket", "bkt"])
    missing_out = capsys.readouterr().err

    assert code == Exit.CONFIG
    assert "Pulumi.test.yaml: qwen36-mtp-l4:modelSha256" in out
    assert missing == Exit.NOT_FOUND
    assert "no Pulumi.other.yaml" in missing_out


def test_stage_from_the_hub_uses_its_lfs_sha256_and_is_idempotent(
    gcs: Gcs, hub: HfServer, small_file: Blob, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    hub.add_file(DEFAULT_REPO, DEFAULT_FILE, small_file.path)
    project = _project(tmp_path)

    code, out = _stage(capsys, project, "--from-hf", "--bucket", gcs.bucket.name)

    assert code == 0, out
    assert f"sha256 {small_file.sha256} verified" in out
    blob = gcs.bucket.get_blob(OBJECT)
    assert blob is not None
    assert blob.metadata == {"sha256": small_file.sha256, "size": str(small_file.size)}
    cached = project / "cache" / "models" / DEFAULT_REPO / DEFAULT_FILE
    assert _sha256_of(cached.read_bytes()) == small_file.sha256
    downloads = len(hub.cdn_requests())

    code, out = _stage(capsys, project, "--bucket", gcs.bucket.name)

    assert code == 0, out
    assert "already staged" in out
    assert len(hub.cdn_requests()) == downloads, "nothing is downloaded for an object already staged"


def test_stage_from_the_hub_refuses_a_config_sha256_the_hub_contradicts(
    gcs: Gcs, hub: HfServer, small_file: Blob, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    hub.add_file(DEFAULT_REPO, DEFAULT_FILE, small_file.path)
    wrong = "01" * 32

    code, out = _stage(capsys, _project(tmp_path, modelSha256=wrong), "--bucket", gcs.bucket.name)

    assert code == EXIT_VERIFY
    assert f"expected sha256 {wrong}, the hub says {small_file.sha256}" in out
    assert "modelSha256" in out
    assert hub.cdn_requests() == []
    assert gcs.bucket.get_blob(OBJECT) is None


def test_upload_state_is_keyed_by_bucket_object_and_sha256(tmp_path: Path) -> None:
    from qwen36.stage import Target
    from qwen36.stage_gcs import state_file

    one = state_file(tmp_path, Target("b", "o"), "a" * 64)

    assert one == state_file(tmp_path, Target("b", "o"), "a" * 64)
    assert one != state_file(tmp_path, Target("b2", "o"), "a" * 64)
    assert one != state_file(tmp_path, Target("b", "o2"), "a" * 64)
    assert one != state_file(tmp_path, Target("b", "o"), "b" * 64)
    assert json.dumps(str(one))


def test_truncated_object_is_replaced(
    gcs: Gcs, small_file: Blob, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    half = tmp_path / "half.gguf"
    half.write_bytes(small_file.path.read_bytes()[: small_file.size // 2])
    gcs.put(
        OBJECT,
        Blob(half, small_file.sha256, small_file.size // 2),
        {
            "sha256": small_file.sha256,
            "size": str(small_file.size),
        },
    )
    project = _project(tmp_path, modelSha256=small_file.sha256)

    code, out = _stage(capsys, project, "--from-file", str(small_file.path), "--bucket", gcs.bucket.name)

    assert code == 0, out
    assert f"{small_file.size // 2} bytes (metadata size {small_file.size})" in out
    blob = gcs.bucket.get_blob(OBJECT)
    assert blob is not None
    assert blob.size == small_file.size


def test_an_upload_that_does_not_match_the_local_file_is_deleted(gcs: Gcs, small_file: Blob) -> None:
    """The post-upload check: GCS's crc32c of what it stored against the local file's."""
    from qwen36.stage import StageError, Target
    from qwen36.stage_gcs import check_uploaded

    gcs.put(OBJECT, small_file)
    target = Target(gcs.bucket.name, OBJECT)

    with pytest.raises(StageError) as raised:
        check_uploaded(gcs.bucket, target, small_file.sha256, small_file.size, crc32c="AAAAAA==")

    assert raised.value.exit_code == EXIT_VERIFY
    assert f"{target.uri} was deleted" in str(raised.value)
    assert "the local file has AAAAAA==" in str(raised.value)
    assert gcs.bucket.get_blob(OBJECT) is None
