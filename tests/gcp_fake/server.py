"""The fake project served over HTTP: each API under its own prefix (``/<service>/...``), Compute at
``/compute/v1/...`` as google-cloud-compute builds it from ``api_endpoint``, and the OAuth token
endpoint at ``/token`` (an ADC file's ``token_uri``), so google-auth refreshes exactly as it would."""

from __future__ import annotations

import json
import re
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from http.server import BaseHTTPRequestHandler
from urllib.parse import parse_qs, urlparse

from tests.compute_fake.shapes import not_found
from tests.gcp_fake import shapes
from tests.gcp_fake.project import ACCESS_TOKEN, HANG, FakeProject, Fault, Request
from tests.harness.loopback import JsonHandler, serve_on_loopback

_ROUTES: list[tuple[str, str, re.Pattern[str], str]] = [
    # (method, service that must be enabled, path pattern, handler name)
    (
        "GET",
        "serviceusage.googleapis.com",
        re.compile(r"/serviceusage/v1/projects/(?P<p>[^/]+)/services:batchGet"),
        "_batch_get",
    ),
    (
        "GET",
        "cloudbilling.googleapis.com",
        re.compile(r"/cloudbilling/v1/projects/(?P<p>[^/]+)/billingInfo"),
        "_billing",
    ),
    ("GET", "compute.googleapis.com", re.compile(r"/compute/v1/projects/(?P<p>[^/]+)"), "_compute_project"),
    (
        "GET",
        "compute.googleapis.com",
        re.compile(r"/compute/v1/projects/(?P<p>[^/]+)/regions/(?P<r>[^/]+)"),
        "_region",
    ),
    (
        "GET",
        "compute.googleapis.com",
        re.compile(r"/compute/v1/projects/(?P<p>[^/]+)/aggregated/acceleratorTypes"),
        "_accelerators",
    ),
    (
        "GET",
        "compute.googleapis.com",
        re.compile(r"/compute/v1/projects/(?P<p>[^/]+)/global/images/family/(?P<f>[^/]+)"),
        "_family",
    ),
    (
        "GET",
        "orgpolicy.googleapis.com",
        re.compile(r"/orgpolicy/v2/projects/(?P<p>[^/]+)/policies/(?P<c>[^/:]+):getEffectivePolicy"),
        "_policy",
    ),
    (
        "POST",
        "cloudresourcemanager.googleapis.com",
        re.compile(r"/cloudresourcemanager/v1/projects/(?P<p>[^/:]+):testIamPermissions"),
        "_permissions",
    ),
]
# How long a HANG fault holds its request: past any client timeout, ended early when the fake stops.
HANG_S = 600.0
_FILTER = re.compile(r'^name = "(?P<name>[a-z0-9-]+)"$')


def _authorized(project: FakeProject, header: str) -> bool:
    """The token the fake's /token handed out, or a service account's self-signed JWT, which
    google-cloud-compute's clients send instead of asking the token endpoint
    (https://google.aip.dev/auth/4111), checked against the account's public key."""
    value = header.removeprefix("Bearer ")
    if value == ACCESS_TOKEN:
        return True
    if not project.jwt_public_key or value == header:
        return False
    from google.auth import exceptions, jwt

    try:
        claims = jwt.decode(value, certs=project.jwt_public_key, verify=True)
    except (exceptions.GoogleAuthError, ValueError):
        return False
    return bool(claims.get("iss"))


def _handler(project: FakeProject, stopping: threading.Event) -> type[BaseHTTPRequestHandler]:
    class Handler(JsonHandler):
        def _serve(self, method: str) -> None:
            url = urlparse(self.path)
            length = int(self.headers.get("Content-Length") or 0)
            body = self.rfile.read(length) if length else b""
            query = parse_qs(url.query)
            request = Request(method, url.path, query, body, {k.lower(): v for k, v in self.headers.items()})
            project.record(request)
            if method == "POST" and url.path == "/token":
                self._json(200, shapes.token())
                return
            fault = project.take_fault(url.path)
            if fault is not None:
                self._fault(fault)
                return
            if not _authorized(project, self.headers.get("Authorization") or ""):
                self._json(401, shapes.unauthenticated())
                return
            for verb, service, pattern, name in _ROUTES:
                match = pattern.fullmatch(url.path)
                if verb != method or match is None:
                    continue
                if not project.is_us(match["p"]):
                    self._json(404, not_found(url.path))
                    return
                # The consumer is the call's quota project when it names one, else the project itself.
                # https://cloud.google.com/apis/docs/system-parameters (x-goog-user-project)
                consumer = self.headers.get("x-goog-user-project") or project.number
                if consumer == project.project_id:
                    consumer = project.number
                if service not in project.enabled:
                    self._json(403, shapes.service_disabled(project, service, consumer))
                    return
                getattr(self, name)(match, query, body)
                return
            self._json(404, not_found(url.path))

        def _fault(self, fault: Fault) -> None:
            if fault.status == HANG:
                stopping.wait(HANG_S)
                self.close_connection = True
                return
            if fault.body is None:
                self._json(int(fault.status), shapes.canonical_error(int(fault.status)))
                return
            self.send_response(int(fault.status))
            self.send_header("Content-Type", fault.content_type)
            self.send_header("Content-Length", str(len(fault.body)))
            self.end_headers()
            self.wfile.write(fault.body)

        def do_GET(self) -> None:
            self._serve("GET")

        def do_POST(self) -> None:
            self._serve("POST")

        def _batch_get(self, match: re.Match[str], query: dict[str, list[str]], body: bytes) -> None:
            self._json(200, shapes.batch_get(project, query.get("names", [])))

        def _billing(self, match: re.Match[str], query: dict[str, list[str]], body: bytes) -> None:
            self._json(200, shapes.billing_info(project))

        def _compute_project(self, match: re.Match[str], query: dict[str, list[str]], body: bytes) -> None:
            self._json(200, shapes.compute_project(project))

        def _region(self, match: re.Match[str], query: dict[str, list[str]], body: bytes) -> None:
            if match["r"] not in project.region_quotas:
                self._json(404, not_found(f"projects/{match['p']}/regions/{match['r']}"))
                return
            self._json(200, shapes.region(project, match["r"]))

        def _accelerators(self, match: re.Match[str], query: dict[str, list[str]], body: bytes) -> None:
            # Only the filter the check sends is understood; any other is refused, not guessed at.
            wanted = _FILTER.match(query.get("filter", [""])[0])
            if wanted is None:
                self._json(
                    400, shapes.status_error(400, "INVALID_ARGUMENT", f"the fake reads no filter {query}")
                )
                return
            self._json(200, shapes.accelerator_types(project, wanted["name"]))

        def _family(self, match: re.Match[str], query: dict[str, list[str]], body: bytes) -> None:
            name = project.families.get(match["f"])
            if name is None:
                self._json(404, not_found(f"projects/{match['p']}/global/images/family/{match['f']}"))
                return
            self._json(200, shapes.image(project, match["f"], name))

        def _policy(self, match: re.Match[str], query: dict[str, list[str]], body: bytes) -> None:
            self._json(200, shapes.effective_policy(project, match["c"]))

        def _permissions(self, match: re.Match[str], query: dict[str, list[str]], body: bytes) -> None:
            asked = json.loads(body or b"{}").get("permissions") or []
            self._json(200, shapes.test_iam_permissions([p for p in asked if p not in project.denied]))

    return Handler


@contextmanager
def fake_gcp(project: FakeProject) -> Iterator[str]:
    """Serves ``project`` on a free loopback port; yields the root URL (the check's ``--api-root``)."""
    stopping = threading.Event()
    try:
        with serve_on_loopback(_handler(project, stopping)) as root:
            try:
                yield root
            finally:
                stopping.set()
    finally:
        stopping.set()
