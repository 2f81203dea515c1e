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


COLD_START_TOOLING = minutes(cold_start_s("tooling", "gcs"))
COLD_START_STOCK = minutes(cold_start_s("stock", "gcs"))
COLD_START_HUB = minutes(cold_start_s("stock", "hub"))
