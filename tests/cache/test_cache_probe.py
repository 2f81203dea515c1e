"""Detection at `pulumi up`: which path the VM will take, looked up in the emulator's bucket."""

from __future__ import annotations

from pathlib import Path

import pytest

from infra.cache_probe import COLD_START_GCS, COLD_START_HF, probe_model_cache
from tests.cache.conftest import Blob, Gcs

OBJECT = "models/unsloth/Qwen3.6-35B-A3B-MTP-GGUF/Qwen3.6-35B-A3B-UD-Q4_K_XL.gguf"


def test_staged_object_means_the_gcs_path(gcs: Gcs, small_file: Blob) -> None:
    gcs.put(OBJECT, small_file)

    with_sha = probe_model_cache(gcs.bucket.name, OBJECT, small_file.sha256)
    without_sha = probe_model_cache(gcs.bucket.name, OBJECT, "")

    assert with_sha.path == without_sha.path == "gcs"
    assert with_sha.expected_cold_start == COLD_START_GCS
    assert "is staged" in with_sha.reason
    assert with_sha.summary().startswith("model from gcs:")


def test_missing_object_means_huggingface(gcs: Gcs) -> None:
    probe = probe_model_cache(gcs.bucket.name, OBJECT, "")

    assert probe.path == "huggingface"
    assert probe.expected_cold_start == COLD_START_HF
    assert "is not staged" in probe.reason
    assert "`qwen36 stage`" in probe.reason


def test_missing_bucket_means_huggingface_not_an_error(gcs: Gcs) -> None:
    probe = probe_model_cache("bucket-not-created-yet", OBJECT, "")

    assert probe.path == "huggingface"
    assert "does not exist yet" in probe.reason


def test_object_for_another_sha256_means_huggingface(
    gcs: Gcs, small_file: Blob, other_small_file: Blob
) -> None:
    gcs.put(OBJECT, small_file)

    probe = probe_model_cache(gcs.bucket.name, OBJECT, other_small_file.sha256)

    assert probe.path == "huggingface"
    assert f"has sha256 {small_file.sha256}, the stack expects {other_small_file.sha256}" in probe.reason


def test_object_without_sha256_metadata_means_gcs_checked_against_the_hub(gcs: Gcs, small_file: Blob) -> None:
    """The VM serves it and ties it to the hub's LFS sha256 (tests/boot/test_boot_model_path.py)."""
    gcs.put(OBJECT, small_file, {})

    probe = probe_model_cache(gcs.bucket.name, OBJECT, "")

    assert probe.path == "gcs"
    assert "no sha256 metadata" in probe.reason and "hub's LFS sha256" in probe.reason


def test_truncated_object_means_huggingface_and_the_vm_agrees(
    gcs: Gcs, small_file: Blob, tmp_path: Path
) -> None:
    """The VM refuses the same object before any download (tests/boot/test_boot_model_path.py)."""
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

    probe = probe_model_cache(gcs.bucket.name, OBJECT, "")

    assert probe.path == "huggingface"
    assert "truncated" in probe.reason


def test_no_credentials_means_unknown_not_an_error(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("STORAGE_EMULATOR_HOST", raising=False)
    monkeypatch.setenv("GOOGLE_APPLICATION_CREDENTIALS", str(tmp_path / "no-such-key.json"))
    monkeypatch.setenv("CLOUDSDK_CONFIG", str(tmp_path / "gcloud"))

    probe = probe_model_cache("some-bucket", OBJECT, "")

    assert probe.path == "unknown"
    assert "no Google credentials" in probe.reason
    assert COLD_START_GCS in probe.expected_cold_start
    assert COLD_START_HF in probe.expected_cold_start


def test_unreadable_bucket_means_unknown(forbidding_gcs: str) -> None:
    probe = probe_model_cache("locked", OBJECT, "")

    assert probe.path == "unknown"
    assert "cannot read gs://locked/" in probe.reason
