"""The named-key set's payload (version 1), parsed and checked: the door's half of the format (the
CLI's ``qwen36 keys`` writes it; door/ imports no other room, so the format is written twice and a
test parses one's output with the other).

    {"version": 1,
     "keys": [{"name": "alice", "salt": "<32 hex>", "hash": "<64 hex: sha256(salt bytes + key)>",
               "created": "2026-12-02T01:02:03Z",
               "limits": {"concurrent": 2, "tokensPerMinute": 20000}},
              {"name": "default", "revoked": true, "created": "..."}]}

A ``default`` entry overrides the program's key: with a ``hash`` it replaces it, with ``revoked``
it disables it. Matching a presented key against the set hashes it under every entry's salt and
compares every digest with ``hmac.compare_digest``, always all of them, so the time taken says
nothing of which entry, if any, matched.
"""

from __future__ import annotations

import hashlib
import hmac
import json
import re
from dataclasses import dataclass
from typing import Any

VERSION = 1
DEFAULT = "default"
NAME = re.compile(r"[a-z0-9][a-z0-9-]{0,62}")
_HEX32 = re.compile(r"[0-9a-f]{32}")
_HEX64 = re.compile(r"[0-9a-f]{64}")


class KeySetError(ValueError):
    pass


@dataclass(frozen=True)
class Limits:
    concurrent: int | None = None
    tokens_per_minute: int | None = None

    @property
    def any(self) -> bool:
        return self.concurrent is not None or self.tokens_per_minute is not None


@dataclass(frozen=True)
class Entry:
    name: str
    salt: bytes = b""
    digest: bytes = b""
    revoked: bool = False
    created: str = ""
    limits: Limits = Limits()


def key_digest(salt: bytes, key: str) -> bytes:
    return hashlib.sha256(salt + key.encode("utf-8", "surrogatepass")).digest()


def _limit(doc: dict[str, Any], field: str, where: str) -> int | None:
    value = doc.get(field)
    if value is None:
        return None
    if not isinstance(value, int) or isinstance(value, bool) or value < 1:
        raise KeySetError(f"{where}: limits.{field} must be a whole number >= 1 or null, not {value!r}")
    return value


def _entry(doc: Any, i: int) -> Entry:
    where = f"keys[{i}]"
    if not isinstance(doc, dict):
        raise KeySetError(f"{where} is not an object")
    name = doc.get("name")
    if not isinstance(name, str) or not NAME.fullmatch(name):
        raise KeySetError(f"{where}: name {name!r} is not [a-z0-9][a-z0-9-]{{0,62}}")
    where = f"key {name!r}"
    limits_doc = doc.get("limits") or {}
    if not isinstance(limits_doc, dict):
        raise KeySetError(f"{where}: limits is not an object")
    limits = Limits(_limit(limits_doc, "concurrent", where), _limit(limits_doc, "tokensPerMinute", where))
    created = str(doc.get("created", ""))
    if doc.get("revoked") is True:
        return Entry(name, revoked=True, created=created, limits=limits)
    salt, digest = doc.get("salt"), doc.get("hash")
    if not isinstance(salt, str) or not _HEX32.fullmatch(salt):
        raise KeySetError(f"{where}: salt is not 32 lower-case hex characters")
    if not isinstance(digest, str) or not _HEX64.fullmatch(digest):
        raise KeySetError(f"{where}: hash is not 64 lower-case hex characters")
    return Entry(name, bytes.fromhex(salt), bytes.fromhex(digest), False, created, limits)


def parse(payload: bytes) -> dict[str, Entry]:
    """The set by name; ``KeySetError`` names the first thing wrong with it."""
    try:
        doc = json.loads(payload.decode("utf-8"))
    except (UnicodeDecodeError, ValueError) as exc:
        raise KeySetError(f"the key set is not JSON: {exc}") from None
    if not isinstance(doc, dict) or doc.get("version") != VERSION:
        raise KeySetError(f"the key set's version is not {VERSION}")
    keys = doc.get("keys")
    if not isinstance(keys, list):
        raise KeySetError("the key set has no keys list")
    out: dict[str, Entry] = {}
    for i, item in enumerate(keys):
        entry = _entry(item, i)
        if entry.name in out:
            raise KeySetError(f"key {entry.name!r} appears twice")
        out[entry.name] = entry
    return out


def match(entries: dict[str, Entry], key: str) -> str | None:
    """The name of the live entry whose hash is ``key``'s, comparing against every entry."""
    found: str | None = None
    for entry in entries.values():
        if entry.revoked:
            continue
        if hmac.compare_digest(key_digest(entry.salt, key), entry.digest) and found is None:
            found = entry.name
    return found
