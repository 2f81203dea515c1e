"""Real llama-server processes for the bench/load/tune tests, started with the product's flags."""

from __future__ import annotations

import json
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import jsonschema

from infra.config import StackConfig
from infra.server_args import server_args
from qwen36.bench.report import SCHEMA_DIR
from tests.harness.server import LlamaServer

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
