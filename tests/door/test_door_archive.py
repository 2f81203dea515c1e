"""The deployable archive (infra/door_archive.py): the same bytes for the same inputs, pure Python
only, and alone (extracted into an empty directory, run by ``python -I -S``: no PYTHONPATH, no
site-packages, not even the venv's) it starts the door, which then serves a real completion."""

from __future__ import annotations

import base64
import hashlib
import io
import os
import re
import shutil
import subprocess
import sys
import tarfile
import zipfile
from pathlib import Path, PurePosixPath

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


def _rebuilt_wheels(out: Path) -> Path:
    """The pinned distributions as wheels again, from this venv's installed files (each distribution's
    own files and its METADATA and WHEEL; the installer's files left out; a RECORD written anew, as a
    wheel carries one: https://packaging.python.org/en/latest/specifications/binary-distribution-format/),
    so that other installers can install them offline."""
    out.mkdir()
    for name, version in door_archive.pins():
        dist = door_archive.metadata.distribution(name)
        stem = f"{re.sub(r'[-_.]+', '_', name)}-{version}"
        record: list[str] = []
        with zipfile.ZipFile(out / f"{stem}-py3-none-any.whl", "w") as wheel:
            for entry in dist.files or []:
                rel = PurePosixPath(str(entry))
                if rel.parts[0] == ".." or "__pycache__" in rel.parts or rel.suffix == ".pyc":
                    continue
                if rel.parts[0].endswith(".dist-info") and rel.name in door_archive.INSTALLER_FILES:
                    continue
                data = Path(str(dist.locate_file(entry))).read_bytes()
                wheel.writestr(str(rel), data)
                digest = base64.urlsafe_b64encode(hashlib.sha256(data).digest()).rstrip(b"=").decode()
                record.append(f"{rel},sha256={digest},{len(data)}")
            info = next(
                p for p in (PurePosixPath(str(e)) for e in dist.files or []) if p.name == "METADATA"
            ).parent
            record.append(f"{info}/RECORD,,")
            wheel.writestr(f"{info}/RECORD", "\n".join(record) + "\n")
    return out


def test_two_installers_give_the_same_archive(tmp_path: Path) -> None:
    """The system's pip (compiling bytecode, as it does by default, from an index of wheels) and this
    venv's pip of another version (no bytecode, each wheel by its path) write different RECORDs and
    a direct_url.json: the archive is the same bytes from either."""
    wheels = _rebuilt_wheels(tmp_path / "wheels")
    system_pip = Path("/usr/bin/python3")
    if not system_pip.is_file() or subprocess.run([system_pip, "-m", "pip", "--version"]).returncode:
        pytest.skip("no system pip beside this venv's to install with")
    first, second = tmp_path / "first", tmp_path / "second"
    offline = ["--no-index", "--no-deps", "--disable-pip-version-check", "--quiet"]
    subprocess.run(
        [
            *(system_pip, "-m", "pip", "install", *offline),
            *("--find-links", wheels, "--target", first, "-r", door_archive.REQUIREMENTS),
        ],
        check=True,
    )
    subprocess.run(
        [
            sys.executable,
            "-m",
            "pip",
            "install",
            *offline,
            "--no-compile",
            "--target",
            second,
            *sorted(wheels.glob("*.whl")),
        ],
        check=True,
    )
    versions = {
        subprocess.run([p, "-m", "pip", "--version"], capture_output=True, text=True).stdout.split()[1]
        for p in (system_pip, Path(sys.executable))
    }
    assert len(versions) == 2, "the two installers are the same pip"
    records = [sorted(site.glob("starlette-*.dist-info/RECORD"))[0].read_text() for site in (first, second)]
    assert records[0] != records[1] and ".pyc" in records[0] and ".pyc" not in records[1]
    assert list(second.glob("*.dist-info/direct_url.json")) and not list(
        first.glob("*.dist-info/direct_url.json")
    )
    one, other = door_archive.build(site=[first]), door_archive.build(site=[second])
    assert one.data == other.data and one.name == other.name
    assert not [m for m in one.members if PurePosixPath(m).name in door_archive.INSTALLER_FILES]


def test_main_refuses_an_interpreter_below_3_11_in_one_line(tmp_path: Path) -> None:
    """No 3.10 interpreter is at hand here, so main.py runs with sys.version_info set to Ubuntu 22.04's
    system python3 (3.10.12) before its first line: it ends before importing the door."""
    (tmp_path / "main.py").write_text(door_archive.MAIN_PY)
    fake = (
        "import sys; sys.version_info = (3, 10, 12, 'final', 0); "
        "code = compile(open('main.py').read(), 'main.py', 'exec'); "
        "exec(code, {'__name__': '__main__', '__file__': 'main.py'})"
    )
    old = subprocess.run([sys.executable, "-I", "-c", fake], cwd=tmp_path, capture_output=True, text=True)
    assert old.returncode == 1 and old.stdout == ""
    assert old.stderr == (
        f"door: error: Python 3.10.12 ({sys.executable}) is too old; the door needs 3.11 or later: run it "
        "with the runtime's `python` (infra/door.py COMMAND)\n"
    )
    # This interpreter passes the guard and goes on to import the door (absent here: no door/ beside it).
    current = subprocess.run([sys.executable, "-I", "main.py"], cwd=tmp_path, capture_output=True, text=True)
    assert "ModuleNotFoundError: No module named 'door'" in current.stderr
