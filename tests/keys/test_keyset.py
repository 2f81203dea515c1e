"""The key set's format as the CLI writes it (contract B): what it makes parses back, verifies with
the spec's own check (tests/keys/test_keys_cli.py ``spec_name_of``) and with the door's own reader
(door/keyset.py, which the CLI cannot import: the two rooms share only the format), and a payload off
the format is refused with what is wrong."""

from __future__ import annotations

import json

import pytest

from door import keyset as door_keyset
from qwen36.keys import keyset as ks
from tests.keys.test_keys_cli import KEY, spec_name_of


def test_a_new_key_is_qk_and_43_urlsafe_characters_and_never_repeats() -> None:
    made = {ks.new_key() for _ in range(200)}
    assert len(made) == 200 and all(KEY.match(k) for k in made)


def test_what_the_cli_writes_parses_back_and_verifies_by_the_spec() -> None:
    alice, bob = ks.new_key(), ks.new_key()
    limits = ks.Limits(concurrent=2, tokens_per_minute=20000)
    written = ks.KeySet(
        (
            ks.make_entry("alice", alice, "2026-12-02T01:02:03Z", limits),
            ks.make_entry("bob", bob, "2026-12-02T01:02:04Z"),
            ks.Entry(name="default", created="2026-12-02T01:02:05Z", revoked=True),
        )
    )
    payload = ks.serialize(written)
    assert ks.parse(payload) == written
    assert spec_name_of(payload, alice) == "alice" and spec_name_of(payload, bob) == "bob"
    assert spec_name_of(payload, "qk-" + "A" * 43) is None
    # The door reads what the CLI wrote: the same names, the revoked default refused.
    entries = door_keyset.parse(payload)
    assert door_keyset.match(entries, alice) == "alice" and door_keyset.match(entries, bob) == "bob"
    assert door_keyset.match(entries, "qk-" + "A" * 43) is None and entries["default"].revoked
    assert entries["alice"].limits.concurrent == 2 and entries["alice"].limits.tokens_per_minute == 20000
    document = json.loads(payload)
    assert document["keys"][0]["limits"] == {"concurrent": 2, "tokensPerMinute": 20000}
    assert "limits" not in document["keys"][1]  # no limits: as today
    assert document["keys"][2] == {"name": "default", "revoked": True, "created": "2026-12-02T01:02:05Z"}
    assert alice not in payload.decode() and bob not in payload.decode()
    # Two entries of one key never share a salt, so equal keys would not share a hash.
    same = ks.new_key()
    assert ks.make_entry("a", same, "t").hash != ks.make_entry("b", same, "t").hash


@pytest.mark.parametrize(
    ("payload", "why"),
    [
        (b"\xff", "not UTF-8 JSON"),
        (b'{"version": 2, "keys": []}', "not a version-1 key set"),
        (b'{"version": 1, "keys": {}}', "'keys' is not a list"),
        (b'{"version": 1, "keys": [{"name": "Alice", "created": "t", "revoked": true}]}', "is not 1-63"),
        (b'{"version": 1, "keys": [{"name": "a", "created": "t", "salt": "00", "hash": "00"}]}', "'salt'"),
        (
            b'{"version": 1, "keys": [{"name": "a", "created": "t", "revoked": true},'
            b' {"name": "a", "created": "t", "revoked": true}]}',
            "appears twice",
        ),
        (
            json.dumps(
                {
                    "version": 1,
                    "keys": [{**ks.make_entry("a", "k", "t").to_json(), "limits": {"concurrent": 0}}],
                }
            ).encode(),
            "limits.concurrent is not a positive whole number",
        ),
    ],
)
def test_a_payload_off_the_format_is_refused(payload: bytes, why: str) -> None:
    with pytest.raises(ks.KeySetError, match=why):
        ks.parse(payload)
