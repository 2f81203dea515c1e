"""GCE's rules for the VMs, their template, the regional group and its autoscaler and health check."""

from __future__ import annotations

import re
import shlex
from collections.abc import Callable, Iterator, Mapping, Sequence
from typing import Any

from infra import fleet_bounds
from infra.policy.core import (
    _VMS,
    BACKEND_SERVICE,
    DEFAULT_SA_SUFFIX,
    HEALTH_CHECK,
    LOCAL_COMMAND,
    PolicyContext,
    Resource,
    Rule,
    UnknownInput,
    _instances,
    _last,
)
from infra.policy.names import _bad_gce_name

GROUP = "gcp:compute/regionInstanceGroupManager:RegionInstanceGroupManager"
AUTOSCALER = "gcp:compute/regionAutoscaler:RegionAutoscaler"
REGION_AUTOSCALER = "gcp:compute/regionAutoscaler:RegionAutoscaler"
# https://cloud.google.com/compute/docs/instance-groups/autohealing-instances-in-migs
MAX_INITIAL_DELAY_S = 3600
# Shapes that leave zones uneven (proactive redistribution must be off: BALANCED and
# ANY_SINGLE_ZONE where the hardware is not in every zone, ANY always), and the shapes an
# autoscaler works with. https://cloud.google.com/compute/docs/instance-groups/regional-mig-set-target-distribution-shape
UNEVEN_SHAPES = {"BALANCED", "ANY", "ANY_SINGLE_ZONE"}
AUTOSCALER_SHAPES = {"EVEN", "BALANCED"}


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


def _builder_create(resource: Resource) -> list[str] | None:
    """The argv of a local command's ``gcloud compute instances create``, if it has one."""
    if resource.type != LOCAL_COMMAND:
        return None
    for line in str(resource.inputs.get("create") or "").splitlines():
        if "gcloud compute instances create" in line:
            return shlex.split(line.strip())
    return None


# The label a VM with Secure Boot off carries its reason in (infra/shielded.py OFF_LABEL).
SECURE_BOOT_OFF_LABEL = "secure-boot-off"


def secure_boot_on(resource: Resource, ctx: PolicyContext) -> Iterator[str]:
    """Shielded VMs boot with Secure Boot, unless the bake's recorded reason says why not (the
    template's `secure-boot-off` label, a reason of infra/shielded.py); the bake's own VMs always do."""
    argv = _builder_create(resource)
    if argv is not None and "--shielded-secure-boot" not in argv:
        yield "gcloud compute instances create without --shielded-secure-boot"
    if resource.type not in _VMS:
        return
    shielded = resource.inputs.get("shieldedInstanceConfig") or {}
    if shielded.get("enableSecureBoot") is True:
        return
    reason = (resource.inputs.get("labels") or {}).get(SECURE_BOOT_OFF_LABEL)
    if reason not in ctx.secure_boot_reasons:
        yield (
            f"Secure Boot is off without a recorded reason (label {SECURE_BOOT_OFF_LABEL}={reason!r}; "
            f"the reasons are infra/shielded.py's OFF_REASONS)"
        )


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


# GCE appends "-" and four characters to a group's baseInstanceName (REST instanceGroupManagers).
MAX_BASE_INSTANCE_NAME = 58
# https://cloud.google.com/compute/docs/metadata/setting-custom-metadata#limitations
MAX_METADATA_VALUE_BYTES = 256 * 1024
MAX_METADATA_TOTAL_BYTES = 512 * 1024
MAX_METADATA_KEY = 128
# Health checks default to 5 s each. https://cloud.google.com/compute/docs/reference/rest/v1/healthChecks
DEFAULT_HEALTH_CHECK_S = 5


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
