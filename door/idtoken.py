"""Verifies the Google ID token the VM's idle watcher sends with its stop call.

The watcher asks its metadata server for an identity token with the door's URL as audience
(https://cloud.google.com/compute/docs/instances/verifying-instance-identity); Google signs it with
RS256. The door checks it as Google's OpenID Connect guide says
(https://developers.google.com/identity/openid-connect/openid-connect#validatinganidtoken):

* the header's ``alg`` is RS256 and its ``kid`` names one of Google's current keys, fetched from
  ``https://www.googleapis.com/oauth2/v3/certs`` (JSON Web Keys) and kept for their Cache-Control
  max-age; the signature verifies under that key (PKCS#1 v1.5, SHA-256, checked by ``rsa``);
* ``iss`` is ``https://accounts.google.com`` or ``accounts.google.com``;
* ``aud`` is one of the door's configured URLs (a token minted for another service is refused);
* ``exp`` is in the future and ``iat`` not in the future, each within a minute of clock skew;
* the token is the VM's service account's: ``email`` is that account and ``email_verified`` is
  true (the metadata server's ``format=full`` tokens carry both: the JWT payload on the page above),
  or, where no ``email`` claim comes, ``sub`` (or ``azp``) is the account's unique id, as OpenID
  Connect's stable identifier of the subject ("sub ... never reused",
  https://developers.google.com/identity/openid-connect/openid-connect#an-id-tokens-payload; smallstep's
  GCP provisioner accepts a GCE token on ``sub`` or ``email`` alike, smallstep/certificates
  authority/provisioner/gcp.go). Which claims a real GCE token carries is secondary evidence only, so
  either proof passes; a token of any other account fails both.

Any failure is a ``TokenError`` naming the first check that failed.
"""

from __future__ import annotations

import base64
import json
import re
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass

import rsa

ISSUERS = ("https://accounts.google.com", "accounts.google.com")
SKEW_S = 60.0
DEFAULT_KEYS_TTL_S = 3600.0
# An unknown kid refetches the keys (Google rotates them), at most this often.
REFETCH_MIN_S = 30.0
_MAX_AGE = re.compile(r"max-age=(\d+)")


class TokenError(ValueError):
    pass


def _b64(segment: str) -> bytes:
    return base64.urlsafe_b64decode(segment + "=" * (-len(segment) % 4))


def _int(segment: str) -> int:
    return int.from_bytes(_b64(segment), "big")


@dataclass(frozen=True)
class Keys:
    by_kid: dict[str, rsa.PublicKey]
    fetched: float
    ttl_s: float


def parse_jwks(body: bytes, cache_control: str = "") -> tuple[dict[str, rsa.PublicKey], float]:
    doc = json.loads(body)
    keys = {
        k["kid"]: rsa.PublicKey(_int(k["n"]), _int(k["e"]))
        for k in doc.get("keys", [])
        if k.get("kty") == "RSA" and k.get("kid") and k.get("n") and k.get("e")
    }
    match = _MAX_AGE.search(cache_control)
    return keys, float(match.group(1)) if match else DEFAULT_KEYS_TTL_S


Fetch = Callable[[], Awaitable[tuple[bytes, str]]]
"""Returns the JWKS body and its Cache-Control header."""


class Verifier:
    def __init__(
        self,
        fetch: Fetch,
        *,
        audiences: tuple[str, ...],
        service_account: str,
        service_account_id: str = "",
        clock: Callable[[], float] = time.time,
    ) -> None:
        self._fetch = fetch
        self.audiences = audiences
        self.service_account = service_account
        self.service_account_id = service_account_id
        self._clock = clock
        self._keys: Keys | None = None
        self._last_fetch = -1e18

    async def _key(self, kid: str) -> rsa.PublicKey:
        now = time.monotonic()
        keys = self._keys
        stale = keys is None or now - keys.fetched > keys.ttl_s
        unknown = keys is not None and kid not in keys.by_kid and now - self._last_fetch > REFETCH_MIN_S
        if stale or unknown:
            self._last_fetch = now
            body, cache_control = await self._fetch()
            by_kid, ttl = parse_jwks(body, cache_control)
            self._keys = keys = Keys(by_kid, now, ttl)
        assert keys is not None
        if kid not in keys.by_kid:
            raise TokenError(f"the token's key id {kid!r} is not one of Google's current keys")
        return keys.by_kid[kid]

    async def verify(self, token: str) -> dict[str, object]:
        """The token's claims, once every check above passed."""
        if not self.audiences or not self.service_account:
            raise TokenError("the door has no audience or service account configured for the stop")
        parts = token.split(".")
        if len(parts) != 3:
            raise TokenError("not a JWT (three dot-separated parts)")
        try:
            header = json.loads(_b64(parts[0]))
            claims = json.loads(_b64(parts[1]))
            signature = _b64(parts[2])
        except ValueError as exc:
            raise TokenError(f"undecodable JWT: {exc}") from None
        if not isinstance(header, dict) or not isinstance(claims, dict):
            raise TokenError("the JWT's header or payload is not an object")
        if header.get("alg") != "RS256":
            raise TokenError(f"alg {header.get('alg')!r} is not RS256")
        key = await self._key(str(header.get("kid", "")))
        try:
            method = rsa.verify(f"{parts[0]}.{parts[1]}".encode("ascii"), signature, key)
        except (rsa.VerificationError, ValueError):
            raise TokenError("the signature does not verify under Google's key") from None
        if method != "SHA-256":
            raise TokenError(f"signed with {method}, not SHA-256")
        self._check_claims(claims)
        return claims

    def _check_claims(self, claims: dict[str, object]) -> None:
        now = self._clock()
        if claims.get("iss") not in ISSUERS:
            raise TokenError(f"issuer {claims.get('iss')!r} is not Google")
        audience = claims.get("aud")
        if not isinstance(audience, str) or audience.rstrip("/") not in self.audiences:
            raise TokenError(f"audience {audience!r} is not this door")
        exp, iat = claims.get("exp"), claims.get("iat")
        if not isinstance(exp, int | float) or not isinstance(iat, int | float):
            raise TokenError("exp or iat missing")
        if exp + SKEW_S < now:
            raise TokenError("the token has expired")
        if iat - SKEW_S > now:
            raise TokenError("the token was issued in the future")
        email = claims.get("email")
        if email is None and self.service_account_id:
            subject = {claims.get("sub"), claims.get("azp")}
            if self.service_account_id not in subject:
                sub, azp = claims.get("sub"), claims.get("azp")
                raise TokenError(f"sub {sub!r} (azp {azp!r}) is not the server's service account")
            return
        if email != self.service_account:
            raise TokenError(f"email {email!r} is not the server's service account")
        if claims.get("email_verified") is not True:
            raise TokenError("email_verified is not true")
