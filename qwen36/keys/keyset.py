"""The door's named-key set as the CLI makes and edits it: the secret's payload, version 1.

The one definition of the format is docs/door.md (contract B): JSON, UTF-8,
``{"version": 1, "keys": [{"name", "salt", "hash", "created", "limits"?}, {"name", "revoked": true,
"created"}]}``. ``hash`` is ``sha256(bytes.fromhex(salt) + key.encode())`` in hex, ``salt`` 16 random
bytes in hex; the plain key (``qk-`` and 43 characters of ``secrets.token_urlsafe(32)``) is never
stored. An entry named ``default`` overrides the program's key: with a hash it replaces it, revoked
it disables it; without one the program's key is ``default``. The door parses and verifies the same
payload with its own copy (``door/keyset.py``: the door imports nothing of the CLI's), and a test holds
the two to one format.
"""

from __future__ import annotations

import hashlib
import json
import re
import secrets
from dataclasses import dataclass, field, replace
from datetime import UTC, datetime
from typing import Any

FORMAT_VERSION = 1
DEFAULT = "default"
KEY_PREFIX = "qk-"
KEY_BYTES = 32
SALT_BYTES = 16
NAME = re.compile(r"^[a-z0-9][a-z0-9-]{0,62}$")
NAME_RULE = "1-63 characters of a-z, 0-9 and '-', starting with a letter or digit"
_HEX32 = re.compile(r"^[0-9a-f]{32}$")
_HEX64 = re.compile(r"^[0-9a-f]{64}$")
LIMIT_FIELDS = {"concurrent": "concurrent", "tokens_per_minute": "tokensPerMinute"}


class KeySetError(ValueError):
    """A payload that is not a version-1 key set."""


@dataclass(frozen=True)
class Limits:
    concurrent: int | None = None
    tokens_per_minute: int | None = None

    def to_json(self) -> dict[str, int]:
        pairs = ((wire, getattr(self, attr)) for attr, wire in LIMIT_FIELDS.items())
        return {wire: value for wire, value in pairs if value is not None}

    def describe(self) -> str:
        parts = []
        if self.concurrent is not None:
            parts.append(f"{self.concurrent} concurrent")
        if self.tokens_per_minute is not None:
            parts.append(f"{self.tokens_per_minute} tokens/min")
        return ", ".join(parts) or "none"


@dataclass(frozen=True)
class Entry:
    name: str
    created: str
    salt: str = ""
    hash: str = ""
    revoked: bool = False
    limits: Limits = field(default_factory=Limits)

    @property
    def active(self) -> bool:
        return not self.revoked and bool(self.hash)

    def to_json(self) -> dict[str, Any]:
        if self.revoked:
            return {"name": self.name, "revoked": True, "created": self.created}
        out: dict[str, Any] = {"name": self.name, "salt": self.salt, "hash": self.hash}
        out["created"] = self.created
        limits = self.limits.to_json()
        if limits:
            out["limits"] = limits
        return out


@dataclass(frozen=True)
class KeySet:
    entries: tuple[Entry, ...] = ()

    def find(self, name: str) -> Entry | None:
        return next((e for e in self.entries if e.name == name), None)

    def put(self, entry: Entry) -> KeySet:
        """The set with ``entry`` in place of the one of its name, or appended."""
        if self.find(entry.name) is None:
            return KeySet((*self.entries, entry))
        return KeySet(tuple(entry if e.name == entry.name else e for e in self.entries))


def now() -> str:
    return datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def new_key() -> str:
    """A new key: ``qk-`` and 43 URL-safe characters (32 random bytes)."""
    return KEY_PREFIX + secrets.token_urlsafe(KEY_BYTES)


def hash_key(key: str, salt: str) -> str:
    return hashlib.sha256(bytes.fromhex(salt) + key.encode()).hexdigest()


def make_entry(name: str, key: str, created: str, limits: Limits | None = None) -> Entry:
    salt = secrets.token_hex(SALT_BYTES)
    return Entry(name=name, created=created, salt=salt, hash=hash_key(key, salt), limits=limits or Limits())


def revoked(entry: Entry) -> Entry:
    return replace(entry, salt="", hash="", revoked=True, limits=Limits())


def valid_name(name: str) -> bool:
    return NAME.fullmatch(name) is not None


def serialize(keyset: KeySet) -> bytes:
    document = {"version": FORMAT_VERSION, "keys": [e.to_json() for e in keyset.entries]}
    return json.dumps(document, separators=(",", ":")).encode("utf-8")


def parse(data: bytes) -> KeySet:
    """The key set of a payload; :class:`KeySetError` names what is wrong with one that is not."""
    try:
        document = json.loads(data.decode("utf-8"))
    except (UnicodeDecodeError, ValueError) as exc:
        raise KeySetError(f"not UTF-8 JSON ({exc})") from None
    if not isinstance(document, dict) or document.get("version") != FORMAT_VERSION:
        raise KeySetError(f"not a version-{FORMAT_VERSION} key set")
    keys = document.get("keys")
    if not isinstance(keys, list):
        raise KeySetError("its 'keys' is not a list")
    entries: list[Entry] = []
    for raw in keys:
        entry = _entry(raw)
        if any(e.name == entry.name for e in entries):
            raise KeySetError(f"the name {entry.name!r} appears twice")
        entries.append(entry)
    return KeySet(tuple(entries))


def _entry(raw: Any) -> Entry:
    if not isinstance(raw, dict):
        raise KeySetError("an entry is not an object")
    name = raw.get("name")
    if not isinstance(name, str) or not valid_name(name):
        raise KeySetError(f"the name {name!r} is not {NAME_RULE}")
    created = raw.get("created")
    if not isinstance(created, str):
        raise KeySetError(f"{name}: 'created' is not a string")
    if raw.get("revoked") is True:
        return Entry(name=name, created=created, revoked=True)
    salt, digest = raw.get("salt"), raw.get("hash")
    if not isinstance(salt, str) or not _HEX32.match(salt):
        raise KeySetError(f"{name}: 'salt' is not 32 hex characters")
    if not isinstance(digest, str) or not _HEX64.match(digest):
        raise KeySetError(f"{name}: 'hash' is not 64 hex characters")
    limits = raw.get("limits") or {}
    if not isinstance(limits, dict):
        raise KeySetError(f"{name}: 'limits' is not an object")
    values: dict[str, int | None] = {}
    for attr, wire in LIMIT_FIELDS.items():
        value = limits.get(wire)
        if value is not None and (isinstance(value, bool) or not isinstance(value, int) or value < 1):
            raise KeySetError(f"{name}: limits.{wire} is not a positive whole number")
        values[attr] = value
    return Entry(name=name, created=created, salt=salt, hash=digest, limits=Limits(**values))
