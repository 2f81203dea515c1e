"""`python -m qwen36 tune --sweep calibrate` runs the boot's own calibration against the real
pinned llama-server and, with --write-verdict, leaves the verdict every later boot reads (here in
gcp-storage-emulator, with no credentials, as Google's clients do against an emulator)."""

from __future__ import annotations

import json
import urllib.request
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest
from gcp_storage_emulator.server import create_server

from infra.config import StackConfig
from infra.model_cache import verdict_object_name
from tests.boot.world import create_bucket
from tests.harness.server import free_port
from tests.measure.servers import CliRun


@pytest.fixture
def emulator(monkeypatch: pytest.MonkeyPatch) -> Iterator[str]:
    port = free_port()
    server = create_server("127.0.0.1", port, in_memory=True)
    server.start()
    url = f"http://127.0.0.1:{port}"
    monkeypatch.setenv("STORAGE_EMULATOR_HOST", url)
    yield url
    server.stop()


def test_tune_calibrate_writes_the_verdict_the_boot_reads(
    cli: Callable[..., CliRun], llama_server_bin: Path, tiny_mtp_model: Path, emulator: str
) -> None:
    bucket = f"tune-{uuid.uuid4().hex[:10]}"
    create_bucket(emulator, bucket)
    run = cli(
        "tune", "--sweep", "calibrate", "--launcher", "local", "--server-bin", str(llama_server_bin),
        "--model", str(tiny_mtp_model), "--set", "threads=1", "--max-tokens", "32", "--budget", "90",
        "--gpu", "cpu", "none", "N/A", "--write-verdict", "--bucket", bucket,
    )  # fmt: skip
    assert run.code == 0, run.err
    assert "winner: plain/" in run.out, run.out + run.err
    name = verdict_object_name(StackConfig())
    quoted = urllib.request.quote(name, safe="")
    with urllib.request.urlopen(
        f"{emulator}/download/storage/v1/b/{bucket}/o/{quoted}?alt=media", timeout=10
    ) as r:
        doc = json.loads(r.read())
    assert doc["winner"]["n_max"] == 0 and doc["writer"] == "qwen36 tune --sweep calibrate"
    assert doc["key"]["gpu_name"] == "cpu" and doc["key"]["llama_cpp_build"] == StackConfig().llama_cpp_build
    assert f"verdict written to gs://{bucket}/{name}" in run.out
