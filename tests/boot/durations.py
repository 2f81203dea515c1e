"""Phase durations of a spot g2-standard-8 (simulated seconds) for the boot sandbox's stubs
(``Sandbox.delays``) and bench/boot_bench.py: infra/cold_start.py's phases, where each value says
where it comes from (none is measured on this machine), so the bench and the figures the outputs
and docs quote share one table.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass

from infra import cold_start as c


@dataclass(frozen=True)
class Durations:
    reboot: float = c.ECC_REBOOT_S
    gpu_reset: float = c.GPU_RESET_S
    apt_docker: float = c.DOCKER_INSTALL_S
    pull: float = c.IMAGE_PULL_S
    gcs_ram: float = c.GCS_TO_RAM_S
    gcs_disk: float = c.GCS_TO_DISK_S
    hub: float = c.HUB_DOWNLOAD_S
    load_ram: float = c.LOAD_RAM_S
    load_disk_warm: float = c.LOAD_WARM_CACHE_S
    load_disk_cold: float = c.LOAD_COLD_DISK_S
    gcloud: float = c.SECRET_READ_S

    def stub_delays(self, scale: float) -> dict[str, float]:
        """The stubs' sleeps in real seconds (the reboot and the hub download are timed elsewhere)."""
        return {k: v * scale for k, v in asdict(self).items() if k not in ("reboot", "hub")}
