"""Where a request carries its key, read before anything else the door does with it.

A key arrives as ``Authorization: Bearer KEY`` or ``X-Api-Key: KEY`` (what llama-server itself
accepts, so clients need no change), or, from a browser that entered it on the door's key page, as
a session cookie made from the key (door/keys.py checks both, in constant time).
"""

from __future__ import annotations

from collections.abc import Mapping

COOKIE = "qwen36_door"


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
