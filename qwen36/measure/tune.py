"""``tune``: start the server with varied settings, measure each, and name the winners.

Every setting is the stack config with one field changed (``StackConfig.model_copy``) and turned
into flags by ``server_args``, so a winner maps one-to-one onto a ``pulumi config set`` line.
Draft settings are ranked by the bench's headline, the slowest workload's decode speed; slot
counts by aggregate decode speed under load. The context search assumes that if a size fails,
every larger size fails too (memory only grows with it) and bisects at the chosen resolution.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from typing import Any

from infra.config import ConfigError, StackConfig, config_key, parse_config
from infra.server_args import FUSION_ENV
from qwen36.errors import UsageError
from qwen36.measure.bench import run_bench
from qwen36.measure.client import Client, EndpointError
from qwen36.measure.launcher import Launcher, LaunchError, last_lines
from qwen36.measure.load import run_load
from qwen36.measure.workloads import Workload

FILL_GEN_TOKENS = 8
# Room left in a filled slot for the generated tokens and the MTP drafts verified past them.
FILL_MARGIN = 8
REQUESTS_PER_SLOT = 2
FILL_TEXT = " the"
# The one switch left in the pinned build over CUDA's fused kernels (infra/server_args.py).
# Public reports say a MoE fusion can cut MTP draft acceptance on Qwen3.6-35B-A3B; the sweep puts
# acceptance and tok/s side by side with fusion on and off, so one run on an L4 settles it.
FUSION_VALUES = ("0", "1")

Progress = Callable[[str], None]


@dataclass
class Trial:
    """One server setting and what it measured (bench figures or load figures)."""

    setting: dict[str, Any]
    error: str | None = None
    mean_tps: float | None = None
    min_tps: float | None = None
    min_workload: str | None = None
    acceptance: float | None = None
    aggregate_tps: float | None = None
    per_request_tps: float | None = None
    requests: int = 0
    failed_requests: int = 0

    @property
    def ok(self) -> bool:
        return self.error is None


@dataclass
class CtxProbe:
    ctx_size: int
    ok: bool
    detail: str


@dataclass
class TuneResult:
    base: StackConfig
    n_max: list[Trial] = field(default_factory=list)
    p_min: list[Trial] = field(default_factory=list)
    parallel: list[Trial] = field(default_factory=list)
    fusion: list[Trial] = field(default_factory=list)
    ctx: list[CtxProbe] = field(default_factory=list)
    ctx_resolution: int | None = None
    ctx_at_upper_bound: bool = False
    winners: dict[str, Any] = field(default_factory=dict)
    notes: list[str] = field(default_factory=list)

    def config_lines(self) -> list[str]:
        return [f"pulumi config set {config_key(name)} {_value(v)}" for name, v in self.winners.items()]

    def config_problem(self) -> str | None:
        """Why the winners together would not pass the stack's own validation, if they would not."""
        if not self.winners:
            return None
        # Validate the winners on top of the base config, as `pulumi up` will.
        merged = {config_key(k): _value(v) for k, v in self.base.model_dump().items()}
        merged |= {config_key(k): _value(v) for k, v in self.winners.items()}
        try:
            parse_config(merged)
        except ConfigError as exc:
            return str(exc)
        return None


def _value(value: Any) -> str:
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, float):
        return f"{value:g}"
    if isinstance(value, list):
        return json.dumps(value)
    return str(value)


def bench_setting(
    launcher: Launcher,
    cfg: StackConfig,
    setting: dict[str, Any],
    workloads: Sequence[Workload],
    *,
    reps: int,
    max_tokens: int,
    timeout_s: float,
) -> Trial:
    trial = Trial(setting)
    try:
        with launcher.launch(cfg) as server, Client(server.base_url, server.api_key, timeout_s) as client:
            result = run_bench(client, workloads, reps=reps, max_tokens=max_tokens)
    except LaunchError as exc:
        trial.error = f"did not start: {exc}"
        return trial
    if result.error is not None:
        trial.error = result.error.message
    minimum = result.minimum
    trial.mean_tps = result.mean_tps
    trial.min_tps = minimum.decode_tps if minimum else None
    trial.min_workload = minimum.name if minimum else None
    trial.acceptance = result.acceptance
    trial.requests = result.completed
    return trial


def _best(trials: list[Trial], key: Callable[[Trial], float | None]) -> Trial | None:
    scored = [(score, t) for t in trials if t.ok and (score := key(t)) is not None]
    return max(scored, key=lambda pair: pair[0])[1] if scored else None


def sweep_draft(
    launcher: Launcher,
    base: StackConfig,
    field_name: str,
    values: Sequence[Any],
    workloads: Sequence[Workload],
    *,
    reps: int,
    max_tokens: int,
    timeout_s: float,
    progress: Progress,
) -> tuple[list[Trial], Trial | None]:
    trials = []
    for value in values:
        progress(f"{field_name}={value}")
        cfg = base.model_copy(update={field_name: value})
        trials.append(
            bench_setting(
                launcher,
                cfg,
                {field_name: value},
                workloads,
                reps=reps,
                max_tokens=max_tokens,
                timeout_s=timeout_s,
            )
        )
    return trials, _best(trials, lambda t: t.min_tps)


def sweep_fusion(
    launcher: Launcher,
    base: StackConfig,
    workloads: Sequence[Workload],
    *,
    reps: int,
    max_tokens: int,
    timeout_s: float,
    progress: Progress,
) -> tuple[list[Trial], str]:
    """The same config with CUDA fusion on (the default) and off; and a note comparing the two."""
    trials = []
    for value in FUSION_VALUES:
        progress(f"{FUSION_ENV}={value}")
        running = launcher.with_env({FUSION_ENV: value}) if value != "0" else launcher
        trials.append(
            bench_setting(
                running,
                base,
                {FUSION_ENV: value},
                workloads,
                reps=reps,
                max_tokens=max_tokens,
                timeout_s=timeout_s,
            )
        )
    on, off = trials
    if not (on.ok and off.ok):
        return trials, f"{FUSION_ENV}: not compared (a setting failed to run)"

    def pct(value: float | None) -> str:
        return "n/a" if value is None else f"{value:.1%}"

    faster = "off" if (off.min_tps or 0) > (on.min_tps or 0) else "on"
    note = (
        f"{FUSION_ENV}: fusion on gives acceptance {pct(on.acceptance)}, slowest workload "
        f"{on.min_tps or 0:.1f} tok/s; fusion off ({FUSION_ENV}=1) gives {pct(off.acceptance)}, "
        f"{off.min_tps or 0:.1f} tok/s: fusion {faster} is faster here"
    )
    return trials, note


def sweep_parallel(
    launcher: Launcher,
    base: StackConfig,
    values: Sequence[int],
    *,
    max_tokens: int,
    timeout_s: float,
    progress: Progress,
) -> tuple[list[Trial], Trial | None]:
    trials = []
    for slots in values:
        progress(f"parallel={slots}")
        trial = Trial({"parallel": slots})
        cfg = base.model_copy(update={"parallel": slots})
        try:
            with launcher.launch(cfg) as server:
                load = run_load(
                    server.base_url, server.api_key, clients=slots, requests=slots * REQUESTS_PER_SLOT,
                    max_tokens=max_tokens, timeout_s=timeout_s,
                )  # fmt: skip
        except LaunchError as exc:
            trial.error = f"did not start: {exc}"
            trials.append(trial)
            continue
        per_request = load.per_request_tps()
        trial.aggregate_tps = load.aggregate_tps
        trial.per_request_tps = sum(per_request) / len(per_request) if per_request else None
        trial.requests = load.sent
        trial.failed_requests = sum(load.errors_by_kind.values())
        failure = load.startup_error or next((o.error for o in load.outcomes if o.error), None)
        if failure is not None:
            trial.error = failure.message
        trials.append(trial)
    return trials, _best(trials, lambda t: t.aggregate_tps)


def probe_ctx(launcher: Launcher, cfg: StackConfig, timeout_s: float) -> CtxProbe:
    """Start at ``cfg.ctx_size`` and fill every slot at once with a prompt as long as the slot holds."""
    try:
        with launcher.launch(cfg) as server:
            try:
                slot_ctx, fill = _fill_slots(server.base_url, server.api_key, cfg.parallel, timeout_s)
            except EndpointError as exc:
                if not server.alive():
                    return CtxProbe(
                        cfg.ctx_size, False, f"died with its context full: {last_lines(server.log())}"
                    )
                return CtxProbe(cfg.ctx_size, False, f"failed with its context full: {exc.message}")
    except LaunchError as exc:
        return CtxProbe(cfg.ctx_size, False, f"did not load: {exc}")
    slots = f"{cfg.parallel} slots" if cfg.parallel > 1 else "one slot"
    return CtxProbe(cfg.ctx_size, True, f"loaded; {slots} of {slot_ctx} tokens filled with {fill} each")


def _fill_slots(url: str, api_key: str | None, slots: int, timeout_s: float) -> tuple[int, int]:
    with Client(url, api_key, timeout_s) as client:
        slot_ctx = client.slot_context()
        token = client.tokenize(FILL_TEXT)[0]
    fill = max(1, slot_ctx - FILL_GEN_TOKENS - FILL_MARGIN)

    def fill_slot(_slot: int) -> int:
        with Client(url, api_key, timeout_s) as slot_client:
            slot_client.seen_alive = True
            return slot_client.complete_tokens([token] * fill, FILL_GEN_TOKENS).prompt_n

    with ThreadPoolExecutor(max_workers=slots) as pool:
        list(pool.map(fill_slot, range(slots)))
    with Client(url, api_key, timeout_s) as client:
        client.seen_alive = True
        client.check_health()
    return slot_ctx, fill


def search_ctx(
    launcher: Launcher,
    base: StackConfig,
    low: int,
    high: int,
    resolution: int,
    *,
    timeout_s: float,
    progress: Progress,
) -> tuple[list[CtxProbe], int | None, bool]:
    """Largest multiple of ``resolution`` in [low, high] that loads and survives being filled.

    Returns the probes, the answer (None when even ``low`` fails), and whether the answer is
    ``high`` itself (the real limit may lie above the range).
    """
    if resolution < 1 or low > high:
        raise ValueError("need resolution >= 1 and low <= high")
    k_low = -(-low // resolution)
    k_high = high // resolution
    if k_low > k_high:
        raise ValueError(f"no multiple of {resolution} lies in [{low}, {high}]")
    probes: list[CtxProbe] = []

    def ok(k: int) -> bool:
        progress(f"ctx-size={k * resolution}")
        probe = probe_ctx(launcher, base.model_copy(update={"ctx_size": k * resolution}), timeout_s)
        probes.append(probe)
        return probe.ok

    if not ok(k_low):
        return probes, None, False
    good, bad = k_low, k_high + 1
    if k_high > k_low:
        if ok(k_high):
            good = k_high
        else:
            bad = k_high
        while bad - good > 1:
            mid = (good + bad) // 2
            if ok(mid):
                good = mid
            else:
                bad = mid
    return probes, good * resolution, good == k_high


# ------------------------------------------------------------------- the boot's calibration, here


def startup_calibrate() -> Any:
    """startup/calibrate.py, the VM's own module (standard library only, importing no other room),
    imported by name at run time: the type checker checks it as the VM runs it, a top-level module
    beside the agents, and one file may not be two modules to it."""
    import importlib

    return importlib.import_module("startup.calibrate")


def calibration_runner(args: Any, base: StackConfig) -> Any:
    """startup/calibrate.py's own runners: a local llama-server, or the pinned image on the VM (the
    tune sweep's launchers find their binary, model folder and key the same way)."""
    from infra.llama_cpp import server_image
    from infra.server_args import CONTAINER_API_KEY_FILE, CONTAINER_MODEL_DIR
    from qwen36.measure.launcher import free_port, local_server_binary, vm_model_and_key

    calibrate = startup_calibrate()

    if args.launcher == "local":
        binary = local_server_binary(args.server_bin)
        return calibrate.LocalRunner(str(binary), str(args.model), free_port())
    model_dir, key_file = vm_model_and_key(args.model_dir, args.api_key_file)
    runner = calibrate.DockerRunner(
        server_image(base.llama_cpp_build), str(model_dir), CONTAINER_MODEL_DIR, free_port(),
        str(key_file) if key_file else None, CONTAINER_API_KEY_FILE if key_file else None,
    )  # fmt: skip
    runner.free_gpu()
    return runner


def calibration_key(args: Any, base: StackConfig) -> Any:
    import hashlib

    calibrate = startup_calibrate()

    sha = args.model_sha256 or base.model_sha256
    if not sha and args.model is not None:
        digest = hashlib.sha256()
        with args.model.open("rb") as handle:
            for block in iter(lambda: handle.read(1 << 24), b""):
                digest.update(block)
        sha = digest.hexdigest()
    if not sha:
        raise UsageError("give --model-sha256 (or modelSha256 in the config): the verdict's key needs it")
    name, driver, ecc = args.gpu if args.gpu else calibrate.gpu_identity()
    return calibrate.Key(base.llama_cpp_build, sha, name, driver, ecc, base.ctx_size)


def run_calibration(
    base: StackConfig, runner: Any, key: Any, *, budget_s: float | None, max_tokens: int, say: Progress
) -> dict[str, Any]:
    """The verdict document of one calibration with ``base``'s arguments (infra/server_args.py)."""
    from infra.server_args import calibration_candidates, container_model_path

    calibrate = startup_calibrate()

    doc = calibration_candidates(
        base, model_path=container_model_path(base), api_key_file=None, ctx_sizes=(base.ctx_size,)
    )
    entries = {(e["n_max"], e["gpu_sampling"]): e["args"] for e in doc["candidates"]}
    plan = calibrate.Plan(first_n_max=base.spec_draft_n_max)
    result = calibrate.calibrate(
        key, plan, lambda c: list(entries[(c.n_max, c.gpu_sampling)]), runner,
        budget_s=budget_s or calibrate.DEFAULT_BUDGET_S, max_tokens=max_tokens, say=say,
    )  # fmt: skip
    return result.verdict(writer="qwen36 tune --sweep calibrate")


def write_verdict(doc: dict[str, Any], base: StackConfig, bucket: str) -> str:
    """Stores ``doc`` as the bucket's verdict with the deployer's application-default credentials."""
    import os

    import google.auth
    import google.auth.transport.requests

    from infra.model_cache import verdict_object_name

    calibrate = startup_calibrate()

    def token() -> str | None:
        # Against an emulator (STORAGE_EMULATOR_HOST) no credentials, as Google's client libraries do.
        if os.environ.get("STORAGE_EMULATOR_HOST"):
            return None
        if not credentials.valid:
            credentials.refresh(google.auth.transport.requests.Request())
        return str(credentials.token)

    if not os.environ.get("STORAGE_EMULATOR_HOST"):
        credentials, _ = google.auth.default(scopes=["https://www.googleapis.com/auth/devstorage.read_write"])

    store = calibrate.VerdictStore(
        calibrate.Gcs(calibrate.Gcs.default_url(), token), bucket, verdict_object_name(base)
    )
    _, generation = store.load()
    store.save(doc, generation)
    return store.uri
