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
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from typing import Any, TypeVar

import requests

from qwen36.cloud_answers import LastAnswer, describe, parse_failures, watch

# Every call's own bound: a connection within CONNECT_TIMEOUT_S, an answer within READ_TIMEOUT_S (the
# client libraries' defaults are 120 s for google-auth's requests and a 600 s retry deadline for
# google-cloud-compute's GETs), tried at most TRIES times on 429, 5xx or no answer, with a pause of
# BACKOFF_S, then twice that, between tries. A service whose tries all failed gets one try for its
# later calls, one that gave no answer at all is not asked again, and once one has gone silent every
# other call gets one try; past BUDGET_S of API time nothing new
# is tried. So the whole check ends within about BUDGET_S + TRIES * READ_TIMEOUT_S (worst_case_s),
# and every retry prints a progress line first.
CONNECT_TIMEOUT_S = 3.05
READ_TIMEOUT_S = 6.0
TRIES = 3
BACKOFF_S = 0.5
BUDGET_S = 30.0
TRANSIENT = frozenset({0, 429, 500, 502, 503, 504})
# Reasons of our own (not Google's): an answer that is not the API's, and a call not made.
MALFORMED = "MALFORMED"
NOT_TRIED = "NOT_TRIED"
# The check's sleep; tests replace it to run the backoff without waiting.
SLEEP: Callable[[float], None] = time.sleep


def worst_case_s() -> float:
    """The longest the check's API calls can take, from the bounds above."""
    pauses = sum(BACKOFF_S * 2**i for i in range(TRIES - 1))
    return BUDGET_S + TRIES * (CONNECT_TIMEOUT_S + READ_TIMEOUT_S) + pauses


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
        return f"{self.status}: {self.message}" if self.status and not self.malformed else self.message

    @property
    def disabled(self) -> bool:
        return self.reason in (SERVICE_DISABLED, ACCESS_NOT_CONFIGURED)

    @property
    def not_found(self) -> bool:
        return self.status == 404

    @property
    def transient(self) -> bool:
        return self.status in TRANSIENT and self.reason not in (MALFORMED, NOT_TRIED)

    @property
    def malformed(self) -> bool:
        return self.reason == MALFORMED

    @classmethod
    def from_response(cls, status: int, text: str, content_type: str = "") -> ApiError:
        """From the JSON error body of Google APIs: https://cloud.google.com/apis/design/errors#http_mapping"""
        try:
            error = json.loads(text).get("error") or {}
        except (ValueError, AttributeError):
            return cls(status, describe(text.encode(), content_type))
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


def _no_answer(exc: requests.RequestException) -> str:
    """Which kind of silence: a refused or reset connection, or a timeout."""
    if isinstance(exc, requests.ConnectTimeout):
        return f"no connection within {CONNECT_TIMEOUT_S:g} s"
    if isinstance(exc, requests.Timeout):
        return f"no answer within {READ_TIMEOUT_S:g} s"
    if isinstance(exc, requests.ConnectionError):
        return "the connection was refused or dropped"
    return type(exc).__name__


def answer_error(service: str, what: str, body: bytes | None, content_type: str = "") -> ApiError:
    """A 2xx answer that is not the method's documented shape: unread, never a finding."""
    return ApiError(200, f"{service} answered {describe(body, content_type)}, not {what}", reason=MALFORMED)


@dataclass
class Apis:
    """Authorized access to the APIs the check reads, each call bounded (see ``worst_case_s``)."""

    credentials: Any
    api_root: str | None = None
    say: Callable[[str], None] = print
    session: requests.Session = field(init=False)
    silent: set[str] = field(init=False, default_factory=set)
    """Services that gave no answer at all: not asked again."""
    failing: set[str] = field(init=False, default_factory=set)
    """Services whose tries all failed (429, 5xx): their later calls get one try."""
    started: float = field(init=False, default_factory=time.monotonic)

    def __post_init__(self) -> None:
        from google.auth.transport.requests import AuthorizedSession

        self.session = AuthorizedSession(self.credentials)

    def _url(self, service: str, path: str) -> str:
        base = f"{self.api_root.rstrip('/')}/{service}" if self.api_root else HOSTS[service]
        return f"{base}/{path.lstrip('/')}"

    def attempt(self, service: str, fn: Callable[[], T]) -> T:
        """``fn()`` within the bounds: transient failures retried, a silent service not asked again."""
        if service in self.silent:
            raise ApiError(0, f"not tried: {service} gave no answer to an earlier call", reason=NOT_TRIED)
        if time.monotonic() - self.started > BUDGET_S:
            raise ApiError(
                0, f"not tried: the check's {BUDGET_S:g} s for the APIs were spent", reason=NOT_TRIED
            )
        tries = 1 if self.silent or service in self.failing else TRIES
        for number in range(1, tries + 1):
            try:
                return fn()
            except ApiError as exc:
                last = number == tries or time.monotonic() - self.started > BUDGET_S
                if not exc.transient or last:
                    if exc.transient:
                        self.failing.add(service)
                    if exc.status == 0:
                        self.silent.add(service)
                    if exc.transient and number > 1:
                        exc.message += f" (after {number} tries)"
                    raise
                pause = BACKOFF_S * 2 ** (number - 1)
                self.say(f"wait  {service}: {exc}; trying again in {pause:g} s (try {number + 1} of {tries})")
                SLEEP(pause)
        raise AssertionError("unreachable")  # pragma: no cover

    def _call(self, method: str, service: str, path: str, **kwargs: Any) -> Any:
        url = self._url(service, path)

        def once() -> Any:
            try:
                response = self.session.request(
                    method, url, timeout=(CONNECT_TIMEOUT_S, READ_TIMEOUT_S), **kwargs
                )
            except requests.RequestException as exc:
                raise ApiError(0, f"{service} gave no answer ({_no_answer(exc)})") from None
            content_type = response.headers.get("Content-Type", "")
            if response.status_code >= 400:
                text = response.content.decode("utf-8", "replace")
                raise ApiError.from_response(response.status_code, text, content_type)
            try:
                return json.loads(response.content.decode("utf-8"))
            except ValueError:  # UnicodeDecodeError is one
                raise answer_error(service, "JSON", response.content, content_type) from None

        return self.attempt(service, once)

    def get(self, service: str, path: str, params: Any = None) -> Any:
        """The answer's JSON, whatever its shape: each caller checks the shape it documents."""
        return self._call("GET", service, path, params=params)

    def post(self, service: str, path: str, body: dict[str, Any]) -> Any:
        return self._call("POST", service, path, json=body)

    # --- Compute Engine (google-cloud-compute, REST transport) ----------------------------------

    def _compute_kwargs(self) -> dict[str, Any]:
        from google.api_core.client_options import ClientOptions

        options = ClientOptions(api_endpoint=self.api_root) if self.api_root else None
        return {"transport": "rest", "client_options": options, "credentials": self.credentials}

    def compute(self, client: str, method: str, call: Callable[[Any, Any], T]) -> T:
        """``call(compute_v1, client)`` on a fresh ``compute_v1.<client>``, within the bounds; the
        library's own retry off (``retry=None`` in each call). Its errors become :class:`ApiError`;
        an answer it cannot parse is unread, naming what came back (qwen36/cloud_answers.py)."""
        from google.api_core import exceptions
        from google.cloud import compute_v1

        api = f"compute {client.removesuffix('Client')}.{method}"

        def once() -> T:
            instance = getattr(compute_v1, client)(**self._compute_kwargs())
            last: LastAnswer = watch(instance)
            try:
                return call(compute_v1, instance)
            except exceptions.GoogleAPICallError as exc:
                response = getattr(exc, "response", None)
                if response is not None and getattr(response, "text", None):
                    content_type = str(getattr(response, "headers", {}).get("Content-Type", ""))
                    raise ApiError.from_response(int(exc.code or 0), response.text, content_type) from None
                raise ApiError(int(exc.code or 0), exc.message or str(exc)) from None
            except requests.RequestException as exc:
                raise ApiError(0, f"compute gave no answer ({_no_answer(exc)})") from None
            except parse_failures() as exc:
                what = describe(last.body, last.content_type)
                raise ApiError(
                    200, f"{api} answered {what}, not its documented JSON", reason=MALFORMED
                ) from exc

        return self.attempt("compute", once)

    def _named(self, found: Any, what: str, api: str) -> Any:
        # Every Compute resource carries its name; the library reads {} or unknown fields as empty.
        if not str(getattr(found, "name", "") or ""):
            raise ApiError(
                200, f"{api} answered no {what} name, not its documented resource", reason=MALFORMED
            )
        return found

    def project_quotas(self, project: str) -> dict[str, tuple[float, float]]:
        """``projects.get``'s ``quotas``: metric -> (limit, usage).
        https://cloud.google.com/compute/docs/reference/rest/v1/projects/get"""
        found = self.compute(
            "ProjectsClient",
            "get",
            lambda v1, c: c.get(project=project, retry=None, timeout=READ_TIMEOUT_S),
        )
        self._named(found, "project", "compute projects.get")
        return {str(q.metric): (float(q.limit), float(q.usage)) for q in found.quotas}

    def region_quotas(self, project: str, region: str) -> dict[str, tuple[float, float]]:
        """``regions.get``'s ``quotas``. https://cloud.google.com/compute/docs/reference/rest/v1/regions/get"""
        found = self.compute(
            "RegionsClient",
            "get",
            lambda v1, c: c.get(project=project, region=region, retry=None, timeout=READ_TIMEOUT_S),
        )
        self._named(found, "region", "compute regions.get")
        return {str(q.metric): (float(q.limit), float(q.usage)) for q in found.quotas}

    def zones_offering(self, project: str, accelerator: str) -> dict[str, bool]:
        """Every zone the project sees -> whether it offers ``accelerator``, from one
        ``acceleratorTypes.aggregatedList`` filtered by name (a zone without it answers a warning).
        https://cloud.google.com/compute/docs/reference/rest/v1/acceleratorTypes/aggregatedList"""

        def listed(v1: Any, client: Any) -> dict[str, bool]:
            request = v1.AggregatedListAcceleratorTypesRequest(
                project=project, filter=f'name = "{accelerator}"'
            )
            pages: Iterator[tuple[str, Any]] = iter(
                client.aggregated_list(request=request, retry=None, timeout=READ_TIMEOUT_S)
            )
            return {
                scope.removeprefix("zones/"): any(t.name == accelerator for t in scoped.accelerator_types)
                for scope, scoped in pages
                if scope.startswith("zones/")
            }

        offering = self.compute("AcceleratorTypesClient", "aggregatedList", listed)
        if not offering:
            # Every project sees every zone, each scope with its types or a NO_RESULTS_ON_PAGE warning.
            raise ApiError(
                200, "compute acceleratorTypes.aggregatedList answered no zone at all", reason=MALFORMED
            )
        return offering

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
                "ImagesClient",
                "getFromFamily",
                lambda v1, c: c.get_from_family(
                    project=project, family=family, retry=None, timeout=READ_TIMEOUT_S
                ),
            )
        except ApiError as exc:
            if exc.not_found:
                return None
            raise
        image = self._named(image, "image", "compute images.getFromFamily")
        return str(image.name), {str(k): str(v) for k, v in dict(image.labels).items()}
