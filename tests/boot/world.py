"""The pieces every boot-sandbox run shares, for the tests and bench/boot_bench.py alike: the names
the rendered script is given, the model file, and staging it in the GCS emulator the way the stage
command leaves it (the object with sha256 and size as custom metadata)."""

from __future__ import annotations

import contextlib
import hashlib
import json
import urllib.error
import urllib.request
from collections.abc import Callable
from pathlib import Path
from typing import Any

from infra.config import StackConfig
from infra.model_cache import model_object_name, verdict_object_name
from startup import calibrate
from tests.boot import gcs_rest
from tests.boot.sandbox import Sandbox

PROJECT_ID = "sandbox-project"
SECRET = "qwen36-api-key"
API_KEY = "sk-sandbox-" + "7f3e9a" * 6
MODEL_REPO = "unsloth/Qwen3.6-35B-A3B-MTP-GGUF"
MODEL_FILE = "Qwen3.6-35B-A3B-UD-Q4_K_XL.gguf"
MODEL_BYTES = 3 * 1024 * 1024 + 17
STAGED = "staged by the test world"
# What the sandbox's nvidia-smi says (tests/boot/stubs.py), for a verdict's key.
GPU_NAME = "NVIDIA L4"
GPU_DRIVER = "580.95.05"

# make_sandbox(cached=..., cfg=..., api_key=..., served=..., **Sandbox fields) -> Sandbox
SandboxFactory = Callable[..., Sandbox]


class Model:
    def __init__(self, path: Path) -> None:
        self.path = path
        self.data = path.read_bytes()
        self.sha256 = hashlib.sha256(self.data).hexdigest()
        self.size = len(self.data)


def stage(
    gcs_endpoint: str,
    bucket: str,
    name: str,
    src: Path,
    sha256: str,
    *,
    metadata: dict[str, str] | None = None,
) -> None:
    """Put the model in the cache bucket as staging leaves it (``metadata`` replaces sha256/size)."""
    create_bucket(gcs_endpoint, bucket)
    data = src.read_bytes()
    meta = {"sha256": sha256, "size": str(len(data))} if metadata is None else metadata
    gcs_rest.upload(gcs_endpoint, bucket, name, data, meta)


def model_object(sandbox: Sandbox, model: Model) -> dict[str, Any]:
    """The cache object's resource as GCS holds it (generation, metadata, hashes)."""
    return gcs_rest.get_object(sandbox.gcs_endpoint, sandbox.bucket, model_object_name(config(model)))


def stage_corrupt(sandbox: Sandbox, model: Model, tmp_path: Path) -> str:
    """Stage the model with one byte flipped under metadata that claims the pinned sha256 (the
    object's own CRC32C matches its bytes, so only the sha256 tells); returns its generation."""
    bad = tmp_path / "bad.gguf"
    data = bytearray(model.data)
    data[len(data) // 3] ^= 0x10
    bad.write_bytes(bytes(data))
    stage(sandbox.gcs_endpoint, sandbox.bucket, model_object_name(config(model)), bad, model.sha256)
    return str(model_object(sandbox, model)["generation"])


def create_bucket(gcs_endpoint: str, bucket: str) -> None:
    with contextlib.suppress(urllib.error.HTTPError):  # 409: it exists
        _create_bucket(gcs_endpoint, bucket)


def _create_bucket(gcs_endpoint: str, bucket: str) -> None:
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


def sandbox_key(
    cfg: StackConfig, sha256: str, *, ecc: str = "Disabled", ctx_size: int | None = None
) -> calibrate.Key:
    """The key a sandbox boot computes: the stack's build and ctx, the sandbox's GPU, ECC off."""
    ctx = cfg.ctx_size if ctx_size is None else ctx_size
    return calibrate.Key(cfg.llama_cpp_build, sha256, GPU_NAME, GPU_DRIVER, ecc, ctx)


def verdict_for(key: calibrate.Key, winner: calibrate.Candidate, tok_s: float = 90.0) -> dict[str, Any]:
    """A verdict as a calibration that measured only ``winner`` (at ``tok_s``) would write it."""
    samples = {i: calibrate.Sample(64, 64 / tok_s * 1000.0, 128, 100) for i in range(len(calibrate.PROMPTS))}
    result = calibrate.Result(winner, samples, status="measured")
    measured = calibrate.Calibration(key, [result], calibrate.Noise(), 1.0, 120.0, [0.1], 64)
    return measured.verdict(writer=STAGED)


def stage_verdict(gcs_endpoint: str, bucket: str, cfg: StackConfig, doc: dict[str, Any]) -> None:
    """The verdict object where a calibration leaves it (its content type and bytes as written)."""
    create_bucket(gcs_endpoint, bucket)
    data = json.dumps(doc, indent=1, sort_keys=True).encode() + b"\n"
    gcs_rest.upload(gcs_endpoint, bucket, verdict_object_name(cfg), data, {})


def read_verdict(gcs_endpoint: str, bucket: str, cfg: StackConfig) -> dict[str, Any] | None:
    try:
        meta = gcs_rest.get_object(gcs_endpoint, bucket, verdict_object_name(cfg))
    except gcs_rest.GcsError as exc:
        if exc.status == 404:
            return None
        raise
    size = int(meta["size"])
    data = gcs_rest.read_range(gcs_endpoint, bucket, verdict_object_name(cfg), meta["generation"], 0, size)
    doc: dict[str, Any] = json.loads(data)
    return doc


def default_candidate(cfg: StackConfig) -> calibrate.Candidate:
    return calibrate.Candidate(cfg.spec_draft_n_max, True, cfg.backend_sampling)
