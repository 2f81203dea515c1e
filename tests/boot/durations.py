# ruff: noqa: E501  (the table below is one row a line)
"""Phase durations of a spot g2-standard-8 (simulated seconds), from documented limits and the
original write-up's measurements, for the boot sandbox's stubs (``Sandbox.delays``) and
bench/boot_bench.py. Each value says where it comes from; none is measured on this machine.

| phase              | s    | source |
|--------------------|------|--------|
| ECC-off reboot     | 60   | original write-up, measured 30-90 s on GCE (mid-range) |
| GPU reset (-r)     | 10   | assumed: unverified on GCE (facts.md); nvidia-smi -r on a single idle GPU takes seconds |
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
|                    |      | measured against 4.0 s from tmpfs, facts.md; tmpfs kept as the bound) |
| load, cold pd-ssd  | 73   | the disk's read rate, 288 MiB/s (the page cache is empty after a boot) |
| post-serve sha256  | 40   | 22 GB at ~0.5 GB/s on one Cascade Lake core (no SHA extensions); off the critical path |
| secret read        | 2    | one gcloud call (its Python start dominates) |
| calibration decode | x1   | the stand-in container's decode-speed model (tests/boot/fake_container.py: 73 tok/s plain, |
|                    |      | MTP acceptance 0.85/0.7/0.55): a calibration request takes its tokens at that rate |
"""

from __future__ import annotations

from dataclasses import asdict, dataclass


@dataclass(frozen=True)
class Durations:
    reboot: float = 60.0
    gpu_reset: float = 10.0
    apt_docker: float = 60.0
    pull: float = 110.0
    gcs_ram: float = 13.0
    gcs_disk: float = 73.0
    hub: float = 390.0
    load_ram: float = 6.5
    load_disk_warm: float = 6.5
    load_disk_cold: float = 73.0
    gcloud: float = 2.0
    # A multiplier, not seconds: 1 plays the stand-in's calibration requests at their modelled speed.
    decode: float = 1.0

    def stub_delays(self, scale: float) -> dict[str, float]:
        """The stubs' sleeps in real seconds (the reboot and the hub download are timed elsewhere)."""
        return {k: v * scale for k, v in asdict(self).items() if k not in ("reboot", "hub")}
