"""A rough hourly cost for the chosen machine, labelled as an estimate with its basis.

GCE prices change (spot prices up to once a day), differ by region and exclude disk, IP and
egress; this is only an order of magnitude for the stack outputs, never a quote.
https://cloud.google.com/compute/vm-instance-pricing#accelerator-optimized
https://cloud.google.com/spot-vms/pricing
"""

from __future__ import annotations

from dataclasses import dataclass

from infra.config import StackConfig

# The project's seed figures for g2-standard-8 (8 vCPU, 32 GB, 1x L4) in us-central1.
BASE_MACHINE_VCPUS = 8
BASE_REGION = "us-central1"
SEED_USD_PER_HOUR = {"SPOT": 0.24, "STANDARD": 0.81}
PRICE_SOURCE = "seed figures for g2-standard-8 in us-central1 (cloud.google.com/compute/vm-instance-pricing)"
PRICE_DATE = "2026-11-30"

# Share of the g2-standard-8 price that is the L4 itself; the rest (vCPUs and memory) grows
# linearly with the G2 shape. Read off the published G2 list, where each +4 vCPU/+16 GB step
# costs about the same: an approximation for the larger shapes, stated in the label.
GPU_SHARE = 0.66


@dataclass(frozen=True)
class CostEstimate:
    usd_per_hour: float
    label: str


def estimate_hourly_cost(cfg: StackConfig) -> CostEstimate:
    base = SEED_USD_PER_HOUR[cfg.provisioning_model]
    scale = GPU_SHARE + (1 - GPU_SHARE) * cfg.vcpus / BASE_MACHINE_VCPUS
    usd = round(base * scale, 2)
    basis = [f"estimate only: {cfg.provisioning_model.lower()} {cfg.machine_type}"]
    if cfg.machine_type != "g2-standard-8":
        basis.append(f"scaled from g2-standard-8 by vCPUs with the L4 at ~{GPU_SHARE:.0%} of its price")
    if cfg.region != BASE_REGION:
        basis.append(f"{BASE_REGION} prices; {cfg.region} is usually dearer")
    if cfg.provisioning_model == "SPOT":
        basis.append("spot prices float daily")
    basis.append("VM only, excludes disk, static IP and egress")
    label = f"~${usd:.2f}/h ({'; '.join(basis)}). Source: {PRICE_SOURCE}, as of {PRICE_DATE}"
    return CostEstimate(usd_per_hour=usd, label=label)
