"""A rough hourly cost for the chosen machine, labelled as an estimate with its basis.

GCE prices change (spot prices up to once a day), differ by region and exclude disk, IP and
egress; this is only an order of magnitude for the stack outputs, never a quote.
https://cloud.google.com/compute/vm-instance-pricing#accelerator-optimized
https://cloud.google.com/spot-vms/pricing
"""

from __future__ import annotations

from dataclasses import dataclass

from infra.cold_start import DOOR_START_S, cold_start_s, ttft_after_idle_stop_s
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


# --- egress: Cloud NAT or the VM's own external address ------------------------------------------
# Public NAT, list prices (USD), read on the pricing page on NAT_PRICE_DATE: the gateway bills per
# hour for each VM with a NAT assignment (capped at 32 VMs), every GiB it processes in either
# direction, and each external address it holds; the data transfer out is billed as for any VM.
# https://cloud.google.com/nat/pricing
NAT_USD_PER_VM_HOUR = 0.0014
NAT_USD_PER_GIB = 0.045
NAT_IP_USD_PER_HOUR = 0.005
NAT_PRICE_SOURCE = "cloud.google.com/nat/pricing"
NAT_PRICE_DATE = "2026-12-02"
# An in-use external IPv4 address on a standard VM. https://cloud.google.com/vpc/network-pricing#ipaddress
EXTERNAL_IP_USD_PER_HOUR = 0.005
GIB = 1024**3
HOURS_PER_MONTH = 730  # GCE bills a month as 730 hours


def nat_download_usd(size_bytes: int) -> float:
    """What Cloud NAT bills for carrying one download of ``size_bytes`` (the hub's model, once)."""
    return round(size_bytes / GIB * NAT_USD_PER_GIB, 2)


def nat_idle_month_usd() -> float:
    """The most an idle month costs with NAT: its one address, if the gateway keeps it while no VM
    runs (no source says whether an AUTO_ONLY gateway releases it, so the estimate assumes not)."""
    return round(NAT_IP_USD_PER_HOUR * HOURS_PER_MONTH, 2)


def egress_note(cfg: StackConfig) -> str:
    """Which way the VMs reach the internet, and what that adds to the hourly estimate."""
    if cfg.external_ip:
        return (
            f"egress over each VM's ephemeral external IP (externalIp: true; ~${EXTERNAL_IP_USD_PER_HOUR}/h "
            "per running VM, not in the estimate)"
        )
    hub = nat_download_usd(cfg.model_bytes_for_sizing)
    return (
        f"egress through Cloud NAT, no external IP: ${NAT_USD_PER_VM_HOUR}/h per running VM and "
        f"${NAT_USD_PER_GIB}/GiB carried (~${hub:.2f} for the one hub download of a new model), at most "
        f"~${nat_idle_month_usd():.2f}/month for its address while idle; Google's APIs go through Private "
        f"Google Access, free ({NAT_PRICE_SOURCE}, as of {NAT_PRICE_DATE})"
    )


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
    basis.append("VM only, excludes disk and egress")
    basis.append(egress_note(cfg))
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


# --- the front door on Cloud Run (docs/door.md) -----------------------------------------------
# Request-based billing ("CPU only allocated during request processing", the door's cpu_idle): an
# instance is billed, rounded up to 100 ms, while at least one request is in flight on it (and while
# it starts and shuts down), per vCPU-second and GiB-second, plus per request, after a free tier that
# is aggregated across the projects of a billing account, resets every month and is applied as a
# spending-based discount at Tier 1 prices. https://cloud.google.com/run/pricing, read 2026-12-01
# (through the search tool's stored copy): the free tier (180,000 vCPU-s, 360,000 GiB-s, 2 million
# requests a month) and Tier 1's $0.000024 per vCPU-second beyond it are on that page; its memory and
# request rates were cut off in the copy read, so those two are the door engineer's reading of the
# page (from memory), which two third-party summaries of it agree with (cloudwebschool.com's Cloud
# Run cost calculator, cloudchipr.com's 2025 guide). us-central1 is a Tier 1 region; other
# regions may be dearer (the page lists the tiers). Memory stays inside its free tier in every case
# below, so the memory rate does not move the figures while the free tier is the door's own.
RUN_USD_PER_VCPU_SECOND = 0.000024
RUN_USD_PER_GIB_SECOND = 0.0000025
RUN_USD_PER_MILLION_REQUESTS = 0.40
RUN_FREE_VCPU_SECONDS = 180_000
RUN_FREE_GIB_SECONDS = 360_000
RUN_FREE_REQUESTS = 2_000_000
# A generous bound on a busy hour's requests (a chat, an agent, a web UI tab's polls): one a second.
DOOR_REQUESTS_PER_BUSY_HOUR = 3600


@dataclass(frozen=True)
class DoorMonth:
    """A month of the front door in one usage pattern (an estimate, like the VM's)."""

    busy_hours_per_day: float
    in_flight_share: float
    """The share of the busy hours with at least one request in flight at the door (1: all of them)."""
    vcpu_seconds: float
    gib_seconds: float
    requests: float
    usd: float
    """With the billing account's Cloud Run free tier all the door's own."""
    usd_without_free_tier: float
    """When other Cloud Run services on the billing account have used the free tier up."""


def door_month(
    *,
    vcpus: float,
    memory_gib: float,
    busy_hours_per_day: float = 4.0,
    sessions_per_day: int = 2,
    in_flight_share: float = 1.0,
    requests_per_busy_hour: float = DOOR_REQUESTS_PER_BUSY_HOUR,
) -> DoorMonth:
    """The door's Cloud Run bill for a month of ``busy_hours_per_day`` in ``sessions_per_day``
    sessions (the autostop table's pattern), for an instance of ``vcpus`` and ``memory_gib``.

    Billed: each session's first request, held through the wake (the time to first token after an
    idle stop, infra/cold_start.py), the busy hours' share with a request in flight, and the idle
    stop's request, which starts an instance of its own (the door scaled to zero in the idle window).
    Idle, nothing is billed: no request, no instance (min instances 0)."""
    days = HOURS_PER_MONTH / 24
    per_day = sessions_per_day * (ttft_after_idle_stop_s() + DOOR_START_S)
    per_day += busy_hours_per_day * 3600 * in_flight_share
    seconds = per_day * days
    vcpu_s, gib_s = seconds * vcpus, seconds * memory_gib
    requests = (busy_hours_per_day * requests_per_busy_hour + 2 * sessions_per_day) * days

    def bill(free_vcpu: float, free_gib: float, free_requests: float) -> float:
        return (
            max(0.0, vcpu_s - free_vcpu) * RUN_USD_PER_VCPU_SECOND
            + max(0.0, gib_s - free_gib) * RUN_USD_PER_GIB_SECOND
            + max(0.0, requests - free_requests) / 1e6 * RUN_USD_PER_MILLION_REQUESTS
        )

    return DoorMonth(
        busy_hours_per_day=busy_hours_per_day,
        in_flight_share=in_flight_share,
        vcpu_seconds=round(vcpu_s),
        gib_seconds=round(gib_s),
        requests=round(requests),
        usd=round(bill(RUN_FREE_VCPU_SECONDS, RUN_FREE_GIB_SECONDS, RUN_FREE_REQUESTS), 2),
        usd_without_free_tier=round(bill(0, 0, 0), 2),
    )


def door_cost_table(*, vcpus: float, memory_gib: float) -> str:
    """docs/door.md's table of the door's month (scripts/gen_docs.py renders it there)."""
    rows = [
        f"| the door ({vcpus:g} vCPU, {memory_gib:g} GiB), 2 sessions a day | vCPU-seconds a month "
        "| USD a month | without the free tier |",
        "| --- | --- | --- | --- |",
    ]
    idle = door_month(vcpus=vcpus, memory_gib=memory_gib, busy_hours_per_day=0, sessions_per_day=0)
    rows.append(
        f"| idle all month | {idle.vcpu_seconds:,.0f} | ${idle.usd:.2f} | ${idle.usd_without_free_tier:.2f} |"
    )
    for share, what in ((1.0, "every second of them"), (0.5, "half of them"), (0.25, "a quarter of them")):
        m = door_month(vcpus=vcpus, memory_gib=memory_gib, in_flight_share=share)
        rows.append(
            f"| {m.busy_hours_per_day:g} busy hours a day, a request in flight {what} "
            f"| {m.vcpu_seconds:,.0f} | ${m.usd:.2f} | ${m.usd_without_free_tier:.2f} |"
        )
    return "\n".join(rows)
