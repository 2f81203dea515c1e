"""Simulated boot-to-ready of the server VM, per path, through the real boot script.

    .venv/bin/python bench/boot_bench.py [--scale 0.25] [--reboot-s 60] [--hf-s 390]

Replays the original write-up's measured phase durations on a spot g2-standard-8 through the boot
sandbox (tests/boot/sandbox.py: the real rendered script under bash, stubs for the GPU, apt, docker,
gcloud, reboot and the metadata server, the real fetch tool against a GCS emulator and the loopback
hub), at ``--scale`` real seconds per simulated second. Durations assumed (simulated seconds):

    ECC-off reboot      60   (measured 30-90; shutdown to the next startup-script start)
    docker install      60   \\ together the measured ~170 s of docker install + image pull
    image pull         110   /
    model from GCS      72   (sliced, same region)
    model from HF      390   (measured 300-480)
    server load         30   (22 GB into VRAM, --no-warmup)

The stubs and the fetch wrapper sleep those durations; everything else the script does (its checks,
hashing of the small test model, guest-attribute writes, health polls every 5 s) takes its own real
time, scaled up like the rest, and is shown as "script overhead" from a run with every delay at zero.
Boot-to-ready counts from the first boot's startup script to the ready report; the kernel boot before
the first script is not in it. Prints a markdown table.
"""

from __future__ import annotations

import argparse
import sys
import tempfile
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

REPO_ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO_ROOT))

from gcp_storage_emulator.server import create_server  # noqa: E402

from infra.boot_script import render_boot_script  # noqa: E402
from infra.model_cache import model_object_name  # noqa: E402
from tests.boot.metadata_server import MetadataServer  # noqa: E402
from tests.boot.sandbox import BootResult, Sandbox, free_port  # noqa: E402
from tests.boot.world import (  # noqa: E402
    MODEL_FILE,
    MODEL_REPO,
    PROJECT_ID,
    SECRET,
    Model,
    config,
    create_bucket,
    stage,
)
from tests.cache.hf_server import HfServer  # noqa: E402

MODEL_BYTES = 2 * 1024 * 1024
BOOT_TIMEOUT_FACTOR = 3.0


@dataclass(frozen=True)
class Durations:
    reboot: float = 60.0
    docker_install: float = 60.0
    image_pull: float = 110.0
    gcs: float = 72.0
    hf: float = 390.0
    load: float = 30.0

    @property
    def docker(self) -> float:
        return self.docker_install + self.image_pull


@dataclass(frozen=True)
class Path_:
    name: str
    cached: bool
    baked: bool
    restart: str  # "" (fresh VM), "same-host" or "new-host"

    def expected(self, d: Durations) -> tuple[float, float]:
        """(reboot + max(docker, model) + load, the same phases one after the other)."""
        if self.restart == "same-host":
            return d.load, d.load
        if self.restart == "new-host":
            return d.reboot + d.load, d.reboot + d.load
        docker = 0.0 if self.baked else d.docker
        model = d.gcs if self.cached else d.hf
        return d.reboot + max(docker, model) + d.load, d.reboot + docker + model + d.load


PATHS = [
    Path_("fresh VM, model from HuggingFace (no cache), stock image", cached=False, baked=False, restart=""),
    Path_("fresh VM, model from the GCS cache, stock image", cached=True, baked=False, restart=""),
    Path_("fresh VM, GCS cache + baked tooling image", cached=True, baked=True, restart=""),
    Path_("spot restart, same host", cached=True, baked=True, restart="same-host"),
    Path_("spot restart, new host (ECC on again)", cached=True, baked=True, restart="new-host"),
]


@dataclass
class Measured:
    total: float
    docker: float | None
    model: float | None


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
        self.hub = HfServer()
        self.metadata = MetadataServer()
        self.count = 0

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

    def vm(self, path: Path_, durations: Durations, scale: float, *, delays_on: bool) -> Sandbox:
        self.count += 1
        cfg = config(self.model)
        bucket = f"bench-{self.count}"
        if path.cached:
            stage(self.gcs_endpoint, bucket, model_object_name(cfg), self.model.path, self.model.sha256)
        else:
            create_bucket(self.gcs_endpoint, bucket)
        on = scale if delays_on else 0.0
        sandbox = Sandbox(
            root=self.root / f"vm{self.count}",
            script=render_boot_script(cfg, bucket=bucket, api_key_secret=SECRET, project=PROJECT_ID),
            metadata=self.metadata,
            gcs_endpoint=self.gcs_endpoint,
            hf_endpoint=self.hub.base_url,
            secrets={f"{PROJECT_ID}/{SECRET}": "sk-bench"},
            bucket=bucket,
            time_scale=scale,
            delays={
                "apt_docker": durations.docker_install * on,
                "pull": durations.image_pull * on,
                "load": durations.load * on,
            },
            # The fetch wrapper needs a nonzero entry to exist; zero keeps the overhead run honest.
            fetch_delays={"gcs": durations.gcs * on, "hf": durations.hf * on},
        )
        if path.baked:
            sandbox.bake_tooling_image()
        return sandbox


def _span(result: BootResult, first: Callable[[str], bool], last: Callable[[str], bool]) -> float | None:
    # The journal's reports with the time each line came out: the guest attribute carries only
    # the rationed ones (startup/lib.sh).
    details = [(r.t, r.detail) for r in result.reports]
    start = next((t for t, v in details if first(v)), None)
    end = next((t for t, v in details if last(v)), None)
    return end - start if start is not None and end is not None else None


def run_path(world: World, path: Path_, durations: Durations, scale: float, *, delays_on: bool) -> Measured:
    sandbox = world.vm(path, durations, scale, delays_on=delays_on)
    timeout = BOOT_TIMEOUT_FACTOR * (durations.hf + durations.docker + durations.load) * scale + 60
    reboot_s = durations.reboot * scale if delays_on else 0.0
    try:
        if path.restart:
            sandbox.boot_until_ready()
            if path.restart == "new-host":
                sandbox.new_host()
            first_index = len(sandbox.boots)
        else:
            first_index = 0
        while True:
            result = sandbox.boot(reboot_delay_s=reboot_s, timeout=timeout)
            if result.rc != 0:
                raise RuntimeError(f"{path.name}: boot failed:\n{result.log}")
            if not result.rebooted:
                break
        ready_at = result.ready_at()
        if ready_at is None:
            raise RuntimeError(f"{path.name}: no ready report:\n{result.log}")
        total = (ready_at - sandbox.boots[first_index].started) / scale
        docker = _span(
            result, lambda v: v.startswith("checking docker"), lambda v: v.startswith("docker ready")
        )
        model = _span(
            result, lambda v: v.startswith(("fetching", "verified copy")), lambda v: "verified" in v
        )
        return Measured(
            total=total,
            docker=docker / scale if docker is not None else None,
            model=model / scale if model is not None else None,
        )
    finally:
        sandbox.shutdown()


def _fmt(seconds: float | None) -> str:
    return "-" if seconds is None else f"{seconds:.0f} s"


def _minutes(seconds: float) -> str:
    return f"{seconds:.0f} s ({seconds / 60:.1f} min)"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--scale", type=float, default=0.25, help="real seconds per simulated second")
    parser.add_argument("--reboot-s", type=float, default=Durations.reboot)
    parser.add_argument("--hf-s", type=float, default=Durations.hf)
    args = parser.parse_args(argv)
    durations = Durations(reboot=args.reboot_s, hf=args.hf_s)
    rows = []
    with tempfile.TemporaryDirectory(prefix="boot-bench-") as tmp, World(Path(tmp)) as world:
        for path in PATHS:
            measured = run_path(world, path, durations, args.scale, delays_on=True)
            overhead = run_path(world, path, durations, args.scale, delays_on=False)
            critical, serial = path.expected(durations)
            rows.append((path, measured, overhead, critical, serial))
            print(f"{path.name}: {measured.total:.0f} s simulated", file=sys.stderr, flush=True)
    print(
        f"Simulated boot-to-ready (scale {args.scale} real s per simulated s; "
        f"reboot {durations.reboot:.0f} s, "
        f"docker install + pull {durations.docker:.0f} s, GCS {durations.gcs:.0f} s, "
        f"HF {durations.hf:.0f} s, load {durations.load:.0f} s):\n"
    )
    print(
        "| Path | docker prep | model | boot-to-ready (simulated) | reboot + max(docker, model) + load "
        "| phases in series | script overhead |"
    )
    print("|---|---|---|---|---|---|---|")
    for path, measured, overhead, critical, serial in rows:
        print(
            f"| {path.name} | {_fmt(measured.docker)} | {_fmt(measured.model)} | {_minutes(measured.total)} "
            f"| {_minutes(critical)} | {_minutes(serial)} | {overhead.total:.0f} s |"
        )
    return 0


if __name__ == "__main__":
    sys.exit(main())
