"""GCP's rules and our own, checked over the inputs the program gives each resource.

Neither the SDK nor a mocked deployment enforces any of these (the SDK checks only keyword
names), and GCE would reject several of them only at `pulumi up` time, mid-deployment, or
accept them silently (an open firewall, the default service account). Inputs use the wire
shape Pulumi sends to providers: camelCase keys, nested Args as dicts.
"""

from __future__ import annotations

import ipaddress
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

INSTANCE = "gcp:compute/instance:Instance"
FIREWALL = "gcp:compute/firewall:Firewall"
BUCKET = "gcp:storage/bucket:Bucket"
SECRET_VERSION = "gcp:secretmanager/secretVersion:SecretVersion"  # noqa: S105 (a type token)
LOCAL_COMMAND = "command:local:Command"
RANDOM_PASSWORD = "random:index/randomPassword:RandomPassword"  # noqa: S105 (a type token)

# The default compute service account is <project-number>-compute@developer.gserviceaccount.com.
# https://cloud.google.com/compute/docs/access/service-accounts#default_service_account
DEFAULT_SA_SUFFIX = "-compute@developer.gserviceaccount.com"
_ANYWHERE = ipaddress.ip_network("0.0.0.0/0")


@dataclass(frozen=True)
class Resource:
    type: str
    name: str
    inputs: Mapping[str, Any]


@dataclass(frozen=True)
class Violation:
    rule: str
    resource: str
    message: str

    def __str__(self) -> str:
        return f"[{self.rule}] {self.resource}: {self.message}"


@dataclass(frozen=True)
class PolicyContext:
    allow_public_internet: bool = False
    # Values that must appear only where they are meant to be stored (the secret's version).
    secrets: Sequence[str] = field(default_factory=list)


Rule = Callable[[Resource, PolicyContext], Iterator[str]]


def _instances(rule: Callable[[Mapping[str, Any]], Iterator[str]]) -> Rule:
    def check(resource: Resource, _: PolicyContext) -> Iterator[str]:
        if resource.type == INSTANCE:
            yield from rule(resource.inputs)

    check.__name__ = rule.__name__
    return check


@_instances
def spot_is_preemptible_without_restart(inputs: Mapping[str, Any]) -> Iterator[str]:
    # https://cloud.google.com/compute/docs/instances/create-use-spot
    scheduling = inputs.get("scheduling") or {}
    if scheduling.get("provisioningModel") != "SPOT":
        return
    if scheduling.get("preemptible") is not True:
        yield "SPOT needs preemptible=true"
    # The provider defaults automaticRestart to true, which GCE rejects for spot VMs.
    if scheduling.get("automaticRestart") is not False:
        yield "SPOT needs automaticRestart=false set explicitly (it defaults to true)"
    if scheduling.get("instanceTerminationAction") not in {"STOP", "DELETE"}:
        yield "SPOT needs instanceTerminationAction STOP or DELETE"


@_instances
def gpu_terminates_on_maintenance(inputs: Mapping[str, Any]) -> Iterator[str]:
    # GPU VMs cannot live-migrate. https://cloud.google.com/compute/docs/gpus/gpu-host-maintenance
    maintenance = (inputs.get("scheduling") or {}).get("onHostMaintenance")
    if inputs.get("guestAccelerators") and maintenance != "TERMINATE":
        yield "a VM with GPUs needs scheduling.onHostMaintenance=TERMINATE"


@_instances
def shielded_vm_on(inputs: Mapping[str, Any]) -> Iterator[str]:
    shielded = inputs.get("shieldedInstanceConfig") or {}
    for key in ("enableVtpm", "enableIntegrityMonitoring"):
        if shielded.get(key) is not True:
            yield f"shieldedInstanceConfig.{key} must be true"


@_instances
def own_service_account(inputs: Mapping[str, Any]) -> Iterator[str]:
    account = inputs.get("serviceAccount") or {}
    email = account.get("email")
    if not email:
        yield "no serviceAccount.email: GCE would attach the default compute service account"
    elif str(email).endswith(DEFAULT_SA_SUFFIX):
        yield f"uses the default compute service account {email}"


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


def private_bucket(resource: Resource, _: PolicyContext) -> Iterator[str]:
    if resource.type != BUCKET:
        return
    if resource.inputs.get("uniformBucketLevelAccess") is not True:
        yield "uniformBucketLevelAccess must be true"
    if resource.inputs.get("publicAccessPrevention") != "enforced":
        yield "publicAccessPrevention must be 'enforced'"


def secret_stays_secret(resource: Resource, ctx: PolicyContext) -> Iterator[str]:
    if resource.type in {SECRET_VERSION, RANDOM_PASSWORD}:
        return
    for path, value in _strings(resource.inputs, ""):
        if resource.type == LOCAL_COMMAND and path.startswith("environment."):
            # The health gate's own process on the deployer's machine; Pulumi keeps it encrypted in state.
            continue
        if any(secret and secret in value for secret in ctx.secrets):
            yield f"a secret value appears in plain text at {path or '<inputs>'}"


def _strings(value: Any, path: str) -> Iterator[tuple[str, str]]:
    if isinstance(value, str):
        yield path, value
    elif isinstance(value, Mapping):
        for key, item in value.items():
            yield from _strings(item, f"{path}.{key}" if path else str(key))
    elif isinstance(value, list | tuple):
        for i, item in enumerate(value):
            yield from _strings(item, f"{path}[{i}]")


PROJECT_IAM_MEMBER = "gcp:projects/iAMMember:IAMMember"
PROJECT_IAM_BINDING = "gcp:projects/iAMBinding:IAMBinding"
# Roles that would let the VM (and anything that breaks into llama-server) manage every VM, disk
# and group in the project. Idle autostop needs one group: infra/autostop.py's custom role.
# https://cloud.google.com/compute/docs/access/iam#predefined_roles
BROAD_COMPUTE_ROLES = frozenset(
    {
        "roles/owner",
        "roles/editor",
        "roles/compute.admin",
        "roles/compute.instanceAdmin",
        "roles/compute.instanceAdmin.v1",
    }
)


def no_project_compute_admin_for_service_accounts(resource: Resource, _: PolicyContext) -> Iterator[str]:
    # The program's only service account is the VM's; a condition does not make these roles narrow.
    if resource.type == PROJECT_IAM_MEMBER:
        members = [resource.inputs.get("member")]
    elif resource.type == PROJECT_IAM_BINDING:
        members = list(resource.inputs.get("members") or [])
    else:
        return
    role = resource.inputs.get("role")
    if role not in BROAD_COMPUTE_ROLES:
        return
    for member in members:
        if str(member).startswith("serviceAccount:"):
            yield f"{role} on the whole project for {member}; grant only what it needs on its own group"


RULES: tuple[Rule, ...] = (
    spot_is_preemptible_without_restart,
    gpu_terminates_on_maintenance,
    shielded_vm_on,
    own_service_account,
    no_open_firewall,
    private_bucket,
    secret_stays_secret,
    no_project_compute_admin_for_service_accounts,
)


def check(
    resources: Iterable[Resource], ctx: PolicyContext, rules: Sequence[Rule] = RULES
) -> list[Violation]:
    return [
        Violation(rule.__name__, f"{resource.type}::{resource.name}", message)
        for resource in resources
        for rule in rules
        for message in rule(resource, ctx)
    ]
