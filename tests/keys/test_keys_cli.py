"""``qwen36 keys`` against Secret Manager's and Monitoring's shapes on loopback (tests/keys/google_fake.py):
add, list, rotate, revoke, the lost-update check, the one-line errors and their exit codes.

The keys it makes are checked with a verifier written here from the format's spec (contract B,
docs/door.md), not with the CLI's own code; tests/keys/test_keyset.py checks the door's own reader
(door/keyset.py) against the same payloads."""

from __future__ import annotations

import hashlib
import hmac
import json
import re
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest

from qwen36.errors import Exit
from qwen36.keys import keyset as ks
from qwen36.keys import usage
from tests.keys.google_fake import PROJECT, SECRET, SECRET_ID, DoorPoint, FakeGoogle

KEY = re.compile(r"^qk-[A-Za-z0-9_-]{43}$")
ROOT = Path(__file__).resolve().parents[2]


def spec_name_of(payload: bytes, presented: str) -> str | None:
    """The name of the set's key that ``presented`` is, or None: contract B read literally
    (sha256(bytes.fromhex(salt) + key.encode()) in hex, compared in constant time; revoked entries
    have no hash)."""
    document = json.loads(payload.decode("utf-8"))
    assert document["version"] == 1
    for entry in document["keys"]:
        assert re.fullmatch(r"[a-z0-9][a-z0-9-]{0,62}", entry["name"]), entry
        if entry.get("revoked") is True:
            assert "hash" not in entry and "salt" not in entry, entry
            continue
        assert re.fullmatch(r"[0-9a-f]{32}", entry["salt"]) and re.fullmatch(r"[0-9a-f]{64}", entry["hash"])
        digest = hashlib.sha256(bytes.fromhex(entry["salt"]) + presented.encode()).hexdigest()
        if hmac.compare_digest(digest, entry["hash"]):
            return str(entry["name"])
    return None


def _entries(google: FakeGoogle) -> dict[str, dict[str, Any]]:
    return {e["name"]: e for e in json.loads(google.latest())["keys"]}


def _key(out: str, name: str) -> str:
    (line,) = [line for line in out.splitlines() if KEY.match(line.removeprefix(f"{name}: "))]
    return line.removeprefix(f"{name}: ")


def test_add_prints_the_key_once_and_stores_only_its_salted_hash(keys: Any, google_api: FakeGoogle) -> None:
    ran = keys("add", "alice", "--concurrent", "2", "--tokens-per-minute", "20000")
    assert ran.code == 0, ran.err
    key = _key(ran.out, "alice")
    assert ran.out.count(key) == 1 and key not in google_api.latest().decode()
    assert f"alice: added as version 1 of {SECRET} (limits: 2 concurrent, 20000 tokens/min)" in ran.out
    assert "the key is shown only this once" in ran.out
    assert spec_name_of(google_api.latest(), key) == "alice"
    assert spec_name_of(google_api.latest(), key + "x") is None
    entry = _entries(google_api)["alice"]
    assert entry["limits"] == {"concurrent": 2, "tokensPerMinute": 20000}
    assert datetime.strptime(entry["created"], "%Y-%m-%dT%H:%M:%SZ")
    # The payload went with its checksum, which the fake checks.
    add = [c for c in google_api.calls if c[1].endswith(":addVersion")]
    assert len(add) == 1


def test_add_with_json_prints_one_object(keys: Any, google_api: FakeGoogle) -> None:
    ran = keys("add", "ci-job", "--json")
    assert ran.code == 0, ran.err
    (line,) = ran.out.splitlines()
    document = json.loads(line)
    assert KEY.match(document["key"]) and document["name"] == "ci-job"
    assert (document["secret"], document["version"], document["limits"]) == (SECRET, 1, {})
    assert spec_name_of(google_api.latest(), document["key"]) == "ci-job"


def test_a_second_key_keeps_the_first(keys: Any, google_api: FakeGoogle) -> None:
    alice = _key(keys("add", "alice").out, "alice")
    bob = _key(keys("add", "bob").out, "bob")
    assert len(google_api.secrets[SECRET_ID]) == 2
    assert spec_name_of(google_api.latest(), alice) == "alice"
    assert spec_name_of(google_api.latest(), bob) == "bob"


def test_a_taken_name_is_refused_in_one_line_with_10_and_nothing_written(
    keys: Any, google_api: FakeGoogle
) -> None:
    keys("add", "alice")
    ran = keys("add", "alice")
    assert ran.code == Exit.API_ERROR == 10
    assert ran.err == (
        f"keys: error: a key named alice already exists (in use) in {SECRET}; pick another name, "
        "or `qwen36 keys rotate alice` for a new key\n"
    )
    assert len(google_api.secrets[SECRET_ID]) == 1
    assert keys("add", "default").code == 10  # the program's key has that name


def test_rotate_gives_a_new_key_and_keeps_the_limits(keys: Any, google_api: FakeGoogle) -> None:
    old = _key(keys("add", "alice", "--concurrent", "3").out, "alice")
    ran = keys("rotate", "alice")
    assert ran.code == 0, ran.err
    new = _key(ran.out, "alice")
    assert new != old and "the old key stops" in ran.out
    assert spec_name_of(google_api.latest(), new) == "alice"
    assert spec_name_of(google_api.latest(), old) is None
    assert _entries(google_api)["alice"]["limits"] == {"concurrent": 3}
    # rotate default: the set's own default entry now replaces the program's key at the door.
    default = _key(keys("rotate", "default").out, "default")
    assert spec_name_of(google_api.latest(), default) == "default"


def test_rotate_or_revoke_of_a_name_not_in_the_set_is_8(keys: Any, google_api: FakeGoogle) -> None:
    for verb in ("rotate", "revoke"):
        ran = keys(verb, "carol")
        assert ran.code == Exit.NOT_FOUND == 8
        assert ran.err.startswith(f"keys: error: no key named carol in {SECRET}; `qwen36 keys list` shows")
        assert len(ran.err.splitlines()) == 1
    assert google_api.secrets[SECRET_ID] == []


def test_revoke_removes_the_hash_and_keeps_the_name(keys: Any, google_api: FakeGoogle) -> None:
    alice = _key(keys("add", "alice").out, "alice")
    bob = _key(keys("add", "bob").out, "bob")
    ran = keys("revoke", "alice")
    assert ran.code == 0, ran.err
    assert ran.out == f"alice: revoked as version 3 of {SECRET}; the door refuses it within 60 s\n"
    assert spec_name_of(google_api.latest(), alice) is None
    assert spec_name_of(google_api.latest(), bob) == "bob"
    assert _entries(google_api)["alice"]["revoked"] is True
    again = keys("revoke", "alice")
    assert (again.code, again.out) == (0, "alice: already revoked (version 3); nothing written\n")
    assert len(google_api.secrets[SECRET_ID]) == 3
    assert keys("add", "alice").code == 10  # a revoked name stays taken: its usage history is its own


def test_revoke_default_needs_force(keys: Any, google_api: FakeGoogle) -> None:
    ran = keys("revoke", "default")
    assert ran.code == Exit.USAGE == 2
    assert "pass --force to revoke it anyway" in ran.err and len(ran.err.splitlines()) == 1
    assert google_api.calls == []  # refused before anything was read
    forced = keys("revoke", "default", "--force")
    assert forced.code == 0, forced.err
    assert _entries(google_api)["default"] == {"name": "default", "revoked": True, "created": ANY_TIME}


class _AnyTime:
    def __eq__(self, other: object) -> bool:
        return isinstance(other, str) and bool(re.fullmatch(r"\d{4}-\d\d-\d\dT\d\d:\d\d:\d\dZ", other))


ANY_TIME: Any = _AnyTime()


@pytest.mark.parametrize(
    ("denied", "argv", "role"),
    [
        ("secretmanager.versions.access", ("list",), "roles/secretmanager.secretAccessor"),
        ("secretmanager.versions.add", ("add", "alice"), "roles/secretmanager.secretVersionAdder"),
        ("monitoring.timeSeries.list", ("list",), "roles/monitoring.viewer"),
    ],
)
def test_no_permission_is_6_and_names_the_role(
    keys: Any, google_api: FakeGoogle, denied: str, argv: tuple[str, ...], role: str
) -> None:
    google_api.denied.add(denied)
    ran = keys(*argv)
    assert ran.code == Exit.DENIED == 6
    (line,) = ran.err.splitlines()
    assert line.startswith("keys: error: ") and "permission denied (403" in line and denied in line
    assert line.endswith(f"grant yourself {role} on it")
    assert google_api.secrets[SECRET_ID] == []
    assert "qk-" not in ran.out


def test_a_secret_that_does_not_exist_is_8(keys: Any, google_api: FakeGoogle) -> None:
    ran = keys("list", secret=f"projects/{PROJECT}/secrets/qwen36-gone-door-keys")
    assert ran.code == Exit.NOT_FOUND
    assert (
        "not found (404: Secret [projects/123456789012/secrets/qwen36-gone-door-keys] not found.)" in ran.err
    )
    assert keys("add", "alice", secret=f"projects/{PROJECT}/secrets/qwen36-gone-door-keys").code == 8


def test_bad_names_and_secrets_are_usage_errors(keys: Any, google_api: FakeGoogle) -> None:
    for argv in (("add", "Alice"), ("add", "ab.c"), ("add", "a" * 64), ("rotate", "a_b"), ("add", "é")):
        ran = keys(*argv)
        assert ran.code == 2 and "is not 1-63 characters of a-z, 0-9 and '-'" in ran.err, argv
    ran = keys("list", secret="my-secret")
    assert ran.code == 2 and "is not projects/<project>/secrets/<id>" in ran.err
    assert keys("add", "bob", "--concurrent", "0").code == 2
    assert google_api.calls == []


def test_an_edit_that_landed_between_the_read_and_the_write_is_kept(
    keys: Any, google_api: FakeGoogle
) -> None:
    """Another user adds bob between this command's read and its write: the version numbers show it,
    and alice is applied again on top of bob's set."""
    bob_key = ks.new_key()
    theirs = ks.serialize(ks.KeySet((ks.make_entry("bob", bob_key, ks.now()),)))
    google_api.before_add.append(lambda g: g.add_version(SECRET_ID, theirs))
    ran = keys("add", "alice")
    assert ran.code == 0, ran.err
    alice = _key(ran.out, "alice")
    # 1: bob's; 2: alice's, made from the empty set read before bob's; 3: alice on top of bob's.
    assert len(google_api.secrets[SECRET_ID]) == 3
    assert "added as version 3" in ran.out
    assert spec_name_of(google_api.latest(), alice) == "alice"
    assert spec_name_of(google_api.latest(), bob_key) == "bob"


def test_the_same_name_added_at_the_same_time_keeps_the_other_and_fails(
    keys: Any, google_api: FakeGoogle
) -> None:
    their_key = ks.new_key()
    theirs = ks.serialize(ks.KeySet((ks.make_entry("alice", their_key, ks.now()),)))
    google_api.before_add.append(lambda g: g.add_version(SECRET_ID, theirs))
    ran = keys("add", "alice")
    assert ran.code == 10
    assert "another edit of the key set landed at the same time (version 1)" in ran.err
    assert "its set is back in place" in ran.err and len(ran.err.splitlines()) == 1
    assert google_api.latest() == theirs
    assert spec_name_of(google_api.latest(), their_key) == "alice"
    assert "qk-" not in ran.out  # no key shown that the door would refuse


NOW = datetime.now(UTC).replace(second=0, microsecond=0)


def _traffic(google: FakeGoogle) -> None:
    """The door's points: alice 3 + 2 requests today and 4 ten days ago; bob one 20 days ago."""
    minute = timedelta(minutes=1)
    for key, end, requests, tokens_in, tokens_out in (
        ("alice", NOW - 5 * minute, 3, 100.0, 50.0),
        ("alice", NOW - 90 * minute, 2, 10.0, 20.0),
        ("alice", NOW - timedelta(days=10), 4, 25.0, 5.0),
        ("bob", NOW - timedelta(days=20), 1, 7.0, 3.0),
    ):
        google.points += [
            DoorPoint(usage.REQUESTS, key, end, requests),
            DoorPoint(usage.TOKENS_IN, key, end, requests, tokens_in),
            DoorPoint(usage.TOKENS_OUT, key, end, requests, tokens_out),
        ]


def test_list_shows_each_key_with_its_use_over_the_day_and_the_month(
    keys: Any, google_api: FakeGoogle
) -> None:
    keys("add", "alice", "--concurrent", "2")
    keys("add", "bob")
    keys("add", "carol")
    keys("revoke", "bob")
    _traffic(google_api)
    google_api.points.append(DoorPoint(usage.REQUESTS, "zed", NOW - timedelta(hours=2), 1))
    ran = keys("list")
    assert ran.code == 0, ran.err
    lines = ran.out.splitlines()
    assert lines[0] == f"keys: 4 in {SECRET} (version 4)"
    assert lines[1] == (
        "default: active, the program's key (the apiKey output), limits none; "
        "last day 0 requests, 0 prompt + 0 completion tokens; "
        "last 30 days 0 requests, 0 prompt + 0 completion tokens; last use none in 30 days"
    )
    alice = lines[2]
    assert alice.startswith("alice: active, created ") and ", limits 2 concurrent; " in alice
    # Today: 3 x 100 + 2 x 10 prompt, 3 x 50 + 2 x 20 completion; the month adds 4 x 25 and 4 x 5.
    assert "last day 5 requests, 320 prompt + 190 completion tokens" in alice
    assert "last 30 days 9 requests, 420 prompt + 210 completion tokens" in alice
    # The end of the minute-long period that holds the last point: within a minute after it.
    last = datetime.strptime(alice.rsplit("last use ", 1)[1], "%Y-%m-%dT%H:%M:%SZ").replace(tzinfo=UTC)
    assert NOW - timedelta(minutes=5) <= last <= NOW - timedelta(minutes=4)
    assert lines[3].startswith("bob: revoked, created ")
    assert "last 30 days 1 requests, 7 prompt + 3 completion tokens" in lines[3]
    assert lines[4].startswith("carol: active") and lines[4].endswith("last use none in 30 days")
    assert lines[5].startswith("zed: not in the set; last day 1 requests")
    assert len(lines) == 6
    # Monitoring was asked by key, and paged (two series a page in the fake).
    lists = [q for m, p, q in google_api.calls if p == f"/v3/projects/{PROJECT}/timeSeries"]
    assert {q["aggregation.groupByFields"][0] for q in lists} == {"metric.label.key"}
    assert any("pageToken" in q for q in lists)


def test_list_json(keys: Any, google_api: FakeGoogle) -> None:
    keys("add", "alice")
    _traffic(google_api)
    ran = keys("list", "--json")
    assert ran.code == 0, ran.err
    document = json.loads(ran.out)
    names = [k["name"] for k in document["keys"]]
    assert names == ["default", "alice"] and document["version"] == 1
    alice = document["keys"][1]
    assert alice["usage"]["day"] == {"requests": 5, "promptTokens": 320, "completionTokens": 190}
    assert alice["usage"]["month"]["requests"] == 9 and alice["state"] == "active"
    assert document["notInTheSet"]["bob"]["month"]["requests"] == 1


def test_the_stack_output_names_the_secret(
    google_api: FakeGoogle,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    from qwen36.__main__ import main

    def pulumi_prints(outputs: dict[str, Any]) -> None:
        pulumi = tmp_path / "pulumi"
        pulumi.write_text(
            "#!/bin/bash\n"
            '[[ "$*" == "stack output --json --stack dev" ]] || exit 7\n'
            f"cat <<'EOF'\n{json.dumps(outputs)}\nEOF\n"
        )
        pulumi.chmod(0o755)

    monkeypatch.setenv("PATH", f"{tmp_path}:/usr/bin:/bin")
    pulumi_prints({"keysSecret": SECRET, "apiBaseUrl": "https://door.example/v1"})
    assert main(["keys", "add", "alice", "--stack", "dev", "--api-root", google_api.url]) == 0
    assert "alice: added as version 1" in capsys.readouterr().out
    pulumi_prints({"apiBaseUrl": "https://door.example/v1"})
    assert main(["keys", "list", "--stack", "dev", "--api-root", google_api.url]) == Exit.NOT_FOUND
    assert capsys.readouterr().err == (
        "keys: error: stack dev has no keysSecret output (no front door, or deployed before named keys); "
        "run `pulumi up`, or pass --keys-secret\n"
    )


def test_the_metric_types_are_the_doors_own() -> None:
    """qwen36/keys/usage.py copies three types of door/metrics.json (the CLI reads no door file)."""
    metrics = {
        m["name"]: m["type"] for m in json.loads((ROOT / "door" / "metrics.json").read_text())["metrics"]
    }
    assert (
        metrics["requests"],
        metrics["tokens_in"],
        metrics["tokens_out"],
    ) == (usage.REQUESTS, usage.TOKENS_IN, usage.TOKENS_OUT)


def test_a_lost_answer_to_the_write_is_7_and_says_the_version_may_be_there(
    keys: Any, google_api: FakeGoogle
) -> None:
    google_api.add_unavailable = 1
    ran = keys("add", "alice")
    assert ran.code == Exit.UNREACHABLE == 7
    assert "the version may or may not have been added; `qwen36 keys list` shows the set" in ran.err
    assert len([c for c in google_api.calls if c[1].endswith(":addVersion")]) == 1  # not retried
    assert "qk-" not in ran.out + ran.err


def test_no_credentials_is_5(keys: Any, google_api: FakeGoogle, monkeypatch: pytest.MonkeyPatch) -> None:
    import google.auth
    from google.auth import exceptions

    def no_adc(scopes: Any = None, **kw: Any) -> Any:
        raise exceptions.DefaultCredentialsError("Your default credentials were not found.")

    monkeypatch.setattr(google.auth, "default", no_adc)
    ran = keys("list")
    assert ran.code == Exit.NO_CREDENTIALS == 5
    assert ran.err.startswith("keys: error: no usable Google application-default credentials")
