"""Fixtures for the boot-script sandbox: a GCS emulator, the loopback hub and a model to serve."""

from __future__ import annotations

import hashlib
import itertools
import random
import subprocess
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
from gcp_storage_emulator.server import create_server

from infra.boot_script import FETCH_TOOL_PATH, model_object_name, render_boot_script
from infra.config import StackConfig
from tests.boot.metadata_server import MetadataServer
from tests.boot.sandbox import Sandbox, base_python, free_port
from tests.cache.hf_server import HfServer

PROJECT_ID = "sandbox-project"
SECRET = "qwen36-api-key"
API_KEY = "sk-sandbox-" + "7f3e9a" * 6
MODEL_REPO = "unsloth/Qwen3.6-35B-A3B-MTP-GGUF"
MODEL_FILE = "Qwen3.6-35B-A3B-UD-Q4_K_XL.gguf"
MODEL_BYTES = 3 * 1024 * 1024 + 17
UPLOAD_TIMEOUT_S = 60
_buckets = itertools.count()


class Model:
    def __init__(self, path: Path) -> None:
        self.path = path
        self.data = path.read_bytes()
        self.sha256 = hashlib.sha256(self.data).hexdigest()
        self.size = len(self.data)


@pytest.fixture(scope="session")
def model(tmp_path_factory: pytest.TempPathFactory) -> Model:
    path = tmp_path_factory.mktemp("model") / MODEL_FILE
    path.write_bytes(random.Random(36).randbytes(MODEL_BYTES))
    return Model(path)


@pytest.fixture(scope="session")
def gcs() -> Iterator[str]:
    port = free_port()
    server = create_server("127.0.0.1", port, in_memory=True)
    server.start()
    yield f"http://127.0.0.1:{port}"
    server.stop()


@pytest.fixture(scope="session")
def hub(model: Model) -> Iterator[HfServer]:
    with HfServer() as server:
        server.add_file(MODEL_REPO, MODEL_FILE, model.path)
        yield server


def stage(gcs_endpoint: str, bucket: str, name: str, src: Path, sha256: str) -> None:
    """Put the model in the cache bucket the way staging does: the fetch tool's own upload."""
    env = {"STORAGE_EMULATOR_HOST": gcs_endpoint, "PATH": "/usr/bin:/bin"}
    create_bucket(gcs_endpoint, bucket)
    subprocess.run(
        [base_python(), str(FETCH_TOOL_PATH), "upload", "--bucket", bucket, "--object", name,
         "--src", str(src), "--sha256", sha256],
        env=env, check=True, timeout=UPLOAD_TIMEOUT_S, capture_output=True,
    )  # fmt: skip


def create_bucket(gcs_endpoint: str, bucket: str) -> None:
    import json
    import urllib.request

    request = urllib.request.Request(
        f"{gcs_endpoint}/storage/v1/b?project={PROJECT_ID}",
        data=json.dumps({"name": bucket}).encode(),
        headers={"Content-Type": "application/json"},
        method="POST",
    )
    with urllib.request.urlopen(request, timeout=10) as reply:
        reply.read()


def config(model: Model, **overrides: Any) -> StackConfig:
    values: dict[str, Any] = {
        "model_repo": MODEL_REPO,
        "model_file": MODEL_FILE,
        "model_sha256": model.sha256,
        "model_size_bytes": model.size,
        **overrides,
    }
    return StackConfig(**values)


SandboxFactory = Callable[..., Sandbox]


@pytest.fixture
def make_sandbox(tmp_path: Path, gcs: str, hub: HfServer, model: Model) -> Iterator[SandboxFactory]:
    """Build a fresh VM; ``cached=True`` stages the model in its own bucket first."""
    made: list[Sandbox] = []
    metadata = MetadataServer().__enter__()

    def factory(
        *,
        cached: bool = True,
        cfg: StackConfig | None = None,
        api_key: bool = True,
        **kwargs: Any,
    ) -> Sandbox:
        cfg = cfg or config(model)
        bucket = f"sandbox-models-{next(_buckets)}"
        if cached:
            stage(gcs, bucket, model_object_name(cfg), model.path, model.sha256)
        else:
            create_bucket(gcs, bucket)
        script = render_boot_script(
            cfg, bucket=bucket, api_key_secret=SECRET if api_key else None, project=PROJECT_ID
        )
        sandbox = Sandbox(
            root=tmp_path / f"vm{len(made)}",
            script=script,
            metadata=metadata,
            gcs_endpoint=gcs,
            hf_endpoint=hub.base_url,
            secrets={f"{PROJECT_ID}/{SECRET}": API_KEY},
            bucket=bucket,
            **kwargs,
        )
        made.append(sandbox)
        return sandbox

    yield factory
    for sandbox in made:
        sandbox.shutdown()
    metadata.__exit__(None, None, None)
