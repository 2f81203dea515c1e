"""`pulumi up` says which path the VM's model step will take, looked up in a real (emulated) bucket."""

from __future__ import annotations

import hashlib
import socket
from collections.abc import Iterator

import pytest
from gcp_storage_emulator.server import create_server
from google.cloud import storage
from program_mocks import GCP_PROJECT, deploy, stack_config

from infra.cache_probe import COLD_START_GCS, COLD_START_HF
from infra.config import deployment_name, parse_config
from infra.model_cache import model_bucket_name, model_object_name

CONTENT = b"GGUF" + bytes(range(256)) * 64


@pytest.fixture
def bucket(monkeypatch: pytest.MonkeyPatch) -> Iterator[storage.Bucket]:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    server = create_server("127.0.0.1", port, in_memory=True)
    server.start()
    monkeypatch.setenv("STORAGE_EMULATOR_HOST", f"http://127.0.0.1:{port}")
    name = model_bucket_name(GCP_PROJECT, deployment_name("dev"), "us-central1")
    try:
        yield storage.Client().create_bucket(name)
    finally:
        server.stop()


def test_a_staged_model_is_announced_as_the_gcs_path(bucket: storage.Bucket) -> None:
    cfg = parse_config(stack_config("dev"))
    blob = bucket.blob(model_object_name(cfg))
    blob.metadata = {"sha256": hashlib.sha256(CONTENT).hexdigest(), "size": str(len(CONTENT))}
    blob.upload_from_string(CONTENT)

    out = deploy("dev").outputs
    assert out["modelCachePath"] == "gcs"
    assert "staged" in out["modelCacheNote"] and COLD_START_GCS in out["modelCacheNote"]


def test_an_empty_bucket_means_the_hugging_face_path(bucket: storage.Bucket) -> None:
    out = deploy("dev").outputs
    assert out["modelCachePath"] == "huggingface"
    assert "not staged" in out["modelCacheNote"] and COLD_START_HF in out["modelCacheNote"]


def test_a_wrong_sha256_in_the_bucket_is_not_promised_as_the_fast_path(bucket: storage.Bucket) -> None:
    cfg = parse_config(stack_config("dev"))
    blob = bucket.blob(model_object_name(cfg))
    blob.metadata = {"sha256": "0" * 64, "size": str(len(CONTENT))}
    blob.upload_from_string(CONTENT)

    out = deploy("dev", {"modelSha256": "a" * 64}).outputs
    assert out["modelCachePath"] == "huggingface"
    assert "a" * 64 in out["modelCacheNote"]
