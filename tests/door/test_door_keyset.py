"""The key set's payload as the door reads it (contract B, door/keyset.py): what parses, what is
refused with the reason named, and the match against every entry."""

from __future__ import annotations

import hashlib
import json
import secrets
from typing import Any

import pytest

from door import keyset


def _entry(name: str, key: str, **extra: Any) -> dict[str, Any]:
    salt = secrets.token_hex(16)
    digest = hashlib.sha256(bytes.fromhex(salt) + key.encode()).hexdigest()
    return {"name": name, "salt": salt, "hash": digest, "created": "2026-12-02T01:02:03Z", **extra}


def _payload(*keys: dict[str, Any]) -> bytes:
    return json.dumps({"version": 1, "keys": list(keys)}).encode()


def test_a_set_parses_with_its_limits_and_matches_each_key() -> None:
    alice, bob = "qk-" + secrets.token_urlsafe(32), "qk-" + secrets.token_urlsafe(32)
    entries = keyset.parse(
        _payload(
            _entry("alice", alice, limits={"concurrent": 2, "tokensPerMinute": 20000}),
            _entry("bob", bob, limits={"concurrent": None}),
            {"name": "default", "revoked": True, "created": "2026-12-02T01:02:03Z"},
        )
    )
    assert entries["alice"].limits == keyset.Limits(2, 20000)
    assert entries["bob"].limits == keyset.Limits() and not entries["bob"].limits.any
    assert entries["default"].revoked
    assert keyset.match(entries, alice) == "alice" and keyset.match(entries, bob) == "bob"
    assert keyset.match(entries, alice[:-1]) is None and keyset.match(entries, "") is None


def test_a_revoked_entry_matches_nothing() -> None:
    key = "qk-" + secrets.token_urlsafe(32)
    assert keyset.match(keyset.parse(_payload(_entry("alice", key, revoked=True))), key) is None


@pytest.mark.parametrize(
    ("payload", "why"),
    [
        (b"not json", "not JSON"),
        (json.dumps({"version": 2, "keys": []}).encode(), "version"),
        (json.dumps({"version": 1}).encode(), "no keys list"),
        (_payload(_entry("Alice", "k")), "is not [a-z0-9]"),
        (_payload(_entry("-alice", "k")), "is not [a-z0-9]"),
        (_payload(_entry("a" * 64, "k")), "is not [a-z0-9]"),
        (_payload(_entry("alice", "k"), _entry("alice", "j")), "appears twice"),
        (_payload({**_entry("alice", "k"), "salt": "00"}), "salt"),
        (_payload({**_entry("alice", "k"), "hash": "ZZ" * 32}), "hash"),
        (_payload(_entry("alice", "k", limits={"concurrent": 0})), "limits.concurrent"),
        (_payload(_entry("alice", "k", limits={"tokensPerMinute": "lots"})), "limits.tokensPerMinute"),
    ],
)
def test_a_bad_set_is_refused_with_its_reason(payload: bytes, why: str) -> None:
    with pytest.raises(keyset.KeySetError, match=why.replace("[", r"\[")):
        keyset.parse(payload)
