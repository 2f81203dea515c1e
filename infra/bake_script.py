"""Renders the builder VM's startup script: a shell-quoted variable block, ``startup/lib.sh`` (the
helpers it shares with the boot script), then ``startup/bake.sh``.

The rendered text also names the tooling image (its hash is part of the image name), so it holds
nothing time-dependent or random: the same config always gives the same bytes.
"""

from __future__ import annotations

import hashlib
from pathlib import Path

from infra import boot_protocol
from infra.boot_script import lib_variables
from infra.config import StackConfig
from infra.llama_cpp import server_image

STARTUP_DIR = Path(__file__).resolve().parent.parent / "startup"
BODY_PATH = STARTUP_DIR / "bake.sh"
LIB_PATH = STARTUP_DIR / "lib.sh"

# The bake's own phases, reported under the boot script's namespace and keys so the same
# guest-attribute follower reads both; "ready" and "failed" are shared terminal reports.
BAKE_PHASES = (
    "bake-start",
    "bake-docker",
    "bake-runtime",
    "bake-pull",
    "bake-clean",
    boot_protocol.PHASE_READY,
)


def _variables(cfg: StackConfig) -> dict[str, str]:
    return {
        "SERVER_IMAGE": server_image(cfg.llama_cpp_build),
        **lib_variables(),
    }


def shell_quote(value: str) -> str:
    """Always single-quoted (shlex leaves ``time`` bare, which shellcheck reads as a command)."""
    return "'" + value.replace("'", "'\"'\"'") + "'"


def render_bake_script(cfg: StackConfig) -> str:
    """The startup script for the builder VM: shebang, config block, then lib.sh and bake.sh verbatim."""
    block = "".join(f"{name}={shell_quote(value)}\n" for name, value in _variables(cfg).items())
    return (
        "#!/bin/bash\n"
        "# Rendered by infra/bake_script.py from the stack config; the body is startup/{lib,bake}.sh.\n"
        f"{block}\n{LIB_PATH.read_text(encoding='utf-8')}\n{BODY_PATH.read_text(encoding='utf-8')}"
    )


def bake_script_hash(script: str, length: int = 8) -> str:
    """A short content hash for image names: a changed bake script makes a new image."""
    return hashlib.sha256(script.encode()).hexdigest()[:length]
