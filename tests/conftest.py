"""Session fixtures shared by the suite: the pinned llama-server and the model files it serves."""

from __future__ import annotations

import asyncio
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.harness import models
from tests.harness.llama_build import llama_server_binary

# Any test that asks for one of these needs the compiled llama-server (`-m "not llama"` skips them).
_LLAMA_FIXTURES = frozenset({"llama_server_bin"})


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    for item in items:
        if _LLAMA_FIXTURES & set(getattr(item, "fixturenames", ())):
            item.add_marker(pytest.mark.llama)


@pytest.fixture(scope="session")
def llama_server_bin() -> Path:
    """The pinned llama-server: one build per machine, cached (tests/harness/llama_build.py)."""
    return llama_server_binary()


@pytest.fixture(scope="session")
def tiny_mtp_model(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """~2 MB random-weight qwen35moe with an MTP head: drafts are made, essentially none accepted."""
    return models.tiny_mtp_model(tmp_path_factory.mktemp("models"))


@pytest.fixture(scope="session")
def tiny_mtp_model_agreeing(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The tiny model with trunk and MTP head agreeing: greedy "aaaa", every draft accepted."""
    return models.tiny_mtp_model(tmp_path_factory.mktemp("models"), agree=True)


@pytest.fixture(scope="session")
def gemma_model() -> Path:
    """The real Gemma-3-270M Q4_K_M GGUF (253 MB, no MTP layers), cached outside the repo."""
    return models.gemma_model()


@pytest.fixture(autouse=True)
def _main_thread_event_loop() -> Iterator[None]:
    """Pulumi's mocks create futures on the main thread's current loop, but ``asyncio.run`` (the
    bench commands use it) leaves the main thread with none: give each test a loop if it lacks one."""
    policy = asyncio.get_event_loop_policy()
    try:
        loop = policy.get_event_loop()
    except RuntimeError:
        loop = None
    if loop is None or loop.is_closed():
        policy.set_event_loop(policy.new_event_loop())
    yield
