"""The API key check, before anything else the door does with a request.

A key arrives as ``Authorization: Bearer KEY`` or ``X-Api-Key: KEY`` (what llama-server itself
accepts, so clients need no change), or, from a browser that entered it on the door's key page, as
a session cookie derived from the key. Every comparison hashes both sides first and compares the
digests with ``hmac.compare_digest``: the time taken does not depend on how much of a guess matched,
nor on its length.
"""

from __future__ import annotations

import hashlib
import hmac
from collections.abc import Mapping

COOKIE = "qwen36_door"
# The cookie carries an HMAC of this label under the key, never the key itself: a cookie read out of
# a browser profile is no API key, and rotating the key voids every cookie.
_COOKIE_LABEL = b"qwen36-door-session-v1"


def _digest(value: str) -> bytes:
    return hashlib.sha256(value.encode("utf-8", "surrogatepass")).digest()


def cookie_value(key: str) -> str:
    return hmac.new(key.encode("utf-8"), _COOKIE_LABEL, hashlib.sha256).hexdigest()


def presented_key(headers: Mapping[str, str]) -> str | None:
    """The key a request presents in its headers (names lower-case, as ASGI gives them)."""
    auth = headers.get("authorization", "")
    scheme, _, token = auth.partition(" ")
    if scheme.lower() == "bearer" and token.strip():
        return token.strip()
    api_key = headers.get("x-api-key", "").strip()
    return api_key or None


def cookie_from(headers: Mapping[str, str]) -> str | None:
    for part in headers.get("cookie", "").split(";"):
        name, _, value = part.strip().partition("=")
        if name == COOKIE and value:
            return value
    return None


class KeyCheck:
    def __init__(self, key: str) -> None:
        self._key_digest = _digest(key)
        self._cookie_digest = _digest(cookie_value(key))

    def key_matches(self, candidate: str) -> bool:
        return hmac.compare_digest(_digest(candidate), self._key_digest)

    def allows(self, headers: Mapping[str, str]) -> bool:
        """True when the headers carry the key or the session cookie. Both are compared, always, so
        a request with a header and one without take the same path through the check."""
        key = presented_key(headers) or ""
        cookie = cookie_from(headers) or ""
        by_key = hmac.compare_digest(_digest(key), self._key_digest)
        by_cookie = hmac.compare_digest(_digest(cookie), self._cookie_digest)
        return bool(key and by_key) or bool(cookie and by_cookie)
