"""The metrics publisher inside the rendered boot script: embedded byte for byte for autoscaled
fleets only, shellcheck clean, installed with vm_agent.py on a fresh VM and runnable from there, and
started as a supervised systemd unit (systemctl and systemd-run stubbed: the sandbox has no
systemd; everything else is the real rendered bash)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from datetime import datetime
from pathlib import Path

import metrics_publisher
import pytest

from infra.boot_script import METRICS_PUBLISHER_PATH, PUBLISHER_HEREDOC_END, VM_AGENT_PATH, render_boot_script
from infra.config import StackConfig
from infra.fleet_bounds import LOAD_METRIC_INTERVAL_S, LOAD_METRIC_TYPE

SHELLCHECK = Path(sys.executable).parent / "shellcheck"
AUTOSCALED = StackConfig(min_replicas=1, max_replicas=4, source_ranges=["198.51.100.0/24"])
SECRET = "projects/acme/secrets/qwen36-dev-api-key"
STUB = """#!/bin/bash
printf '%s\\n' "$(basename "$0") $*" >>"$STUB_LOG"
if [[ $(basename "$0") == systemctl && $1 == is-active ]]; then exit "${UNIT_ACTIVE_RC:-3}"; fi
"""


def render(cfg: StackConfig, secret: str | None = SECRET) -> str:
    return render_boot_script(cfg, bucket="qwen36-dev-models", api_key_secret=secret, project="acme")


def embedded(script: str) -> str:
    start = script.index(f"cat <<'{PUBLISHER_HEREDOC_END}'\n") + len(f"cat <<'{PUBLISHER_HEREDOC_END}'\n")
    return script[start : script.index(f"\n{PUBLISHER_HEREDOC_END}\n", start) + 1]


def test_autoscaled_fleet_embeds_the_publisher_verbatim() -> None:
    script = render(AUTOSCALED)
    assert embedded(script) == METRICS_PUBLISHER_PATH.read_text()
    assert "LOAD_METRIC_PUBLISH='1'" in script
    assert render(AUTOSCALED) == script  # deterministic


@pytest.mark.parametrize(
    "cfg",
    [StackConfig(), StackConfig(replicas=3, source_ranges=["198.51.100.0/24"])],
    ids=["single", "fixed"],
)
def test_without_an_autoscaler_nothing_is_published(cfg: StackConfig) -> None:
    script = render(cfg)
    assert PUBLISHER_HEREDOC_END not in script
    assert "LOAD_METRIC_PUBLISH='0'" in script


def test_rendered_fleet_script_is_shellcheck_clean(tmp_path: Path) -> None:
    path = tmp_path / "startup.sh"
    path.write_text(render(AUTOSCALED))
    result = subprocess.run(
        [str(SHELLCHECK), "--shell=bash", "--severity=style", str(path)],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert result.returncode == 0, result.stdout


def run_start(tmp_path: Path, *, secret: str | None, unit_active: bool) -> tuple[list[str], str]:
    """Source the real rendered script (without its final `main` call) and run the start step."""
    stubs = tmp_path / "stubs"
    stubs.mkdir()
    for name in ("systemctl", "systemd-run"):
        (stubs / name).write_text(STUB)
        (stubs / name).chmod(0o755)
    script = render(AUTOSCALED, secret)
    body, main_call = script.rstrip("\n").rsplit("\n", 1)
    assert main_call == 'main "$@"'
    (tmp_path / "boot.sh").write_text(body + "\n")
    log = tmp_path / "calls.log"
    env = {
        **os.environ,
        "PATH": f"{stubs}:{os.environ['PATH']}",
        "STUB_LOG": str(log),
        "UNIT_ACTIVE_RC": "0" if unit_active else "3",
        "QWEN36_STATE_DIR": str(tmp_path / "state"),
        "QWEN36_BIN_DIR": str(tmp_path / "bin"),
    }
    result = subprocess.run(
        ["bash", "-c", f"source {tmp_path / 'boot.sh'}; start_metrics_publisher"],
        env=env, capture_output=True, text=True, timeout=60,
    )  # fmt: skip
    assert result.returncode == 0, result.stderr + result.stdout
    return log.read_text().splitlines(), result.stdout


@pytest.mark.parametrize("unit_active", [False, True], ids=["first-boot", "unit-left-running"])
def test_start_is_a_supervised_unit(tmp_path: Path, unit_active: bool) -> None:
    calls, out = run_start(tmp_path, secret=SECRET, unit_active=unit_active)
    tool = tmp_path / "bin" / "metrics_publisher.py"
    assert tool.read_text() == METRICS_PUBLISHER_PATH.read_text()
    assert (tmp_path / "bin" / "vm_agent.py").read_text() == VM_AGENT_PATH.read_text()
    # The installed publisher imports vm_agent from its own directory, with no PYTHONPATH or site.
    help_run = subprocess.run(
        ["python3", "-E", "-s", "-S", str(tool), "--help"], capture_output=True, text=True, timeout=30
    )
    assert help_run.returncode == 0 and "--metric-type" in help_run.stdout, help_run.stderr
    runs = [c for c in calls if c.startswith("systemd-run ")]
    assert len(runs) == 1
    args = runs[0].split()
    assert "--unit=qwen36-metrics-publisher" in args and "Restart=on-failure" in args
    command = args[args.index("python3") :]
    assert command == [
        "python3", str(tool), "--metrics-url", "http://127.0.0.1:8080/metrics",
        "--key-file", str(tmp_path / "state" / "secrets" / "llama-api-key"),
        "--metric-type", LOAD_METRIC_TYPE, "--interval", str(LOAD_METRIC_INTERVAL_S),
    ]  # fmt: skip
    stopped = "systemctl stop qwen36-metrics-publisher" in calls
    assert stopped == unit_active
    # A unit of the same name must be gone before systemd-run can create it again.
    assert calls.index("systemctl reset-failed qwen36-metrics-publisher") < calls.index(runs[0])
    assert "started qwen36-metrics-publisher" in out


def test_without_an_api_key_no_key_file_is_passed(tmp_path: Path) -> None:
    calls, _ = run_start(tmp_path, secret=None, unit_active=False)
    (run,) = [c for c in calls if c.startswith("systemd-run ")]
    assert "--key-file" not in run.split()


def test_publisher_refuses_intervals_below_monitorings_limit() -> None:
    result = subprocess.run(
        [sys.executable, str(METRICS_PUBLISHER_PATH), "--metrics-url", "http://127.0.0.1:9/metrics",
         "--metric-type", LOAD_METRIC_TYPE, "--interval", "1"],
        capture_output=True, text=True, timeout=30,
    )  # fmt: skip
    assert result.returncode == 2 and "at least 5" in result.stderr


def test_publisher_parses_llama_server_metrics() -> None:
    text = (
        "# HELP x\nllamacpp:requests_processing 2\nllamacpp:requests_deferred 3\n"
        "llamacpp:n_busy_slots_per_decode 1\n"
    )
    assert metrics_publisher.parse_in_flight(text) == 5
    assert metrics_publisher.parse_in_flight("llamacpp:requests_processing 2\n") is None
    body = metrics_publisher.time_series_body(
        LOAD_METRIC_TYPE, {"zone": "z"}, 5, datetime(2026, 11, 30, 22, 0, 1, 5)
    )
    assert json.loads(json.dumps(body))["timeSeries"][0]["points"][0] == {
        "interval": {"endTime": "2026-11-30T22:00:01.000005Z"},
        "value": {"int64Value": "5"},
    }
