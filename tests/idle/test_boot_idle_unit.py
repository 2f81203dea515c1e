"""The boot script's start_idle_watch, run from the real rendered script under bash with systemd-run
and systemctl stubbed (the sandbox has no systemd): the embedded watcher and vm_agent.py land byte
for byte and the watcher runs from there, the unit is started once with the right command line, and
a running one is left alone."""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

from infra.boot_script import IDLE_WATCH_PATH, VM_AGENT_PATH, render_boot_script
from infra.config import StackConfig

STUB = """#!/bin/bash
# Records its arguments; systemctl is-active answers from the marker systemd-run leaves.
printf '%s\\n' "$(basename "$0") $*" >>"$STUB_LOG"
case $(basename "$0") in
  systemd-run) [[ ${STUB_RUN_FAILS:-0} == 1 ]] && exit 1; : >"$STUB_ACTIVE"; exit 0 ;;
  systemctl) [[ $1 == is-active && -e $STUB_ACTIVE ]] && exit 0; exit 3 ;;
esac
"""


def _run(tmp_path: Path, cfg: StackConfig, *, calls: int = 2, api_key: bool = True, run_fails: bool = False,
         door_url: str | None = None) -> tuple[str, list[str], Path]:  # fmt: skip
    script = render_boot_script(
        cfg, bucket="b", api_key_secret="s" if api_key else None, project="p", door_url=door_url
    )
    body, last = script.rstrip("\n").rsplit("\n", 1)
    assert last == 'main "$@"'
    path = tmp_path / "boot.sh"
    path.write_text(body + "\n" + "start_idle_watch\n" * calls)
    stubs = tmp_path / "stubs"
    stubs.mkdir()
    for name in ("systemd-run", "systemctl"):
        (stubs / name).write_text(STUB)
        (stubs / name).chmod(0o755)
    state = tmp_path / "state"
    env = {
        "PATH": f"{stubs}:{os.environ['PATH']}",
        "QWEN36_STATE_DIR": str(state),
        "QWEN36_METADATA_URL": "http://127.0.0.1:9",
        "STUB_LOG": str(tmp_path / "stub.log"),
        "STUB_ACTIVE": str(tmp_path / "active"),
        "STUB_RUN_FAILS": "1" if run_fails else "0",
    }
    out = subprocess.run(["bash", str(path)], env=env, capture_output=True, text=True, timeout=30)
    assert out.returncode == 0, out.stderr + out.stdout
    log = (tmp_path / "stub.log").read_text().splitlines() if (tmp_path / "stub.log").exists() else []
    return out.stdout, log, state


def test_started_once_with_the_watcher_and_the_key(tmp_path: Path) -> None:
    stdout, log, state = _run(tmp_path, StackConfig(idle_stop_minutes=45))
    tool = state / "bin" / "idle_watch.py"
    assert tool.read_bytes() == IDLE_WATCH_PATH.read_bytes()
    assert (state / "bin" / "vm_agent.py").read_bytes() == VM_AGENT_PATH.read_bytes()
    # The installed watcher imports vm_agent from its own directory, with no PYTHONPATH or site.
    off = subprocess.run(
        ["python3", "-E", "-s", "-S", str(tool), "--metrics-url", "http://127.0.0.1:9/metrics",
         "--idle-minutes", "0"],
        capture_output=True, text=True, timeout=30,
    )  # fmt: skip
    assert off.returncode == 0 and "idle stop is off" in off.stdout, off.stderr
    runs = [line for line in log if line.startswith("systemd-run ")]
    assert len(runs) == 1, log
    python = subprocess.run(
        ["bash", "-c", "command -v python3"], capture_output=True, text=True
    ).stdout.strip()
    assert runs[0].split(" ")[1:] == [
        "--quiet", "--collect", "--unit=qwen36-idle-watch", "-p", "Restart=on-failure", "-p", "RestartSec=30",
        python, str(tool), "--metrics-url", "http://127.0.0.1:8080/metrics", "--idle-minutes", "45",
        "--key-file", str(state / "secrets" / "llama-api-key"),
    ]  # fmt: skip
    assert "idle watcher qwen36-idle-watch started" in stdout
    assert "already running; left alone" in stdout


def test_no_key_file_without_an_api_key(tmp_path: Path) -> None:
    _, log, _ = _run(tmp_path, StackConfig(api_key=False, door=False), calls=1, api_key=False)
    (run,) = [line for line in log if line.startswith("systemd-run ")]
    assert "--key-file" not in run
    assert "--idle-minutes 30" in run


def test_off_when_idle_stop_minutes_is_zero(tmp_path: Path) -> None:
    stdout, log, state = _run(tmp_path, StackConfig(idle_stop_minutes=0), calls=1)
    assert log == []
    assert "idle autostop is off" in stdout
    assert not (state / "bin" / "idle_watch.py").exists()


def test_a_watcher_that_cannot_start_does_not_fail_the_boot(tmp_path: Path) -> None:
    stdout, _, _ = _run(tmp_path, StackConfig(), calls=1, run_fails=True)
    assert "warning: could not start the idle watcher" in stdout


def test_the_rendered_value_is_the_config_value() -> None:
    script = render_boot_script(
        StackConfig(idle_stop_minutes=7), bucket="b", api_key_secret=None, project="p"
    )
    assert "IDLE_STOP_MINUTES='7'" in script.splitlines()


def test_the_door_url_reaches_the_watcher_only_with_a_door(tmp_path: Path) -> None:
    door = "https://qwen36-door-123456789012.us-central1.run.app"
    (tmp_path / "door").mkdir()
    (tmp_path / "none").mkdir()
    _, log, _ = _run(tmp_path / "door", StackConfig(), calls=1, door_url=door)
    (run,) = [line for line in log if line.startswith("systemd-run ")]
    assert run.split(" ")[-2:] == ["--door-url", door]
    _, log, _ = _run(tmp_path / "none", StackConfig(), calls=1)
    (run,) = [line for line in log if line.startswith("systemd-run ")]
    assert "--door-url" not in run
