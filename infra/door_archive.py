"""The door's deployable archive: ``door/`` and its pinned pure-Python dependencies, packed from the
local venv into one tar.gz that Cloud Run runs on Google's Python base image without a build
(docs/door.md: the "source deploy without build" pick).

Packing only: infra never imports ``door/`` (tests/test_import_rooms.py); it reads its files and
``door/requirements.txt``. The archive is deterministic: the same door and the same pinned
distributions give the same bytes (sorted entries, fixed mtimes, owners and modes, gzip without a
name or time), whichever installer put them in the venv: what only an installer writes is left out
(``INSTALLER_FILES``: pip's RECORD lists the bytecode it compiled, INSTALLER names pip or uv,
direct_url.json where it came from; https://packaging.python.org/en/latest/specifications/recording-installed-packages/),
and the runtime reads none of them. So its sha256, which names the bucket object, changes only when
a byte of the door or a pinned distribution's own files changes, and a ``pulumi up`` with no change
redeploys nothing.

Layout::

    main.py            puts the archive's own directory and vendor/ first on sys.path, runs the door
    door/...           the service (its .py files, metrics.json, requirements.txt)
    vendor/...         each pinned distribution's files as its RECORD lists them, dist-info included
                       but for what only the installer writes (INSTALLER_FILES)

``python -m infra.door_archive --out DIR`` writes ``DIR/door-<sha12>.tar.gz`` and prints its path.
"""

from __future__ import annotations

import argparse
import gzip
import hashlib
import io
import re
import sys
import tarfile
from collections.abc import Sequence
from dataclasses import dataclass
from importlib import metadata
from pathlib import Path, PurePosixPath

REPO_ROOT = Path(__file__).resolve().parents[1]
DOOR_DIR = REPO_ROOT / "door"
REQUIREMENTS = DOOR_DIR / "requirements.txt"
# 1980-01-01: the earliest time every archive tool (zip included) can store; 0 trips some of them.
FIXED_MTIME = 315532800
DOOR_SUFFIXES = (".py", ".json", ".txt")
COMPILED = re.compile(r"\.(so|pyd|dylib|dll)(\.|$)")
# Files of a distribution's .dist-info that the installer writes, not the wheel: RECORD (with the
# hashes of what was installed, the .pyc files it compiled included), INSTALLER, REQUESTED and
# direct_url.json (the recording-installed-packages specification above); uv_cache.json is uv's own.
INSTALLER_FILES = frozenset({"RECORD", "INSTALLER", "REQUESTED", "direct_url.json", "uv_cache.json"})
_PIN = re.compile(r"^([A-Za-z0-9_.-]+)==([^\s;#]+)\s*(?:#.*)?$")

MAIN_PY = '''\
"""The door's entry point in its archive: no site-packages needed, only this directory."""

import sys

# The door needs 3.11 (datetime.UTC, door/metrics.py). On Ubuntu 22.04, the base image's stack, a
# system python3 is 3.10: say so in one line rather than fail on an import.
if sys.version_info < (3, 11):
    found = ".".join(str(part) for part in sys.version_info[:3])
    sys.exit(
        f"door: error: Python {found} ({sys.executable}) is too old; the door needs 3.11 or later: "
        "run it with the runtime's `python` (infra/door.py COMMAND)"
    )

from pathlib import Path  # noqa: E402

HERE = Path(__file__).resolve().parent
sys.path[:0] = [str(HERE), str(HERE / "vendor")]

from door.__main__ import main  # noqa: E402

sys.exit(main())
'''


class ArchiveError(RuntimeError):
    pass


@dataclass(frozen=True)
class Archive:
    data: bytes
    members: tuple[str, ...]

    @property
    def sha256(self) -> str:
        return hashlib.sha256(self.data).hexdigest()

    @property
    def name(self) -> str:
        return f"door-{self.sha256[:12]}.tar.gz"


def pins(path: Path = REQUIREMENTS) -> list[tuple[str, str]]:
    out = []
    for line in path.read_text(encoding="utf-8").splitlines():
        line = line.strip()
        if not line or line.startswith("#"):
            continue
        match = _PIN.match(line)
        if match is None:
            raise ArchiveError(f"{path.name}: {line!r} is not a name==version pin")
        out.append((match.group(1), match.group(2)))
    return out


def _distribution(name: str, site: Sequence[Path] | None) -> metadata.Distribution:
    if site is None:
        return metadata.distribution(name)
    normal = re.sub(r"[-_.]+", "-", name).lower()
    for dist in metadata.distributions(path=[str(p) for p in site]):
        if re.sub(r"[-_.]+", "-", dist.metadata["Name"]).lower() == normal:
            return dist
    raise metadata.PackageNotFoundError(name)


def _distribution_files(name: str, version: str, site: Sequence[Path] | None = None) -> dict[str, Path]:
    """``vendor/<path>`` -> file, for one installed distribution (in ``site``, else this venv),
    checked against its pin."""
    try:
        dist = _distribution(name, site)
    except metadata.PackageNotFoundError:
        raise ArchiveError(
            f"{name}=={version} is not installed in this venv (pip install -r door/requirements.txt)"
        ) from None
    if dist.version != version:
        raise ArchiveError(f"{name} is {dist.version} in this venv; door/requirements.txt pins {version}")
    wheel = dist.read_text("WHEEL") or ""
    if "Root-Is-Purelib: true" not in wheel:
        raise ArchiveError(f"{name} is not a pure-Python wheel; the door runs without a build step")
    out: dict[str, Path] = {}
    for entry in dist.files or []:
        rel = PurePosixPath(str(entry))
        if rel.parts[0] == ".." or "__pycache__" in rel.parts or rel.suffix == ".pyc":
            continue  # console scripts outside site-packages; bytecode the runtime writes itself
        if rel.parts[0].endswith(".dist-info") and rel.name in INSTALLER_FILES:
            continue
        if COMPILED.search(rel.name):
            raise ArchiveError(f"{name} ships compiled code ({rel}); the door must stay pure Python")
        path = Path(str(dist.locate_file(entry)))
        if path.is_file():
            out[f"vendor/{rel}"] = path
    return out


def _door_files(door_dir: Path) -> dict[str, Path]:
    return {
        f"door/{p.relative_to(door_dir).as_posix()}": p
        for p in door_dir.rglob("*")
        if p.is_file() and p.suffix in DOOR_SUFFIXES and "__pycache__" not in p.parts
    }


def _info(name: str, size: int, *, directory: bool = False) -> tarfile.TarInfo:
    info = tarfile.TarInfo(name)
    info.size = 0 if directory else size
    info.type = tarfile.DIRTYPE if directory else tarfile.REGTYPE
    info.mode = 0o755 if directory else 0o644
    info.mtime = FIXED_MTIME
    info.uid = info.gid = 0
    info.uname = info.gname = ""
    return info


def build(
    door_dir: Path = DOOR_DIR, requirements: Path = REQUIREMENTS, site: Sequence[Path] | None = None
) -> Archive:
    """The archive of ``door_dir`` and the pins of ``requirements`` as installed in ``site`` (the
    directories to look in; None: this venv)."""
    files: dict[str, bytes] = {"main.py": MAIN_PY.encode()}
    for arcname, path in _door_files(door_dir).items():
        files[arcname] = path.read_bytes()
    for name, version in pins(requirements):
        for arcname, path in _distribution_files(name, version, site).items():
            if arcname in files:
                raise ArchiveError(f"{arcname} is in two distributions")
            files[arcname] = path.read_bytes()
    directories = sorted(
        {str(parent) for name in files for parent in PurePosixPath(name).parents if str(parent) != "."}
    )
    raw = io.BytesIO()
    with tarfile.open(fileobj=raw, mode="w", format=tarfile.GNU_FORMAT) as tar:
        for directory in directories:
            tar.addfile(_info(directory, 0, directory=True))
        for name in sorted(files):
            tar.addfile(_info(name, len(files[name])), io.BytesIO(files[name]))
    packed = io.BytesIO()
    with gzip.GzipFile(filename="", mode="wb", fileobj=packed, mtime=0, compresslevel=9) as gz:
        gz.write(raw.getvalue())
    return Archive(packed.getvalue(), tuple(sorted(files)))


def write(out_dir: Path) -> Path:
    """Writes the archive as ``out_dir/door-<sha12>.tar.gz`` (kept if already there) and returns it."""
    archive = build()
    out_dir.mkdir(parents=True, exist_ok=True)
    path = out_dir / archive.name
    if not path.is_file() or path.read_bytes() != archive.data:
        path.write_bytes(archive.data)
    return path


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m infra.door_archive", description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, required=True, help="directory to write door-<sha12>.tar.gz into")
    args = parser.parse_args(argv)
    try:
        path = write(args.out)
    except ArchiveError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 1
    print(path)
    return 0


if __name__ == "__main__":
    sys.exit(main())
