"""The policy rules' shared types (a resource as the engine sends it, an unknown value, a violation, the
stack's context) and the type tokens and helpers more than one family of rules reads."""

from __future__ import annotations

from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

INSTANCE = "gcp:compute/instance:Instance"
TEMPLATE = "gcp:compute/regionInstanceTemplate:RegionInstanceTemplate"
HEALTH_CHECK = "gcp:compute/healthCheck:HealthCheck"
INSTANCE_TEMPLATE = "gcp:compute/instanceTemplate:InstanceTemplate"
REGION_INSTANCE_TEMPLATE = "gcp:compute/regionInstanceTemplate:RegionInstanceTemplate"
SUBNETWORK = "gcp:compute/subnetwork:Subnetwork"
FIREWALL = "gcp:compute/firewall:Firewall"
LOCAL_COMMAND = "command:local:Command"
BACKEND_SERVICE = "gcp:compute/backendService:BackendService"
REGION_GROUP = "gcp:compute/regionInstanceGroupManager:RegionInstanceGroupManager"
# The default compute service account is <project-number>-compute@developer.gserviceaccount.com.
# https://cloud.google.com/compute/docs/access/service-accounts#default_service_account
DEFAULT_SA_SUFFIX = "-compute@developer.gserviceaccount.com"
# Google's health checkers. https://cloud.google.com/load-balancing/docs/health-check-concepts#ip-ranges
HEALTH_CHECK_RANGES = ("35.191.0.0/16", "130.211.0.0/22")


@dataclass(frozen=True)
class Resource:
    type: str
    name: str
    inputs: Mapping[str, Any]
    # What the engine also knows of a resource (the pack's PolicyResource, the mocks' registration):
    # its URN, ignoreChanges, and which resources (URNs) each input property was computed from.
    urn: str = ""
    ignore_changes: tuple[str, ...] = ()
    property_dependencies: Mapping[str, tuple[str, ...]] = field(default_factory=dict)


class UnknownInput(Exception):
    """A rule read a value that is not known yet (an output of a resource not created, in a preview)."""


@dataclass(frozen=True)
class Violation:
    rule: str
    resource: str
    message: str

    def __str__(self) -> str:
        return f"[{self.rule}] {self.resource}: {self.message}"


def _documented_secure_boot_reasons() -> Mapping[str, str]:
    from infra import shielded

    return dict(shielded.OFF_REASONS)


@dataclass(frozen=True)
class PolicyContext:
    allow_public_internet: bool = False
    # Values that must appear only where they are meant to be stored (the secret's version).
    secrets: Sequence[str] = field(default_factory=list)
    # More than one server behind the load balancer (infra/fleet.py): 8080 then admits only Google.
    fleet: bool = False
    # The reasons a VM may run with Secure Boot off, by the code its `secure-boot-off` label carries
    # (infra/shielded.py OFF_REASONS); empty: no exception.
    secure_boot_reasons: Mapping[str, str] = field(default_factory=_documented_secure_boot_reasons)
    # externalIp: true, the VMs' ephemeral external addresses instead of Cloud NAT (infra/network.py).
    external_ip: bool = False
    # Pulumi.yaml's `options` (None: not known, and the rule that needs it is skipped).
    project_options: Mapping[str, Any] | None = None


Rule = Callable[[Resource, PolicyContext], Iterator[str]]
# A rule over the whole program (a group and its template, firewall or autoscaler): yields the
# resource to blame and the message.
ProgramRule = Callable[[Sequence[Resource], PolicyContext], Iterator[tuple[Resource, str]]]


def _instances(rule: Callable[[Mapping[str, Any]], Iterator[str]]) -> Rule:
    """A rule on what a VM is: a bare instance's inputs, or a template its group creates VMs from."""

    def check(resource: Resource, _: PolicyContext) -> Iterator[str]:
        if resource.type in {INSTANCE, TEMPLATE}:
            yield from rule(resource.inputs)

    check.__name__ = rule.__name__
    return check


SERVING_PORT = 8080
_VMS = {INSTANCE, INSTANCE_TEMPLATE, REGION_INSTANCE_TEMPLATE}
MAX_GCE_NAME = 63


def _last(value: Any) -> str:
    return str(value).rstrip("/").rsplit("/", 1)[-1]
