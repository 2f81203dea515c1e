"""The endpoint as people reach it: the deployed argument list, run locally on the tiny MTP model.

The argument list is the ``SERVER_ARGS`` of the rendered boot script for the default config, so
whatever the VM would run (API key, ``--jinja``, MTP, backend sampling, ``--alias``) is what these
tests talk to; only the container paths, host and port are swapped for local ones.
"""

from __future__ import annotations

import subprocess
from collections.abc import Iterator
from pathlib import Path

import pytest

from infra.boot_script import render_boot_script
from infra.config import StackConfig
from infra.server_args import CONTAINER_API_KEY_FILE
from tests.harness import models
from tests.harness.server import LlamaServer

API_KEY = "client-test-key-0123456789"
WRONG_KEY = "not-the-key"
# What __main__.py names the Secret Manager secret when the api_key config is on.
API_KEY_SECRET = "qwen36-api-key"


def deployed_server_args(cfg: StackConfig) -> list[str]:
    """``SERVER_ARGS`` exactly as bash reads it from the rendered startup script."""
    script = render_boot_script(
        cfg, bucket="qwen36-models", api_key_secret=API_KEY_SECRET if cfg.api_key else None, project="proj"
    )
    (line,) = [ln for ln in script.splitlines() if ln.startswith("SERVER_ARGS=(")]
    out = subprocess.run(
        ["bash", "-c", f"{line}\nprintf '%s\\0' \"${{SERVER_ARGS[@]}}\""],
        capture_output=True,
        check=True,
        timeout=10,
    )
    return out.stdout.decode().split("\0")[:-1]


def local_args(deployed: list[str], *, model: Path, key_file: Path) -> list[str]:
    """The deployed list with the container's model and key paths swapped for local files.

    A list without ``--api-key-file`` stays without one, so a key turned off upstream reaches
    the tests as an open server (``LlamaServer`` swaps host and port itself).
    """
    out = list(deployed)
    out[out.index("--model") + 1] = str(model)
    if "--api-key-file" in out:
        at = out.index("--api-key-file")
        assert out[at + 1] == CONTAINER_API_KEY_FILE, out[at + 1]
        out[at + 1] = str(key_file)
    return out


@pytest.fixture(scope="session")
def key_file(tmp_path_factory: pytest.TempPathFactory) -> Path:
    path = tmp_path_factory.mktemp("key") / "llama-api-key"
    path.write_text(API_KEY + "\n")
    path.chmod(0o600)
    return path


@pytest.fixture(scope="session")
def endpoint_args(tiny_mtp_model_agreeing: Path, key_file: Path) -> list[str]:
    """The default deployment's arguments, with the tiny model whose greedy answer is "aaaa"."""
    return local_args(deployed_server_args(StackConfig()), model=tiny_mtp_model_agreeing, key_file=key_file)


@pytest.fixture(scope="session")
def thinking_endpoint_args(tmp_path_factory: pytest.TempPathFactory, key_file: Path) -> list[str]:
    """The default deployment's arguments with the tiny model that carries the Qwen3.5 chat template:
    with thinking on (the template's default), every token it says arrives as ``reasoning_content``."""
    model = models.tiny_mtp_model(tmp_path_factory.mktemp("models"), agree=True, thinking=True)
    return local_args(deployed_server_args(StackConfig()), model=model, key_file=key_file)


@pytest.fixture(scope="module")
def endpoint(endpoint_args: list[str], llama_server_bin: Path) -> Iterator[LlamaServer]:
    """One real llama-server per test module (~1 s to start on the tiny model)."""
    with LlamaServer(endpoint_args, binary=llama_server_bin) as srv:
        srv.wait_healthy()
        yield srv
