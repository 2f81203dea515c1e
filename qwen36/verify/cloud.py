"""The two things ``verify`` reads from Google's storage and logs: the calibration's verdict in the
model bucket (google-cloud-storage) and the idle stop's Cloud Logging entry (``entries.list``)."""

from __future__ import annotations

import json
from datetime import UTC, datetime, timedelta
from typing import Any

from qwen36.errors import detail
from qwen36.verify.checks import STOP_VIA_DOOR, VERDICT, Check, fail, ok, skip

LOGGING_URL = "https://logging.googleapis.com/v2"
# startup/idle_watch.py LOG_NAME (the VM's room; tests/verify holds the copies equal).
AUTOSTOP_LOG = "qwen36-autostop"
LOG_TIMEOUT_S = 30.0
CLOUD_PLATFORM = "https://www.googleapis.com/auth/cloud-platform"
# The boot stores a verdict it measured only once the served file has passed its sha256, at idle
# priority after ready (startup/boot.sh store_verdict): minutes for 22 GB. Within this of the ready
# report, a missing verdict may still be on its way.
VERDICT_PENDING = timedelta(minutes=20)
# calibrate.py's writer field for a boot: "boot <boot id>" (startup/boot.sh --writer).
BOOT_WRITER = "boot "


def read_verdict(bucket: str, name: str, project: str) -> tuple[dict[str, Any] | None, str]:
    """The verdict document (None when there is none) and what went wrong reading it ('' if nothing)."""
    from google.api_core import exceptions
    from google.cloud import storage

    try:
        client = storage.Client(project=project)
        blob = client.bucket(bucket).get_blob(name, timeout=LOG_TIMEOUT_S)
        if blob is None:
            return None, ""
        data = blob.download_as_bytes(timeout=LOG_TIMEOUT_S)
    except exceptions.Forbidden as exc:
        return None, f"403 reading gs://{bucket}/{name} ({detail(exc)[:160]})"
    except exceptions.NotFound:
        return None, f"no bucket gs://{bucket}"
    except exceptions.GoogleAPIError as exc:
        return None, f"gs://{bucket}/{name}: {detail(exc)[:160]}"
    try:
        doc = json.loads(data)
    except ValueError:
        return None, f"gs://{bucket}/{name} is not JSON"
    return (doc, "") if isinstance(doc, dict) else (None, f"gs://{bucket}/{name} is not a JSON object")


def verdict_check(
    doc: dict[str, Any] | None,
    problem: str,
    uri: str,
    boot: dict[str, str],
    ready_at: datetime | None,
    now: datetime,
) -> Check:
    """``boot``: the serving member's ready-report fields (``verdict``, ``flags``) and its boot id."""
    source = boot.get("verdict")
    this_boot = f"{BOOT_WRITER}{boot['boot_id']}" if boot.get("boot_id") else None
    if problem:
        return fail(
            VERDICT, problem, "grant the deployer storage.objects.get on the bucket, or check its name"
        )
    pending = source == "calibrated" and ready_at is not None and now - ready_at < VERDICT_PENDING
    if doc is None:
        if pending:
            assert ready_at is not None
            return skip(
                VERDICT,
                f"no verdict at {uri} yet: this boot calibrated and stores it once the served file passed "
                f"its sha256",
                f"after {(ready_at + VERDICT_PENDING).strftime('%H:%M')} UTC",
            )
        return fail(
            VERDICT,
            f"no verdict at {uri}" + (f" (the serving boot says verdict={source})" if source else ""),
            "`qwen36 logs --serial`: 'the verdict could not be written (GCS answered 403 ...)' is the VM's "
            "conditional write refused (infra/identity.py's condition on the verdict and its .tmp- copies)",
        )
    winner = doc.get("winner") if isinstance(doc.get("winner"), dict) else None
    key = doc.get("key") if isinstance(doc.get("key"), dict) else {}
    writer = str(doc.get("writer") or "")
    data: dict[str, Any] = {
        "uri": uri,
        "winner": winner.get("name") if winner else None,
        "tok_s": winner.get("tok_s") if winner else None,
        "acceptance": winner.get("acceptance") if winner else None,
        "writer": writer,
        "date": doc.get("date"),
        "stale": doc.get("stale"),
        "key": key,
    }
    if winner is None:
        return fail(
            VERDICT,
            f"{uri} names no winner (no candidate was measured to the end)",
            "`qwen36 logs --serial` shows the calibration; `qwen36 tune --sweep calibrate` measures again",
            **data,
        )
    if source == "calibrated" and this_boot and writer != this_boot and not pending:
        return fail(
            VERDICT,
            f"the serving boot calibrated but {uri} is {writer or 'an unnamed writer'}'s, not {this_boot}'s",
            "its write was refused: `qwen36 logs --serial` shows the verdict's 403 (infra/identity.py's "
            "condition on the verdict and its .tmp- copies)",
            **data,
        )
    acceptance = winner.get("acceptance")
    accepted = f"acceptance {acceptance:.1%}" if isinstance(acceptance, int | float) else "no MTP drafts"
    how = (
        "written by the VM through its conditional grant (a .tmp- object, then objects.copy)"
        if writer.startswith(BOOT_WRITER)
        else f"written by {writer or 'an unnamed writer'}, not a boot: the VM's conditional write is unshown"
    )
    stale = doc.get("stale")
    notes = (
        f"; marked stale: {stale.get('reason', '') if isinstance(stale, dict) else stale}" if stale else ""
    )
    return ok(
        VERDICT,
        f"{uri}: winner {winner.get('name')} ({winner.get('tok_s')} tok/s, {accepted}); {how}{notes}",
        **data,
    )


def autostop_entries(project: str, endpoint: str | None, anonymous: bool) -> list[dict[str, Any]]:
    """The newest entries of the autostop log, newest first.
    https://cloud.google.com/logging/docs/reference/v2/rest/v2/entries/list"""
    import requests

    session: Any
    if anonymous:
        session = requests.Session()
    else:
        import google.auth
        from google.auth.transport.requests import AuthorizedSession

        credentials, _ = google.auth.default(scopes=[CLOUD_PLATFORM])
        session = AuthorizedSession(credentials)
    body = {
        "resourceNames": [f"projects/{project}"],
        "filter": f'logName="projects/{project}/logs/{AUTOSTOP_LOG}"',
        "orderBy": "timestamp desc",
        "pageSize": 5,
    }
    with session:
        response = session.post(f"{endpoint or LOGGING_URL}/entries:list", json=body, timeout=LOG_TIMEOUT_S)
    if response.status_code != 200:
        raise LoggingError(response.status_code, response.text[:200])
    entries = response.json().get("entries") or []
    return [e for e in entries if isinstance(e, dict)]


class LoggingError(Exception):
    def __init__(self, status: int, text: str) -> None:
        super().__init__(f"Cloud Logging answered {status}: {' '.join(text.split())}")
        self.status = status


def stop_via_door_check(
    entries: list[dict[str, Any]], idle_minutes: int, project: str, now: datetime
) -> Check:
    if not entries:
        at = (now + timedelta(minutes=idle_minutes)).strftime("%H:%M")
        return skip(
            STOP_VIA_DOOR,
            f"no idle stop in projects/{project}/logs/{AUTOSTOP_LOG} yet (the server stops after "
            f"{idle_minutes} idle minutes)",
            f"`qwen36 verify --no-wake` after {at} UTC with no request meanwhile",
        )
    newest = entries[0]
    payload = newest.get("jsonPayload") if isinstance(newest.get("jsonPayload"), dict) else {}
    assert isinstance(payload, dict)
    stamp = str(newest.get("timestamp") or "?")
    data = {"timestamp": stamp, "via": payload.get("via"), "idle_minutes": payload.get("idleMinutes")}
    if payload.get("via") == "door":
        return ok(
            STOP_VIA_DOOR,
            f"the door accepted the VM's ID token and stopped the group at {stamp} "
            f"(idle {payload.get('idleMinutes')} min)",
            **data,
        )
    return fail(
        STOP_VIA_DOOR,
        f"the last idle stop ({stamp}) was not made by the door ({payload.get('message', 'no message')})",
        "with a door the VM holds no resize grant: redeploy (`pulumi up`), then wait for the next idle stop",
        **data,
    )


def now_utc() -> datetime:
    return datetime.now(UTC)
