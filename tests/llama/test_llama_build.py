"""One llama-server build serves the harness and the browser tests, cached by everything that changes it.

The compile itself (download, cmake, 10-35 minutes on 2 cores) is replaced by a fake that writes a
runnable ``llama-server`` script; everything around it runs for real: the recipe and its key, the
lookup, the lock, the staging directory, the ``--version`` check, the embedded-UI check and the
publishing rename. The last test checks the real build this machine provides.
"""

from __future__ import annotations

import json
import subprocess
import threading
import time
from dataclasses import replace
from pathlib import Path

import pytest

from tests.harness import llama_build
from tests.harness.llama_build import LlamaBuildError, Recipe, UiBuildError

FAKE_SERVER = "#!/bin/sh\necho 'version: 0 (fake)'\necho 'built with fake-cc for x86_64'\n"
TOOLCHAIN = ("cc (Debian 12.2.0) 12.2.0", "c++ (Debian 12.2.0) 12.2.0", "cmake version 4.4.5")
UI_TOOLS = ("node v20.20.2", "npm 11.19.1")


class FakeCompiler:
    """Stands in for download + configure + build: counts builds, can be slow or fail."""

    def __init__(self, *, delay_s: float = 0.0, fail: bool = False, embed_ui: bool = True) -> None:
        self.built: list[Recipe] = []
        self.delay_s = delay_s
        self.fail = fail
        self.embed_ui = embed_ui
        self._lock = threading.Lock()

    def __call__(self, r: Recipe, work: Path) -> Path:
        with self._lock:
            self.built.append(r)
        time.sleep(self.delay_s)
        if self.fail:
            raise subprocess.CalledProcessError(2, ["cmake", "--build"])
        out = work / "build" / "bin"
        out.mkdir(parents=True)
        (out / "llama-server").write_text(FAKE_SERVER)
        (out / "llama-server").chmod(0o755)
        library = b"\0assets\0" + (llama_build.EMBEDDED_ASSET if r.ui and self.embed_ui else b"")
        (out / llama_build.SERVER_LIBRARY).write_bytes(library)
        return out


@pytest.fixture
def cache(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> Path:
    home = tmp_path / "cache"
    monkeypatch.setenv(llama_build.CACHE_ENV, str(home))
    for name in (llama_build.BINARY_ENV, llama_build.UI_BINARY_ENV, llama_build.UI_ENV, "CMAKE_ARGS"):
        monkeypatch.delenv(name, raising=False)
    for name in llama_build.FLAG_ENV:
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setattr(llama_build, "_toolchain", lambda ui: TOOLCHAIN + (UI_TOOLS if ui else ()))
    monkeypatch.setattr(llama_build, "npm_available", lambda: True)
    monkeypatch.setattr(llama_build, "host_cpu", lambda: "x86_64 Test CPU flags:0123456789ab")
    return home


@pytest.fixture
def compiler(monkeypatch: pytest.MonkeyPatch) -> FakeCompiler:
    fake = FakeCompiler()
    monkeypatch.setattr(llama_build, "_compile", fake)
    return fake


def base() -> Recipe:
    return Recipe(
        build=11434,
        sdist_sha256="ab" * 32,
        ui=True,
        patches=(),
        cmake_args=("-DLLAMA_BUILD_TESTS=OFF",),
        targets=("llama-server",),
        flags=(),
        toolchain=TOOLCHAIN + UI_TOOLS,
    )


def test_the_key_is_stable_and_changes_with_every_input() -> None:
    r = base()
    assert r.key() == base().key() and len(r.key()) == 16
    variants = [
        replace(r, build=11435),
        replace(r, sdist_sha256="cd" * 32),
        replace(r, ui=False),
        replace(r, patches=(("patches/a.patch", "00" * 32),)),
        replace(r, patches=(("patches/a.patch", "11" * 32),)),  # the same patch, edited
        replace(r, patches=(("patches/a.patch", "00" * 32), ("patches/b.patch", "22" * 32))),
        replace(r, patches=(("patches/b.patch", "22" * 32), ("patches/a.patch", "00" * 32))),  # order
        replace(r, cmake_args=("-DLLAMA_BUILD_TESTS=OFF", "-DGGML_NATIVE=OFF")),
        replace(r, targets=("llama-server", "llama-quantize")),
        replace(r, flags=(("CFLAGS", "-O1"),)),
        replace(r, toolchain=("cc (Debian 12.2.0-14+deb12u2) 12.2.0", *TOOLCHAIN[1:], *UI_TOOLS)),
        replace(r, toolchain=(*TOOLCHAIN, "node v22.1.0", "npm 11.19.1")),
        replace(r, host="x86_64 AMD EPYC flags:000000000000"),
        replace(r, version=r.version + 1),
    ]
    keys = [v.key() for v in variants]
    assert r.key() not in keys and len(set(keys)) == len(keys)
    assert r.dirname == f"llama-server-b11434-{r.key()}"


def test_the_recipe_reads_the_environment_and_the_patch_contents(
    cache: Path, monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    plain = llama_build.recipe(ui=False)
    assert plain.cmake_args == tuple(llama_build.DEFAULT_CMAKE_ARGS.split())
    assert plain.sdist_sha256 == llama_build.SDIST_SHA256[11434] and plain.toolchain == TOOLCHAIN
    assert plain.host == "x86_64 Test CPU flags:0123456789ab"
    monkeypatch.setenv("CMAKE_ARGS", "-DGGML_NATIVE=OFF")
    monkeypatch.setenv("CFLAGS", "-O1")
    tuned = llama_build.recipe(ui=False)
    assert tuned.cmake_args == ("-DGGML_NATIVE=OFF",) and tuned.flags == (("CFLAGS", "-O1"),)
    assert tuned.key() != plain.key()
    patch = tmp_path / "repo" / "patches" / "x.patch"
    patch.parent.mkdir(parents=True)
    patch.write_text("one\n")
    monkeypatch.setattr(llama_build, "ROOT", tmp_path / "repo")
    monkeypatch.setattr(llama_build, "PATCHES", ("patches/x.patch",))
    first = llama_build.recipe(ui=False)
    patch.write_text("two\n")
    assert llama_build.recipe(ui=False).key() != first.key()
    with pytest.raises(LlamaBuildError, match="no sdist sha256 pinned for build 99"):
        llama_build.recipe(99, ui=False)


def test_one_build_embeds_the_ui_and_serves_both_lookups(cache: Path, compiler: FakeCompiler) -> None:
    harness = llama_build.llama_server_binary()
    ui = llama_build.llama_server_ui_binary()
    assert harness == ui == cache / llama_build.recipe(ui=True).dirname / "bin" / "llama-server"
    assert [r.ui for r in compiler.built] == [True]
    stored = json.loads((harness.parent.parent / llama_build.READY).read_text())
    assert stored["ui"] is True and stored["build"] == 11434
    assert llama_build.embeds_ui(harness)
    assert "built with fake-cc" in llama_build.binary_version(harness)
    # Only the published build, its lock, and no staging directory are left.
    assert sorted(p.name for p in cache.iterdir()) == sorted(
        [llama_build.recipe(ui=True).dirname, f"{llama_build.recipe(ui=True).dirname}.lock"]
    )


def test_a_cached_build_is_reused_without_compiling(cache: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(llama_build, "_compile", FakeCompiler())
    first = llama_build.llama_server_binary()
    again = FakeCompiler(fail=True)
    monkeypatch.setattr(llama_build, "_compile", again)
    assert llama_build.llama_server_binary() == first
    assert llama_build.llama_server_ui_binary() == first
    assert again.built == []


def test_without_npm_the_harness_builds_plain_and_the_ui_lookup_refuses(
    cache: Path, compiler: FakeCompiler, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(llama_build, "npm_available", lambda: False)
    plain = llama_build.llama_server_binary()
    assert [r.ui for r in compiler.built] == [False] and not llama_build.embeds_ui(plain)
    with pytest.raises(UiBuildError, match="npm not found"):
        llama_build.llama_server_ui_binary()
    # npm arrives later: the harness keeps its plain build, the browser tests get a UI build.
    monkeypatch.setattr(llama_build, "npm_available", lambda: True)
    assert llama_build.llama_server_binary() == plain
    ui = llama_build.llama_server_ui_binary()
    assert ui != plain and llama_build.embeds_ui(ui)
    assert [r.ui for r in compiler.built] == [False, True]


def test_the_ui_switch(cache: Path, compiler: FakeCompiler, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(llama_build.UI_ENV, "0")
    assert not llama_build.embeds_ui(llama_build.llama_server_binary())
    with pytest.raises(UiBuildError, match="=0"):
        llama_build.llama_server_ui_binary()
    monkeypatch.setenv(llama_build.UI_ENV, "1")
    assert llama_build.embeds_ui(llama_build.llama_server_binary())  # the plain build does not do
    monkeypatch.setattr(llama_build, "npm_available", lambda: False)
    with pytest.raises(UiBuildError, match="=1"):
        llama_build.llama_server_binary()
    assert [r.ui for r in compiler.built] == [False, True]


def test_another_recipe_is_another_build_and_leaves_the_first(
    cache: Path, compiler: FakeCompiler, monkeypatch: pytest.MonkeyPatch
) -> None:
    first = llama_build.llama_server_binary()
    monkeypatch.setenv("CMAKE_ARGS", "-DGGML_NATIVE=OFF")
    second = llama_build.llama_server_binary()
    assert second != first and first.is_file() and len(compiler.built) == 2
    monkeypatch.delenv("CMAKE_ARGS")
    assert llama_build.llama_server_binary() == first and len(compiler.built) == 2


def test_an_entry_without_its_recipe_or_binary_is_built_again(cache: Path, compiler: FakeCompiler) -> None:
    binary = llama_build.llama_server_binary()
    recipe_file = binary.parent.parent / llama_build.READY
    recipe_file.write_text(recipe_file.read_text().replace('"ui": true', '"ui": false'))
    assert llama_build.llama_server_binary() == binary and len(compiler.built) == 2
    binary.unlink()
    assert llama_build.llama_server_binary() == binary and binary.is_file() and len(compiler.built) == 3


def test_a_failed_build_publishes_nothing_and_the_next_call_tries_again(
    cache: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(llama_build, "_compile", FakeCompiler(fail=True))
    with pytest.raises(subprocess.CalledProcessError):
        llama_build.llama_server_binary()
    assert [p.name for p in cache.iterdir()] == [f"{llama_build.recipe(ui=True).dirname}.lock"]
    monkeypatch.setattr(llama_build, "_compile", FakeCompiler(embed_ui=False))
    with pytest.raises(UiBuildError, match="no embedded web UI"):
        llama_build.llama_server_binary()
    assert llama_build.ready_binary(llama_build.recipe(ui=True)) is None
    monkeypatch.setattr(llama_build, "_compile", FakeCompiler())
    assert llama_build.llama_server_binary().is_file()


def test_a_killed_build_leaves_a_work_directory_the_next_build_removes(
    cache: Path, compiler: FakeCompiler
) -> None:
    dirname = llama_build.recipe(ui=True).dirname
    dead = cache / f"{dirname}.k1ll3d"
    (dead / "src").mkdir(parents=True)
    other = cache / "llama-server-b11434-0123456789abcdef.x"  # another recipe's build, maybe running
    other.mkdir()
    llama_build.llama_server_binary()
    assert not dead.exists() and other.is_dir()
    assert sorted(p.name for p in cache.iterdir()) == sorted([dirname, f"{dirname}.lock", other.name])


def test_a_binary_that_does_not_run_is_not_published(cache: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    fake = FakeCompiler()

    def broken(r: Recipe, work: Path) -> Path:
        out = fake(r, work)
        (out / "llama-server").write_text("#!/bin/sh\necho 'libllama.so: cannot open' >&2\nexit 127\n")
        return out

    monkeypatch.setattr(llama_build, "_compile", broken)
    with pytest.raises(LlamaBuildError, match=r"exited 127: libllama\.so"):
        llama_build.llama_server_binary()
    assert llama_build.ready_binary(llama_build.recipe(ui=True)) is None


def test_parallel_callers_share_one_build(cache: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(llama_build, "LOCK_POLL_S", 0.01)
    slow = FakeCompiler(delay_s=0.3)
    monkeypatch.setattr(llama_build, "_compile", slow)
    results: list[Path] = []
    # Each thread opens the lock file itself: flock treats them like separate processes.
    callers = [
        threading.Thread(target=lambda: results.append(llama_build.llama_server_binary())) for _ in range(3)
    ]
    for caller in callers:
        caller.start()
    for caller in callers:
        caller.join(timeout=30)
    assert len(results) == 3 and len(set(results)) == 1
    assert len(slow.built) == 1


def test_patches_apply_in_order_and_one_that_does_not_fit_is_named(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    repo = tmp_path / "repo"
    (repo / "patches").mkdir(parents=True)
    (repo / "patches" / "1.patch").write_text("--- a/f.txt\n+++ b/f.txt\n@@ -1 +1 @@\n-one\n+two\n")
    (repo / "patches" / "2.patch").write_text("--- a/f.txt\n+++ b/f.txt\n@@ -1 +1 @@\n-two\n+three\n")
    monkeypatch.setattr(llama_build, "ROOT", repo)
    source = tmp_path / "src"
    source.mkdir()
    (source / "f.txt").write_text("one\n")

    def with_patches(*names: str) -> Recipe:
        import hashlib

        pairs = tuple((n, hashlib.sha256((repo / n).read_bytes()).hexdigest()) for n in names)
        return replace(base(), patches=pairs)

    llama_build.apply_patches(with_patches("patches/1.patch", "patches/2.patch"), source)
    assert (source / "f.txt").read_text() == "three\n"
    with pytest.raises(LlamaBuildError, match=r"patches/1.patch does not apply to build 11434"):
        llama_build.apply_patches(with_patches("patches/1.patch"), source)
    edited = with_patches("patches/2.patch")
    (repo / "patches" / "2.patch").write_text("edited\n")
    with pytest.raises(LlamaBuildError, match="changed while the build was being prepared"):
        llama_build.apply_patches(edited, source)


def test_override_wins(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.setenv(llama_build.BINARY_ENV, str(tmp_path / "my-llama-server"))
    monkeypatch.setenv(llama_build.UI_BINARY_ENV, str(tmp_path / "my-ui-server"))
    assert llama_build.llama_server_binary() == tmp_path / "my-llama-server"
    assert llama_build.llama_server_ui_binary() == tmp_path / "my-ui-server"


@pytest.mark.llama
def test_the_provided_build_is_the_current_recipe(llama_server_bin: Path) -> None:
    """The real build this machine provides sits in its recipe's directory and runs."""
    home = llama_server_bin.parent.parent
    stored = json.loads((home / llama_build.READY).read_text())
    current = llama_build.recipe(ui=stored["ui"])
    assert home.name == current.dirname and stored == json.loads(current.as_json())
    assert "built with" in llama_build.binary_version(llama_server_bin)
    assert llama_build.embeds_ui(llama_server_bin) == stored["ui"]
