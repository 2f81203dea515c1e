"""Render the server VM's startup script from the validated stack config.

The script is ``#!/bin/bash``, a block of shell assignments generated here (every value through
``shlex.quote``), the VM agents it starts (``startup/idle_watch.py``; ``startup/metrics_publisher.py``
for an autoscaled fleet) and the module they share (``startup/vm_agent.py``) as quoted heredocs,
then ``startup/lib.sh`` (the helpers it shares with the bake script), ``startup/model.sh`` (the
model path: tmpfs, ``gcloud storage cp``, ``hf download``, the post-serve hash) and
``startup/boot.sh`` verbatim.
A changed startup script replaces the VM, so the output depends on the config alone: no clock,
no randomness, no ordering that could vary.
"""

from __future__ import annotations

import json
import re
import shlex
from collections.abc import Iterable
from pathlib import Path

from infra import boot_protocol, fleet_bounds
from infra.config import StackConfig, config_key
from infra.llama_cpp import server_image
from infra.model_cache import model_object_name, verdict_object_name
from infra.server_args import (
    CONTAINER_API_KEY_FILE,
    CONTAINER_MODEL_DIR,
    PORT,
    calibration_candidates,
    container_model_path,
    server_args,
)

REPO_ROOT = Path(__file__).resolve().parent.parent
BODY_PATH = REPO_ROOT / "startup" / "boot.sh"
LIB_PATH = REPO_ROOT / "startup" / "lib.sh"
METRICS_PUBLISHER_PATH = REPO_ROOT / "startup" / "metrics_publisher.py"
PUBLISHER_HEREDOC_END = "QWEN36_METRICS_PUBLISHER_EOF"
IDLE_WATCH_PATH = REPO_ROOT / "startup" / "idle_watch.py"
VM_AGENT_PATH = REPO_ROOT / "startup" / "vm_agent.py"
VM_AGENT_END = "QWEN36_VM_AGENT_EOF"
MODEL_SH_PATH = REPO_ROOT / "startup" / "model.sh"
CALIBRATE_PATH = REPO_ROOT / "startup" / "calibrate.py"
CALIBRATE_END = "QWEN36_CALIBRATE_EOF"
ACCEPT_GUARD_PATH = REPO_ROOT / "startup" / "accept_guard.py"
ACCEPT_GUARD_END = "QWEN36_ACCEPT_GUARD_EOF"
CANDIDATES_END = "QWEN36_CANDIDATES_EOF"
# The bound of the first-boot calibration (startup/calibrate.py DEFAULT_BUDGET_S says why 120 s).
CALIBRATION_BUDGET_S = 120

# GCE caps one metadata value at 256 KB; the rendered script stays well below it.
# https://cloud.google.com/compute/docs/metadata/setting-custom-metadata#limitations
MAX_SCRIPT_BYTES = 200_000
IDLE_WATCH_END = "QWEN36_IDLE_WATCH_EOF"
_DRIVER_BRANCH_RE = re.compile(r"nvidia-(\d+)")


class BootScriptError(ValueError):
    pass


def lib_variables() -> dict[str, str]:
    """The config-block values startup/lib.sh and both bodies read; both renderers emit them."""
    return {
        "GA_NAMESPACE": boot_protocol.NAMESPACE,
        "GA_KEY_REPORT": boot_protocol.KEY_REPORT,
        "GA_SCRIPT_WRITES_PER_MINUTE": str(boot_protocol.SCRIPT_WRITES_PER_MINUTE),
        "GA_MIN_GAP_S": str(boot_protocol.SCRIPT_MIN_GAP_S),
        "GA_PROGRESS_MIN_S": str(boot_protocol.PROGRESS_MIN_INTERVAL_S),
        "DETAIL_MAX_CHARS": str(boot_protocol.DETAIL_MAX_CHARS),
        "PHASE_READY": boot_protocol.PHASE_READY,
        "PHASE_FAILED": boot_protocol.PHASE_FAILED,
    }


def driver_branch(image_family: str) -> str:
    """The NVIDIA driver branch of a Deep Learning VM family (``...-nvidia-580`` -> ``580``), or ''."""
    match = _DRIVER_BRANCH_RE.search(image_family)
    return match[1] if match else ""


def render_boot_script(
    cfg: StackConfig, *, bucket: str, api_key_secret: str | None, project: str, door_url: str | None = None
) -> str:
    """The whole startup script for ``cfg``; byte-identical for the same inputs."""
    key_file = CONTAINER_API_KEY_FILE if api_key_secret else None
    model_path = container_model_path(cfg)
    args = server_args(cfg, model_path=model_path, api_key_file=key_file)
    degraded = server_args(cfg, model_path=model_path, api_key_file=key_file, ctx_size=cfg.degraded_ctx_size)
    candidates = calibration_candidates(
        cfg, model_path=model_path, api_key_file=key_file, ctx_sizes=(cfg.ctx_size, cfg.degraded_ctx_size)
    )
    scalars = {
        "SERVER_IMAGE": server_image(cfg.llama_cpp_build),
        "SERVER_PORT": str(PORT),
        "CONTAINER_MODEL_DIR": CONTAINER_MODEL_DIR,
        "CONTAINER_API_KEY_FILE": CONTAINER_API_KEY_FILE,
        "DEGRADED_CTX_SIZE": str(cfg.degraded_ctx_size),
        "CTX_SIZE_KEY": config_key("ctx_size"),
        "DEGRADED_CTX_SIZE_KEY": config_key("degraded_ctx_size"),
        "NVIDIA_DRIVER_BRANCH": driver_branch(cfg.image_family),
        "MODEL_BUCKET": bucket,
        "MODEL_OBJECT": model_object_name(cfg),
        "MODEL_REPO": cfg.model_repo,
        "MODEL_FILE": cfg.model_file,
        "MODEL_REVISION": cfg.model_revision,
        "MODEL_SHA256": cfg.model_sha256,
        "MODEL_SIZE_BYTES": str(cfg.model_size_bytes),
        "SELF_STAGE": "1" if cfg.self_stage_model else "0",
        "PROGRESS_MIN_INTERVAL_S": str(boot_protocol.PROGRESS_MIN_INTERVAL_S),
        "API_KEY_SECRET": api_key_secret or "",
        "GCP_PROJECT": project,
        # Fleet members with an autoscaler publish their load (startup/metrics_publisher.py).
        "LOAD_METRIC_PUBLISH": "1" if cfg.autoscaled else "0",
        "LOAD_METRIC_TYPE": fleet_bounds.LOAD_METRIC_TYPE,
        "LOAD_METRIC_INTERVAL_S": str(fleet_bounds.LOAD_METRIC_INTERVAL_S),
        "IDLE_STOP_MINUTES": str(cfg.autostop_minutes),
        # With a front door, the idle watcher asks the door to stop the group (the door holds the
        # only grant that can); without one it resizes the group itself.
        "IDLE_STOP_DOOR_URL": door_url or "",
        # The first-boot calibration and the acceptance guard (startup/calibrate.py, accept_guard.py).
        "LLAMA_CPP_BUILD": str(cfg.llama_cpp_build),
        "CTX_SIZE": str(cfg.ctx_size),
        "VERDICT_OBJECT": verdict_object_name(cfg),
        "CALIB_BUDGET_S": str(CALIBRATION_BUDGET_S),
        "ACCEPT_REPORT_INTERVAL_S": str(boot_protocol.ACCEPT_REPORT_INTERVAL_S),
        "ACCEPTANCE_METRIC_TYPE": boot_protocol.ACCEPTANCE_METRIC_TYPE,
        "DECODE_RATE_METRIC_TYPE": boot_protocol.DECODE_RATE_METRIC_TYPE,
        **{f"FIELD_{_var(f)}": f for f in boot_protocol.CALIBRATION_FIELDS},
        **lib_variables(),
    }
    for phase in boot_protocol.PHASES:
        scalars.setdefault(_phase_var(phase), phase)
    for figure in boot_protocol.FIGURES:
        scalars[_figure_var(figure)] = figure
    lines = [
        "#!/bin/bash",
        "# Rendered by infra/boot_script.py from the stack config: edit startup/{lib,boot}.sh or the config.",
        *(f"{name}={_quote_word(value)}" for name, value in scalars.items()),
        _array("SERVER_ARGS", args),
        _array("SERVER_ARGS_DEGRADED", degraded),
        _embedded_file("qwen36_vm_agent_lib", VM_AGENT_PATH.read_text(encoding="utf-8"), VM_AGENT_END),
        *(
            [
                _embedded_file(
                    "qwen36_metrics_publisher",
                    METRICS_PUBLISHER_PATH.read_text(encoding="utf-8"),
                    PUBLISHER_HEREDOC_END,
                )
            ]
            # Only autoscaled fleets carry it, so a single server's script does not change with it.
            if cfg.autoscaled
            else []
        ),
        _embedded_file("qwen36_idle_watch_tool", IDLE_WATCH_PATH.read_text(encoding="utf-8"), IDLE_WATCH_END),
        _embedded_file("qwen36_calibrate_tool", CALIBRATE_PATH.read_text(encoding="utf-8"), CALIBRATE_END),
        _embedded_file(
            "qwen36_accept_guard_tool", ACCEPT_GUARD_PATH.read_text(encoding="utf-8"), ACCEPT_GUARD_END
        ),
        _embedded_file(
            "qwen36_calibration_candidates",
            json.dumps(candidates, separators=(",", ":"), sort_keys=True),
            CANDIDATES_END,
        ),
        LIB_PATH.read_text(encoding="utf-8"),
        MODEL_SH_PATH.read_text(encoding="utf-8"),
        BODY_PATH.read_text(encoding="utf-8"),
    ]
    script = "\n".join(lines)
    size = len(script.encode("utf-8"))
    if size > MAX_SCRIPT_BYTES:
        raise BootScriptError(f"the rendered startup script is {size} bytes; the limit is {MAX_SCRIPT_BYTES}")
    return script


def _phase_var(phase: str) -> str:
    return "PHASE_" + _var(phase)


def _var(word: str) -> str:
    return re.sub(r"[^A-Za-z0-9]", "_", word).upper()


def _figure_var(figure: str) -> str:
    """``fetch-mb-s`` -> ``FIGURE_FETCH_MB_S``: the ready report's figure names (boot_protocol)."""
    return "FIGURE_" + _var(figure)


def _quote_word(value: str) -> str:
    # shlex.quote leaves plain words bare; quoting them too keeps ``KEY=time`` from reading as a
    # command to shellcheck (SC2209) and makes every assignment look alike.
    quoted = shlex.quote(value)
    return quoted if quoted.startswith("'") else f"'{quoted}'"


def _array(name: str, values: Iterable[str]) -> str:
    return f"{name}=({' '.join(shlex.quote(v) for v in values)})"


def _embedded_file(function: str, source: str, end: str) -> str:
    """A shell function that prints ``source`` byte for byte (a quoted heredoc expands nothing)."""
    if end in source.splitlines():
        raise BootScriptError(f"{function}: the embedded file contains the heredoc delimiter line {end}")
    if not source.endswith("\n"):
        source += "\n"
    return f"{function}() {{\n  cat <<'{end}'\n{source}{end}\n}}\n"
