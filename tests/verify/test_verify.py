"""``qwen36 verify`` end to end against the world of conftest.py: every check's ``ok``, ``FAIL`` and
``skip`` line, the exit code, and the record validated against ``qwen36/verify/verify.schema.json``."""

from __future__ import annotations

import json
import re
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import jsonschema
import pytest

from qwen36.__main__ import main
from qwen36.verify.checks import NAMES
from qwen36.verify.record import SCHEMA_FILE
from tests.door.conftest import PROJECT
from tests.verify.conftest import (
    ECC_REBOOT,
    ECC_RESET,
    World,
    member_vm,
    ready_report,
    verdict_doc,
)
from tests.verify.logging_fake import autostop_entry

pytestmark = pytest.mark.llama
OLD = datetime(2026, 12, 1, 9, 0, 0, tzinfo=UTC)
PREVIEW_CHANGES = (
    "     Type                       Name                 Plan       Info\n"
    "     pulumi:pulumi:Stack        qwen36-mtp-l4-dev\n"
    " ~   gcp:cloudrunv2:Service     qwen36-dev-door      update     [diff: ~template]\n"
    "\nResources:\n    ~ 1 to update\n    60 unchanged\n"
)


def lines(out: str) -> dict[str, str]:
    """The check lines by name: ``{"stack": "ok   stack: ...", ...}``; each name once."""
    found: dict[str, str] = {}
    for line in out.splitlines():
        match = re.match(r"^(ok|FAIL|skip) +([a-z-]+): ", line)
        if match:
            assert match[2] not in found, f"{match[2]} printed twice"
            found[match[2]] = line
    return found


def states(found: dict[str, str]) -> dict[str, str]:
    return {name: line.split()[0] for name, line in found.items()}


def record(path: Path) -> dict[str, Any]:
    doc: dict[str, Any] = json.loads(path.read_text())
    jsonschema.validate(doc, json.loads(SCHEMA_FILE.read_text()))
    return doc


def run(
    world: World, capsys: pytest.CaptureFixture[str], tmp_path: Path, *extra: str
) -> tuple[int, str, dict[str, Any]]:
    target = tmp_path / "verify.json"
    rc = main([*world.argv("--json", str(target), *extra)])
    out = capsys.readouterr()
    assert "error:" not in out.err, out.err
    return rc, out.out, record(target)


def test_every_check_ok_with_a_timed_wake(
    env: World, capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    world = env
    current = member_vm(
        "qwen36-dev-x1b2",
        "us-central1-b",
        ready_report("boot-1", OLD, verdict="calibrated", calibrate=74),
        ECC_RESET,
    )
    woken = member_vm("qwen36-dev-w0k3", "us-central1-c", ready_report("boot-2", OLD), ECC_REBOOT)
    world.stage(
        running=True, current=current, woken=woken, verdict=verdict_doc("boot boot-1"),
        entries=[autostop_entry(PROJECT, "2026-12-01T10:00:00.123Z", via_door=True)],
    )  # fmt: skip
    rc, out, doc = run(world, capsys, tmp_path)
    found = lines(out)
    assert states(found) == dict.fromkeys(NAMES, "ok"), out + "\n".join(world.door_log[-30:])
    assert rc == 0
    assert list(found) == [c["name"] for c in doc["checks"]]
    # The fresh shell had no passphrase (this one does) and no PULUMI_* but PULUMI_HOME.
    fresh, preview = world.calls()[0], world.calls()[-1]
    assert fresh["argv"] == ["stack", "output", "--json", "--show-secrets", "--stack", "dev"]
    assert not [name for name in fresh["env"] if name.startswith("PULUMI_")], fresh["env"]
    assert preview["argv"][:2] == ["preview", "--expect-no-changes"]
    assert "PULUMI_CONFIG_PASSPHRASE" in preview["env"]
    # The wake: verify's resize to 0, then the door's to 1 for the two held requests.
    assert [c.query["size"] for c in world.group.resizes()] == [["0"], ["1"]]
    wake = next(c for c in doc["checks"] if c["name"] == "wake")["data"]
    assert wake["stream_status"] == wake["whole_status"] == 200
    assert 0 < wake["ttft_s"] <= wake["whole_s"] + 5
    assert "first token after" in found["wake"] and "the model assumes 124 s" in found["wake"]
    # The deploy's boot (a GPU reset, calibrated) and the wake's (an ECC reboot), each beside the model.
    assert "qwen36-dev-x1b2 in us-central1-b (boot boot-1)" in found["boot"]
    assert "1692.3 MB/s (model 1769.2)" in found["boot"], found["boot"]
    assert "32 slices (model 32)" in found["boot"]
    assert "ready 92.4 s after boot (model 103.5, with calibrate-s 74)" in found["boot"]
    assert "ECC path gpu-reset 9 s (model gpu-reset 10 s)" in found["boot"]
    assert "qwen36-dev-w0k3 in us-central1-c (boot boot-2)" in found["wake-boot"]
    assert "ECC path reboot 71 s (model reboot 60 s)" in found["wake-boot"]
    assert "winner mtp2/fusion-on/gpu-sampling (96.4 tok/s, acceptance 81.2%)" in found["verdict"]
    assert "the door accepted the VM's ID token" in found["stop-via-door"]
    assert world.logging.requests[0]["filter"] == f'logName="projects/{PROJECT}/logs/qwen36-autostop"'
    assert (doc["project"], doc["zone"], doc["gpu"], doc["driver"]) == (
        PROJECT,
        "us-central1-c",
        "NVIDIA L4",
        "580.95.05",
    )
    assert doc["exit_code"] == 0 and doc["counts"] == {"ok": len(NAMES), "FAIL": 0, "skip": 0}


def test_fail_lines(env: World, capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    """A passphrase stack, a preview with changes, no verdict, a stop not made by the door, a boot
    without figures and a template that does not think: each its FAIL line with the fix; exit 1."""
    world = env
    woken = member_vm(
        "qwen36-dev-w0k3", "us-central1-c",
        "ready 2026-12-01T09:00:00Z boot-3 llama-server healthy 60 s after boot", "",
    )  # fmt: skip
    world.stage(
        running=False, woken=woken, thinking=False, secrets="passphrase", preview=PREVIEW_CHANGES,
        entries=[autostop_entry(PROJECT, "2026-12-01T10:00:00Z", via_door=False)],
    )  # fmt: skip
    rc, out, doc = run(world, capsys, tmp_path)
    found = lines(out)
    assert rc == 1 and doc["exit_code"] == 1
    assert {k: v for k, v in states(found).items() if v == "FAIL"} == dict.fromkeys(
        ["stack", "preview", "stop-via-door", "thinking", "verdict", "boot"], "FAIL"
    ), out
    assert "passphrase must be set" in found["stack"] and "gcpkms://" in found["stack"]
    assert "changes (exit 255): update qwen36-dev-door (gcp:cloudrunv2:Service);" in found["preview"]
    assert "pulumi preview --diff" in found["preview"]
    assert "was not made by the door" in found["stop-via-door"]
    assert "no reasoning_content" in found["thinking"]
    assert "no verdict at gs://" in found["verdict"] and "403" in found["verdict"]
    assert "carries no figures" in found["boot"]
    # The group was at 0: the wake came first, with no stop, and the boot line is that wake's.
    assert [c.query["size"] for c in world.group.resizes()] == [["1"]]
    assert states(found)["wake"] == "ok" and "was at 0 (idle-stopped)" in found["wake"]
    assert states(found)["wake-boot"] == "skip"


def test_skip_lines(env: World, capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    """--no-wake with the group at 0 and no idle stop yet: the checks that need a server skip, each
    with when to rerun; nothing is resized."""
    world = env
    world.stage(running=False, verdict=verdict_doc("boot boot-1"))
    rc, out, doc = run(world, capsys, tmp_path, "--no-wake")
    found = lines(out)
    assert {k: v for k, v in states(found).items() if v == "skip"} == dict.fromkeys(
        ["stop-via-door", "door-props", "thinking", "boot", "wake", "wake-boot"], "skip"
    ), out
    assert rc == 0 and doc["wake"] is False
    assert "rerun: `qwen36 verify --no-wake` after" in found["stop-via-door"]
    assert "rerun: `qwen36 wake --stack dev`" in found["door-props"]
    assert "--no-wake" in found["wake"] and "it stops the server" in found["wake"]
    assert world.group.resizes() == []
    assert states(found)["wrong-key"] == states(found)["stop-forged"] == "ok"


def test_verdict_on_its_way_is_a_skip(env: World, capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    """A boot that calibrated minutes ago stores its verdict after the served file's sha256."""
    world = env
    now = datetime.now(UTC).replace(microsecond=0) - timedelta(minutes=2)
    current = member_vm(
        "qwen36-dev-x1b2", "us-central1-b", ready_report("boot-4", now, verdict="calibrated"), ECC_RESET
    )
    world.stage(running=True, current=current, config={"qwen36-mtp-l4:idleStopMinutes": "0"})
    rc, out, _ = run(world, capsys, tmp_path, "--no-wake")
    found = lines(out)
    assert states(found)["verdict"] == "skip" and "rerun: after" in found["verdict"], out
    assert states(found)["stop-via-door"] == "skip" and "idleStopMinutes is 0" in found["stop-via-door"]
    assert states(found)["door-props"] == states(found)["thinking"] == states(found)["boot"] == "ok"
    assert rc == 0


def test_an_open_endpoint_fails_the_key_checks(
    env: World, capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    """A "door" that is a bare llama-server without a key: the wrong key passes and the stop endpoint
    is not the door's, and both say so."""
    from infra.config import StackConfig
    from infra.server_args import server_args
    from tests.harness.server import LlamaServer, free_port

    world = env
    current = member_vm("qwen36-dev-x1b2", "us-central1-b", ready_report("boot-1", OLD), ECC_RESET)
    port = free_port()
    args = server_args(
        StackConfig(), model_path=str(world.thinking_model), api_key_file=None, host="127.0.0.1", port=port
    )
    with LlamaServer(args, binary=world.member.binary) as bare:
        bare.wait_healthy()
        world.stage(
            running=True, current=current, verdict=verdict_doc("boot boot-1"),
            outputs={"apiBaseUrl": f"{bare.base_url}/v1", "webUiUrl": f"{bare.base_url}/"},
        )  # fmt: skip
        rc, out, _ = run(world, capsys, tmp_path, "--no-wake")
    found = lines(out)
    assert states(found)["wrong-key"] == "FAIL" and "the endpoint is open" in found["wrong-key"], out
    assert states(found)["stop-forged"] == "FAIL" and "not the door's refusal" in found["stop-forged"]
    assert states(found)["door-props"] == "ok"
    assert rc == 1


def test_without_a_door(env: World, capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    world = env
    current = member_vm("qwen36-dev-x1b2", "us-central1-b", ready_report("boot-1", OLD), ECC_RESET)
    world.stage(
        running=True, current=current, verdict=verdict_doc("boot boot-1"),
        config={"qwen36-mtp-l4:door": "false"},
        outputs={"apiBaseUrl": "http://localhost:8080/v1", "webUiUrl": "http://localhost:8080/"},
    )  # fmt: skip
    # The record to stdout (one JSON document), the lines to stderr.
    rc = main(world.argv("--json", "-"))
    captured = capsys.readouterr()
    doc = json.loads(captured.out)
    jsonschema.validate(doc, json.loads(SCHEMA_FILE.read_text()))
    found = lines(captured.err)
    skipped = ["wrong-key", "stop-forged", "stop-via-door", "door-props", "thinking", "wake", "wake-boot"]
    skips = {k: v for k, v in states(found).items() if v == "skip"}
    assert skips == dict.fromkeys(skipped, "skip"), captured.err
    assert all("door: false" in found[name] for name in skipped)
    assert rc == 0 and doc["door_url"] is None


def test_a_door_that_refuses_the_stacks_key_fails_door_props(
    env: World, capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    world = env
    current = member_vm("qwen36-dev-x1b2", "us-central1-b", ready_report("boot-1", OLD), ECC_RESET)
    world.stage(
        running=True,
        current=current,
        verdict=verdict_doc("boot boot-1"),
        outputs={"apiKey": "not-the-door-key"},
    )
    rc, out, _ = run(world, capsys, tmp_path, "--no-wake")
    found = lines(out)
    assert (
        states(found)["door-props"] == "FAIL" and "refuses the stack's API key (401)" in found["door-props"]
    )
    assert states(found)["thinking"] == "FAIL" and "got 401" in found["thinking"]
    assert rc == 1


def test_a_stop_the_api_refuses_fails_the_wake(
    env: World, capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    """The deployer may not resize the group (403 on regionInstanceGroupManagers.resize): the wake's
    FAIL line says so, and the server keeps running."""
    world = env
    current = member_vm("qwen36-dev-x1b2", "us-central1-b", ready_report("boot-1", OLD), ECC_RESET)
    world.stage(running=True, current=current, verdict=verdict_doc("boot boot-1"))
    world.group.resize_failures = [403]
    rc, out, doc = run(world, capsys, tmp_path)
    found = lines(out)
    assert states(found)["wake"] == "FAIL" and "(403)" in found["wake"], out
    assert states(found)["wake-boot"] == "skip" and "(FAIL)" in found["wake-boot"]
    assert world.group.state().target_size == 1 and world.member.server is not None
    assert rc == 1 and doc["exit_code"] == 1


def test_a_woken_boot_without_figures_fails_wake_boot(
    env: World, capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    world = env
    current = member_vm("qwen36-dev-x1b2", "us-central1-b", ready_report("boot-1", OLD), ECC_RESET)
    bare = "ready 2026-12-01T09:00:00Z boot-5 llama-server healthy 60 s after boot"
    woken = member_vm("qwen36-dev-w0k3", "us-central1-c", bare, ECC_REBOOT)
    world.stage(running=True, current=current, woken=woken, verdict=verdict_doc("boot boot-1"))
    rc, out, _ = run(world, capsys, tmp_path)
    found = lines(out)
    assert states(found)["wake"] == "ok", out
    assert states(found)["wake-boot"] == "FAIL" and "boot-5" not in found["boot"]
    assert "carries no figures" in found["wake-boot"] and "pulumi up" in found["wake-boot"]
    assert rc == 1
