"""Renders the builder VM's startup script: a shell-quoted variable block, ``startup/lib.sh`` (the
helpers it shares with the boot script), then ``startup/bake.sh``.

The rendered text also names the tooling image (its hash is part of the image name), so it holds
nothing time-dependent or random: the same config always gives the same bytes.
"""

from __future__ import annotations

import hashlib
import re
from pathlib import Path

from infra import boot_protocol
from infra.boot_script import lib_variables
from infra.config import StackConfig
from infra.llama_cpp import server_image

STARTUP_DIR = Path(__file__).resolve().parent.parent / "startup"
BODY_PATH = STARTUP_DIR / "bake.sh"
LIB_PATH = STARTUP_DIR / "lib.sh"
VERIFY_PATH = STARTUP_DIR / "verify_gpu.sh"
# Where the bake records whether Canonical's signed modules replaced the DKMS build ("installed", or
# why not), for the GPU test on the candidate image to read.
DRIVER_MARKER = "/var/lib/qwen36/signed-driver"
# The GPU test's guest attributes (startup/verify_gpu.sh): one per pass.
KEY_SECURE_BOOT = "secure-boot"
KEY_PLAIN = "gpu-without-secure-boot"
_BRANCH_RE = re.compile(r"nvidia-(\d{3,})$")

# The bake's own phases, reported under the boot script's namespace and keys so the same
# guest-attribute follower reads both; "ready" and "failed" are shared terminal reports.
BAKE_PHASES = (
    "bake-start",
    "bake-docker",
    "bake-runtime",
    "bake-pull",
    "bake-driver",
    "bake-clean",
    boot_protocol.PHASE_READY,
)


def driver_branch(cfg: StackConfig) -> str:
    """The NVIDIA driver branch of the base image, from its family's name
    (``common-cu129-ubuntu-2204-nvidia-580``: 580); empty when the name does not say."""
    match = _BRANCH_RE.search(cfg.image_family)
    return match.group(1) if match else ""


def _variables(cfg: StackConfig) -> dict[str, str]:
    return {
        "SERVER_IMAGE": server_image(cfg.llama_cpp_build),
        "DRIVER_BRANCH": driver_branch(cfg),
        "DRIVER_MARKER": DRIVER_MARKER,
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


def render_verify_script(cfg: StackConfig) -> str:
    """The startup script of the bake's GPU test VM: shebang, its variables, startup/verify_gpu.sh."""
    values = {
        "SERVER_IMAGE": server_image(cfg.llama_cpp_build),
        "GA_NAMESPACE": boot_protocol.NAMESPACE,
        "KEY_SECURE_BOOT": KEY_SECURE_BOOT,
        "KEY_PLAIN": KEY_PLAIN,
        "DRIVER_MARKER": DRIVER_MARKER,
    }
    block = "".join(f"{name}={shell_quote(value)}\n" for name, value in values.items())
    return (
        "#!/bin/bash\n"
        "# Rendered by infra/bake_script.py; the body is startup/verify_gpu.sh.\n"
        f"{block}\n{VERIFY_PATH.read_text(encoding='utf-8')}"
    )


def bake_script_hash(script: str, length: int = 8) -> str:
    """A short content hash for image names: a changed bake script makes a new image."""
    return hashlib.sha256(script.encode()).hexdigest()[:length]
