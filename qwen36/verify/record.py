"""The whole record of one ``qwen36 verify`` run as JSON: where it ran (project, region, zone, GPU,
driver, llama.cpp build), when, and every check with what it saw. ``verify.schema.json`` (package
data) is its schema; tests/verify validates every run against it."""

from __future__ import annotations

import json
import os
import sys
import time
from datetime import datetime
from pathlib import Path
from typing import Any

from infra.llama_cpp import LLAMA_CPP_BUILD
from qwen36.argtypes import STDOUT
from qwen36.verify.checks import BOOT, DOOR_PROPS, VERDICT, WAKE_BOOT, Check

SCHEMA_ID = "qwen36-verify/1"
SCHEMA_FILE = Path(__file__).with_name("verify.schema.json")


def stamp(moment: datetime) -> str:
    return moment.strftime("%Y-%m-%dT%H:%M:%SZ")


def record(
    *,
    stack: str,
    project: str,
    region: str,
    group: str,
    door_url: str | None,
    wake: bool,
    checks: list[Check],
    started: datetime,
    finished: datetime,
    exit_code: int,
) -> dict[str, Any]:
    by_name = {c.name: c for c in checks}
    key = (by_name[VERDICT].data.get("key") or {}) if VERDICT in by_name else {}
    boots = [by_name[n].data for n in (WAKE_BOOT, BOOT) if n in by_name and by_name[n].state == "ok"]
    props = by_name[DOOR_PROPS].data if DOOR_PROPS in by_name else {}
    counts = {state: sum(c.state == state for c in checks) for state in ("ok", "FAIL", "skip")}
    return {
        "schema": SCHEMA_ID,
        "stack": stack,
        "project": project,
        "region": region,
        "group": group,
        "zone": boots[0].get("zone") if boots else None,
        "gpu": key.get("gpu_name"),
        "driver": key.get("driver_version"),
        "ecc_mode": key.get("ecc_mode"),
        "llama_cpp_build": LLAMA_CPP_BUILD,
        "server_build": props.get("build_info"),
        "door_url": door_url,
        "wake": wake,
        "started": stamp(started),
        "finished": stamp(finished),
        "checks": [c.as_dict() for c in checks],
        "counts": counts,
        "exit_code": exit_code,
    }


def fallback_dir() -> Path:
    """Where a record that could not be written where asked is kept (as the measure commands do)."""
    base = os.environ.get("XDG_CACHE_HOME") or str(Path.home() / ".cache")
    return Path(base) / "qwen36-mtp-l4" / "reports"


def write(doc: dict[str, Any], target: str | None) -> str:
    """Writes the record to ``target`` (``-``: stdout; None: the reports folder); returns where it went.
    Raises OSError when neither the target nor the reports folder takes it."""
    text = json.dumps(doc, indent=1) + "\n"
    if target == STDOUT:
        sys.stdout.write(text)
        return "stdout"
    if target is not None:
        try:
            Path(target).write_text(text, encoding="utf-8")
            return target
        except OSError as exc:
            kept = _keep(text, doc["stack"])
            raise OSError(f"{target}: {exc.strerror or exc}; kept as {kept}") from None
    return _keep(text, doc["stack"])


def _keep(text: str, stack: str) -> str:
    folder = fallback_dir()
    folder.mkdir(parents=True, exist_ok=True)
    path = folder / f"verify-{stack}-{time.strftime('%Y%m%dT%H%M%S')}-{os.getpid()}.json"
    path.write_text(text, encoding="utf-8")
    return str(path)
