"""Cloud Run's rules for the front door: its limits, its unauthenticated invoker, Direct VPC egress,
and the Monitoring dashboard it feeds."""

from __future__ import annotations

import ipaddress
import json
from collections.abc import Iterator, Sequence
from typing import Any

from infra import fleet_bounds
from infra.policy.core import (
    DEFAULT_SA_SUFFIX,
    FIREWALL,
    HEALTH_CHECK_RANGES,
    MAX_GCE_NAME,
    SERVING_PORT,
    SUBNETWORK,
    PolicyContext,
    Resource,
    _last,
)
from infra.policy.iam import _grants
from infra.policy.names import _bad_gce_name
from infra.policy.network import _admits, _serving_port_sources

CLOUD_RUN_SERVICE = "gcp:cloudrunv2/service:Service"
DASHBOARD = "gcp:monitoring/dashboard:Dashboard"
# Cloud Run: a request may last at most 60 minutes. https://cloud.google.com/run/docs/configuring/request-timeout
MAX_CLOUD_RUN_TIMEOUT_S = 3600
# Direct VPC egress reserves addresses in blocks of 16: the subnet must be /26 or larger.
# https://cloud.google.com/run/docs/configuring/vpc-direct-vpc
MAX_DIRECT_VPC_PREFIX = 26
# The front door's Cloud Run service is the one service named <deployment>-door (design decision 2).
DOOR_SUFFIX = "-door"
PUBLIC_MEMBERS = frozenset({"allUsers", "allAuthenticatedUsers"})
RUN_INVOKER = "roles/run.invoker"


def _is_door(service: Any) -> bool:
    return isinstance(service, str) and _last(service).endswith(DOOR_SUFFIX)


def unauthenticated_only_on_door(
    resources: Sequence[Resource], _: PolicyContext
) -> Iterator[tuple[Resource, str]]:
    """Only the front door's Cloud Run service may be invoked without authentication (allUsers
    roles/run.invoker): it checks the API key itself. Nothing else is granted to allUsers."""
    for resource in resources:
        public = resource.type == CLOUD_RUN_SERVICE and resource.inputs.get("invokerIamDisabled") is True
        if public and not _is_door(resource.inputs.get("name")):
            yield resource, "invokerIamDisabled opens the service to anyone; only the door may be public"
        for role, member in _grants(resource):
            if member not in PUBLIC_MEMBERS:
                continue
            door_invoker = (
                resource.type.startswith("gcp:cloudrunv2/service")
                and role == RUN_INVOKER
                and _is_door(resource.inputs.get("name"))
            )
            if not door_invoker:
                yield resource, f"{member} holds {role}: only the door's run.invoker may be unauthenticated"


def _duration_s(value: Any) -> float | None:
    text = str(value)
    return float(text[:-1]) if text.endswith("s") and text[:-1].replace(".", "", 1).isdigit() else None


def cloud_run_service_limits(resource: Resource, _: PolicyContext) -> Iterator[str]:
    """A Cloud Run service: an RFC 1035 name of at most 63, a request timeout of at most 3600 s, its
    own service account, deletion protection off (else `pulumi destroy` fails), Direct VPC egress on
    one interface without a connector, naming its network and subnet by name (Service.yaml has no
    diff suppression there: a self link the API echoes in another form makes a new revision every
    `up`), a template maximum of instances bounded at the service too (the template's is per
    revision: pulumi_gcp ServiceScalingArgs, "combined maximum ... for all revisions"), and a source
    deploy on Google's Python runtime started by ``python``, the name the provider's zip-deploy test
    uses (``python3`` may be the stack's system 3.10)."""
    if resource.type != CLOUD_RUN_SERVICE:
        return
    inputs = resource.inputs
    name = inputs.get("name")
    if isinstance(name, str) and _bad_gce_name(name, MAX_GCE_NAME):
        yield f"name {name!r} is not an RFC 1035 name of at most {MAX_GCE_NAME} characters"
    if inputs.get("deletionProtection") is not False:
        yield "deletionProtection is not false: the provider (default true) refuses `pulumi destroy`"
    template = inputs.get("template") or {}
    timeout = template.get("timeout")
    if timeout is not None:
        seconds = _duration_s(timeout)
        if seconds is None or not 0 < seconds <= MAX_CLOUD_RUN_TIMEOUT_S:
            yield f"template.timeout {timeout!r} is not a duration of at most {MAX_CLOUD_RUN_TIMEOUT_S}s"
    account = template.get("serviceAccount")
    if not account:
        yield "no template.serviceAccount: the revision would run as the default compute service account"
    elif str(account).endswith(DEFAULT_SA_SUFFIX):
        yield f"runs as the default compute service account {account}"
    vpc = template.get("vpcAccess") or {}
    if len(vpc.get("networkInterfaces") or []) > 1:
        yield "Direct VPC egress supports one network interface"
    if vpc.get("connector") and vpc.get("networkInterfaces"):
        yield "Direct VPC egress and a Serverless VPC Access connector cannot be used together"
    for nic in vpc.get("networkInterfaces") or []:
        for key in ("network", "subnetwork"):
            if "/" in str(nic.get(key) or ""):
                yield f"Direct VPC egress {key} {nic[key]!r} is a path or self link; name it"
    template_max = (template.get("scaling") or {}).get("maxInstanceCount")
    if template_max is not None and (inputs.get("scaling") or {}).get("maxInstanceCount") is None:
        yield "template.scaling.maxInstanceCount is per revision; bound the service's scaling too"
    for container in template.get("containers") or []:
        runtime = "/serverless-runtimes/" in str(container.get("baseImageUri") or "")
        if runtime and (container.get("commands") or [None])[0] == "python3":
            yield "the source deploy runs python3, which may be the base image's system 3.10; run python"


def _door_subnets(resources: Sequence[Resource]) -> Iterator[tuple[Resource, Resource | None]]:
    """Each Cloud Run service with Direct VPC egress and the stack's subnet it sends from."""
    subnets = {r.inputs.get("name"): r for r in resources if r.type == SUBNETWORK}
    for service in resources:
        if service.type != CLOUD_RUN_SERVICE:
            continue
        for nic in ((service.inputs.get("template") or {}).get("vpcAccess") or {}).get(
            "networkInterfaces"
        ) or []:
            subnet = nic.get("subnetwork")
            yield service, subnets.get(_last(subnet)) if subnet else None


def direct_vpc_subnet_fits(resources: Sequence[Resource], _: PolicyContext) -> Iterator[tuple[Resource, str]]:
    """The subnet a Cloud Run service egresses from is /26 or larger and in the service's region."""
    for service, subnet in _door_subnets(resources):
        if subnet is None:
            yield service, "Direct VPC egress names no subnet of this stack (give it its own subnet)"
            continue
        network = ipaddress.ip_network(str(subnet.inputs.get("ipCidrRange")), strict=False)
        if network.prefixlen > MAX_DIRECT_VPC_PREFIX:
            yield subnet, f"{network} is smaller than the /{MAX_DIRECT_VPC_PREFIX} Direct VPC egress needs"
        if subnet.inputs.get("region") != service.inputs.get("location"):
            yield (
                subnet,
                f"in {subnet.inputs.get('region')}, not the service's {service.inputs.get('location')}",
            )


def door_port_only_from_door(
    resources: Sequence[Resource], _: PolicyContext
) -> Iterator[tuple[Resource, str]]:
    """With a door, the server's port admits only the door's subnet (by range: ingress rules cannot
    match a Cloud Run service by tag or account), Google's health checkers and IAP."""
    door_ranges = {
        str(subnet.inputs.get("ipCidrRange")): service
        for service, subnet in _door_subnets(resources)
        if subnet is not None
    }
    if not door_ranges:
        return
    allowed = {*door_ranges, *HEALTH_CHECK_RANGES, fleet_bounds.IAP_TCP_FORWARDING_RANGE}
    firewalls = [r for r in resources if r.type == FIREWALL]
    for rule in firewalls:
        ranges = _serving_port_sources(rule.inputs)
        if ranges is None:
            continue
        strays = sorted(set(ranges) - allowed)
        if strays or not ranges:
            yield (
                rule,
                f"port {SERVING_PORT} is open to {strays or 'every source'}; with a door only its "
                "subnet, Google's health checkers and IAP may reach it",
            )
    for cidr, service in door_ranges.items():
        if not any(_admits(rule.inputs, cidr, SERVING_PORT) for rule in firewalls):
            yield service, f"no ingress rule admits the door's subnet {cidr} on tcp:{SERVING_PORT}"


def dashboard_json_valid(resource: Resource, _: PolicyContext) -> Iterator[str]:
    """A dashboard's dashboardJson is a JSON object with the displayName the API requires."""
    if resource.type != DASHBOARD:
        return
    text = resource.inputs.get("dashboardJson")
    try:
        document = json.loads(str(text))
    except ValueError as err:
        yield f"dashboardJson is not JSON: {err}"
        return
    if not isinstance(document, dict) or not document.get("displayName"):
        yield "dashboardJson has no displayName"
