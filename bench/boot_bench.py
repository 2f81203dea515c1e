"""Simulated time to ready per boot path: our boot script beside the original write-up's, in one
sandbox run, with the same phase durations.

    .venv/bin/python bench/boot_bench.py [--scale 0.25] [--only NAME]

Both scripts run for real under bash in the boot sandbox (tests/boot/sandbox.py: stubs for the GPU,
apt, docker, reboot and mount; `gcloud storage` as a small real implementation on a GCS emulator;
huggingface_hub's `hf` against the loopback hub). The stubs sleep the phase durations of
tests/boot/durations.py (documented limits and the original's measurements, with sources), at
``--scale`` real seconds per simulated second. The original is bench/original_boot.sh, rebuilt from
the write-up's text. Time to ready runs from the start of the path's first boot (after the power-on)
to the first /health 200; a reboot costs its duration between two boots.

Everything the stubs do not sleep (bash, curl, the stubs' own start, the emulator) takes its real
time, multiplied by 1/scale like the rest: "sandbox overhead" is that part, from a run of the same
path with every duration at zero, and it weighs more for the script that makes more calls. Prints,
per path, the critical path phase by phase (the durations the path waits on), the measured totals,
the overheads, and our time over the original's (the acceptance: at most 1.0 wherever both serve a
correct model).
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import sys
import tempfile
import time
from collections.abc import Callable
from dataclasses import dataclass, replace
from pathlib import Path

REPO_ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO_ROOT))

from gcp_storage_emulator.server import create_server  # noqa: E402

from infra.boot_script import CALIBRATION_BUDGET_S, render_boot_script  # noqa: E402
from infra.llama_cpp import server_image  # noqa: E402
from infra.model_cache import model_object_name  # noqa: E402
from infra.server_args import server_args  # noqa: E402
from tests.boot.durations import Durations  # noqa: E402
from tests.boot.metadata_server import MetadataServer  # noqa: E402
from tests.boot.sandbox import Sandbox, free_port  # noqa: E402
from tests.boot.world import (  # noqa: E402
    MODEL_FILE,
    MODEL_REPO,
    PROJECT_ID,
    SECRET,
    STAGED,
    Model,
    config,
    create_bucket,
    default_candidate,
    read_verdict,
    sandbox_key,
    stage,
    stage_verdict,
    verdict_for,
)
from tests.cache.hf_server import HfServer  # noqa: E402

MODEL_BYTES = 2 * 1024 * 1024
ORIGINAL = REPO_ROOT / "bench" / "original_boot.sh"
BOOT_TIMEOUT_S = 900.0
MAX_BOOTS = 3
HEALTH_POLL_S = 5.0


@dataclass(frozen=True)
class BootPath:
    name: str
    cached: bool = True
    baked: bool = False
    restart: str = ""  # "" (a new VM), "same-host" or "new-host"
    reset_works: bool = False
    # The first boot of a key (a new build, model, GPU, driver, ECC mode or ctx): no verdict in the
    # bucket, so ours calibrates (startup/calibrate.py) before serving. Every other path finds one.
    calibrates: bool = False

    def critical(self, d: Durations, ours: bool, calibrate_s: float | None = None) -> list[tuple[str, float]]:
        """The phases this path waits on, in order (parallel branches: the longest one);
        ``calibrate_s``: what the calibration took on this run (it depends on what it measured)."""
        phases = self._critical(d, ours)
        if ours and self.calibrates and calibrate_s is not None:
            phases.insert(-2, (f"calibrate, 8 server starts (bound {CALIBRATION_BUDGET_S})", calibrate_s))
        return phases

    def _critical(self, d: Durations, ours: bool) -> list[tuple[str, float]]:
        phases: list[tuple[str, float]] = []
        fresh_gpu = self.restart in ("", "new-host")
        # Ours starts the model and key jobs beside a GPU reset; docker waits for the reset.
        reset = d.gpu_reset if fresh_gpu and ours and self.reset_works else 0.0
        if fresh_gpu and not reset:
            phases.append(("ECC reboot", d.reboot))
        if self.restart == "":
            docker = 0.0 if self.baked else d.apt_docker + d.pull
            if self.cached:
                model = ("GCS -> tmpfs", d.gcs_ram) if ours else ("GCS -> pd-ssd", d.gcs_disk)
            else:
                model = ("hub -> tmpfs" if ours else "hub -> pd-ssd", d.hub)
            phases += _longest([("GPU reset", reset), ("docker install + pull", docker)], [model])
            phases.append(("load (tmpfs)" if ours else "load (warm page cache)", d.load_ram))
        elif ours:
            phases += _longest([("GPU reset", reset)], [("GCS -> tmpfs", d.gcs_ram)])
            phases.append(("load (tmpfs)", d.load_ram))
        else:
            phases.append(("load (cold pd-ssd)", d.load_disk_cold))
        phases.append(("first /health poll (every 5 s)", 0.0))
        return phases


def _longest(*branches: list[tuple[str, float]]) -> list[tuple[str, float]]:
    """Of parallel branches, the longest; named with the others beside it."""
    ranked = sorted(
        ([(name, s) for name, s in branch if s] for branch in branches), key=lambda b: -sum(s for _, s in b)
    )
    longest, others = ranked[0], [b for b in ranked[1:] if b]
    if not others:
        return longest
    beside = ", ".join(" + ".join(name for name, _ in b) for b in others)
    *head, (name, seconds) = longest
    return [*head, (f"{name} (beside {beside})", seconds)]


PATHS = [
    BootPath("new VM, GCS cache, stock image"),
    BootPath("new VM, GCS cache, baked image", baked=True),
    BootPath("new VM, first boot of a key (calibrates), baked image", baked=True, calibrates=True),
    BootPath("restart, same host", baked=True, restart="same-host"),
    BootPath("new host, ECC reboot", baked=True, restart="new-host"),
    BootPath("new host, GPU reset works", baked=True, restart="new-host", reset_works=True),
    BootPath("hub fallback (no cache), stock image", cached=False),
]


class World:
    """The loopback services every simulated VM talks to."""

    def __init__(self, root: Path) -> None:
        self.root = root
        path = root / MODEL_FILE
        path.write_bytes(bytes(range(256)) * (MODEL_BYTES // 256))
        self.model = Model(path)
        port = free_port()
        self.gcs = create_server("127.0.0.1", port, in_memory=True)
        self.gcs_endpoint = f"http://127.0.0.1:{port}"
        self.hub = HfServer(cdn_host="localhost")
        self.metadata = MetadataServer()
        self.count = 0
        self.calibrations: dict[tuple[str, Durations], float | None] = {}

    def __enter__(self) -> World:
        self.gcs.start()
        self.hub.__enter__()
        self.hub.add_file(MODEL_REPO, MODEL_FILE, self.model.path)
        self.metadata.__enter__()
        return self

    def __exit__(self, *exc: object) -> None:
        self.metadata.__exit__(None, None, None)
        self.hub.__exit__(None, None, None)
        self.gcs.stop()

    def vm(self, path: BootPath, durations: Durations, scale: float, ours: bool) -> Sandbox:
        self.count += 1
        cfg = config(self.model)
        bucket = f"bench-{self.count}"
        if path.cached:
            stage(self.gcs_endpoint, bucket, model_object_name(cfg), self.model.path, self.model.sha256)
        else:
            create_bucket(self.gcs_endpoint, bucket)
        if not path.calibrates:
            key = sandbox_key(cfg, self.model.sha256)
            stage_verdict(self.gcs_endpoint, bucket, cfg, verdict_for(key, default_candidate(cfg)))
        sandbox = Sandbox(
            root=self.root / f"vm{self.count}",
            script=render_boot_script(cfg, bucket=bucket, api_key_secret=SECRET, project=PROJECT_ID)
            if ours
            else ORIGINAL.read_text(),
            metadata=self.metadata,
            gcs_endpoint=self.gcs_endpoint,
            hf_endpoint=self.hub.base_url,
            secrets={f"{PROJECT_ID}/{SECRET}": "sk-bench"},
            bucket=bucket,
            time_scale=scale,
            delays=durations.stub_delays(scale),
            fetch_delays={"hf": durations.hub * scale},
            # The original's reconstruction calls `hf` from PATH; ours installs it as on a stock image.
            hf_on_path=not ours,
        )
        if not ours:
            args = server_args(cfg, model_path="/models/" + MODEL_FILE, api_key_file=None)
            model_at = args.index("--model")
            sandbox.extra_env.update(
                ORIG_FILE=MODEL_FILE,
                ORIG_REPO=MODEL_REPO,
                ORIG_BUCKET=bucket if path.cached else "",
                ORIG_OBJECT=model_object_name(cfg),
                ORIG_IMAGE=server_image(cfg.llama_cpp_build),
                ORIG_ARGS=" ".join(args[:model_at] + args[model_at + 2 :]),
                ORIG_HEALTH_URL=f"http://127.0.0.1:{sandbox.port}/health",
                ORIG_POLL_S=f"{HEALTH_POLL_S * scale:.3f}",
            )
        if path.baked:
            sandbox.bake_tooling_image()
        if path.reset_works:
            sandbox.edit_host(lambda host: host["gpu"].update(reset_supported=True))
        return sandbox


def _healthy_after(sandbox: Sandbox, since: float) -> float | None:
    return next((e["t"] for e in sandbox.loads() if e["event"] == "healthy" and e["t"] >= since), None)


def calibration_s(world: World, sandbox: Sandbox, scale: float) -> float | None:
    """Simulated seconds the calibration took, from the verdict it stored (its own clock)."""
    doc = read_verdict(world.gcs_endpoint, sandbox.bucket, config(world.model))
    if doc is None or doc.get("writer") == STAGED:
        return None
    return float(doc["elapsed_s"]) / scale


def run_path(world: World, path: BootPath, durations: Durations, scale: float, ours: bool) -> float:
    """Simulated seconds from the path's first boot to the first healthy answer."""
    sandbox = world.vm(path, durations, scale, ours)
    reboot_s = durations.reboot * scale
    try:
        if path.restart:
            _boot_until_ready(sandbox, reboot_s, path.name)
            if path.restart == "new-host":
                sandbox.new_host()
        first = len(sandbox.boots)
        _boot_until_ready(sandbox, reboot_s, path.name)
        start = sandbox.boots[first].started
        healthy = _healthy_after(sandbox, start)
        if healthy is None:
            raise RuntimeError(f"{path.name}: never healthy:\n{sandbox.boots[-1].log}")
        if ours and path.calibrates:
            world.calibrations[(path.name, durations)] = calibration_s(world, sandbox, scale)
        return (healthy - start) / scale
    finally:
        sandbox.shutdown()


def _boot_until_ready(sandbox: Sandbox, reboot_s: float, name: str) -> None:
    for _ in range(MAX_BOOTS):
        result = sandbox.boot(reboot_delay_s=reboot_s, timeout=BOOT_TIMEOUT_S)
        if result.rc != 0:
            raise RuntimeError(f"{name}: boot failed:\n{result.log}")
        if not result.rebooted:
            return
    raise RuntimeError(f"{name}: no ready boot in {MAX_BOOTS}")


def calibrated_s(world: World, path: BootPath, durations: Durations, zero: Durations) -> float | None:
    """The calibration's simulated seconds on this run, net of its own sandbox overhead (python and
    docker-stub starts, which the overhead column already counts)."""
    calibrated = world.calibrations.get((path.name, durations))
    overhead = world.calibrations.get((path.name, zero))
    if calibrated is not None and overhead is not None:
        calibrated = max(0.0, calibrated - overhead)
    return calibrated


def results(
    rows: list[tuple[BootPath, float, float, float, float]],
    durations: Durations,
    scale: float,
    calibrations: dict[str, float | None],
) -> dict[str, object]:
    """One run's figures, with the critical paths they were measured on (docs/boot.md's source)."""
    return {
        "scale": scale,
        "date": time.strftime("%Y-%m-%d", time.gmtime()),
        "machine": f"{platform.machine()}, {os.cpu_count()} cores",
        "paths": [
            {
                "name": path.name,
                "critical_ours": path.critical(durations, True, calibrations.get(path.name)),
                "critical_original": path.critical(durations, False),
                "ours_s": round(ours, 1),
                "original_s": round(original, 1),
                "ours_overhead_s": round(ours_overhead, 1),
                "original_overhead_s": round(original_overhead, 1),
            }
            for path, ours, original, ours_overhead, original_overhead in rows
        ],
    }


def _phases(phases: list[tuple[str, float]]) -> str:
    return " + ".join(f"{name} {seconds:g}" for name, seconds in phases if seconds) or "-"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=(__doc__ or "").split("\n\n")[0])
    parser.add_argument("--scale", type=float, default=0.25, help="real seconds per simulated second")
    parser.add_argument("--only", help="run the paths whose name contains this")
    parser.add_argument("--reboot-s", type=float, default=Durations.reboot)
    parser.add_argument(
        "--json",
        type=Path,
        help="also write the results here (bench/results/boot_bench.json is what docs/boot.md shows: "
        "scripts/gen_docs.py --write)",
    )
    args = parser.parse_args(argv)
    durations = Durations(reboot=args.reboot_s)
    zero = replace(durations, **{k: 0.0 for k in durations.__dataclass_fields__})
    paths = [p for p in PATHS if not args.only or args.only in p.name]
    rows = []
    say: Callable[[str], None] = lambda line: print(line, file=sys.stderr, flush=True)  # noqa: E731
    with tempfile.TemporaryDirectory(prefix="boot-bench-") as tmp, World(Path(tmp)) as world:
        for path in paths:
            ours = run_path(world, path, durations, args.scale, ours=True)
            original = run_path(world, path, durations, args.scale, ours=False)
            ours_overhead = run_path(world, path, zero, args.scale, ours=True)
            original_overhead = run_path(world, path, zero, args.scale, ours=False)
            rows.append((path, ours, original, ours_overhead, original_overhead))
            say(f"{path.name}: ours {ours:.0f} s, original {original:.0f} s")
    print(f"Simulated time to ready (scale {args.scale}; durations: tests/boot/durations.py)\n")
    print(
        "| Path | our critical path (s) | ours | original's critical path (s) | original | ours ÷ original "
        "| sandbox overhead ours / original | ÷ without the overhead |"
    )
    print("|---|---|---|---|---|---|---|---|")
    calibrations = {path.name: calibrated_s(world, path, durations, zero) for path, *_ in rows}
    if args.json is not None:
        args.json.write_text(json.dumps(results(rows, durations, args.scale, calibrations), indent=2) + "\n")
    for path, ours, original, ours_overhead, original_overhead in rows:
        net = (ours - ours_overhead) / max(original - original_overhead, 1e-9)
        calibrated = calibrations[path.name]
        print(
            f"| {path.name} | {_phases(path.critical(durations, True, calibrated))} | {ours:.0f} s "
            f"| {_phases(path.critical(durations, False))} | {original:.0f} s | {ours / original:.2f} "
            f"| {ours_overhead:.0f} s / {original_overhead:.0f} s | {net:.2f} |"
        )
    return 0


if __name__ == "__main__":
    sys.exit(main())
