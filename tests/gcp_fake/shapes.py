"""The APIs' answers, each in the documented shape of its method (the reference page is cited at each)."""

from __future__ import annotations

from typing import Any

from tests.compute_fake.group import LINK_HOST
from tests.gcp_fake.project import ACCESS_TOKEN, TITLES, FakeProject

CLOUD_PLATFORM = "https://www.googleapis.com/auth/cloud-platform"


def token() -> dict[str, Any]:
    # The refresh-token grant's answer (RFC 6749 section 5.1; Google's:
    # https://developers.google.com/identity/protocols/oauth2/web-server#offline).
    return {"access_token": ACCESS_TOKEN, "expires_in": 3599, "scope": CLOUD_PLATFORM, "token_type": "Bearer"}


def status_error(
    code: int, status: str, message: str, details: list[dict[str, Any]] | None = None
) -> dict[str, Any]:
    # The JSON error body of Google APIs: {"error": {code, message, status, details[]}}.
    # https://cloud.google.com/apis/design/errors#http_mapping
    error: dict[str, Any] = {"code": code, "message": message, "status": status}
    if details:
        error["details"] = details
    return {"error": error}


# The canonical status of each HTTP code, with the message Google's table gives as its example
# (https://cloud.google.com/apis/design/errors#handling_errors).
CANONICAL = {
    400: ("INVALID_ARGUMENT", "Request contains an invalid argument."),
    401: ("UNAUTHENTICATED", "Request had invalid authentication credentials."),
    403: ("PERMISSION_DENIED", "The caller does not have permission"),
    429: ("RESOURCE_EXHAUSTED", "Quota exceeded for quota metric 'Read requests' of service."),
    500: ("INTERNAL", "Internal error encountered."),
    502: ("UNAVAILABLE", "The service is currently unavailable."),
    503: ("UNAVAILABLE", "The service is currently unavailable."),
    504: ("DEADLINE_EXCEEDED", "Deadline expired before operation could complete."),
}


def canonical_error(code: int) -> dict[str, Any]:
    status, message = CANONICAL[code]
    return status_error(code, status, message)


def unauthenticated() -> dict[str, Any]:
    return status_error(
        401,
        "UNAUTHENTICATED",
        "Request is missing required authentication credential. Expected OAuth 2 access token, login "
        "cookie or other valid authentication credential.",
    )


def service_disabled(project: FakeProject, service: str, consumer: str) -> dict[str, Any]:
    """403 for a disabled API. The message is the one GCE and other APIs answer (e.g. fog/fog#3996,
    GoogleCloudPlatform/community#884, 2i2c-org/infrastructure#489); the ErrorInfo is SERVICE_DISABLED
    with the service and the consumer (google/api/error_reason.proto in googleapis/googleapis). Compute's
    answer also keeps its older ``errors[]`` list, reason accessNotConfigured."""
    title = TITLES.get(service, service)
    message = (
        f"{title} has not been used in project {consumer} before or it is disabled. Enable it by "
        f"visiting https://console.developers.google.com/apis/api/{service}/overview?project={consumer} "
        "then retry. If you enabled this API recently, wait a few minutes for the action to propagate "
        "to our systems and retry."
    )
    body = status_error(
        403,
        "PERMISSION_DENIED",
        message,
        [
            {
                "@type": "type.googleapis.com/google.rpc.ErrorInfo",
                "reason": "SERVICE_DISABLED",
                "domain": "googleapis.com",
                "metadata": {"service": service, "consumer": f"projects/{consumer}"},
            }
        ],
    )
    if service == "compute.googleapis.com":
        body["error"]["errors"] = [
            {
                "message": message,
                "domain": "usageLimits",
                "reason": "accessNotConfigured",
                "extendedHelp": "https://console.developers.google.com",
            }
        ]
    return body


def batch_get(project: FakeProject, names: list[str]) -> dict[str, Any]:
    # https://cloud.google.com/service-usage/docs/reference/rest/v1/services/batchGet:
    # {"services": [Service]}; a Service is {name: projects/<number>/services/<name>, parent, config, state}
    # (https://cloud.google.com/service-usage/docs/reference/rest/v1/services#Service).
    services = []
    for name in names:
        service = name.rsplit("/", 1)[-1]
        services.append(
            {
                "name": f"projects/{project.number}/services/{service}",
                "parent": f"projects/{project.number}",
                "config": {"name": service, "title": TITLES.get(service, service)},
                "state": "ENABLED" if service in project.enabled else "DISABLED",
            }
        )
    return {"services": services}


def billing_info(project: FakeProject) -> dict[str, Any]:
    # https://cloud.google.com/billing/docs/reference/rest/v1/ProjectBillingInfo
    body: dict[str, Any] = {
        "name": f"projects/{project.project_id}/billingInfo",
        "projectId": project.project_id,
        "billingEnabled": project.billing_enabled,
    }
    if project.billing_account:
        body["billingAccountName"] = project.billing_account
    return body


def _quotas(quotas: dict[str, tuple[float, float]]) -> list[dict[str, Any]]:
    # Quota: {metric, limit, usage, owner}: https://cloud.google.com/compute/docs/reference/rest/v1/projects#Quota
    return [{"metric": metric, "limit": limit, "usage": usage} for metric, (limit, usage) in quotas.items()]


def compute_project(project: FakeProject) -> dict[str, Any]:
    # https://cloud.google.com/compute/docs/reference/rest/v1/projects/get (the Project resource)
    return {
        "kind": "compute#project",
        "id": project.number,
        "name": project.project_id,
        "quotas": _quotas(project.project_quotas),
        "selfLink": f"{LINK_HOST}/compute/v1/projects/{project.project_id}",
        "defaultServiceAccount": f"{project.number}-compute@developer.gserviceaccount.com",
    }


def region(project: FakeProject, name: str) -> dict[str, Any]:
    # https://cloud.google.com/compute/docs/reference/rest/v1/regions/get (the Region resource)
    base = f"{LINK_HOST}/compute/v1/projects/{project.project_id}"
    return {
        "kind": "compute#region",
        "id": "1000",
        "name": name,
        "status": "UP",
        "quotas": _quotas(project.region_quotas.get(name, {})),
        "zones": [f"{base}/zones/{z}" for z in sorted(project.zones) if z.startswith(name + "-")],
        "selfLink": f"{base}/regions/{name}",
    }


def accelerator_types(project: FakeProject, name: str) -> dict[str, Any]:
    # https://cloud.google.com/compute/docs/reference/rest/v1/acceleratorTypes/aggregatedList: items is a
    # map "zones/<zone>" -> {acceleratorTypes[]} or, where the filter left none, {warning: {code
    # NO_RESULTS_ON_PAGE, message, data[{key, value}]}}.
    base = f"{LINK_HOST}/compute/v1/projects/{project.project_id}"
    items: dict[str, Any] = {}
    for zone, types in sorted(project.zones.items()):
        scope = f"zones/{zone}"
        if name in types:
            items[scope] = {
                "acceleratorTypes": [
                    {
                        "kind": "compute#acceleratorType",
                        "name": name,
                        "description": "NVIDIA L4" if name == "nvidia-l4" else name,
                        "zone": f"{base}/zones/{zone}",
                        "maximumCardsPerInstance": 8,
                        "selfLink": f"{base}/zones/{zone}/acceleratorTypes/{name}",
                    }
                ]
            }
        else:
            items[scope] = {
                "warning": {
                    "code": "NO_RESULTS_ON_PAGE",
                    "message": f"There are no results for scope '{scope}' on this page.",
                    "data": [{"key": "scope", "value": scope}],
                }
            }
    return {
        "kind": "compute#acceleratorTypeAggregatedList",
        "id": f"projects/{project.project_id}/aggregated/acceleratorTypes",
        "items": items,
        "selfLink": f"{base}/aggregated/acceleratorTypes",
    }


def image(project: FakeProject, family: str, name: str) -> dict[str, Any]:
    # https://cloud.google.com/compute/docs/reference/rest/v1/images/getFromFamily (the Image resource)
    return {
        "kind": "compute#image",
        "name": name,
        "family": family,
        "status": "READY",
        "selfLink": f"{LINK_HOST}/compute/v1/projects/{project.project_id}/global/images/{name}",
        # The Image resource's `labels` map (absent when the image has none).
        **({"labels": project.image_labels[name]} if project.image_labels.get(name) else {}),
    }


def effective_policy(project: FakeProject, constraint: str) -> dict[str, Any]:
    # https://cloud.google.com/resource-manager/docs/reference/orgpolicy/rest/v2/projects.policies/getEffectivePolicy
    # answers a Policy {name: projects/<number>/policies/<constraint>, spec: {rules[]}}
    # (https://cloud.google.com/resource-manager/docs/reference/orgpolicy/rest/v2/organizations.policies#Policy).
    # What it answers for a constraint no policy sets is not documented; the fake answers no spec, and
    # the check reads a spec of default rules ({"enforce": false}, {"allowAll": true}) the same way.
    body: dict[str, Any] = {"name": f"projects/{project.number}/policies/{constraint}"}
    if constraint in project.policies:
        body["spec"] = project.policies[constraint]
    return body


def test_iam_permissions(granted: list[str]) -> dict[str, Any]:
    # https://cloud.google.com/resource-manager/reference/rest/v1/projects/testIamPermissions: the subset
    # of the asked permissions the caller holds. An empty list is left out, as proto3's JSON mapping
    # leaves out every empty repeated field (https://protobuf.dev/programming-guides/json/).
    return {"permissions": granted} if granted else {}
