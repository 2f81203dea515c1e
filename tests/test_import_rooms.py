"""Imports flow one way between the rooms: ``infra/`` (runs inside ``pulumi up``) never reaches into
``qwen36/`` (the user's CLI), ``tests/`` or ``bench/``; ``qwen36/`` never into ``tests/`` or ``bench/``;
``startup/`` (the VM) and ``door/`` (the front door on Cloud Run) into none of them, and nothing but
tests and benchmarks into ``door/``;
and no two modules of one package import each other."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parent.parent
FORBIDDEN = {
    "infra": ("qwen36", "tests", "bench", "door"),
    "qwen36": ("tests", "bench", "door"),
    "startup": ("infra", "qwen36", "tests", "bench", "door"),
    # The policy pack runs in its own venv beside `pulumi up`: only infra/policy/'s pure rules.
    "policy": ("qwen36", "tests", "bench", "startup", "door"),
    # The front door runs on Cloud Run from its own archive (infra/door_archive.py packs its files):
    # it imports no other room, and no room imports it.
    "door": ("infra", "qwen36", "tests", "bench", "startup", "policy"),
}


def _imports(path: Path) -> set[str]:
    tree = ast.parse(path.read_text(), filename=str(path))
    found: set[str] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            found.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            found.add(node.module)
    return found


def _module(path: Path) -> str:
    return ".".join(path.relative_to(REPO).with_suffix("").parts).removesuffix(".__init__")


@pytest.mark.parametrize("room", sorted(FORBIDDEN))
def test_a_room_never_imports_a_room_downstream(room: str) -> None:
    bad = [
        f"{_module(path)} imports {name}"
        for path in sorted((REPO / room).rglob("*.py"))
        for name in sorted(_imports(path))
        if name.split(".")[0] in FORBIDDEN[room]
    ]
    assert not bad, bad


@pytest.mark.parametrize("room", sorted(FORBIDDEN))
def test_no_two_modules_of_a_room_import_each_other(room: str) -> None:
    modules = {_module(path): _imports(path) for path in sorted((REPO / room).rglob("*.py"))}
    circles = sorted(
        f"{a} <-> {b}"
        for a, imported in modules.items()
        for b in imported
        # A package's __init__ re-exporting its own submodule is not a circle between modules.
        if b in modules and a < b and a in modules[b] and not b.startswith(a + ".")
    )
    assert not circles, circles


def test_the_check_sees_a_reversed_import(tmp_path: Path) -> None:
    bad = tmp_path / "bad.py"
    bad.write_text("from qwen36.group import Member\nimport tests.conftest\n")
    assert {"qwen36.group", "tests.conftest"} <= _imports(bad)
