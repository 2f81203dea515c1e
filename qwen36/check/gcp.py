"""The Google APIs the check reads, with the deployer's application-default credentials.

Compute Engine goes through google-cloud-compute (a requirement already); Service Usage, Cloud
Billing, the Organization Policy API and Cloud Resource Manager have no client among the
requirements, so they go through google-auth's ``AuthorizedSession`` and their REST API. Every call is
a read (``testIamPermissions`` too), bounded by ``REQUEST_TIMEOUT_S`` and retried a little on the
transient statuses. ``api_root`` sends every call to one stand-in (a fake on loopback in the tests):
Compute at ``<root>/compute/v1/...``, the others at ``<root>/<service>/...``.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from typing import Any, TypeVar

import requests
from requests.adapters import HTTPAdapter, Retry

REQUEST_TIMEOUT_S = 10.0
RETRY = Retry(
    total=2,
    backoff_factor=0.5,
    status_forcelist=(429, 500, 502, 503, 504),
    allowed_methods=frozenset({"GET", "POST"}),
    raise_on_status=False,
)
HOSTS = {
    "serviceusage": "https://serviceusage.googleapis.com",
    "cloudbilling": "https://cloudbilling.googleapis.com",
    "orgpolicy": "https://orgpolicy.googleapis.com",
    "cloudresourcemanager": "https://cloudresourcemanager.googleapis.com",
}
# A disabled API answers 403 with an ErrorInfo of this reason, whose metadata names the service and
# the consumer project (google/api/error_reason.proto, SERVICE_DISABLED:
# https://github.com/googleapis/googleapis/blob/master/google/api/error_reason.proto); Compute's
# older error list says accessNotConfigured (e.g. fog/fog#3996, GoogleCloudPlatform/community#884).
SERVICE_DISABLED = "SERVICE_DISABLED"
ACCESS_NOT_CONFIGURED = "accessNotConfigured"

T = TypeVar("T")


@dataclass
class ApiError(Exception):
    """A Google API's error answer, or ``status`` 0 when no answer came."""

    status: int
    message: str
    reason: str = ""
    service: str = ""
    consumer: str = ""
    """``projects/<number>`` that the API is disabled for (the quota project of the call)."""

    def __str__(self) -> str:
        return f"{self.status or 'no answer'}: {self.message}"

    @property
    def disabled(self) -> bool:
        return self.reason in (SERVICE_DISABLED, ACCESS_NOT_CONFIGURED)

    @property
    def not_found(self) -> bool:
        return self.status == 404

    @classmethod
    def from_response(cls, status: int, text: str) -> ApiError:
        """From the JSON error body of Google APIs: https://cloud.google.com/apis/design/errors#http_mapping"""
        try:
            error = json.loads(text).get("error") or {}
        except (ValueError, AttributeError):
            return cls(status, text.strip()[:300] or f"HTTP {status}")
        if not isinstance(error, dict):
            return cls(status, str(error)[:300])
        message = " ".join(str(error.get("message") or f"HTTP {status}").split())
        reason = service = consumer = ""
        for detail in error.get("details") or []:
            if isinstance(detail, dict) and str(detail.get("@type", "")).endswith("google.rpc.ErrorInfo"):
                reason = str(detail.get("reason") or "")
                metadata = detail.get("metadata") or {}
                service = str(metadata.get("service") or "")
                consumer = str(metadata.get("consumer") or "")
                break
        if not reason:
            legacy = [e for e in error.get("errors") or [] if isinstance(e, dict)]
            reason = str(legacy[0].get("reason") or "") if legacy else ""
        return cls(status, message, reason, service, consumer)


@dataclass
class Apis:
    """Authorized access to the APIs the check reads."""

    credentials: Any
    api_root: str | None = None
    session: requests.Session = field(init=False)

    def __post_init__(self) -> None:
        from google.auth.transport.requests import AuthorizedSession

        session = AuthorizedSession(self.credentials)
        adapter = HTTPAdapter(max_retries=RETRY)
        session.mount("https://", adapter)
        session.mount("http://", adapter)
        self.session = session

    def _url(self, service: str, path: str) -> str:
        base = f"{self.api_root.rstrip('/')}/{service}" if self.api_root else HOSTS[service]
        return f"{base}/{path.lstrip('/')}"

    def _call(self, method: str, service: str, path: str, **kwargs: Any) -> dict[str, Any]:
        url = self._url(service, path)
        try:
            response = self.session.request(method, url, timeout=REQUEST_TIMEOUT_S, **kwargs)
        except requests.RequestException as exc:
            raise ApiError(0, f"{service}: {type(exc).__name__}: {str(exc)[:200]}") from None
        if response.status_code >= 400:
            raise ApiError.from_response(response.status_code, response.text)
        try:
            body = response.json()
        except ValueError:
            raise ApiError(response.status_code, f"{service}: a non-JSON answer") from None
        return body if isinstance(body, dict) else {}

    def get(self, service: str, path: str, params: Any = None) -> dict[str, Any]:
        return self._call("GET", service, path, params=params)

    def post(self, service: str, path: str, body: dict[str, Any]) -> dict[str, Any]:
        return self._call("POST", service, path, json=body)

    # --- Compute Engine (google-cloud-compute, REST transport) ----------------------------------

    def _compute_kwargs(self) -> dict[str, Any]:
        from google.api_core.client_options import ClientOptions

        options = ClientOptions(api_endpoint=self.api_root) if self.api_root else None
        return {"transport": "rest", "client_options": options, "credentials": self.credentials}

    def compute(self, call: Callable[[Any, dict[str, Any]], T]) -> T:
        """Runs ``call(compute_v1, client kwargs)``; the Compute API's errors become :class:`ApiError`."""
        from google.api_core import exceptions
        from google.cloud import compute_v1

        try:
            return call(compute_v1, self._compute_kwargs())
        except exceptions.GoogleAPICallError as exc:
            response = getattr(exc, "response", None)
            if response is not None and getattr(response, "text", None):
                raise ApiError.from_response(int(exc.code or 0), response.text) from None
            raise ApiError(int(exc.code or 0), exc.message or str(exc)) from None
        except requests.RequestException as exc:
            raise ApiError(0, f"compute: {type(exc).__name__}: {str(exc)[:200]}") from None

    def project_quotas(self, project: str) -> dict[str, tuple[float, float]]:
        """``projects.get``'s ``quotas``: metric -> (limit, usage).
        https://cloud.google.com/compute/docs/reference/rest/v1/projects/get"""
        found = self.compute(
            lambda v1, kw: v1.ProjectsClient(**kw).get(project=project, timeout=REQUEST_TIMEOUT_S)
        )
        return {str(q.metric): (float(q.limit), float(q.usage)) for q in found.quotas}

    def region_quotas(self, project: str, region: str) -> dict[str, tuple[float, float]]:
        """``regions.get``'s ``quotas``. https://cloud.google.com/compute/docs/reference/rest/v1/regions/get"""
        found = self.compute(
            lambda v1, kw: v1.RegionsClient(**kw).get(
                project=project, region=region, timeout=REQUEST_TIMEOUT_S
            )
        )
        return {str(q.metric): (float(q.limit), float(q.usage)) for q in found.quotas}

    def zones_offering(self, project: str, accelerator: str) -> dict[str, bool]:
        """Every zone the project sees -> whether it offers ``accelerator``, from one
        ``acceleratorTypes.aggregatedList`` filtered by name (a zone without it answers a warning).
        https://cloud.google.com/compute/docs/reference/rest/v1/acceleratorTypes/aggregatedList"""

        def listed(v1: Any, kw: dict[str, Any]) -> dict[str, bool]:
            request = v1.AggregatedListAcceleratorTypesRequest(
                project=project, filter=f'name = "{accelerator}"'
            )
            pages: Iterator[tuple[str, Any]] = iter(
                v1.AcceleratorTypesClient(**kw).aggregated_list(request=request, timeout=REQUEST_TIMEOUT_S)
            )
            return {
                scope.removeprefix("zones/"): any(t.name == accelerator for t in scoped.accelerator_types)
                for scope, scoped in pages
                if scope.startswith("zones/")
            }

        return self.compute(listed)

    def image_from_family(self, project: str, family: str) -> str | None:
        """The family's newest image name, or None when it holds none (404).
        https://cloud.google.com/compute/docs/reference/rest/v1/images/getFromFamily"""
        found = self.family_image(project, family)
        return found[0] if found is not None else None

    def family_image(self, project: str, family: str) -> tuple[str, dict[str, str]] | None:
        """The family's newest image: its name and labels (the bake's Secure Boot verdict is one), or
        None when the family holds none (404)."""
        try:
            image = self.compute(
                lambda v1, kw: v1.ImagesClient(**kw).get_from_family(
                    project=project, family=family, timeout=REQUEST_TIMEOUT_S
                )
            )
        except ApiError as exc:
            if exc.not_found:
                return None
            raise
        return str(image.name), {str(k): str(v) for k, v in dict(image.labels).items()}
