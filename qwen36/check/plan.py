"""What the stack would create, in the terms the check compares with the project: derived from the
stack config and the program's own modules, never restated."""

from __future__ import annotations

from dataclasses import dataclass

from infra.config import StackConfig
from infra.required_permissions import ResourceGroup, applicable

# A member's GPU metric by provisioning model (the quota names GCE reports in QUOTA_EXCEEDED).
# https://cloud.google.com/compute/resource-usage#gpu_quota
SPOT_GPU_METRIC = "PREEMPTIBLE_NVIDIA_L4_GPUS"
STANDARD_GPU_METRIC = "NVIDIA_L4_GPUS"
GLOBAL_GPU_METRIC = "GPUS_ALL_REGIONS"


@dataclass(frozen=True)
class Plan:
    stack: str
    project: str
    cfg: StackConfig
    bakes: bool = False
    """This deploy bakes the tooling image (its family holds none yet)."""
    secure_boot_verdict: str | None = None
    """The family's newest image's ``secure-boot`` label (the bake's verdict, infra/shielded.py);
    "" for an image without one, None where no image was read."""

    @property
    def region(self) -> str:
        return self.cfg.region

    @property
    def zones(self) -> list[str]:
        return list(self.cfg.zones)

    @property
    def gpus_initial(self) -> int:
        return self.cfg.initial_servers * self.cfg.accelerator_count

    @property
    def gpus_max(self) -> int:
        return self.cfg.max_servers * self.cfg.accelerator_count

    @property
    def regional_gpu_metric(self) -> str:
        return SPOT_GPU_METRIC if self.cfg.provisioning_model == "SPOT" else STANDARD_GPU_METRIC

    @property
    def door(self) -> bool:
        return any(group.when == "door" for group in self.groups)

    @property
    def groups(self) -> list[ResourceGroup]:
        return applicable(self.cfg, bakes=self.bakes)

    @property
    def services(self) -> list[str]:
        """The APIs the deploy calls: the program's own (infra/apis.py) and those its groups need."""
        from infra.apis import REQUIRED_SERVICES

        return sorted(set(REQUIRED_SERVICES) | {group.service for group in self.groups})

    def enabled_by(self, service: str) -> str:
        """What turns ``service`` on before the deploy needs it, or "" when nothing does."""
        from infra.apis import REQUIRED_SERVICES

        if service in REQUIRED_SERVICES:
            return "infra/apis.py"
        return next(
            (g.enabled_by for g in self.groups if g.service == service and g.enabled_by != "infra/apis.py"),
            "",
        )

    @property
    def image_projects(self) -> list[str]:
        """Projects the members' boot images come from: the stock family's, and this one's (the bake)."""
        projects = [self.cfg.image_project]
        if self.cfg.use_tooling_image and self.project not in projects:
            projects.append(self.project)
        return projects

    @property
    def gate_reads_guest_attributes(self) -> bool:
        """Without a source range the gate follows the member's own report (qwen36/health.py)."""
        return not self.cfg.public_endpoint or self.cfg.fleet

    def describe(self) -> str:
        servers = (
            f"{self.cfg.min_replicas}-{self.cfg.max_replicas} servers (autoscaled)"
            if self.cfg.autoscaled
            else f"{self.cfg.replicas} server{'s' * (self.cfg.replicas != 1)}"
        )
        return (
            f"region {self.region}, zones {', '.join(self.zones)}, {servers} of "
            f"{self.cfg.machine_type} with {self.cfg.accelerator_count} {self.cfg.accelerator_type} "
            f"({self.cfg.provisioning_model})"
        )
