"""The deployable archive (infra/door_archive.py): the same bytes for the same inputs, pure Python
only, and alone (extracted into an empty directory, run by ``python -I -S``: no PYTHONPATH, no
site-packages, not even the venv's) it starts the door, which then serves a real completion."""

from __future__ import annotations

import io
import os
import shutil
import sys
import tarfile
from pathlib import Path

import httpx
import pytest

from infra import door_archive
from tests.door.conftest import AUTH, WorldFactory, ask

REPO = Path(__file__).resolve().parents[2]


def _copy_door(tmp_path: Path) -> Path:
    copy = tmp_path / "door"
    shutil.copytree(REPO / "door", copy, ignore=shutil.ignore_patterns("__pycache__"))
    return copy


def test_the_same_inputs_give_the_same_bytes(tmp_path: Path) -> None:
    first = door_archive.build()
    copy = _copy_door(tmp_path)
    for path in copy.rglob("*"):
        os.utime(path, (1_900_000_000, 1_900_000_000))  # other mtimes, same content
    again = door_archive.build(copy, copy / "requirements.txt")
    assert again.data == first.data and again.name == first.name
    (copy / "pages.py").write_text((copy / "pages.py").read_text() + "\n# changed\n")
    changed = door_archive.build(copy, copy / "requirements.txt")
    assert changed.sha256 != first.sha256


def test_the_archive_is_pure_python_with_every_pin(tmp_path: Path) -> None:
    archive = door_archive.build()
    with tarfile.open(fileobj=io.BytesIO(archive.data)) as tar:
        members = tar.getmembers()
    names = [m.name for m in members]
    assert {"main.py", "door/app.py", "door/metrics.json", "door/requirements.txt"} <= set(names)
    for package in ("starlette", "uvicorn", "httpx", "httpcore", "h11", "anyio", "rsa", "pyasn1", "certifi"):
        assert any(n.startswith(f"vendor/{package}/") for n in names), package
    assert not [
        n for n in names if door_archive.COMPILED.search(n) or "__pycache__" in n or n.endswith(".pyc")
    ]
    assert {m.mtime for m in members} == {door_archive.FIXED_MTIME}
    assert {(m.uid, m.gid, m.uname, m.gname) for m in members} == {(0, 0, "", "")}
    # A pin that is not what the venv has is refused, not packed.
    bad = tmp_path / "requirements.txt"
    bad.write_text("starlette==0.0.1\n")
    with pytest.raises(door_archive.ArchiveError, match=r"pins 0\.0\.1"):
        door_archive.build(REPO / "door", bad)


@pytest.mark.llama
def test_the_archive_alone_starts_the_door_and_serves(make_world: WorldFactory, tmp_path: Path) -> None:
    path = door_archive.write(tmp_path / "out")
    site = tmp_path / "workspace"
    site.mkdir()
    with tarfile.open(path) as tar:
        tar.extractall(site, filter="data")
    # -I: no PYTHONPATH, no user site, not the script's directory; -S: not even the venv's packages.
    world = make_world(size=1, command=[sys.executable, "-I", "-S", "main.py"], cwd=site)
    reply = httpx.post(f"{world.url}/v1/chat/completions", headers=AUTH, json=ask(), timeout=60)
    assert reply.status_code == 200, reply.text
    assert reply.json()["choices"][0]["message"]["content"].startswith("aaaa")
    assert any("vendor" in line or "Uvicorn running" in line for line in world.door.log), world.door.log
