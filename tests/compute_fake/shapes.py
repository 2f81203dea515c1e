"""The Compute API's answers, each in the documented shape of its method (the reference page is cited
at each), built from a fake group's state."""

from __future__ import annotations

from typing import Any

from infra import boot_protocol
from tests.compute_fake.clock import EPOCH, at, rfc3339
from tests.compute_fake.group import LINK_HOST, PREFIX, FakeGroup, FakeMember, GroupState

GROUP_ID = "4102349781350275419"
STOCKOUT_MESSAGE = (
    "The zone 'projects/{project}/zones/{zone}' does not have enough resources available to fulfill "
    "the request.  Try a different zone, or try again later."
)
BACKEND_ERROR_MESSAGE = "Internal error. Please try again or contact Google Support."


def error(status: int, reason: str, message: str) -> dict[str, Any]:
    # The JSON error body of Google APIs: https://cloud.google.com/apis/design/errors#http_mapping
    # (Compute's errors: https://cloud.google.com/compute/docs/reference/rest/v1)
    return {"error": {"code": status, "message": message, "errors": [{"reason": reason}]}}


def not_found(what: str) -> dict[str, Any]:
    return error(404, "notFound", f"The resource '{what}' was not found")


def instance_group_manager(group: FakeGroup, state: GroupState) -> dict[str, Any]:
    # https://cloud.google.com/compute/docs/reference/rest/v1/regionInstanceGroupManagers#resource:-instancegroupmanager
    actions = {
        a: sum(m.action == a.upper() for m in state.members)
        for a in ("none", "creating", "recreating", "deleting", "verifying")
    }
    return {
        "kind": "compute#instanceGroupManager",
        "id": GROUP_ID,
        "name": group.name,
        "region": LINK_HOST + group.region_path,
        "baseInstanceName": group.name,
        "targetSize": state.target_size,
        "currentActions": actions,
        "status": {"isStable": all(m.action == "NONE" for m in state.members)},
        "selfLink": LINK_HOST + group.path,
    }


def managed_instances(group: FakeGroup, members: list[FakeMember]) -> dict[str, Any]:
    # https://cloud.google.com/compute/docs/reference/rest/v1/regionInstanceGroupManagers/listManagedInstances
    # managedInstances[]: {instance, id, instanceStatus, currentAction, name, version, lastAttempt}
    items = []
    for i, member in enumerate(members):
        item: dict[str, Any] = {
            "instance": LINK_HOST + group.instance_path(member),
            "id": str(1000 + i),
            "currentAction": member.action,
            "name": member.name,
            "version": {"name": "primary"},
        }
        if member.status is not None:
            item["instanceStatus"] = member.status
        if member.last_attempt:
            item["lastAttempt"] = {"errors": {"errors": member.last_attempt}}
        items.append(item)
    return {"managedInstances": items}


def list_errors(items: list[dict[str, Any]]) -> dict[str, Any]:
    # https://cloud.google.com/compute/docs/reference/rest/v1/regionInstanceGroupManagers/listErrors
    return {"items": items}


def list_error(
    group: FakeGroup, member: FakeMember, code: str, message: str, seconds: float
) -> dict[str, Any]:
    # https://cloud.google.com/compute/docs/reference/rest/v1/regionInstanceGroupManagers/listErrors
    # items[]: {error: {code, message}, instanceActionDetails: {action, instance, version}, timestamp}
    return {
        "error": {"code": code, "message": message},
        "instanceActionDetails": {
            "action": "CREATING",
            "instance": LINK_HOST + group.instance_path(member),
            "version": {"instanceTemplate": f"{LINK_HOST}{group.region_path}/instanceTemplates/t-1"},
        },
        "timestamp": rfc3339(at(seconds)),
    }


def stockout(
    group: FakeGroup, member: FakeMember, seconds: float, *, zones_available: str = ""
) -> dict[str, Any]:
    code = "ZONE_RESOURCE_POOL_EXHAUSTED_WITH_DETAILS" if zones_available else "ZONE_RESOURCE_POOL_EXHAUSTED"
    message = STOCKOUT_MESSAGE.format(project=group.project, zone=member.zone)
    return list_error(group, member, code, message, seconds)


def attempt_error(code: str, message: str, details: list[dict[str, Any]] | None = None) -> dict[str, Any]:
    # lastAttempt.errors.errors[] is the Operation error shape:
    # https://cloud.google.com/compute/docs/reference/rest/v1/regionInstanceGroupManagers/listManagedInstances
    # errorDetails[] carry errorInfo {reason, domain, metadatas} and quotaInfo {metricName, limitName,
    # dimensions, limit}: https://cloud.google.com/compute/docs/reference/rest/v1/regionOperations
    error: dict[str, Any] = {"code": code, "message": message}
    if details:
        error["errorDetails"] = details
    return error


def quota_blocked_group(project: str, region: str = "us-central1") -> FakeGroup:
    """A group whose one member GCE cannot create for want of spot L4 quota (no status yet)."""
    message = f"Quota 'PREEMPTIBLE_NVIDIA_L4_GPUS' exceeded.  Limit: 0.0 in region {region}."
    member = FakeMember(
        "qwen36-ujzd",
        f"{region}-a",
        status=None,
        action="CREATING",
        last_attempt=[attempt_error("QUOTA_EXCEEDED", message)],
    )
    return FakeGroup(timeline=[(0.0, GroupState(members=[member]))], project=project, region=region)


def instance(group: FakeGroup, member: FakeMember) -> dict[str, Any]:
    # https://cloud.google.com/compute/docs/reference/rest/v1/instances/get
    # (status, lastStartTimestamp in RFC 3339 text; networkInterfaces[]: name, network, subnetwork,
    # networkIP (the internal IPv4 address), accessConfigs[] (the ephemeral external IP, natIP))
    return {
        "kind": "compute#instance",
        "name": member.name,
        "zone": LINK_HOST + group.zone_path(member.zone),
        "status": member.status,
        "lastStartTimestamp": rfc3339(at(member.started)),
        "networkInterfaces": [
            {
                "kind": "compute#networkInterface",
                "name": "nic0",
                "network": f"{LINK_HOST}{PREFIX}/projects/{group.project}/global/networks/{group.name}",
                "subnetwork": f"{LINK_HOST}{group.region_path}/subnetworks/{group.name}",
                "networkIP": member.network_ip,
                "accessConfigs": [
                    {
                        "kind": "compute#accessConfig",
                        "type": "ONE_TO_ONE_NAT",
                        "name": "External NAT",
                        "natIP": "203.0.113.7",
                        "networkTier": "PREMIUM",
                    }
                ],
            }
        ],
    }


def guest_attributes(query_path: str, attributes: dict[str, str]) -> dict[str, Any]:
    # https://cloud.google.com/compute/docs/reference/rest/v1/instances/getGuestAttributes
    # {kind, queryPath, queryValue: {items: [{namespace, key, value}]}}; 404 before any write.
    items = [{"namespace": boot_protocol.NAMESPACE, "key": k, "value": v} for k, v in attributes.items()]
    return {"kind": "compute#guestAttributes", "queryPath": query_path, "queryValue": {"items": items}}


def serial_port_output(contents: str) -> dict[str, Any]:
    # https://cloud.google.com/compute/docs/reference/rest/v1/instances/getSerialPortOutput
    return {"kind": "compute#serialPortOutput", "contents": contents, "start": "0", "next": "0"}


def resize_operation(group: FakeGroup, number: int) -> dict[str, Any]:
    """A resize's operation, RUNNING as ``resize`` answers it."""
    # The Operation resource: https://cloud.google.com/compute/docs/reference/rest/v1/regionOperations#resource:-operation
    name = f"operation-1764568800000-{number:04d}-resize"
    return {
        "kind": "compute#operation",
        "id": str(7000 + number),
        "name": name,
        "operationType": "compute.instanceGroupManagers.resize",
        "targetLink": LINK_HOST + group.path,
        "targetId": GROUP_ID,
        "status": "RUNNING",
        "user": f"{group.name}@{group.project}.iam.gserviceaccount.com",
        "progress": 0,
        "insertTime": rfc3339(EPOCH),
        "startTime": rfc3339(at(0.1)),
        "selfLink": f"{LINK_HOST}{group.region_path}/operations/{name}",
        "region": LINK_HOST + group.region_path,
    }


def done(operation: dict[str, Any]) -> dict[str, Any]:
    """The operation once finished, as ``regionOperations.get`` and ``wait`` answer it."""
    # https://cloud.google.com/compute/docs/reference/rest/v1/regionOperations/wait
    operation.update(status="DONE", progress=100, endTime=rfc3339(at(5)))
    return operation


def org_policy_violation(
    group: FakeGroup,
    member: FakeMember,
    constraint: str,
    seconds: float,
    *,
    project_number: str = "291560455175",
) -> dict[str, Any]:
    """A member refused by an organization policy, as an instance group reports it: code
    CONDITION_NOT_MET, "Instance '<name>' creation failed: Constraint constraints/<c> violated for project
    <number>. ..." (2i2c-org/infrastructure#489, the GKE node pool's group errors; the API's own 412
    conditionNotMet: fortinet/fortigate-terraform-deploy#34)."""
    path = group.instance_path(member).removeprefix("/compute/v1/")
    detail = (
        f" Add instance {path} to the constraint to use external IP with it."
        if constraint == "compute.vmExternalIpAccess"
        else ""
    )
    message = (
        f"Instance '{member.name}' creation failed: Constraint constraints/{constraint} violated for "
        f"project {project_number}.{detail}"
    )
    return list_error(group, member, "CONDITION_NOT_MET", message, seconds)


def permission_error(image: str, agent: str) -> str:
    """A member's creation refused for a permission, as a group reports it: "Instance '<name>' creation
    failed: Required '<permission>' permission for '<resource>' (when acting as '<agent>')"
    (catchpoint/WebPageTest.agent-install#6)."""
    return f"Required 'compute.images.useReadOnly' permission for '{image}' (when acting as '{agent}')"
