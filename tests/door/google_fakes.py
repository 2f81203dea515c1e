"""Loopback stand-ins for the door's other Google surfaces: Cloud Monitoring's ``timeSeries.create``
and Google's ID-token signing keys, with a signer that mints tokens the way the VM's metadata
server does.

* ``POST /v3/projects/{project}/timeSeries`` answers ``{}`` on success
  (https://cloud.google.com/monitoring/api/ref_v3/rest/v3/projects.timeSeries/create: "If
  successful, the response body is an empty JSON object"); every body is kept.
* ``GET /oauth2/v3/certs`` answers ``{"keys": [{kty, alg, use, kid, n, e}]}`` with a Cache-Control
  max-age, the shape of https://www.googleapis.com/oauth2/v3/certs (JSON Web Keys, RFC 7517).
* Tokens carry the claims of a metadata-server identity token for a service account
  (https://cloud.google.com/compute/docs/instances/verifying-instance-identity#token_format):
  iss, aud, azp, sub, email, email_verified, iat, exp, signed RS256 with a kid in the header.
* ``GET /v1/projects/{project}/secrets/{id}/versions/latest:access`` (Secret Manager's access method,
  https://cloud.google.com/secret-manager/docs/reference/rest/v1/projects.secrets.versions/access)
  answers ``{"name": ".../versions/N", "payload": {"data": "<base64>"}}`` (the SecretPayload's
  ``dataCrc32c`` is optional: https://cloud.google.com/secret-manager/docs/reference/rest/v1/SecretPayload,
  and left out); a secret with no version ``404 NOT_FOUND``, one whose latest version is destroyed
  ``400 FAILED_PRECONDITION``, a secret the caller may not read ``403 PERMISSION_DENIED``, each in
  Google's error body (https://cloud.google.com/apis/design/errors#http_mapping). The caller must
  send the metadata server's token (tests/idle/vm_fakes.TOKEN).
"""

from __future__ import annotations

import base64
import json
import re
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler
from typing import Any

import rsa

from tests.harness.loopback import serve_on_loopback
from tests.idle.vm_fakes import TOKEN

KID = "f2e1c3a4b5d6e7f80911aabbccddeeff00112233"
# The VM account's unique id (projects.serviceAccounts uniqueId, 21 digits): its tokens' sub and azp.
VM_ACCOUNT_ID = "104532107733851617093"
# 1024-bit keys: pure-Python key generation at 2048 bits takes seconds; the check is the same.
KEY_BITS = 1024


def _b64(data: bytes) -> str:
    return base64.urlsafe_b64encode(data).rstrip(b"=").decode()


def _b64_int(value: int) -> str:
    return _b64(value.to_bytes((value.bit_length() + 7) // 8, "big"))


@dataclass
class Signer:
    public: rsa.PublicKey
    private: rsa.PrivateKey
    kid: str = KID

    @classmethod
    def new(cls, kid: str = KID) -> Signer:
        public, private = rsa.newkeys(KEY_BITS)
        return cls(public, private, kid)

    def jwk(self) -> dict[str, str]:
        return {
            "kty": "RSA",
            "alg": "RS256",
            "use": "sig",
            "kid": self.kid,
            "n": _b64_int(self.public.n),
            "e": _b64_int(self.public.e),
        }

    def token(
        self,
        *,
        audience: str,
        email: str | None,
        lifetime_s: float = 3600,
        issued: float | None = None,
        header: dict[str, Any] | None = None,
        **overrides: Any,
    ) -> str:
        now = time.time() if issued is None else issued
        claims: dict[str, Any] = {
            "iss": "https://accounts.google.com",
            "aud": audience,
            "azp": VM_ACCOUNT_ID,
            "sub": VM_ACCOUNT_ID,
            "email": email,
            "email_verified": True,
            "iat": int(now),
            "exp": int(now + lifetime_s),
        }
        claims.update(overrides)
        # A claim given as None is left out (a token without `email`, say).
        claims = {k: v for k, v in claims.items() if v is not None}
        head = {"alg": "RS256", "kid": self.kid, "typ": "JWT", **(header or {})}
        signing_input = f"{_b64(json.dumps(head).encode())}.{_b64(json.dumps(claims).encode())}"
        signature = rsa.sign(signing_input.encode(), self.private, "SHA-256")
        return f"{signing_input}.{_b64(signature)}"


@dataclass
class FakeGoogle:
    signers: list[Signer] = field(default_factory=list)
    time_series: list[dict[str, Any]] = field(default_factory=list)
    writes: int = 0
    cert_reads: int = 0
    secrets: dict[str, list[bytes | None]] = field(default_factory=dict)
    """Secret Manager: each secret's versions by full name (``projects/p/secrets/id``), oldest first;
    None is a destroyed version."""
    denied: set[str] = field(default_factory=set)
    secret_reads: int = 0
    _lock: threading.Lock = field(default_factory=threading.Lock)

    def add_version(self, secret: str, payload: bytes | None) -> None:
        with self._lock:
            self.secrets.setdefault(secret, []).append(payload)

    def points(self, metric: str) -> list[dict[str, Any]]:
        """Every series of ``custom.googleapis.com/qwen36/door/<metric>`` received, in order."""
        with self._lock:
            return [s for s in self.time_series if s["metric"]["type"].endswith(f"/door/{metric}")]


_ACCESS = re.compile(r"/v1/(projects/[^/]+/secrets/[^/]+)/versions/latest:access")


def _handler(google: FakeGoogle) -> type[BaseHTTPRequestHandler]:
    class Handler(BaseHTTPRequestHandler):
        def log_message(self, format: str, *args: object) -> None:
            pass

        def _json(self, status: int, body: object, headers: dict[str, str] | None = None) -> None:
            data = json.dumps(body).encode()
            self.send_response(status)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(data)))
            for k, v in (headers or {}).items():
                self.send_header(k, v)
            self.end_headers()
            self.wfile.write(data)

        def _access(self, secret: str) -> None:
            def error(status: int, state: str, message: str) -> None:
                self._json(status, {"error": {"code": status, "message": message, "status": state}})

            with google._lock:
                google.secret_reads += 1
                versions = list(google.secrets.get(secret, []))
                denied = secret in google.denied
            if self.headers.get("Authorization") != f"Bearer {TOKEN}":
                error(401, "UNAUTHENTICATED", "Request had invalid authentication credentials.")
            elif denied:
                what = f"for resource '{secret}/versions/latest' (or it may not exist)."
                error(403, "PERMISSION_DENIED", f"Permission 'secretmanager.versions.access' denied {what}")
            elif not versions:
                error(404, "NOT_FOUND", f"Secret [{secret}] not found or has no versions.")
            elif versions[-1] is None:
                error(
                    400,
                    "FAILED_PRECONDITION",
                    f"Secret Version [{secret}/versions/{len(versions)}] is in DESTROYED state.",
                )
            else:
                data = base64.b64encode(versions[-1]).decode()
                self._json(200, {"name": f"{secret}/versions/{len(versions)}", "payload": {"data": data}})

        def do_GET(self) -> None:
            access = _ACCESS.fullmatch(self.path)
            if access is not None:
                self._access(access.group(1))
            elif self.path == "/oauth2/v3/certs":
                with google._lock:
                    google.cert_reads += 1
                keys = [s.jwk() for s in google.signers]
                self._json(200, {"keys": keys}, {"Cache-Control": "public, max-age=20127, must-revalidate"})
            else:
                self._json(404, {"error": {"code": 404, "message": "not found"}})

        def do_POST(self) -> None:
            length = int(self.headers.get("Content-Length") or 0)
            body = json.loads(self.rfile.read(length) or b"{}")
            if self.path.startswith("/v3/projects/") and self.path.endswith("/timeSeries"):
                with google._lock:
                    google.writes += 1
                    google.time_series.extend(body.get("timeSeries", []))
                self._json(200, {})
            else:
                self._json(404, {"error": {"code": 404, "message": "not found"}})

    return Handler


@contextmanager
def fake_google(google: FakeGoogle) -> Iterator[str]:
    with serve_on_loopback(_handler(google)) as url:
        yield url
