"""Fixtures for the boot-script sandbox: a GCS emulator, the loopback hub and a model to serve."""

from __future__ import annotations

import itertools
import random
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from gcp_storage_emulator.server import create_server

from infra.boot_script import render_boot_script
from infra.config import StackConfig
from infra.model_cache import model_object_name
from tests.boot.metadata_server import MetadataServer
from tests.boot.sandbox import Sandbox, free_port
from tests.boot.world import (
    API_KEY,
    MODEL_BYTES,
    MODEL_FILE,
    MODEL_REPO,
    PROJECT_ID,
    SECRET,
    Model,
    SandboxFactory,
    config,
    create_bucket,
    default_candidate,
    sandbox_key,
    stage,
    stage_verdict,
    verdict_for,
)
from tests.cache.hf_server import HfServer

_buckets = itertools.count()


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
    # The CDN on another host name, as on the real hub: huggingface_hub follows redirects on the
    # hub's own host and reads the file's metadata from the redirect to any other.
    with HfServer(cdn_host="localhost") as server:
        server.add_file(MODEL_REPO, MODEL_FILE, model.path)
        yield server


@pytest.fixture
def make_sandbox(tmp_path: Path, gcs: str, hub: HfServer, model: Model) -> Iterator[SandboxFactory]:
    """Build a fresh VM; ``cached=True`` stages the model (``served``, else the random one) in its
    own bucket first; the hub always holds the random one. ``verdict=True`` stages a calibration
    verdict for the boot's key (ECC off, the stack's ctx) that picks the stack's own flags."""
    made: list[Sandbox] = []
    metadata = MetadataServer().__enter__()

    def factory(
        *,
        cached: bool = True,
        cfg: StackConfig | None = None,
        api_key: bool = True,
        served: Model | None = None,
        verdict: bool = True,
        **kwargs: Any,
    ) -> Sandbox:
        served = served or model
        cfg = cfg or config(served)
        bucket = f"sandbox-models-{next(_buckets)}"
        if cached:
            stage(gcs, bucket, model_object_name(cfg), served.path, served.sha256)
        else:
            create_bucket(gcs, bucket)
        if verdict:
            # Every boot but the first of a key finds a verdict; ``verdict=False`` is that first.
            key = sandbox_key(cfg, served.sha256)
            stage_verdict(gcs, bucket, cfg, verdict_for(key, default_candidate(cfg)))
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
