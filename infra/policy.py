"""GCP's rules and our own, checked over the inputs the program gives each resource.

Neither the SDK nor a mocked deployment enforces any of these (the SDK checks only keyword
names), and GCE would reject several of them only at `pulumi up` time, mid-deployment, or
accept them silently (an open firewall, the default service account). Inputs use the wire
shape Pulumi sends to providers: camelCase keys, nested Args as dicts.

Pure Python with no Pulumi import: the tests run these rules over the mock-recorded resources,
and the policy pack (policy/pack.py, run by ``pulumi preview/up --policy-pack policy``) adapts the
engine's ResourceValidationArgs / StackValidationArgs to the same functions. Every rule carries the
link that states its constraint (``RULE_LINKS``); docs/limits.md tables them.
"""

from __future__ import annotations

import ipaddress
import json
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
# Shapes that leave zones uneven (proactive redistribution must be off: BALANCED and
# ANY_SINGLE_ZONE where the hardware is not in every zone, ANY always), and the shapes an
# autoscaler works with. https://cloud.google.com/compute/docs/instance-groups/regional-mig-set-target-distribution-shape
UNEVEN_SHAPES = {"BALANCED", "ANY", "ANY_SINGLE_ZONE"}
AUTOSCALER_SHAPES = {"EVEN", "BALANCED"}


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


class Unknown:
    """A value the engine does not know yet. Any use of it (truth, comparison, text, iteration)
    raises UnknownInput, so a rule that needs it is skipped for that resource instead of judging a
    placeholder; rules that only look for strings (``_strings``) pass over it."""

    def _unknown(self, *_: Any, **__: Any) -> Any:
        raise UnknownInput

    __bool__ = __eq__ = __ne__ = __lt__ = __le__ = __gt__ = __ge__ = _unknown
    __str__ = __iter__ = __len__ = __getitem__ = __contains__ = __int__ = __float__ = _unknown
    __hash__ = None  # type: ignore[assignment]

    def __getattr__(self, name: str) -> Any:
        raise UnknownInput

    def __repr__(self) -> str:
        return "<unknown>"


def urn_type(urn: str) -> str:
    """The resource's own type token in a URN (``urn:pulumi:stack::project::parent$type::name``)."""
    parts = urn.split("::")
    return parts[2].rsplit("$", 1)[-1] if len(parts) >= 4 else ""


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
    # More than one server behind the load balancer (infra/fleet.py): 8080 then admits only Google.
    fleet: bool = False
    # Why a VM may run with secure boot off (infra/shielded.py); empty: no exception.
    secure_boot_exception: str = field(default_factory=_documented_secure_boot_exception)
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


# --- Issue 20: the limits of every feature the program relies on (docs/limits.md) -------

CUSTOM_ROLE = "gcp:projects/iAMCustomRole:IAMCustomRole"
SERVICE_ACCOUNT = "gcp:serviceaccount/account:Account"
SECRET = "gcp:secretmanager/secret:Secret"  # noqa: S105 (a type token)
CLOUD_RUN_SERVICE = "gcp:cloudrunv2/service:Service"
DASHBOARD = "gcp:monitoring/dashboard:Dashboard"
_RFC1035 = re.compile(r"^[a-z]([-a-z0-9]*[a-z0-9])?$")


def _bad_gce_name(name: str, most: int) -> bool:
    """Not a GCE name: at most ``most`` characters, RFC 1035 (a lowercase letter, then letters,
    digits and '-', not ending in '-')."""
    return len(name) > most or not _RFC1035.match(name)


MAX_GCE_NAME = 63
# GCE appends "-" and four characters to a group's baseInstanceName (REST instanceGroupManagers).
MAX_BASE_INSTANCE_NAME = 58
# The provider's name_prefix takes up to 54 characters, but past 37 it appends a shortened suffix
# "more prone to collisions" (pulumi-gcp RegionInstanceTemplate.name_prefix, from
# terraform-provider-google-beta): a replacement template could then clash with the old one.
MAX_NAME_PREFIX = 37
# https://cloud.google.com/compute/docs/labeling-resources#requirements (ASCII here: GCE also
# takes international lowercase letters, which no name of ours uses).
MAX_LABELS = 64
_LABEL_KEY = re.compile(r"^[a-z][a-z0-9_-]{0,62}$")
_LABEL_VALUE = re.compile(r"^[a-z0-9_-]{0,63}$")
# https://cloud.google.com/compute/docs/metadata/setting-custom-metadata#limitations
MAX_METADATA_VALUE_BYTES = 256 * 1024
MAX_METADATA_TOTAL_BYTES = 512 * 1024
MAX_METADATA_KEY = 128
# Health checks default to 5 s each. https://cloud.google.com/compute/docs/reference/rest/v1/healthChecks
DEFAULT_HEALTH_CHECK_S = 5
# Soft delete: 0 (off) or 7-90 days. https://cloud.google.com/storage/docs/soft-delete
SOFT_DELETE_RANGE_S = (7 * 86400, 90 * 86400)
# https://cloud.google.com/iam/docs/service-accounts-create
_ACCOUNT_ID = re.compile(r"^[a-z][-a-z0-9]{4,28}[a-z0-9]$")
# https://cloud.google.com/secret-manager/docs/reference/rest/v1/projects.secrets/create (secretId)
_SECRET_ID = re.compile(r"^[A-Za-z0-9_-]{1,255}$")
# https://cloud.google.com/iam/docs/creating-custom-roles (role id, title)
_ROLE_ID = re.compile(r"^[A-Za-z0-9_.]{3,64}$")
MAX_ROLE_TITLE = 100
# Cloud Run: a request may last at most 60 minutes. https://cloud.google.com/run/docs/configuring/request-timeout
MAX_CLOUD_RUN_TIMEOUT_S = 3600
# Direct VPC egress reserves addresses in blocks of 16: the subnet must be /26 or larger.
# https://cloud.google.com/run/docs/configuring/vpc-direct-vpc
MAX_DIRECT_VPC_PREFIX = 26
# The front door's Cloud Run service is the one service named <deployment>-door (design decision 2).
DOOR_SUFFIX = "-door"
PUBLIC_MEMBERS = frozenset({"allUsers", "allAuthenticatedUsers"})
RUN_INVOKER = "roles/run.invoker"
# resource.name collections IAM evaluates in a condition, from the resource types on
# https://cloud.google.com/iam/docs/conditions-resource-attributes that this program can meet;
# instance group managers are not on that list (nor instance groups), so a condition naming one
# never matches and the grant is dead. A collection not listed here must be checked there first.
CONDITION_COLLECTIONS = frozenset(
    {"buckets", "objects", "secrets", "versions", "instances", "disks", "images", "firewalls",
     "forwardingRules", "backendServices", "keyRings", "cryptoKeys"}
)  # fmt: skip
UNCONDITIONABLE_COLLECTIONS = frozenset({"instanceGroupManagers", "instanceGroups", "autoscalers"})
_RESOURCE_NAME_LITERAL = re.compile(r'resource\.name\s*(?:==|\.\w+\()\s*"([^"]*)"')


def _show(value: Any) -> str:
    return "<unknown>" if isinstance(value, Unknown) else repr(value)


def _last(value: Any) -> str:
    return str(value).rstrip("/").rsplit("/", 1)[-1]


@_groups
def alternate_zone_repair_supported(inputs: Mapping[str, Any]) -> Iterator[str]:
    """Alternate-zone repair needs update on repair, a BALANCED or ANY shape, and no stateful
    configuration; otherwise GCE refuses the group or never repairs across zones."""
    lifecycle = inputs.get("instanceLifecyclePolicy") or {}
    if (lifecycle.get("onRepair") or {}).get("allowChangingZone") != "YES":
        return
    if lifecycle.get("forceUpdateOnRepair") != "YES":
        yield "onRepair.allowChangingZone YES needs instanceLifecyclePolicy.forceUpdateOnRepair YES"
    shape = inputs.get("distributionPolicyTargetShape") or "EVEN"
    if shape not in {"BALANCED", "ANY"}:
        yield f"onRepair.allowChangingZone YES needs the shape BALANCED or ANY, not {shape}"
    stateful = [
        key for key in ("statefulExternalIps", "statefulInternalIps", "statefulDisks") if inputs.get(key)
    ]
    if stateful:
        yield f"alternate-zone repair is not supported with stateful configuration ({', '.join(stateful)})"


@_groups
def regional_update_policy_fits_zones(inputs: Mapping[str, Any]) -> Iterator[str]:
    """A regional group's fixed maxSurge and maxUnavailable are each 0 or at least its number of
    zones, not both 0, and RECREATE needs maxSurge 0 (the default is the number of zones)."""
    zones = len(inputs.get("distributionPolicyZones") or [])
    update = inputs.get("updatePolicy") or {}
    if not zones or not update:
        return
    surge, unavailable = update.get("maxSurgeFixed"), update.get("maxUnavailableFixed")
    for key, value in (("maxSurgeFixed", surge), ("maxUnavailableFixed", unavailable)):
        if value is not None and value != 0 and value < zones:
            yield f"updatePolicy.{key} {value:g} is neither 0 nor at least the group's {zones} zones"
    if surge == 0 and unavailable == 0:
        yield "updatePolicy: maxSurgeFixed and maxUnavailableFixed cannot both be 0"
    if update.get("replacementMethod") == "RECREATE" and surge != 0:
        shown = "the default (the number of zones)" if surge is None else f"{surge:g}"
        yield f"replacementMethod RECREATE needs maxSurgeFixed 0, not {shown}"


@_groups
def uneven_shape_single_version(inputs: Mapping[str, Any]) -> Iterator[str]:
    """BALANCED, ANY and ANY_SINGLE_ZONE groups do not support canary updates (two versions)."""
    shape = inputs.get("distributionPolicyTargetShape") or "EVEN"
    versions = inputs.get("versions") or []
    if shape in UNEVEN_SHAPES and len(versions) > 1:
        yield f"shape {shape} does not support {len(versions)} versions (canary updates)"


@_groups
def base_instance_name_valid(inputs: Mapping[str, Any]) -> Iterator[str]:
    """A group's baseInstanceName is an RFC 1035 name of at most 58 characters."""
    base = inputs.get("baseInstanceName")
    if not isinstance(base, str):
        return
    if _bad_gce_name(base, MAX_BASE_INSTANCE_NAME):
        yield f"baseInstanceName {base!r} is not RFC 1035 of at most {MAX_BASE_INSTANCE_NAME} characters"


def gce_names_valid(resource: Resource, _: PolicyContext) -> Iterator[str]:
    """Compute Engine names are RFC 1035 names of 1-63 characters; a template's namePrefix at most 37."""
    if not resource.type.startswith("gcp:compute/"):
        return
    name = resource.inputs.get("name")
    if isinstance(name, str) and _bad_gce_name(name, MAX_GCE_NAME):
        yield f"name {name!r} is not an RFC 1035 name of 1-{MAX_GCE_NAME} characters"
    prefix = resource.inputs.get("namePrefix")
    if isinstance(prefix, str) and (
        len(prefix) > MAX_NAME_PREFIX or not re.match(r"^[a-z][-a-z0-9]*$", prefix)
    ):
        yield f"namePrefix {prefix!r} must be lowercase RFC 1035 and at most {MAX_NAME_PREFIX} characters"


def labels_valid(resource: Resource, _: PolicyContext) -> Iterator[str]:
    """Labels: at most 64; keys start with a lowercase letter; keys and values at most 63 of [a-z0-9_-]."""
    labels = resource.inputs.get("labels")
    if not isinstance(labels, Mapping):
        return
    if len(labels) > MAX_LABELS:
        yield f"{len(labels)} labels, more than {MAX_LABELS}"
    for key, value in labels.items():
        if not _LABEL_KEY.match(str(key)):
            yield f"label key {key!r} is not 1-63 of [a-z0-9_-] starting with a letter"
        if isinstance(value, str) and not _LABEL_VALUE.match(value):
            yield f"label {key}={value!r}: a value is at most 63 of [a-z0-9_-]"


@_instances
def network_tags_valid(inputs: Mapping[str, Any]) -> Iterator[str]:
    """Network tags are RFC 1035 names of 1-63 characters."""
    for tag in inputs.get("tags") or []:
        if isinstance(tag, str) and _bad_gce_name(tag, MAX_GCE_NAME):
            yield f"network tag {tag!r} is not an RFC 1035 name of 1-{MAX_GCE_NAME} characters"


@_instances
def metadata_within_limits(inputs: Mapping[str, Any]) -> Iterator[str]:
    """Metadata: keys up to 128 characters, each value up to 256 KB, all of it up to 512 KB."""
    metadata = inputs.get("metadata")
    if not isinstance(metadata, Mapping):
        return
    total = 0
    for key, value in metadata.items():
        if not isinstance(value, str):
            continue
        size = len(value.encode())
        total += size + len(str(key).encode())
        if len(str(key)) > MAX_METADATA_KEY or not re.match(r"^[A-Za-z0-9_-]+$", str(key)):
            yield f"metadata key {key!r} is not 1-{MAX_METADATA_KEY} of [A-Za-z0-9_-]"
        if size > MAX_METADATA_VALUE_BYTES:
            yield f"metadata {key} is {size} bytes, over the {MAX_METADATA_VALUE_BYTES}-byte limit of a value"
    if total > MAX_METADATA_TOTAL_BYTES:
        yield f"metadata totals {total} bytes, over GCE's {MAX_METADATA_TOTAL_BYTES}"


def health_check_timeout_within_interval(resource: Resource, _: PolicyContext) -> Iterator[str]:
    """A health check's timeoutSec may not exceed its checkIntervalSec (both default to 5 s)."""
    if resource.type != HEALTH_CHECK:
        return
    timeout = resource.inputs.get("timeoutSec") or DEFAULT_HEALTH_CHECK_S
    interval = resource.inputs.get("checkIntervalSec") or DEFAULT_HEALTH_CHECK_S
    if timeout > interval:
        yield f"timeoutSec {timeout:g} is greater than checkIntervalSec {interval:g}"


def soft_delete_retention_valid(resource: Resource, _: PolicyContext) -> Iterator[str]:
    """A bucket's soft-delete retention is 0 (off) or between 7 and 90 days."""
    if resource.type != BUCKET:
        return
    seconds = (resource.inputs.get("softDeletePolicy") or {}).get("retentionDurationSeconds")
    low, high = SOFT_DELETE_RANGE_S
    if seconds is not None and seconds != 0 and not low <= seconds <= high:
        yield f"softDeletePolicy.retentionDurationSeconds {seconds:g} is neither 0 nor {low}-{high}"


def service_account_id_valid(resource: Resource, _: PolicyContext) -> Iterator[str]:
    """A service account id is 6-30 characters of [a-z0-9-], starting with a letter, not ending with '-'."""
    account_id = resource.inputs.get("accountId") if resource.type == SERVICE_ACCOUNT else None
    if isinstance(account_id, str) and not _ACCOUNT_ID.match(account_id):
        yield f"accountId {account_id!r} is not 6-30 characters of [a-z0-9-] starting with a letter"


def secret_id_valid(resource: Resource, _: PolicyContext) -> Iterator[str]:
    """A Secret Manager secret id is 1-255 characters of [A-Za-z0-9_-]."""
    secret_id = resource.inputs.get("secretId") if resource.type == SECRET else None
    if isinstance(secret_id, str) and not _SECRET_ID.match(secret_id):
        yield f"secretId {secret_id!r} is not 1-255 characters of [A-Za-z0-9_-]"


def custom_role_valid(resource: Resource, _: PolicyContext) -> Iterator[str]:
    """A custom role: id of 3-64 characters of [A-Za-z0-9_.], a title of at most 100, some permissions."""
    if resource.type != CUSTOM_ROLE:
        return
    role_id, title = resource.inputs.get("roleId"), resource.inputs.get("title")
    if isinstance(role_id, str) and not _ROLE_ID.match(role_id):
        yield f"roleId {role_id!r} is not 3-64 characters of [A-Za-z0-9_.]"
    if isinstance(title, str) and len(title) > MAX_ROLE_TITLE:
        yield f"title is {len(title)} characters, over {MAX_ROLE_TITLE}"
    if not resource.inputs.get("permissions"):
        yield "a custom role needs at least one permission"


def custom_role_id_not_fixed(resource: Resource, _: PolicyContext) -> Iterator[str]:
    """A custom role's id comes from a random resource: IAM keeps a deleted role's id for up to 37
    days (7 soft-deleted, then up to 30 more), so a fixed per-stack id fails a redeploy in that window."""
    if resource.type != CUSTOM_ROLE:
        return
    sources = resource.property_dependencies.get("roleId") or ()
    if not any(urn_type(urn).startswith("random:") for urn in sources):
        role_id = _show(resource.inputs.get("roleId"))
        yield f"roleId {role_id} is fixed per stack; derive it from a random resource"


def _conditions(resource: Resource) -> Iterator[str]:
    kind = resource.type.rsplit(":", 1)[-1].lower()
    if kind.endswith(("iammember", "iambinding")):
        condition = resource.inputs.get("condition")
        if condition:
            yield str((condition or {}).get("expression") or "")


def iam_conditions_on_supported_types(resource: Resource, _: PolicyContext) -> Iterator[str]:
    """An IAM condition on resource.name names only resource types IAM evaluates attributes for;
    instance group managers are not among them, so such a grant never matches."""
    for expression in _conditions(resource):
        for literal in _RESOURCE_NAME_LITERAL.findall(expression):
            segments = set(literal.split("/"))
            bad = sorted(segments & UNCONDITIONABLE_COLLECTIONS)
            if bad:
                yield f"the condition names {', '.join(bad)}, which IAM conditions cannot match"
            elif not segments & CONDITION_COLLECTIONS:
                yield f"resource.name {literal!r} names no resource type known to support conditions"


def _grants(resource: Resource) -> Iterator[tuple[str, str]]:
    """(role, member) pairs of an IAM member, binding or policy resource of any service."""
    kind = resource.type.rsplit(":", 1)[-1].lower()
    role = str(resource.inputs.get("role") or "")
    if kind.endswith("iammember"):
        yield role, str(resource.inputs.get("member") or "")
    elif kind.endswith("iambinding"):
        yield from ((role, str(m)) for m in resource.inputs.get("members") or [])
    elif kind.endswith("iampolicy"):
        data = resource.inputs.get("policyData")
        document = json.loads(data) if isinstance(data, str) else {}
        for binding in document.get("bindings") or []:
            yield from ((str(binding.get("role")), str(m)) for m in binding.get("members") or [])


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
    own service account, deletion protection off (else `pulumi destroy` fails), and Direct VPC
    egress on one interface without a connector."""
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


def backend_port_name_on_group(
    resources: Sequence[Resource], _: PolicyContext
) -> Iterator[tuple[Resource, str]]:
    """A backend service's portName is a named port of each instance group it sends to."""
    ports = {
        r.inputs.get("name"): {p.get("name") for p in r.inputs.get("namedPorts") or []}
        for r in resources
        if r.type == GROUP
    }
    for backend in resources:
        if backend.type != BACKEND_SERVICE:
            continue
        port_name = backend.inputs.get("portName") or "http"
        for entry in backend.inputs.get("backends") or []:
            group = _last(entry.get("group") or "")
            if group in ports and port_name not in ports[group]:
                yield backend, f"portName {port_name!r} is not a named port of group {group}"


def no_out_of_band_template_switch(resource: Resource, _: PolicyContext) -> Iterator[str]:
    """No command moves a group to a template behind Pulumi's back: GCE refuses to delete a template
    a group uses and the provider does not retry, and the group's fingerprint drifts (design decision 4)."""
    if resource.type == LOCAL_COMMAND and "set-instance-template" in str(resource.inputs.get("create") or ""):
        yield "a local command sets the group's template outside Pulumi; declare it on the group"


def _changed_outside(resources: Sequence[Resource]) -> list[Resource]:
    """Groups that something besides Pulumi changes: an ignored size, an autoscaler, a command."""
    groups = [r for r in resources if r.type == GROUP]
    commands = " ".join(str(r.inputs.get("create") or "") for r in resources if r.type == LOCAL_COMMAND)
    scaled = {_last(r.inputs.get("target") or "") for r in resources if r.type == AUTOSCALER}
    return [
        g
        for g in groups
        if "targetSize" in g.ignore_changes
        or g.inputs.get("name") in scaled
        or ("instance-groups managed" in commands and str(g.inputs.get("name")) in commands)
    ]


def refresh_before_update(
    resources: Sequence[Resource], ctx: PolicyContext
) -> Iterator[tuple[Resource, str]]:
    """A group changed outside Pulumi needs `options: refresh: always` in Pulumi.yaml: the provider
    sends the group's fingerprint from the state with each PATCH, and a stale one gets 412."""
    changed = _changed_outside(resources)
    if not changed:
        return
    if ctx.project_options is None:
        raise UnknownInput
    if str(ctx.project_options.get("refresh") or "") != "always":
        for group in changed:
            yield (
                group,
                "changes outside Pulumi; Pulumi.yaml needs options: refresh: always (stale fingerprint: 412)",
            )


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
    alternate_zone_repair_supported,
    regional_update_policy_fits_zones,
    uneven_shape_single_version,
    base_instance_name_valid,
    gce_names_valid,
    labels_valid,
    network_tags_valid,
    metadata_within_limits,
    health_check_timeout_within_interval,
    soft_delete_retention_valid,
    service_account_id_valid,
    secret_id_valid,
    custom_role_valid,
    custom_role_id_not_fixed,
    iam_conditions_on_supported_types,
    cloud_run_service_limits,
    no_out_of_band_template_switch,
    dashboard_json_valid,
)
PROGRAM_RULES: tuple[ProgramRule, ...] = (
    autoscaler_needs_even_or_balanced,
    health_checks_admitted,
    unauthenticated_only_on_door,
    direct_vpc_subnet_fits,
    door_port_only_from_door,
    subnets_do_not_overlap,
    backend_port_name_on_group,
    refresh_before_update,
)
# Rules that need more than one resource's inputs in the pack: the secret values (RandomPassword's
# result), the stack's size (fleet), or the resources an input was computed from (property
# dependencies, which ResourceValidationArgs lacks). policy/pack.py runs them over the whole stack.
STACK_LEVEL_RULES = frozenset(
    {"secret_stays_secret", "fleet_port_only_from_google", "custom_role_id_not_fixed"}
)

COMPUTE_REST = "https://cloud.google.com/compute/docs/reference/rest/v1"
MIG_DOCS = "https://cloud.google.com/compute/docs/instance-groups"
# The document that states each rule's constraint (docs/limits.md tables them with the reasons).
RULE_LINKS: Mapping[str, str] = {
    "spot_is_preemptible_without_restart": "https://cloud.google.com/compute/docs/instances/create-use-spot",
    "gpu_terminates_on_maintenance": "https://cloud.google.com/compute/docs/gpus/gpu-host-maintenance",
    "shielded_vm_on": "https://cloud.google.com/compute/shielded-vm/docs/shielded-vm",
    "own_service_account": "https://cloud.google.com/compute/docs/access/service-accounts#default_service_account",
    "no_open_firewall": "https://cloud.google.com/vpc/docs/firewalls#firewall_rule_components",
    "private_bucket": "https://cloud.google.com/storage/docs/public-access-prevention",
    "secret_stays_secret": "https://cloud.google.com/compute/docs/metadata/overview",
    "uneven_shape_needs_no_redistribution": f"{MIG_DOCS}/regional-mig-set-target-distribution-shape",
    "autohealing_delay_in_range": f"{MIG_DOCS}/autohealing-instances-in-migs",
    "backend_timeout_covers_generation": "https://cloud.google.com/load-balancing/docs/backend-service#timeout-setting",
    "autoscaler_waits_for_cold_start": "https://cloud.google.com/compute/docs/autoscaler/understanding-autoscaler-decisions",
    "public_backend_has_armor": "https://cloud.google.com/armor/docs/security-policy-overview",
    "fleet_port_only_from_google": "https://cloud.google.com/load-balancing/docs/firewall-rules",
    "no_project_compute_admin_for_service_accounts": "https://cloud.google.com/compute/docs/access/iam#predefined_roles",
    "no_default_network": "https://cloud.google.com/vpc/docs/vpc#default-network",
    "no_ssh_from_anywhere": "https://cloud.google.com/iap/docs/using-tcp-forwarding#create-firewall-rule",
    "secure_boot_on": "https://cloud.google.com/compute/docs/gpus/install-drivers-gpu#secure-boot",
    "valid_bucket_name": "https://cloud.google.com/storage/docs/buckets#naming",
    "builder_not_default_account": "https://cloud.google.com/compute/docs/access/service-accounts#default_service_account",
    "alternate_zone_repair_supported": f"{MIG_DOCS}/repair-vm-in-alternate-zone",
    "regional_update_policy_fits_zones": f"{MIG_DOCS}/regional-mig-updates",
    "uneven_shape_single_version": f"{MIG_DOCS}/regional-mig-set-target-distribution-shape",
    "base_instance_name_valid": f"{COMPUTE_REST}/regionInstanceGroupManagers",
    "gce_names_valid": "https://cloud.google.com/compute/docs/naming-resources",
    "labels_valid": "https://cloud.google.com/compute/docs/labeling-resources#requirements",
    "network_tags_valid": "https://cloud.google.com/vpc/docs/add-remove-network-tags",
    "metadata_within_limits": "https://cloud.google.com/compute/docs/metadata/setting-custom-metadata#limitations",
    "health_check_timeout_within_interval": f"{COMPUTE_REST}/healthChecks",
    "soft_delete_retention_valid": "https://cloud.google.com/storage/docs/soft-delete",
    "service_account_id_valid": "https://cloud.google.com/iam/docs/service-accounts-create",
    "secret_id_valid": "https://cloud.google.com/secret-manager/docs/reference/rest/v1/projects.secrets/create",
    "custom_role_valid": "https://cloud.google.com/iam/docs/creating-custom-roles",
    "custom_role_id_not_fixed": "https://cloud.google.com/iam/docs/creating-custom-roles#deleting-custom-role",
    "iam_conditions_on_supported_types": "https://cloud.google.com/iam/docs/conditions-resource-attributes",
    "cloud_run_service_limits": "https://cloud.google.com/run/docs/configuring/request-timeout",
    "no_out_of_band_template_switch": f"{COMPUTE_REST}/instanceTemplates/delete",
    "dashboard_json_valid": "https://cloud.google.com/monitoring/api/ref_v3/rest/v1/projects.dashboards",
    "autoscaler_needs_even_or_balanced": f"{MIG_DOCS}/regional-mig-set-target-distribution-shape",
    "health_checks_admitted": "https://cloud.google.com/load-balancing/docs/health-check-concepts#ip-ranges",
    "unauthenticated_only_on_door": "https://cloud.google.com/run/docs/authenticating/public",
    "direct_vpc_subnet_fits": "https://cloud.google.com/run/docs/configuring/vpc-direct-vpc",
    "door_port_only_from_door": "https://cloud.google.com/run/docs/configuring/vpc-direct-vpc",
    "subnets_do_not_overlap": "https://cloud.google.com/vpc/docs/subnets#valid-ranges",
    "backend_port_name_on_group": "https://cloud.google.com/load-balancing/docs/backend-service#named_ports",
    "refresh_before_update": "https://www.pulumi.com/docs/iac/concepts/projects/project-file/",
}


def describe(rule: Callable[..., Any]) -> str:
    """A rule's one-line description: its docstring's first sentence, or its name."""
    doc = " ".join((rule.__doc__ or "").split())
    return doc or rule.__name__.replace("_", " ")


def run_rule(rule: Rule, resource: Resource, ctx: PolicyContext) -> tuple[list[str], bool]:
    """The rule's messages for one resource, and whether it stopped at a value not known yet."""
    messages: list[str] = []
    try:
        messages.extend(rule(resource, ctx))
    except UnknownInput:
        return messages, True
    return messages, False


def run_program_rule(
    rule: ProgramRule, resources: Sequence[Resource], ctx: PolicyContext
) -> tuple[list[tuple[Resource, str]], bool]:
    found: list[tuple[Resource, str]] = []
    try:
        found.extend(rule(resources, ctx))
    except UnknownInput:
        return found, True
    return found, False


def check(
    resources: Iterable[Resource],
    ctx: PolicyContext,
    rules: Sequence[Rule] = RULES,
    program_rules: Sequence[ProgramRule] = PROGRAM_RULES,
    skipped: list[str] | None = None,
) -> list[Violation]:
    """Every violation; ``skipped`` collects ``rule resource`` pairs that met a value not known yet."""
    listed = list(resources)
    found: list[Violation] = []
    for resource in listed:
        for rule in rules:
            messages, unknown = run_rule(rule, resource, ctx)
            found += [Violation(rule.__name__, f"{resource.type}::{resource.name}", m) for m in messages]
            if unknown and skipped is not None:
                skipped.append(f"{rule.__name__} {resource.type}::{resource.name}")
    for program_rule in program_rules:
        pairs, unknown = run_program_rule(program_rule, listed, ctx)
        found += [Violation(program_rule.__name__, f"{r.type}::{r.name}", m) for r, m in pairs]
        if unknown and skipped is not None:
            skipped.append(program_rule.__name__)
    return found
