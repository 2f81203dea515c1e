"""The boot sandbox's stubs (tests/boot/stubs.py), plus what only the bake needs of them.

Run in place of that program by the apt-get and docker wrappers of a bake sandbox. It adds
``apt-get clean`` (the boot script never cleans), ``depmod`` (the signed-driver step), and two
faults a test switches on with a flag file in the host folder: ``fail-pull`` (the registry refuses
every pull) and ``docker-dead`` (the daemon never answers). Everything else is the boot
sandbox's own behaviour.
"""

from __future__ import annotations

import runpy
import sys
from pathlib import Path
from typing import Any

BOOT_STUBS = Path(__file__).resolve().parents[1] / "boot" / "stubs.py"

stubs: dict[str, Any] = runpy.run_path(str(BOOT_STUBS), run_name="boot_stubs")
host: Path = stubs["HOST"]
err = stubs["err"]
boot_apt_get = stubs["apt_get"]
boot_docker = stubs["docker"]


def apt_get(argv: list[str]) -> int:
    words = [a for a in argv if not a.startswith("-") and "::" not in a]
    if words == ["clean"]:
        return 0
    return int(boot_apt_get(argv))


def docker(argv: list[str]) -> int:
    if (host / "docker-dead").exists():
        return int(err("Cannot connect to the Docker daemon at unix:///var/run/docker.sock.", 1))
    if argv[:1] == ["pull"] and (host / "fail-pull").exists():
        return int(err("Error response from daemon: toomanyrequests: retry later", 1))
    return int(boot_docker(argv))


def depmod(argv: list[str]) -> int:
    return 0


stubs["HANDLERS"].update({"apt-get": apt_get, "docker": docker, "depmod": depmod})

if __name__ == "__main__":
    sys.exit(stubs["main"]())
