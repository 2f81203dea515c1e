"""``qwen36 status --stack S`` of a stack with the door: after the group's line, each key's use from
the door's Monitoring series (the stand-in of tests/keys/google_fake.py) and the group from the
Compute stand-in."""

from __future__ import annotations

import json
from datetime import timedelta
from pathlib import Path

import pytest

from infra.autostop import autostop_output
from qwen36.__main__ import main
from qwen36.keys import usage
from tests.compute_fake.server import fake_compute_api
from tests.idle.conftest import idle_group
from tests.keys.google_fake import SECRET, DoorPoint, FakeGoogle
from tests.keys.test_keys_cli import NOW

GROUP_PROJECT = "acme-llm-test"  # the Compute stand-in's (tests/idle/conftest.py idle_group)


def _stack(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, **extra: str) -> None:
    outputs = {
        "autostop": autostop_output(
            project=GROUP_PROJECT, region="us-central1", group="qwen36-dev", size=1,
            url=None, timeout_minutes=1, idle_minutes=30,
        ),
        **extra,
    }  # fmt: skip
    pulumi = tmp_path / "pulumi"
    pulumi.write_text(
        "#!/bin/bash\n"
        '[[ "$*" == "stack output --json --show-secrets --stack dev" ]] || exit 7\n'
        f"cat <<'EOF'\n{json.dumps(outputs)}\nEOF\n"
    )
    pulumi.chmod(0o755)
    monkeypatch.setenv("PATH", f"{tmp_path}:/usr/bin:/bin")


def _status(google: FakeGoogle) -> int:
    with fake_compute_api(idle_group(target_size=0)) as compute:
        return main(["status", "--stack", "dev", "--compute-endpoint", compute, "--anonymous",
                     "--api-root", google.url])  # fmt: skip


def test_status_shows_each_keys_use(
    google_api: FakeGoogle,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    _stack(tmp_path, monkeypatch, keysSecret=SECRET)
    for key, ago, n in (("alice", timedelta(hours=3), 2), ("default", timedelta(days=3), 5)):
        google_api.points += [
            DoorPoint(usage.REQUESTS, key, NOW - ago, n),
            DoorPoint(usage.TOKENS_IN, key, NOW - ago, n, 40.0),
            DoorPoint(usage.TOKENS_OUT, key, NOW - ago, n, 8.0),
        ]
    assert _status(google_api) == 0
    out = capsys.readouterr()
    lines = out.out.splitlines()
    assert lines[0].startswith("idle-stopped: the group is at size 0")
    assert lines[1].startswith(
        "key alice: last day 2 requests, 80 prompt + 16 completion tokens; "
        "last 30 days 2 requests, 80 prompt + 16 completion tokens; last use "
    )
    assert lines[2].startswith(
        "key default: last day 0 requests, 0 prompt + 0 completion tokens; "
        "last 30 days 5 requests, 200 prompt + 40 completion tokens; last use "
    )
    assert len(lines) == 3


def test_status_without_traffic_says_so_and_without_a_door_asks_nothing(
    google_api: FakeGoogle,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    _stack(tmp_path, monkeypatch, keysSecret=SECRET)
    assert _status(google_api) == 0
    assert capsys.readouterr().out.splitlines()[1] == "keys: no request through the door in the last 30 days"
    _stack(tmp_path, monkeypatch)
    google_api.calls.clear()
    assert _status(google_api) == 0
    assert len(capsys.readouterr().out.splitlines()) == 1 and google_api.calls == []


def test_status_whose_usage_read_is_denied_is_6_after_the_groups_line(
    google_api: FakeGoogle,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    _stack(tmp_path, monkeypatch, keysSecret=SECRET)
    google_api.denied.add("monitoring.timeSeries.list")
    assert _status(google_api) == 6
    out = capsys.readouterr()
    assert out.out.startswith("idle-stopped:")
    (line,) = out.err.splitlines()
    assert line.startswith(
        "status: error: reading the door's requests series in acme-llm-test: permission denied"
    )
    assert line.endswith("grant yourself roles/monitoring.viewer on it")
