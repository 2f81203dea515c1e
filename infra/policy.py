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

from infra import fleet_bounds

INSTANCE = "gcp:compute/instance:Instance"
TEMPLATE = "gcp:compute/regionInstanceTemplate:RegionInstanceTemplate"
GROUP = "gcp:compute/regionInstanceGroupManager:RegionInstanceGroupManager"
AUTOSCALER = "gcp:compute/regionAutoscaler:RegionAutoscaler"
HEALTH_CHECK = "gcp:compute/healthCheck:HealthCheck"
INSTANCE_TEMPLATE = "gcp:compute/instanceTemplate:InstanceTemplate"
REGION_INSTANCE_TEMPLATE = "gcp:compute/regionInstanceTemplate:RegionInstanceTemplate"
SUBNETWORK = "gcp:compute/subnetwork:Subnetwork"
FIREWALL = "gcp:compute/firewall:Firewall"
BUCKET = "gcp:storage/bucket:Bucket"
SECRET_VERSION = "gcp:secretmanager/secretVersion:SecretVersion"  # noqa: S105 (a type token)
LOCAL_COMMAND = "command:local:Command"
RANDOM_PASSWORD = "random:index/randomPassword:RandomPassword"  # noqa: S105 (a type token)
BACKEND_SERVICE = "gcp:compute/backendService:BackendService"
REGION_AUTOSCALER = "gcp:compute/regionAutoscaler:RegionAutoscaler"
REGION_GROUP = "gcp:compute/regionInstanceGroupManager:RegionInstanceGroupManager"

# The default compute service account is <project-number>-compute@developer.gserviceaccount.com.
# https://cloud.google.com/compute/docs/access/service-accounts#default_service_account
DEFAULT_SA_SUFFIX = "-compute@developer.gserviceaccount.com"
_ANYWHERE = ipaddress.ip_network("0.0.0.0/0")
# Google's health checkers. https://cloud.google.com/load-balancing/docs/health-check-concepts#ip-ranges
HEALTH_CHECK_RANGES = ("35.191.0.0/16", "130.211.0.0/22")
# https://cloud.google.com/compute/docs/instance-groups/autohealing-instances-in-migs
MAX_INITIAL_DELAY_S = 3600
# Shapes that leave zones uneven, and the shapes an autoscaler works with.
# https://cloud.google.com/compute/docs/instance-groups/regional-mig-distribution-shape
UNEVEN_SHAPES = {"BALANCED", "ANY_SINGLE_ZONE"}
AUTOSCALER_SHAPES = {"EVEN", "BALANCED"}
_REGION_IN_URL = re.compile(r"/regions/([a-z0-9-]+)/")


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
    # The reserved addresses, IP -> region (resolved outputs: an Address's inputs do not carry its IP).
    addresses: Mapping[str, str] = field(default_factory=dict)
    # More than one server behind the load balancer (infra/fleet.py): 8080 then admits only Google.
    fleet: bool = False
    # Why a VM may run with secure boot off (infra/shielded.py); empty: no exception.
    secure_boot_exception: str = field(default_factory=_documented_secure_boot_exception)


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


def _groups(rule: Callable[[Mapping[str, Any]], Iterator[str]]) -> Rule:
    def check(resource: Resource, _: PolicyContext) -> Iterator[str]:
        if resource.type == GROUP:
            yield from rule(resource.inputs)

    check.__name__ = rule.__name__
    return check


@_groups
def uneven_shape_needs_no_redistribution(inputs: Mapping[str, Any]) -> Iterator[str]:
    # GCE rejects proactive redistribution for shapes that do not keep zones even.
    shape = inputs.get("distributionPolicyTargetShape") or "EVEN"
    redistribution = (inputs.get("updatePolicy") or {}).get("instanceRedistributionType") or "PROACTIVE"
    if shape in UNEVEN_SHAPES and redistribution != "NONE":
        yield f"shape {shape} needs updatePolicy.instanceRedistributionType=NONE, not {redistribution}"


@_groups
def autohealing_delay_in_range(inputs: Mapping[str, Any]) -> Iterator[str]:
    healing = inputs.get("autoHealingPolicies") or {}
    delay = healing.get("initialDelaySec")
    if healing and (delay is None or not 0 <= delay <= MAX_INITIAL_DELAY_S):
        yield f"autoHealingPolicies.initialDelaySec must be within 0-{MAX_INITIAL_DELAY_S}, not {delay}"


def _group_named(resources: Sequence[Resource], target: str) -> Resource | None:
    for resource in resources:
        name = resource.inputs.get("name")
        if resource.type == GROUP and name and (target == name or target.endswith(f"/{name}")):
            return resource
    return None


def autoscaler_needs_even_or_balanced(
    resources: Sequence[Resource], _: PolicyContext
) -> Iterator[tuple[Resource, str]]:
    for scaler in resources:
        if scaler.type != AUTOSCALER:
            continue
        group = _group_named(resources, str(scaler.inputs.get("target") or ""))
        shape = (group.inputs.get("distributionPolicyTargetShape") or "EVEN") if group else "EVEN"
        if group is not None and shape not in AUTOSCALER_SHAPES:
            yield group, f"is autoscaled by {scaler.name}: its shape must be EVEN or BALANCED, not {shape}"


def _admits(rule: Mapping[str, Any], source: str, port: int) -> bool:
    if (rule.get("direction") or "INGRESS") != "INGRESS" or source not in (rule.get("sourceRanges") or []):
        return False
    return any(
        allow.get("protocol") in {"tcp", "all"}
        and (not allow.get("ports") or any(_port_in(str(p), port) for p in allow["ports"]))
        for allow in rule.get("allows") or []
    )


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


# --- the fleet (infra/fleet.py) ---------------------------------------------------------------

_PUBLIC_SCHEMES = {"EXTERNAL", "EXTERNAL_MANAGED"}
SERVING_PORT = 8080


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


def autoscaler_waits_for_cold_start(resource: Resource, _: PolicyContext) -> Iterator[str]:
    if resource.type != REGION_AUTOSCALER:
        return
    policy = resource.inputs.get("autoscalingPolicy") or {}
    cooldown = policy.get("cooldownPeriod") or 60
    bound = fleet_bounds.COLD_START_BOUND_S
    if cooldown < bound:
        yield (
            f"cooldownPeriod {cooldown:g} s is shorter than the {bound} s cold start: "
            "the autoscaler would add servers again while new ones still load"
        )
    in_control = (policy.get("scaleInControl") or {}).get("maxScaledInReplicas") or {}
    if not (in_control.get("fixed") or in_control.get("percent")):
        yield "no scaleInControl: the end of a burst may remove several busy servers at once"


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
    if (resource.inputs.get("direction") or "INGRESS") != "INGRESS":
        return
    if not any(_opens(allow, SERVING_PORT) for allow in resource.inputs.get("allows") or []):
        return
    allowed = {*fleet_bounds.GOOGLE_FRONT_END_RANGES, fleet_bounds.IAP_TCP_FORWARDING_RANGE}
    ranges = resource.inputs.get("sourceRanges") or []
    strays = sorted(set(ranges) - allowed)
    if strays or not ranges:
        yield (
            f"port {SERVING_PORT} of a fleet member is open to {strays or 'every source'}; only Google's "
            f"load-balancer and health-check ranges (and IAP) may reach it"
        )


def _opens(allow: Mapping[str, Any], port: int) -> bool:
    if allow.get("protocol") not in {"tcp", "all"}:
        return False
    ports = allow.get("ports") or []
    if not ports:
        return True
    for spec in ports:
        low, _, high = str(spec).partition("-")
        if int(low) <= port <= int(high or low):
            return True
    return False


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
    uneven_shape_needs_no_redistribution,
    autohealing_delay_in_range,
    backend_timeout_covers_generation,
    autoscaler_waits_for_cold_start,
    public_backend_has_armor,
    fleet_port_only_from_google,
    no_project_compute_admin_for_service_accounts,
    no_default_network,
    no_ssh_from_anywhere,
    secure_boot_on,
    valid_bucket_name,
    builder_not_default_account,
)
PROGRAM_RULES: tuple[ProgramRule, ...] = (
    autoscaler_needs_even_or_balanced,
    health_checks_admitted,
)


def check(
    resources: Iterable[Resource],
    ctx: PolicyContext,
    rules: Sequence[Rule] = RULES,
    program_rules: Sequence[ProgramRule] = PROGRAM_RULES,
) -> list[Violation]:
    listed = list(resources)
    found = [
        Violation(rule.__name__, f"{resource.type}::{resource.name}", message)
        for resource in listed
        for rule in rules
        for message in rule(resource, ctx)
    ]
    for program_rule in program_rules:
        found += [
            Violation(program_rule.__name__, f"{resource.type}::{resource.name}", message)
            for resource, message in program_rule(listed, ctx)
        ]
    return found
