"""The single source of truth for llama-server's arguments.

The boot script, the Dockerfile/compose files and the contract tests against the real pinned
llama-server all take the argument list from :func:`server_args`; nothing else spells a flag.
Spellings are those of the pinned build (``infra/llama_cpp.py``): ``--load-mode none`` replaced
``--no-mmap``, which that build rejects.
"""

from __future__ import annotations

from typing import Any

from infra.config import StackConfig, config_key

PORT = 8080
CONTAINER_MODEL_DIR = "/models"
CONTAINER_API_KEY_FILE = "/run/secrets/llama-api-key"


def container_model_path(cfg: StackConfig) -> str:
    return f"{CONTAINER_MODEL_DIR}/{cfg.model_file.rsplit('/', 1)[-1]}"


def server_args(
    cfg: StackConfig,
    *,
    model_path: str,
    api_key_file: str | None,
    host: str = "0.0.0.0",  # noqa: S104 (inside the container; docker publishes the port)
    port: int = PORT,
    ctx_size: int | None = None,
) -> list[str]:
    """llama-server's argument list for a validated config (no container or GPU wrapper).

    ``ctx_size`` overrides the configured context, for the degraded ECC-on mode.
    ``api_key_file`` is None only where the user turned the API key off.
    """
    args = [
        "--model", model_path,
        "--alias", cfg.alias,
        "--host", host,
        "--port", str(port),
        "--jinja",
        "--ctx-size", str(ctx_size if ctx_size is not None else cfg.ctx_size),
        "--parallel", str(cfg.parallel),
        "--flash-attn", "on",
        # Every layer and every MoE expert on the GPU: one expert left on the CPU costs ~28 %.
        "--n-gpu-layers", "99",
        "--n-cpu-moe", "0",
        # A small ubatch shrinks the compute buffer so the weights and 56K of KV fit in 24 GB;
        # decode is batch-1, so it costs prompt speed only.
        "--ubatch-size", str(cfg.ubatch_size),
        "--batch-size", str(cfg.batch_size),
        "--load-mode", "none",
        "--threads", str(cfg.server_threads),
        "--metrics",
        "--no-warmup",
    ]  # fmt: skip
    if cfg.default_max_tokens > 0:
        # A request without max_tokens stops here: at b11434 the request's own n_predict/max_tokens
        # wins and the server's --n-predict is the default (tools/server/server-context.cpp,
        # "the per-request limit takes priority over the global one").
        args += ["--n-predict", str(cfg.default_max_tokens)]
    if cfg.spec_draft_n_max > 0:
        args += ["--spec-type", "draft-mtp", "--spec-draft-n-max", str(cfg.spec_draft_n_max)]
        if cfg.spec_draft_p_min > 0:
            args += ["--spec-draft-p-min", f"{cfg.spec_draft_p_min:g}"]
    if cfg.backend_sampling:
        args.append("--backend-sampling")
    if api_key_file is not None:
        args += ["--api-key-file", api_key_file]
    if cfg.tools:
        # Server-side tools run shell commands and write files on the VM: only on explicit request.
        args += ["--tools", ",".join(cfg.tools)]
    return args


# ----------------------------------------------------------------------- first-boot calibration
# The one switch the pinned build has over CUDA's fused kernels: "1" turns every fusion off.
# https://github.com/ggml-org/llama.cpp/blob/master/ggml/src/ggml-cuda/ggml-cuda.cu (GGML_CUDA_DISABLE_FUSION)
FUSION_ENV = "GGML_CUDA_DISABLE_FUSION"
# MTP off and the draft lengths the first boot of a key measures (startup/calibrate.py).
CALIBRATION_N_MAX = (0, 1, 2, 3)
# The stack-config fields a calibration may decide; a value the stack file sets wins over it.
CALIBRATED_FIELDS = ("spec_draft_n_max", "backend_sampling")
CALIBRATION_SCHEMA = 1


def calibration_candidates(
    cfg: StackConfig, *, model_path: str, api_key_file: str | None, ctx_sizes: tuple[int, ...]
) -> dict[str, Any]:
    """Every argument list the calibration may start or choose, from :func:`server_args` alone:
    one per (ctx size, n-max, GPU sampling), each the stack config with those two fields changed.
    Fusion is an environment variable (``FUSION_ENV``), not a flag, so it adds no list."""
    n_values = sorted(set(CALIBRATION_N_MAX) | {cfg.spec_draft_n_max})
    entries = [
        {
            "ctx_size": ctx,
            "n_max": n,
            "gpu_sampling": sampling,
            "args": server_args(
                cfg.model_copy(update={"spec_draft_n_max": n, "backend_sampling": sampling}),
                model_path=model_path,
                api_key_file=api_key_file,
                ctx_size=ctx,
            ),
        }
        for ctx in dict.fromkeys(ctx_sizes)
        for n in n_values
        for sampling in (True, False)
    ]
    pinned = {name: getattr(cfg, name) for name in CALIBRATED_FIELDS if name in cfg.model_fields_set}
    return {
        "schema": CALIBRATION_SCHEMA,
        "fusion_env": FUSION_ENV,
        "calibrated_n_max": list(CALIBRATION_N_MAX),
        "default": {"n_max": cfg.spec_draft_n_max, "gpu_sampling": cfg.backend_sampling},
        "pinned": pinned,
        "pinned_keys": {name: config_key(name) for name in pinned},
        "candidates": entries,
    }
