"""A rough hourly cost for the chosen machine, labelled as an estimate with its basis.

GCE prices change (spot prices up to once a day), differ by region and exclude disk, IP and
egress; this is only an order of magnitude for the stack outputs, never a quote.
https://cloud.google.com/compute/vm-instance-pricing#accelerator-optimized
https://cloud.google.com/spot-vms/pricing
"""

from __future__ import annotations

from dataclasses import dataclass

from infra.cold_start import cold_start_s
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


# --- the fleet's load balancer and edge policy ---------------------------------------------
# List prices (USD) as published on the pricing pages, not re-checked live on PRICE_DATE: the
# first five global forwarding rules cost a flat hourly rate, the load balancer also bills
# ~$0.008 per GB processed (text streams: cents a day), Cloud Armor Standard bills per policy,
# per rule and per million requests. The managed certificate costs nothing.
# https://cloud.google.com/vpc/network-pricing#lb
# https://cloud.google.com/armor/pricing
LB_FORWARDING_RULE_USD_PER_HOUR = 0.025
ARMOR_POLICY_USD_PER_MONTH = 5.0
ARMOR_RULE_USD_PER_MONTH = 1.0
ARMOR_USD_PER_MILLION_REQUESTS = 0.75
LB_USD_PER_GB_PROCESSED = 0.008
HOURS_PER_MONTH = 730  # GCE bills a month as 730 hours
LB_PRICE_SOURCE = "cloud.google.com/vpc/network-pricing#lb and cloud.google.com/armor/pricing list prices"


@dataclass(frozen=True)
class FleetCost:
    now_usd_per_hour: float
    max_usd_per_hour: float
    edge_usd_per_hour: float
    label: str


def edge_usd_per_hour(armor_rules: int) -> float:
    """The load balancer's forwarding rule plus the Cloud Armor policy and its rules, per hour."""
    armor_month = ARMOR_POLICY_USD_PER_MONTH + ARMOR_RULE_USD_PER_MONTH * armor_rules
    return LB_FORWARDING_RULE_USD_PER_HOUR + armor_month / HOURS_PER_MONTH


def estimate_fleet_cost(cfg: StackConfig, *, servers_now: int, armor_rules: int) -> FleetCost:
    """N servers (spot or standard) plus the edge, at the current size and at the largest one."""
    server = estimate_hourly_cost(cfg)
    edge = edge_usd_per_hour(armor_rules)
    now = round(servers_now * server.usd_per_hour + edge, 2)
    most = round(cfg.max_servers * server.usd_per_hour + edge, 2)
    label = (
        f"estimate only: {servers_now} server(s) now, up to {cfg.max_servers}, "
        f"at ~${server.usd_per_hour:.2f}/h each, plus ~${edge:.3f}/h for the load balancer's "
        f"forwarding rule and Cloud Armor "
        f"({armor_rules} rules); excludes ${LB_USD_PER_GB_PROCESSED}/GB processed, "
        f"${ARMOR_USD_PER_MILLION_REQUESTS} per million requests, disks and egress. "
        f"Server: {server.label}. Edge: {LB_PRICE_SOURCE}, as of {PRICE_DATE}"
    )
    return FleetCost(now, most, round(edge, 4), label)


# --- idle autostop (docs/autostop.md) --------------------------------------------------------------

# Boot disk list prices in us-central1, per GB-month. https://cloud.google.com/compute/disks-image-pricing#disk
DISK_USD_PER_GB_MONTH = {"pd-ssd": 0.17, "pd-balanced": 0.10}
# A wake is billed from the VM's creation until the server answers: the cold start from the GCS
# model cache on the tooling image (infra/cold_start.py).
WAKE_MINUTES = cold_start_s("tooling", "gcs") / 60


# What outlives the VM, per GB-month in us-central1: the model bucket's Standard storage and the
# tooling image (custom images bill their archive size; at most the builder's disk).
# https://cloud.google.com/storage/pricing#storage-pricing
# https://cloud.google.com/compute/disks-image-pricing#imagestorage
BUCKET_USD_PER_GB_MONTH = 0.020
IMAGE_USD_PER_GB_MONTH = 0.05


@dataclass(frozen=True)
class AutostopCosts:
    """A month of one usage pattern: VM plus boot disk, in USD (estimates, like the hourly one)."""

    busy_hours_per_day: float
    sessions_per_day: int
    running_hours: float
    always_on: float
    resize_to_zero: float
    stop_instances: float


def autostop_costs(
    cfg: StackConfig, *, busy_hours_per_day: float = 4.0, sessions_per_day: int = 2
) -> AutostopCosts:
    """Always on, versus autostop by resize to 0 (VM and disk gone while stopped) and by
    ``stopInstances`` (the stopped member keeps its disk, billed all month).

    Each session runs its busy hours, then ``idleStopMinutes`` of idle before the stop, plus a wake.
    """
    vm = estimate_hourly_cost(cfg).usd_per_hour
    disk_month = cfg.boot_disk_size_gb * DISK_USD_PER_GB_MONTH[cfg.boot_disk_type]
    days = HOURS_PER_MONTH / 24
    if cfg.idle_stop_minutes == 0:
        running = float(HOURS_PER_MONTH)
    else:
        per_day = busy_hours_per_day + sessions_per_day * (cfg.idle_stop_minutes + WAKE_MINUTES) / 60
        running = min(float(HOURS_PER_MONTH), per_day * days)
    always_on = HOURS_PER_MONTH * vm + disk_month
    return AutostopCosts(
        busy_hours_per_day=busy_hours_per_day,
        sessions_per_day=sessions_per_day,
        running_hours=round(running, 1),
        always_on=round(always_on, 2),
        resize_to_zero=round(running * vm + disk_month * running / HOURS_PER_MONTH, 2),
        stop_instances=round(running * vm + disk_month, 2),
    )


def autostop_cost_table(cfg: StackConfig) -> str:
    """docs/autostop.md's table (scripts/gen_docs.py renders it there; tests/test_docs.py checks it)."""
    c = autostop_costs(cfg)
    machine = f"{cfg.provisioning_model.lower()} {cfg.machine_type}"
    disk = f"{cfg.boot_disk_size_gb} GB {cfg.boot_disk_type}"
    return "\n".join(
        [
            f"| {c.busy_hours_per_day:g} busy hours a day in {c.sessions_per_day} sessions, "
            f"{machine}, {disk} | VM hours a month | USD a month |",
            "| --- | --- | --- |",
            f"| always on (`idleStopMinutes: 0`) | {HOURS_PER_MONTH} | ${c.always_on:.2f} |",
            f"| autostop, resize to 0 (this project), `idleStopMinutes: {cfg.idle_stop_minutes}` "
            f"| {c.running_hours:g} | ${c.resize_to_zero:.2f} |",
            f"| autostop by `stopInstances` (disk kept) | {c.running_hours:g} | ${c.stop_instances:.2f} |",
        ]
    )
