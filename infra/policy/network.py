"""The firewall's and the VPC's rules: who reaches which port, the default network, subnets."""

from __future__ import annotations

import ipaddress
import re
from collections.abc import Iterator, Mapping, Sequence
from typing import Any

from infra import config_rules, fleet_bounds
from infra.policy.compute import _builder_create
from infra.policy.core import (
    _VMS,
    BACKEND_SERVICE,
    FIREWALL,
    HEALTH_CHECK,
    HEALTH_CHECK_RANGES,
    SERVING_PORT,
    SUBNETWORK,
    PolicyContext,
    Resource,
    _last,
)

_ANYWHERE = ipaddress.ip_network("0.0.0.0/0")


def _admits(rule: Mapping[str, Any], source: str, port: int) -> bool:
    if (rule.get("direction") or "INGRESS") != "INGRESS" or source not in (rule.get("sourceRanges") or []):
        return False
    return any(_opens(allow, port) for allow in rule.get("allows") or [])


def _opens(allow: Mapping[str, Any], port: int) -> bool:
    if allow.get("protocol") not in {"tcp", "all"}:
        return False
    return not allow.get("ports") or any(_port_in(str(p), port) for p in allow["ports"])


def _serving_port_sources(rule: Mapping[str, Any]) -> list[str] | None:
    """An ingress rule's source ranges when it opens the serving port (none: every source), else None."""
    if (rule.get("direction") or "INGRESS") != "INGRESS":
        return None
    if not any(_opens(allow, SERVING_PORT) for allow in rule.get("allows") or []):
        return None
    return [str(r) for r in rule.get("sourceRanges") or []]


def _port_in(spec: str, port: int) -> bool:
    low, _, high = spec.partition("-")
    return int(low) <= port <= int(high or low)


def health_checks_admitted(resources: Sequence[Resource], _: PolicyContext) -> Iterator[tuple[Resource, str]]:
    # Without this, autohealing sees every member as dead and recreates it after the initial delay.
    firewalls = [r.inputs for r in resources if r.type == FIREWALL]
    for check in resources:
        if check.type != HEALTH_CHECK:
            continue
        port = int((check.inputs.get("httpHealthCheck") or {}).get("port") or 80)
        for source in HEALTH_CHECK_RANGES:
            if not any(_admits(rule, source, port) for rule in firewalls):
                yield (
                    check,
                    f"no ingress firewall rule admits Google's health checkers {source} on tcp:{port}",
                )


def no_open_firewall(resource: Resource, ctx: PolicyContext) -> Iterator[str]:
    if resource.type != FIREWALL or (resource.inputs.get("direction") or "INGRESS") != "INGRESS":
        return
    ranges = resource.inputs.get("sourceRanges") or []
    sources = ranges or resource.inputs.get("sourceTags") or resource.inputs.get("sourceServiceAccounts")
    if not sources:
        # GCE reads an ingress rule without any source as "from anywhere".
        yield "ingress rule without sourceRanges/sourceTags admits every source"
    elif not ctx.allow_public_internet and any(
        ipaddress.ip_network(r, strict=False) == _ANYWHERE for r in ranges
    ):
        yield "0.0.0.0/0 without allowPublicInternet"
    elif not ctx.allow_public_internet and config_rules.exposes_public_internet(ranges):
        # Exposure by size, as infra/config_rules.py reads it: all but one address is the internet.
        yield "sourceRanges admit more than one /8 of public addresses without allowPublicInternet"
    most = config_rules.MAX_FIREWALL_SOURCE_RANGES
    if len(ranges) > most:
        yield f"{len(ranges)} source ranges: a firewall rule takes at most {most}"


_PUBLIC_SCHEMES = {"EXTERNAL", "EXTERNAL_MANAGED"}


def backend_timeout_covers_generation(resource: Resource, _: PolicyContext) -> Iterator[str]:
    # The load balancer ends a response that outlives timeoutSec (default 30 s) and never retries it.
    if resource.type != BACKEND_SERVICE:
        return
    timeout = resource.inputs.get("timeoutSec") or 30
    bound = fleet_bounds.GENERATION_BOUND_S
    if timeout < bound:
        yield f"timeoutSec {timeout:g} s cuts streams off before the {bound} s generation bound"
    if not resource.inputs.get("connectionDrainingTimeoutSec"):
        yield "no connectionDrainingTimeoutSec: a member leaving the group drops its open streams"


def public_backend_has_armor(resource: Resource, _: PolicyContext) -> Iterator[str]:
    # A public load balancer is reachable from anywhere; the firewall only sees Google's proxies.
    if resource.type != BACKEND_SERVICE:
        return
    if (resource.inputs.get("loadBalancingScheme") or "EXTERNAL") not in _PUBLIC_SCHEMES:
        return
    if not resource.inputs.get("securityPolicy"):
        yield "a public backend service without a Cloud Armor securityPolicy admits every source"


def fleet_port_only_from_google(resource: Resource, ctx: PolicyContext) -> Iterator[str]:
    if not ctx.fleet or resource.type != FIREWALL:
        return
    ranges = _serving_port_sources(resource.inputs)
    if ranges is None:
        return
    allowed = {*fleet_bounds.GOOGLE_FRONT_END_RANGES, fleet_bounds.IAP_TCP_FORWARDING_RANGE}
    strays = sorted(set(ranges) - allowed)
    if strays or not ranges:
        yield (
            f"port {SERVING_PORT} of a fleet member is open to {strays or 'every source'}; only Google's "
            f"load-balancer and health-check ranges (and IAP) may reach it"
        )


_DEFAULT_NETWORK = re.compile(r"(^|/)(networks|subnetworks)/default$|^default$")
_ANYWHERE_V6 = ipaddress.ip_network("::/0")
SSH_PORT = 22


def no_default_network(resource: Resource, _: PolicyContext) -> Iterator[str]:
    """Nothing on the project's `default` network: its default-allow-ssh rule opens tcp:22 to
    0.0.0.0/0 on every VM, and some organizations have none
    (https://cloud.google.com/vpc/docs/vpc#default-network)."""
    places: list[tuple[str, Any]] = []
    if resource.type in _VMS:
        for i, nic in enumerate(resource.inputs.get("networkInterfaces") or []):
            if not nic.get("network") and not nic.get("subnetwork"):
                yield f"networkInterfaces[{i}] names no network: GCE puts it on `default`"
            places += [(f"networkInterfaces[{i}].network", nic.get("network"))]
            places += [(f"networkInterfaces[{i}].subnetwork", nic.get("subnetwork"))]
    elif resource.type in {FIREWALL, SUBNETWORK}:
        places.append(("network", resource.inputs.get("network")))
    argv = _builder_create(resource)
    if argv is not None:
        flags = dict(a[2:].split("=", 1) for a in argv if a.startswith("--") and "=" in a)
        if "network" not in flags and "subnet" not in flags:
            yield "gcloud compute instances create without --network: GCE puts the VM on `default`"
        places += [("--network", flags.get("network")), ("--subnet", flags.get("subnet"))]
    for where, value in places:
        if isinstance(value, str) and _DEFAULT_NETWORK.search(value):
            yield f"{where} is the project's default network ({value})"


def _port_ranges(allow: Mapping[str, Any]) -> Iterator[tuple[int, int]]:
    if allow.get("protocol") not in ("tcp", "all", "6"):
        return
    ports = allow.get("ports") or []
    if not ports:
        yield 0, 65535
    for port in ports:
        low, _, high = str(port).partition("-")
        yield int(low), int(high or low)


def no_ssh_from_anywhere(resource: Resource, _: PolicyContext) -> Iterator[str]:
    """No ingress rule opens tcp:22 to the whole internet, opted in or not: SSH goes through IAP."""
    if resource.type != FIREWALL or (resource.inputs.get("direction") or "INGRESS") != "INGRESS":
        return
    ranges = [ipaddress.ip_network(r, strict=False) for r in resource.inputs.get("sourceRanges") or []]
    if not any(r in (_ANYWHERE, _ANYWHERE_V6) for r in ranges):
        return
    for allow in resource.inputs.get("allows") or []:
        if any(low <= SSH_PORT <= high for low, high in _port_ranges(allow)):
            yield "tcp:22 from 0.0.0.0/0: SSH comes through IAP (35.235.240.0/20) only"
            return


def subnets_do_not_overlap(resources: Sequence[Resource], _: PolicyContext) -> Iterator[tuple[Resource, str]]:
    """Subnets of one VPC have disjoint primary ranges (the door's beside the server's)."""
    seen: dict[str, list[tuple[Resource, Any]]] = {}
    for subnet in resources:
        if subnet.type != SUBNETWORK:
            continue
        network = ipaddress.ip_network(str(subnet.inputs.get("ipCidrRange")), strict=False)
        others = seen.setdefault(_last(subnet.inputs.get("network")), [])
        for other, other_range in others:
            if network.overlaps(other_range):
                yield subnet, f"{network} overlaps {other.name}'s {other_range} in the same VPC"
        others.append((subnet, network))
