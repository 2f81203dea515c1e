"""The key set in Secret Manager, through its REST API with the user's own credentials
(google-auth's ``AuthorizedSession``, as ``qwen36 check`` calls the APIs it has no client for).

- read: ``GET v1/{secret}/versions/latest:access`` answers ``{name, payload: {data, dataCrc32c}}``
  (https://cloud.google.com/secret-manager/docs/reference/rest/v1/projects.secrets.versions/access);
  a secret without a version answers 404, and so does a secret that does not exist, so a 404 is told
  apart by ``GET v1/{secret}`` (https://cloud.google.com/secret-manager/docs/reference/rest/v1/projects.secrets/get).
- write: ``POST v1/{secret}:addVersion`` with ``{payload: {data, dataCrc32c}}`` answers the new
  ``SecretVersion`` (https://cloud.google.com/secret-manager/docs/reference/rest/v1/projects.secrets/addVersion).

Secret Manager has no compare-and-set on a new version, so an edit detects a lost update by the
version numbers: "SecretVersion IDs in a Secret start at 1 and are incremented for each subsequent
version" (https://cloud.google.com/secret-manager/docs/reference/rest/v1/projects.secrets.versions).
An edit read version N and added version M: M = N + 1 means nothing was added between its read and
its write. Otherwise another edit landed in between and the version just added dropped it; the edit
is then applied again on top of version M - 1 (the newest other one), a bounded number of times, and
when it no longer applies there (both added the same name) the other's set is put back and the
command fails. Old versions are left enabled (the door reads only ``latest``); nothing is destroyed.

GETs are retried on 429 and 5xx; ``addVersion`` is not (a retried add could land twice), so a write
whose answer was lost says so.
"""

from __future__ import annotations

import base64
import json
import re
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import requests
from requests.adapters import HTTPAdapter, Retry

from qwen36.errors import (
    ApiError,
    CredentialsError,
    DeniedError,
    NotFoundError,
    QwenError,
    UnreachableError,
    UsageError,
    one_line,
)
from qwen36.keys.keyset import KeySet, KeySetError, parse, serialize

SECRET_MANAGER_URL = "https://secretmanager.googleapis.com/v1"  # noqa: S105 (a URL)
REQUEST_TIMEOUT_S = 15.0
RETRY = Retry(
    total=3,
    backoff_factor=0.5,
    status_forcelist=(429, 500, 502, 503, 504),
    allowed_methods=frozenset({"GET"}),
    raise_on_status=False,
)
# How many times an edit is applied again on top of another that landed between its read and its write.
MAX_REAPPLY = 3
SECRET_NAME = re.compile(r"^projects/(?P<project>[^/]+)/secrets/(?P<secret>[A-Za-z0-9_-]{1,255})$")
_VERSION = re.compile(r"/versions/(?P<n>[0-9]+)$")
READ_ROLE = "roles/secretmanager.secretAccessor"
WRITE_ROLE = "roles/secretmanager.secretVersionAdder"


def parse_secret_name(name: str) -> tuple[str, str]:
    """``projects/<project>/secrets/<id>`` -> (project, id); a UsageError for anything else."""
    match = SECRET_NAME.fullmatch(name.strip())
    if match is None:
        raise UsageError(f"--keys-secret {name!r} is not projects/<project>/secrets/<id>")
    return match["project"], match["secret"]


def session(credentials: Any) -> requests.Session:
    from google.auth.transport.requests import AuthorizedSession

    authorized = AuthorizedSession(credentials)
    adapter = HTTPAdapter(max_retries=RETRY)
    authorized.mount("https://", adapter)
    authorized.mount("http://", adapter)
    return authorized


def api_error(status: int, text: str, what: str, role: str, service: str = "Secret Manager") -> QwenError:
    """One line for a Google API's error answer (https://cloud.google.com/apis/design/errors#http_mapping)."""
    message = text.strip()[:200] or f"HTTP {status}"
    try:
        body = json.loads(text)
        error = body.get("error") if isinstance(body, dict) else None
        if isinstance(error, dict) and error.get("message"):
            message = str(error["message"])
    except ValueError:
        pass
    message = one_line(message, 240)
    if status == 401:
        return CredentialsError(
            f"{what}: the credentials were refused (401: {message}); "
            "run `gcloud auth application-default login`"
        )
    if status == 403:
        return DeniedError(f"{what}: permission denied (403: {message}); grant yourself {role} on it")
    if status == 404:
        return NotFoundError(f"{what}: not found (404: {message}); check the name, or deploy the door first")
    if status == 429 or status >= 500:
        return UnreachableError(f"{what}: {service} kept answering {status} ({message}); rerun later")
    return ApiError(f"{what}: {service} refused it ({status}: {message})")


@dataclass
class Version:
    number: int
    """0 for a secret without a version (an empty set)."""
    keyset: KeySet
    data: bytes = b""


def _crc32c(data: bytes) -> int:
    import google_crc32c

    return int(google_crc32c.value(data))


class KeyStore:
    """The key set's secret ``projects/<project>/secrets/<id>``; ``url`` points it at a stand-in."""

    def __init__(self, secret: str, credentials: Any, url: str | None = None) -> None:
        self.project, self.secret_id = parse_secret_name(secret)
        self.secret = secret
        self.url = (url or SECRET_MANAGER_URL).rstrip("/")
        self.http = session(credentials)

    def _request(self, method: str, path: str, what: str, role: str, **kwargs: Any) -> requests.Response:
        try:
            return self.http.request(method, f"{self.url}/{path}", timeout=REQUEST_TIMEOUT_S, **kwargs)
        except requests.RequestException as exc:
            raise UnreachableError(
                f"{what}: Secret Manager did not answer ({type(exc).__name__}); check the network and rerun"
            ) from None

    def _json(self, response: requests.Response, what: str, role: str) -> dict[str, Any]:
        if response.status_code >= 400:
            raise api_error(response.status_code, response.text, what, role)
        try:
            body = response.json()
        except ValueError:
            raise ApiError(f"{what}: Secret Manager answered {response.status_code} without JSON") from None
        if not isinstance(body, dict):
            raise ApiError(f"{what}: Secret Manager answered {type(body).__name__}, not an object")
        return body

    def read(self, version: str = "latest") -> Version:
        what = f"reading the key set {self.secret}"
        response = self._request("GET", f"{self.secret}/versions/{version}:access", what, READ_ROLE)
        if response.status_code == 404 and version == "latest":
            # A secret without a version and a secret that is not there both answer 404 here.
            self._json(self._request("GET", self.secret, what, READ_ROLE), what, READ_ROLE)
            return Version(0, KeySet())
        body = self._json(response, what, READ_ROLE)
        payload = body.get("payload") or {}
        try:
            data = base64.b64decode(str(payload.get("data", "")), validate=True)
        except ValueError:
            raise ApiError(f"{what}: the payload is not base64") from None
        checksum = payload.get("dataCrc32c")
        if checksum is not None and int(checksum) != _crc32c(data):
            raise UnreachableError(
                f"{what}: the payload's CRC32C does not match (corrupted on the way); rerun"
            )
        number = version_number(str(body.get("name", "")), what)
        try:
            keyset = parse(data)
        except KeySetError as exc:
            raise ApiError(
                f"{what}: version {number} is not a key set ({exc}); fix or disable that version"
            ) from None
        return Version(number, keyset, data)

    def add(self, keyset: KeySet) -> int:
        """Adds ``keyset`` as the new latest version; returns its number."""
        what = f"writing the key set {self.secret}"
        data = serialize(keyset)
        body = {"payload": {"data": base64.b64encode(data).decode(), "dataCrc32c": str(_crc32c(data))}}
        response = self._request("POST", f"{self.secret}:addVersion", what, WRITE_ROLE, json=body)
        if response.status_code in (429,) or response.status_code >= 500:
            raise UnreachableError(
                f"{what}: Secret Manager answered {response.status_code}, and the version may or may not "
                "have been added; `qwen36 keys list` shows the set, then rerun"
            )
        return version_number(str(self._json(response, what, WRITE_ROLE).get("name", "")), what)

    def edit(self, change: Callable[[KeySet], KeySet]) -> tuple[int, KeySet]:
        """Applies ``change`` to the latest set and adds the result; returns (version, the set written).

        ``change`` raises a QwenError when it does not apply (a name taken, a name missing)."""
        base = self.read()
        written = change(base.keyset)
        number = self.add(written)
        after = base.number
        for _ in range(MAX_REAPPLY):
            if number == after + 1:
                return number, written
            # Versions after+1 .. number-1 were added by another edit between this one's read and
            # write, and the version just added dropped them: apply this edit on the newest of them.
            theirs = self.read(str(number - 1))
            try:
                written = change(theirs.keyset)
            except QwenError as refused:
                self.add(theirs.keyset)
                raise ApiError(
                    f"another edit of the key set landed at the same time (version {theirs.number}) and "
                    f"this one no longer applies to it: {refused.message}; its set is back in place"
                ) from None
            after = number
            number = self.add(written)
        if number == after + 1:
            return number, written
        raise ApiError(
            f"the key set kept changing while this command wrote it (up to version {number}); "
            "`qwen36 keys list` shows where it stands, then rerun"
        )


def version_number(name: str, what: str) -> int:
    match = _VERSION.search(name)
    if match is None:
        raise ApiError(f"{what}: Secret Manager named the version {name!r}, which has no number")
    return int(match["n"])
