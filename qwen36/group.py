"""The server group as the deployer sees it through the Compute API: members, errors, one member's report.

Members of a regional managed instance group get new names or zones on repair, so everything that
reaches "the server" first asks the group which member is current (``find_member``). The group's
errors come from two documented places: ``regionInstanceGroupManagers.listErrors`` (a history of
failed actions) and each managed instance's ``lastAttempt.errors`` from ``listManagedInstances``.
https://cloud.google.com/compute/docs/reference/rest/v1/regionInstanceGroupManagers/listErrors
https://cloud.google.com/compute/docs/reference/rest/v1/regionInstanceGroupManagers/listManagedInstances
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any, Protocol

from infra import boot_protocol
from qwen36.errors import NotFoundError, UsageError

# Short enough that a hung API call cannot stretch a bounded wait much past its deadline.
COMPUTE_REQUEST_TIMEOUT_S = 15.0
SERIAL_PORT = 1
# The server container's name on every member (startup/boot.sh's CONTAINER_NAME).
CONTAINER_NAME = "llama-server"

STOCKOUT_CODES = ("ZONE_RESOURCE_POOL_EXHAUSTED", "ZONE_RESOURCE_POOL_EXHAUSTED_WITH_DETAILS")
QUOTA_CODE = "QUOTA_EXCEEDED"
# A member is "the server" once GCE reports it RUNNING; other states mean it is coming or going.
RUNNING = "RUNNING"

_ZONE_IN_URL = re.compile(r"zones/([a-z]+-[a-z]+[0-9]+-[a-z])\b")
_NAME_IN_URL = re.compile(r"/instances/([a-z0-9-]+)$")
# GCE's quota message, e.g. "Quota 'PREEMPTIBLE_NVIDIA_L4_GPUS' exceeded.  Limit: 0.0 in region us-central1."
_QUOTA_MESSAGE = re.compile(
    r"Quota '(?P<metric>[A-Z0-9_]+)' exceeded.*?(?:in region (?P<region>[a-z0-9-]+))?\.?$"
)
# ..._WITH_DETAILS names the zones that do have capacity, in errorInfo.metadatas or in its message.
_ZONES_AVAILABLE_KEY = "zonesAvailable"


# A project id: 6 to 30 lowercase letters, digits and hyphens, starting with a letter, not ending in a
# hyphen (https://cloud.google.com/resource-manager/docs/creating-managing-projects#before_you_begin);
# a legacy domain-scoped project has its domain and a colon before it (`example.com:my-project`,
# https://cloud.google.com/compute/docs/naming-resources, "Domain-scoped projects").
PROJECT_ID = re.compile(r"(?:[a-z0-9][a-z0-9.-]{0,62}:)?[a-z][a-z0-9-]{4,28}[a-z0-9]")
# What the group's readers need of it: only a project id's characters, so that it cannot change the
# request's path (their tests' fakes use short ids such as "proj").
PROJECT_CHARS = re.compile(r"(?:[a-z0-9][a-z0-9.-]{0,62}:)?[a-z](?:[a-z0-9-]{0,28}[a-z0-9])?")
# Regions, zones, groups and instances: RFC 1035 labels of at most 63 characters
# (https://cloud.google.com/compute/docs/naming-resources#resource-name-format). Checked before a name
# goes into a request's URL path, where `../` would name another resource.
GCE_NAME = re.compile(r"[a-z](?:[-a-z0-9]{0,61}[a-z0-9])?")


def project_problem(value: str, *, strict: bool = True) -> str:
    """Why ``value`` is not a project id (``strict``: the documented rule, length included; else only
    its characters), or ""."""
    if (PROJECT_ID if strict else PROJECT_CHARS).fullmatch(value):
        return ""
    return (
        f"{value!r} is not a project id (6-30 lowercase letters, digits and hyphens, starting with a "
        "letter; https://cloud.google.com/resource-manager/docs/creating-managing-projects)"
    )


def name_problem(value: str) -> str:
    """Why ``value`` is not a Compute Engine name, or ""."""
    if GCE_NAME.fullmatch(value):
        return ""
    return (
        f"{value!r} is not a Compute Engine name (lowercase letters, digits and '-', at most 63, "
        "starting with a letter; https://cloud.google.com/compute/docs/naming-resources)"
    )


class GroupNotFound(NotFoundError):
    """The group named does not exist (a wrong --project/--region/--group, or not deployed)."""


@dataclass(frozen=True)
class GroupTarget:
    """The group's coordinates, checked here, where every command that reads a group builds them
    (from its flags or the stack's outputs): a bad one is a usage error, not a request the client
    library refuses with a ValueError."""

    project: str
    region: str
    group: str

    def __post_init__(self) -> None:
        project = project_problem(self.project, strict=False)
        problems = [
            f"project {project}" if project else "",
            f"region {name_problem(self.region)}" if name_problem(self.region) else "",
            f"group {name_problem(self.group)}" if name_problem(self.group) else "",
        ]
        problem = next((p for p in problems if p), "")
        if problem:
            raise UsageError(f"{problem}; check --project, --region and --group (or the stack's outputs)")


@dataclass(frozen=True)
class Target:
    """One member VM, for its report, serial port and the commands that reach it."""

    project: str
    zone: str
    instance: str


@dataclass(frozen=True)
class GroupError:
    """One error GCE reported for the group or a member's last attempt."""

    code: str
    message: str
    zone: str = ""
    instance: str = ""
    timestamp: datetime | None = None
    quota_metric: str = ""
    quota_region: str = ""
    zones_available: tuple[str, ...] = ()

    @property
    def stockout(self) -> bool:
        return self.code in STOCKOUT_CODES

    @property
    def quota(self) -> bool:
        return self.code == QUOTA_CODE


@dataclass(frozen=True)
class Member:
    name: str
    zone: str
    status: str
    """GCE's instance status (RUNNING, PROVISIONING, STOPPING...); empty while the VM does not exist."""
    action: str
    """What the group is doing to it (NONE, CREATING, RECREATING, VERIFYING...)."""
    errors: tuple[GroupError, ...] = ()

    @property
    def running(self) -> bool:
        return self.status == RUNNING

    def target(self, project: str) -> Target:
        return Target(project=project, zone=self.zone, instance=self.name)


@dataclass(frozen=True)
class InstanceInfo:
    status: str
    last_start: datetime | None
    """``lastStartTimestamp``: reports written before it belong to an earlier start."""


class GroupReader(Protocol):
    def target_size(self, group: GroupTarget) -> int: ...
    def members(self, group: GroupTarget) -> list[Member]: ...
    def errors(self, group: GroupTarget) -> list[GroupError]: ...
    def instance(self, target: Target) -> InstanceInfo: ...
    def guest_attributes(self, target: Target) -> dict[str, str]: ...
    def serial_tail(self, target: Target, lines: int) -> list[str]: ...


def zone_of(url: str) -> str:
    match = _ZONE_IN_URL.search(url)
    return match[1] if match else ""


def name_of(url: str) -> str:
    match = _NAME_IN_URL.search(url)
    return match[1] if match else ""


def parse_time(value: str) -> datetime | None:
    """GCE's RFC 3339 timestamps (``2026-11-30T14:02:03.123-08:00``) as aware UTC datetimes."""
    if not value:
        return None
    try:
        return datetime.fromisoformat(value.replace("Z", "+00:00")).astimezone(UTC)
    except ValueError:
        return None


def group_error(
    code: str,
    message: str,
    *,
    instance_url: str = "",
    timestamp: str = "",
    details: list[dict[str, Any]] | None = None,
) -> GroupError:
    """A :class:`GroupError` from GCE's fields; quota metric and spare zones from details or message."""
    metric = region = ""
    available: tuple[str, ...] = ()
    for detail in details or []:
        quota = detail.get("quotaInfo") or {}
        if quota.get("metricName"):
            metric = str(quota.get("limitName") or quota["metricName"])
            region = str((quota.get("dimensions") or {}).get("region", ""))
        zones = ((detail.get("errorInfo") or {}).get("metadatas") or {}).get(_ZONES_AVAILABLE_KEY)
        if zones:
            available = tuple(z.strip() for z in str(zones).split(",") if z.strip())
    if code == QUOTA_CODE:
        match = _QUOTA_MESSAGE.search(message.strip())
        if match:
            metric = match["metric"]
            region = match["region"] or region
    zone = zone_of(instance_url) or zone_of(message)
    return GroupError(
        code=code,
        message=" ".join(message.split()),
        zone=zone,
        instance=name_of(instance_url),
        timestamp=parse_time(timestamp),
        quota_metric=metric,
        quota_region=region,
        zones_available=available,
    )


def find_member(members: list[Member]) -> Member | None:
    """The member to follow: a RUNNING one first, else the one the group is bringing up."""
    running = [m for m in members if m.running]
    if running:
        return sorted(running, key=lambda m: m.name)[0]
    named = [m for m in members if m.name]
    return sorted(named, key=lambda m: m.name)[0] if named else None


def current_report(
    attrs: dict[str, str], last_start: datetime | None
) -> tuple[boot_protocol.Report | None, str]:
    """The member's report if it was written during its current start, else None and why.

    A report's time has whole seconds, so it is compared with the start truncated to the second.
    """
    value = attrs.get(boot_protocol.KEY_REPORT)
    if not value:
        return None, "the VM has not reported yet"
    try:
        report = boot_protocol.parse_report(value)
    except boot_protocol.ReportFormatError as exc:
        return None, f"unreadable report ignored: {exc}"
    if last_start is not None and report.time < last_start.replace(microsecond=0):
        stamp = report.time.strftime("%H:%M:%SZ")
        started = last_start.strftime("%H:%M:%SZ")
        return None, (
            f"ignored a stale '{report.phase}' report from {stamp} (boot {report.boot_id}), "
            f"before this member's last start at {started}"
        )
    return report, ""


class ComputeApiReader:
    """Reads the group and its members with google-cloud-compute (REST transport).

    ``api_endpoint`` points the clients elsewhere (a local server playing the Compute API in tests);
    ``credentials`` defaults to the deployer's application-default credentials.
    """

    def __init__(self, api_endpoint: str | None = None, credentials: Any = None) -> None:
        from google.api_core.client_options import ClientOptions
        from google.cloud import compute_v1

        from qwen36.retry import RetryingClient

        options = ClientOptions(api_endpoint=api_endpoint) if api_endpoint else None
        kwargs: dict[str, Any] = {"transport": "rest", "client_options": options, "credentials": credentials}
        # Every call read-only, each retried on a transient error within qwen36.retry's bounds.
        self._instances = RetryingClient(compute_v1.InstancesClient(**kwargs), "instances")
        self._groups = RetryingClient(
            compute_v1.RegionInstanceGroupManagersClient(**kwargs), "regionInstanceGroupManagers"
        )
        self._v1 = compute_v1

    def target_size(self, group: GroupTarget) -> int:
        manager = self._groups.get(
            project=group.project,
            region=group.region,
            instance_group_manager=group.group,
            timeout=COMPUTE_REQUEST_TIMEOUT_S,
        )
        return int(checked_group(manager, self._groups).target_size)

    def members(self, group: GroupTarget) -> list[Member]:
        from google.api_core import exceptions

        request = self._v1.ListManagedInstancesRegionInstanceGroupManagersRequest(
            project=group.project, region=group.region, instance_group_manager=group.group
        )
        try:
            pages = self._groups.list_managed_instances(request=request, timeout=COMPUTE_REQUEST_TIMEOUT_S)
            items = list(pages)
        except exceptions.NotFound as exc:
            raise GroupNotFound(
                f"no group {group.group} in {group.region} of {group.project}: check --project, --region "
                "and --group (or --stack), or deploy it with `pulumi up`"
            ) from exc
        members = []
        for item in items:
            url = item.instance
            errors = tuple(
                group_error(
                    e.code,
                    e.message,
                    instance_url=url,
                    details=[type(d).to_dict(d, preserving_proto_field_name=False) for d in e.error_details],
                )
                for e in item.last_attempt.errors.errors
            )
            members.append(
                Member(
                    name=item.name or name_of(url),
                    zone=zone_of(url),
                    status=item.instance_status if item.instance_status else "",
                    action=item.current_action,
                    errors=errors,
                )
            )
        return members

    def errors(self, group: GroupTarget) -> list[GroupError]:
        request = self._v1.ListErrorsRegionInstanceGroupManagersRequest(
            project=group.project, region=group.region, instance_group_manager=group.group
        )
        pages = self._groups.list_errors(request=request, timeout=COMPUTE_REQUEST_TIMEOUT_S)
        return [
            group_error(
                item.error.code,
                item.error.message,
                instance_url=item.instance_action_details.instance,
                timestamp=item.timestamp,
            )
            for item in pages
        ]

    def instance(self, target: Target) -> InstanceInfo:
        vm = self._instances.get(
            project=target.project,
            zone=target.zone,
            instance=target.instance,
            timeout=COMPUTE_REQUEST_TIMEOUT_S,
        )
        return InstanceInfo(status=str(vm.status), last_start=parse_time(vm.last_start_timestamp))

    def guest_attributes(self, target: Target) -> dict[str, str]:
        from google.api_core import exceptions

        request = self._v1.GetGuestAttributesInstanceRequest(
            project=target.project,
            zone=target.zone,
            instance=target.instance,
            query_path=f"{boot_protocol.NAMESPACE}/",
        )
        try:
            result = self._instances.get_guest_attributes(request=request, timeout=COMPUTE_REQUEST_TIMEOUT_S)
        except exceptions.NotFound:
            # Nothing written under the namespace yet: the VM has not reached its first report.
            return {}
        return {
            item.key: item.value
            for item in result.query_value.items
            if item.namespace == boot_protocol.NAMESPACE
        }

    def serial_tail(self, target: Target, lines: int) -> list[str]:
        request = self._v1.GetSerialPortOutputInstanceRequest(
            project=target.project, zone=target.zone, instance=target.instance, port=SERIAL_PORT
        )
        output = self._instances.get_serial_port_output(request=request, timeout=COMPUTE_REQUEST_TIMEOUT_S)
        return output.contents.splitlines()[-lines:]


def checked_group(manager: Any, client: Any) -> Any:
    """``manager`` if it is a group: every InstanceGroupManager carries its name (the resource,
    https://cloud.google.com/compute/docs/reference/rest/v1/regionInstanceGroupManagers); the library
    reads ``{}``, ``"text"`` or an object of unknown fields as an empty one, which would say size 0."""
    if str(getattr(manager, "name", "") or ""):
        return manager
    from qwen36.cloud_answers import not_the_api

    raise not_the_api(
        "the Compute API's regionInstanceGroupManagers.get", "the group's name", getattr(client, "last", None)
    )


class SingleVmReader:
    """One plain VM seen as a group of one (the tooling image's builder): the same wait serves both."""

    def __init__(self, reader: GroupReader, vm: Target) -> None:
        self._reader = reader
        self._vm = vm

    def target_size(self, group: GroupTarget) -> int:
        return 1

    def members(self, group: GroupTarget) -> list[Member]:
        from google.api_core import exceptions

        try:
            status = self._reader.instance(self._vm).status
        except exceptions.NotFound:
            return []
        return [Member(name=self._vm.instance, zone=self._vm.zone, status=status, action="NONE")]

    def errors(self, group: GroupTarget) -> list[GroupError]:
        return []

    def instance(self, target: Target) -> InstanceInfo:
        return self._reader.instance(target)

    def guest_attributes(self, target: Target) -> dict[str, str]:
        return self._reader.guest_attributes(target)

    def serial_tail(self, target: Target, lines: int) -> list[str]:
        return self._reader.serial_tail(target, lines)
