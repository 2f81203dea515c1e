"""Cloud Logging's ``entries.list`` on loopback, as ``qwen36 verify`` calls it.

``POST /v2/entries:list`` with ``resourceNames``, ``filter``, ``orderBy`` and ``pageSize`` answers
``{"entries": [LogEntry, ...]}`` (no ``entries`` key when nothing matches, as the API leaves empty
fields out) (https://cloud.google.com/logging/docs/reference/v2/rest/v2/entries/list). The entries
are the ones startup/idle_watch.py writes (its ``write_log_entry``: logName, resource, severity,
jsonPayload, insertId, timestamp: https://cloud.google.com/logging/docs/reference/v2/rest/v2/LogEntry).
The fake keeps them newest first and applies only the logName of the filter; every request body is
recorded.
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Any

from tests.harness.loopback import JsonHandler, serve_on_loopback

_LOG_NAME = re.compile(r'logName="([^"]+)"')


@dataclass
class FakeLogging:
    entries: list[dict[str, Any]] = field(default_factory=list)
    requests: list[dict[str, Any]] = field(default_factory=list)


def autostop_entry(project: str, when: str, *, via_door: bool) -> dict[str, Any]:
    """An entry as startup/idle_watch.py ``stop`` writes it."""
    payload: dict[str, Any] = {
        "event": "idle-stop",
        "message": f"qwen36 autostop{': the door' if via_door else ''} resized qwen36-dev to 0: idle 30 min",
        "group": "qwen36-dev",
        "region": "us-central1",
        "idleMinutes": 30.0,
        "lastRequest": "2026-12-01T09:30:00Z",
        "bootId": "boot-1",
        "operation": "operation-1",
    }
    if via_door:
        payload["via"] = "door"
    return {
        "logName": f"projects/{project}/logs/qwen36-autostop",
        "resource": {"type": "gce_instance", "labels": {"project_id": project}},
        "severity": "NOTICE",
        "jsonPayload": payload,
        "insertId": "0123456789abcdef",
        "timestamp": when,
    }


@contextmanager
def fake_logging(state: FakeLogging) -> Iterator[str]:
    """Serves ``state``; yields the base URL to pass as ``<url>/v2``."""

    class Handler(JsonHandler):
        def do_POST(self) -> None:
            length = int(self.headers.get("Content-Length") or 0)
            body = json.loads(self.rfile.read(length) or b"{}")
            state.requests.append(body)
            if self.path != "/v2/entries:list":
                self._json(404, {"error": {"code": 404, "message": "not found", "status": "NOT_FOUND"}})
                return
            wanted = _LOG_NAME.search(str(body.get("filter", "")))
            entries = [e for e in state.entries if wanted is None or e.get("logName") == wanted[1]]
            self._json(200, {"entries": entries[: int(body.get("pageSize") or 50)]} if entries else {})

    with serve_on_loopback(Handler) as url:
        yield url
