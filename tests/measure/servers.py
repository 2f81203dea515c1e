"""Real llama-server processes for the bench/load/tune tests, started with the product's flags."""

from __future__ import annotations

import json
import shutil
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx
import jsonschema

from infra.config import StackConfig
from infra.server_args import server_args
from qwen36.measure.report import SCHEMA_DIR
from tests.harness.server import LlamaServer, LlamaServerError

# Two threads: the CI machine has two cores (the production default would be 8).
TEST_THREADS = 2
TEST_CTX = 2048
TEST_KEY = "test-key-0123456789"


def make_config(**update: Any) -> StackConfig:
    """The stack's defaults with test-sized changes, derived the way tune derives its settings."""
    return StackConfig().model_copy(update={"threads": TEST_THREADS, "ctx_size": TEST_CTX, **update})


@contextmanager
def serve(
    binary: Path, model: Path, tmp_path: Path, *, api_key: str | None = None, **update: Any
) -> Iterator[LlamaServer]:
    """A healthy llama-server started with the product's own flag list for ``make_config(**update)``."""
    key_file = None
    if api_key is not None:
        key_file = tmp_path / "api-key"
        key_file.write_text(api_key)
    args = server_args(
        make_config(**update), model_path=str(model), api_key_file=str(key_file) if key_file else None
    )
    with LlamaServer(args, binary=binary) as server:
        server.wait_healthy()
        yield server


@dataclass
class CliRun:
    code: int
    out: str
    err: str

    def json(self) -> Any:
        return json.loads(self.out)


def validate(document: Any, schema_file: str) -> None:
    schema = json.loads((SCHEMA_DIR / schema_file).read_text())
    jsonschema.Draft202012Validator.check_schema(schema)
    jsonschema.Draft202012Validator(schema).validate(document)


def count_completions(log: str) -> int:
    """Requests the server finished, from the timing block it logs after each one."""
    return log.count("total time =")


# glibc gives threads their own malloc arenas, each reserving 64 MiB of address space at moments
# that depend on scheduling; with one arena the server's address space is the same on every run,
# so a limit on it fails at one context size and not at a random one.
# https://www.gnu.org/software/libc/manual/html_node/Memory-Allocation-Tunables.html
ONE_ARENA = {"MALLOC_ARENA_MAX": "1"}
CALIBRATION_LOW = 64 * 1024**2
CALIBRATION_HIGH = 4 * 1024**3
CALIBRATION_PRECISION = 256 * 1024
FILL_TIMEOUT_S = 120.0


def survives_under(binary: Path, model: Path, cfg: StackConfig, address_space: int) -> bool:
    """Whether llama-server, its address space capped by util-linux prlimit, starts and answers one
    request that fills its slot (sent with plain httpx, independent of the code under test)."""
    prlimit = shutil.which("prlimit")
    assert prlimit is not None, "prlimit (util-linux) is needed for the memory-limit tests"
    args = server_args(cfg, model_path=str(model), api_key_file=None)
    with LlamaServer(
        [f"--as={address_space}", "--", str(binary), *args], binary=Path(prlimit), env=ONE_ARENA
    ) as server:
        try:
            server.wait_healthy()
            with httpx.Client(base_url=server.base_url, timeout=FILL_TIMEOUT_S) as http:
                n_ctx = http.get("/v1/models").json()["data"][0]["meta"]["n_ctx"]
                token = http.post("/tokenize", json={"content": " the"}).json()["tokens"][0]
                body = {"prompt": [token] * (n_ctx - 16), "n_predict": 8, "cache_prompt": False}
                return http.post("/completion", json=body).status_code == 200
        except (LlamaServerError, httpx.TransportError, ValueError):
            return False


def min_address_space(binary: Path, model: Path, cfg: StackConfig) -> int:
    """The smallest address-space cap (to 256 KiB) under which the server survives a full context."""
    low, high = CALIBRATION_LOW, CALIBRATION_HIGH
    assert survives_under(binary, model, cfg, high)
    while high - low > CALIBRATION_PRECISION:
        middle = (low + high) // 2
        if survives_under(binary, model, cfg, middle):
            high = middle
        else:
            low = middle
    return high
