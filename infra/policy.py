"""GCP's rules and our own, checked over the inputs the program gives each resource.

Neither the SDK nor a mocked deployment enforces any of these (the SDK checks only keyword
names), and GCE would reject several of them only at `pulumi up` time, mid-deployment, or
accept them silently (an open firewall, the default service account). Inputs use the wire
shape Pulumi sends to providers: camelCase keys, nested Args as dicts.
"""

from __future__ import annotations

import ipaddress
import re
import shlex
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

INSTANCE = "gcp:compute/instance:Instance"
INSTANCE_TEMPLATE = "gcp:compute/instanceTemplate:InstanceTemplate"
REGION_INSTANCE_TEMPLATE = "gcp:compute/regionInstanceTemplate:RegionInstanceTemplate"
SUBNETWORK = "gcp:compute/subnetwork:Subnetwork"
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


def _documented_secure_boot_exception() -> str:
    from infra import shielded

    return "" if shielded.SECURE_BOOT else shielded.SECURE_BOOT_EXCEPTION


@dataclass(frozen=True)
class PolicyContext:
    allow_public_internet: bool = False
    # Values that must appear only where they are meant to be stored (the secret's version).
    secrets: Sequence[str] = field(default_factory=list)
    # Why a VM may run with secure boot off (infra/shielded.py); empty: no exception.
    secure_boot_exception: str = field(default_factory=_documented_secure_boot_exception)


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


# --- Rules for issue 15: GCE's rules that a first real deployment meets -------------------------

_VMS = {INSTANCE, INSTANCE_TEMPLATE, REGION_INSTANCE_TEMPLATE}
_DEFAULT_NETWORK = re.compile(r"(^|/)(networks|subnetworks)/default$|^default$")
_ANYWHERE_V6 = ipaddress.ip_network("::/0")
SSH_PORT = 22
# https://cloud.google.com/storage/docs/buckets#naming
_BUCKET_NAME = re.compile(r"^[a-z0-9][a-z0-9._-]{1,61}[a-z0-9]$")
_GOOGLE_LIKE = re.compile(r"g[o0]{2}g[l1]e")


def _builder_create(resource: Resource) -> list[str] | None:
    """The argv of a local command's ``gcloud compute instances create``, if it has one."""
    if resource.type != LOCAL_COMMAND:
        return None
    for line in str(resource.inputs.get("create") or "").splitlines():
        if "gcloud compute instances create" in line:
            return shlex.split(line.strip())
    return None


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


def secure_boot_on(resource: Resource, ctx: PolicyContext) -> Iterator[str]:
    """Shielded VMs boot with secure boot, unless infra/shielded.py documents the exception."""
    if resource.type not in _VMS:
        return
    shielded = resource.inputs.get("shieldedInstanceConfig") or {}
    if shielded.get("enableSecureBoot") is not True and not ctx.secure_boot_exception:
        yield "secure boot is off without a documented exception (infra/shielded.py)"


def valid_bucket_name(resource: Resource, _: PolicyContext) -> Iterator[str]:
    """GCS's naming rules, which GCS checks only at create time.
    https://cloud.google.com/storage/docs/buckets#naming"""
    if resource.type != BUCKET:
        return
    name = resource.inputs.get("name")
    if not isinstance(name, str):
        yield "no fixed bucket name: a later deploy could not find (adopt) the kept bucket"
        return
    if not _BUCKET_NAME.match(name) or ".." in name:
        yield f"bucket name {name!r} is not 3-63 characters of [a-z0-9._-] starting and ending alphanumeric"
    if name.startswith("goog"):
        yield f"bucket name {name!r} starts with 'goog'"
    if _GOOGLE_LIKE.search(name):
        yield f"bucket name {name!r} contains 'google' or a close misspelling"


def builder_not_default_account(resource: Resource, _: PolicyContext) -> Iterator[str]:
    """The tooling-image builder runs as its own service account, never the default compute one."""
    argv = _builder_create(resource)
    if argv is None:
        return
    account = next((a.split("=", 1)[1] for a in argv if a.startswith("--service-account=")), None)
    if account is None and "--no-service-account" not in argv:
        yield "a builder created without --service-account gets the default compute account"
    elif account is not None and account.endswith(DEFAULT_SA_SUFFIX):
        yield f"the builder runs as the default compute service account {account}"


RULES: tuple[Rule, ...] = (
    spot_is_preemptible_without_restart,
    gpu_terminates_on_maintenance,
    shielded_vm_on,
    own_service_account,
    no_open_firewall,
    private_bucket,
    secret_stays_secret,
    no_default_network,
    no_ssh_from_anywhere,
    secure_boot_on,
    valid_bucket_name,
    builder_not_default_account,
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
