"""Fixtures for the calibration tests: gcp-storage-emulator on loopback (the bucket the verdict lives
in) and the rendered candidates of the production stack config."""

from __future__ import annotations

import json
import uuid
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import calibrate
import pytest
from gcp_storage_emulator.server import create_server

from infra.config import StackConfig
from infra.server_args import calibration_candidates, container_model_path
from tests.boot.world import create_bucket
from tests.harness.server import free_port


@dataclass(frozen=True)
class Bucket:
    endpoint: str
    name: str

    def store(self, name: str = "models/o/m.gguf.verdict.json") -> calibrate.VerdictStore:
        return calibrate.VerdictStore(calibrate.Gcs(self.endpoint, lambda: None), self.name, name)


@pytest.fixture(scope="session")
def emulator() -> Iterator[str]:
    port = free_port()
    server = create_server("127.0.0.1", port, in_memory=True)
    server.start()
    yield f"http://127.0.0.1:{port}"
    server.stop()


@pytest.fixture
def bucket(emulator: str) -> Bucket:
    name = f"calib-{uuid.uuid4().hex[:12]}"
    create_bucket(emulator, name)
    return Bucket(emulator, name)


def write_candidates(path: Path, cfg: StackConfig) -> Path:
    """The candidates document the boot script carries, for ``cfg`` (no API key)."""
    doc = calibration_candidates(
        cfg,
        model_path=container_model_path(cfg),
        api_key_file=None,
        ctx_sizes=(cfg.ctx_size, cfg.degraded_ctx_size),
    )
    path.write_text(json.dumps(doc))
    return path


@pytest.fixture
def candidates_file(tmp_path: Path) -> Path:
    return write_candidates(tmp_path / "candidates.json", StackConfig())
