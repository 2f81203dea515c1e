"""Who has an address, and which way the VMs' egress goes: no external IP unless the stack opts in
(``externalIp``), Cloud NAT that logs nothing, Private Google Access on every subnet a VM uses."""

from __future__ import annotations

from collections.abc import Iterator, Sequence

from infra.policy.compute import _builder_create
from infra.policy.core import _VMS, SUBNETWORK, PolicyContext, Resource, UnknownInput, _last

ROUTER_NAT = "gcp:compute/routerNat:RouterNat"
# What a NAT's sourceSubnetworkIpRangesToNat may say; the ALL_* values cover every subnet.
# https://cloud.google.com/compute/docs/reference/rest/v1/routers (nats[].sourceSubnetworkIpRangesToNat)
_NAT_ALL = {"ALL_SUBNETWORKS_ALL_IP_RANGES", "ALL_SUBNETWORKS_ALL_PRIMARY_IP_RANGES"}


def no_external_ip_unless_opted_in(resource: Resource, ctx: PolicyContext) -> Iterator[str]:
    """No VM (template, instance or the image builder) carries an access config, i.e. an external
    IP, unless the stack says externalIp: true; its egress goes through Cloud NAT
    (https://cloud.google.com/compute/docs/ip-addresses#externaladdresses)."""
    if ctx.external_ip:
        return
    if resource.type in _VMS:
        for i, nic in enumerate(resource.inputs.get("networkInterfaces") or []):
            if nic.get("accessConfigs") or nic.get("ipv6AccessConfigs"):
                yield f"networkInterfaces[{i}] has an access config (an external IP) without externalIp: true"
    argv = _builder_create(resource)
    if argv is not None and "--no-address" not in argv:
        yield "gcloud compute instances create without --no-address gives the builder an external IP"


def nat_logging_off(resource: Resource, _: PolicyContext) -> Iterator[str]:
    """Cloud NAT logs nothing: its entries bill as Cloud Logging ingestion, and the boot's own
    report says what failed (https://cloud.google.com/nat/docs/monitoring)."""
    if resource.type == ROUTER_NAT and (resource.inputs.get("logConfig") or {}).get("enable") is not False:
        yield "logConfig.enable must be false"


def _vm_subnets(resources: Sequence[Resource]) -> dict[str, Resource]:
    """The subnets (by name) that a VM's interface or the builder's --subnet names."""
    named: dict[str, Resource] = {}
    for resource in resources:
        values: list[object] = []
        if resource.type in _VMS:
            values = [nic.get("subnetwork") for nic in resource.inputs.get("networkInterfaces") or []]
        argv = _builder_create(resource)
        if argv is not None:
            values = [a.split("=", 1)[1] for a in argv if a.startswith("--subnet=")]
        for value in values:
            if isinstance(value, str) and value:
                named.setdefault(_last(value), resource)
    return named


def _nat_covers(nat: Resource, subnet: str) -> bool:
    scope = nat.inputs.get("sourceSubnetworkIpRangesToNat")
    if scope in _NAT_ALL:
        return True
    listed = nat.inputs.get("subnetworks") or []
    if any(not isinstance(s.get("name"), str) for s in listed):
        raise UnknownInput
    return scope == "LIST_OF_SUBNETWORKS" and any(_last(s["name"]) == subnet for s in listed)


def vm_subnets_private_egress(
    resources: Sequence[Resource], ctx: PolicyContext
) -> Iterator[tuple[Resource, str]]:
    """Every subnet a VM uses has Private Google Access (Google's APIs without an external IP), and,
    unless externalIp, a Cloud NAT that serves it (https://cloud.google.com/vpc/docs/private-google-access)."""
    subnets = {str(r.inputs.get("name")): r for r in resources if r.type == SUBNETWORK}
    nats = [r for r in resources if r.type == ROUTER_NAT]
    for name, user in _vm_subnets(resources).items():
        subnet = subnets.get(name)
        if subnet is None:  # a subnet of another program: its settings are not ours to read
            continue
        if subnet.inputs.get("privateIpGoogleAccess") is not True:
            yield subnet, f"{user.name}'s subnet {name} has no Private Google Access"
        if not ctx.external_ip and not any(_nat_covers(nat, name) for nat in nats):
            yield subnet, f"{user.name} has no external IP and no Cloud NAT serves its subnet {name}"
