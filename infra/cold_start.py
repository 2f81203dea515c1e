# ruff: noqa: E501  (the table below is one row a line)
"""How long a server takes to serve: the one source of every cold-start figure the stack outputs,
the autostop estimate and the docs quote (docs/boot.md generates its figures from here; the boot
sandbox's stubs sleep these phases: tests/boot/durations.py, bench/boot_bench.py).

Phase durations of a spot g2-standard-8, in seconds, from documented limits and the original
write-up's measurements; none is measured on this project's machines:

| phase              | s    | source |
|--------------------|------|--------|
| VM creation        | 40   | assumed: no documented figure (a group's VM, from its creation to its boot script) |
| ECC-off reboot     | 60   | original write-up, measured 30-90 s on GCE (mid-range) |
| GPU reset (-r)     | 10   | assumed: unverified on GCE; nvidia-smi -r on a single idle GPU takes seconds |
| docker.io install  | 60   | original write-up: docker install + image pull ~170 s together |
| image pull         | 110  | (the rest of those ~170 s) |
| GCS -> tmpfs       | 13   | 22 GB at the NIC's 16 Gbps (~2 GB/s) is 11 s; +2 s for gcloud's start and the slices' tail |
|                    |      | https://cloud.google.com/compute/docs/network-bandwidth (g2-standard-8: 16 Gbps) |
| GCS -> pd-ssd      | 73   | the disk's write rate: 240 MiB/s + 0.48 MiB/s per GiB = 288 MiB/s on 100 GB; 22 GB / 288 MiB/s |
|                    |      | https://cloud.google.com/compute/docs/disks/performance (matches the original's ~72 s) |
| hub download       | 390  | original write-up, measured 300-480 s |
| load from tmpfs    | 6.5  | measured on an H200 host, start to /health 200 with the production flags: 1.3-1.5 s fixed |
|                    |      | + 4.0-5.3 GiB/s, 5.4-6.5 s for 20.5 GiB (bench/gpu/RESULTS.md, the slower run kept) |
| load, warm cache   | 6.5  | a file written since boot is in the page cache: the same rate as tmpfs (3.0 s per 5.1 GiB |
|                    |      | measured against 4.0 s from tmpfs; tmpfs kept as the bound) |
| load, cold pd-ssd  | 73   | the disk's read rate, 288 MiB/s (the page cache is empty after a boot) |
| secret read        | 2    | one gcloud call (its Python start dominates) |
| image creation     | 300  | assumed: no documented figure (an image from the tooling builder's 60 GB disk) |

The boot (startup/boot.sh) runs docker's install and pull, the model's fetch and the key's read in
parallel after the ECC step, so a cold start is the VM's creation, the reboot, the longest of those
jobs, and the load.
"""

from __future__ import annotations

from typing import Literal

VM_CREATE_S = 40.0
ECC_REBOOT_S = 60.0
GPU_RESET_S = 10.0
DOCKER_INSTALL_S = 60.0
IMAGE_PULL_S = 110.0
GCS_TO_RAM_S = 13.0
GCS_TO_DISK_S = 73.0
HUB_DOWNLOAD_S = 390.0
LOAD_RAM_S = 6.5
LOAD_WARM_CACHE_S = 6.5
LOAD_COLD_DISK_S = 73.0
SECRET_READ_S = 2.0
IMAGE_CREATE_S = 300.0

DOCKER_AND_PULL_S = DOCKER_INSTALL_S + IMAGE_PULL_S

Image = Literal["tooling", "stock"]
Source = Literal["gcs", "hub"]


def cold_start_s(image: Image = "tooling", source: Source = "gcs") -> float:
    """A new member (a wake, a repair, a preemption's replacement), from its creation to /health 200.

    ``tooling``: the baked image, docker and the server image on disk; ``stock``: the Deep Learning
    VM image, which installs docker and pulls the server image at boot. ``gcs``: the model from the
    stack's bucket into RAM; ``hub``: from Hugging Face (nothing staged yet).
    """
    docker = 0.0 if image == "tooling" else DOCKER_AND_PULL_S
    model = GCS_TO_RAM_S if source == "gcs" else HUB_DOWNLOAD_S
    return VM_CREATE_S + ECC_REBOOT_S + max(docker, model, SECRET_READ_S) + LOAD_RAM_S


def minutes(seconds: float) -> str:
    """A duration as the docs and outputs say it: ``~2 min``, ``~4.6 min``, ``~11 min``."""
    value = seconds / 60
    text = f"{value:.0f}" if value >= 10 or abs(value - round(value)) < 0.05 else f"{value:.1f}"
    return f"~{text} min"


# --- the first token after an idle stop, through the front door (docs/door.md) ----------------
# A request that finds the group at 0 is held by the door (door/upstream.py) while the door itself
# starts, resizes the group to 1, the new member cold-starts on the baked image from the bucket, and
# the door's poll finds its /health 200; then the server answers. The wake's own phases are the
# table above; these are the door's, each with its source.

DOOR_START_S = 2.0
"""Assumed: Cloud Run starting a door instance (Python and the ~0.9 MB archive, startup CPU boost on)
after it scaled to zero; no documented figure, not measured (docs/live-checks.md)."""
WAKE_CALL_S = 1.0
"""Assumed: the door's read of the group's targetSize and its resize call (one Compute API round
trip each); the group then creates the VM (VM creation above)."""
DOOR_HEALTH_POLL_S = 2.0
"""door/config.py ``DEFAULT_HEALTH_POLL_S``: the door looks for a RUNNING member and its /health every
2 s, so it finds a ready server half a period late on average (copied: infra imports no door, and
tests/test_docs.py holds the two equal)."""
FIRST_TOKEN_S = 0.5
"""Assumed: a short prompt's prefill and the first decode step on the L4 (a decode step is ~11 ms at
~91 tok/s: docs/performance.md); a long prompt adds its prefill."""


def ttft_after_idle_stop_phases() -> list[tuple[str, float]]:
    """The time to first token of a request that arrives after an idle stop, phase by phase."""
    return [
        ("the door starts", DOOR_START_S),
        ("resize call", WAKE_CALL_S),
        ("a new member's cold start (tooling image, model from the bucket)", cold_start_s("tooling", "gcs")),
        ("the door's next health poll (half its period)", DOOR_HEALTH_POLL_S / 2),
        ("the first token", FIRST_TOKEN_S),
    ]


def ttft_after_idle_stop_s() -> float:
    """The time to first token after an idle stop, when the verdict of the build is already stored
    (a first boot of a key adds its calibration, at most infra/boot_script.py's
    ``CALIBRATION_BUDGET_S``)."""
    return sum(seconds for _, seconds in ttft_after_idle_stop_phases())


COLD_START_TOOLING = minutes(cold_start_s("tooling", "gcs"))
COLD_START_STOCK = minutes(cold_start_s("stock", "gcs"))
COLD_START_HUB = minutes(cold_start_s("stock", "hub"))
