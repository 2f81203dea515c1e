"""Idle autostop: resize this VM's managed instance group to 0 when llama-server serves nobody.

Runs on the server VM (standard library only, Python 3.10 like the image's python3, and
``vm_agent.py`` installed next to it), started by the boot script once llama-server is ready, as a
supervised systemd unit. Every poll it reads llama-server's own ``/metrics``:

* ``llamacpp:requests_processing`` and ``llamacpp:requests_deferred`` (gauges) say a request is
  in progress or queued: a long stream counts as use for as long as it runs, even though the token
  counters only move when a request finishes;
* ``llamacpp:prompt_tokens_total`` and ``llamacpp:tokens_predicted_total`` (counters) move with
  every completion, so a request that started and finished between two polls is never missed.
  ``/health`` and ``/metrics`` requests (ours, a load balancer's, the deploy gate's) move neither.

The server is idle once both gauges read 0 and the counters have not moved for the whole window.
A server that does not answer (crashed, restarting, a rejected key) is not idle: the window starts
again when it answers, and the group's autohealing owns a crash.

The stop goes through the group, never the guest: inside a managed instance group a guest
``poweroff`` is a failure that the group repairs. The call is ``regionInstanceGroupManagers.resize``
with ``size=0`` (https://cloud.google.com/compute/docs/reference/rest/v1/regionInstanceGroupManagers/resize),
made with the VM's own service account (a metadata-server token), on the group named by the
``created-by`` metadata GCE sets on every managed instance. Resize to 0 deletes the member and its
boot disk, so nothing is billed while stopped, and a wake lets the group place the new member in any
zone with capacity (a stopped member could only restart in its old zone). docs/autostop.md has the
comparison with ``stopInstances`` and its costs.

With the front door (``--door-url``, the single server's default) the stop is the door's: the VM's
account then holds no Compute permission, so the watcher asks the door instead, ``POST
<door>/_qwen36/idle-stop`` with an ID token of the VM's account from the metadata server (audience:
the door's URL). The door verifies the token, refuses while it holds or streams a request (409: the
idle window starts again) and resizes its group to 0. The watcher stays the clock of idleness:
every request reaches llama-server through the door, so llama-server's counters see them all.

Each idle stop is logged (stdout: the journal), written to the guest attribute ``qwen36/idle`` and
to Cloud Logging (log ``qwen36-autostop``): a deleted VM takes its journal and guest attributes with
it, the log entry stays.
"""

from __future__ import annotations

import argparse
import json
import math
import sys
import time
import urllib.parse
import uuid
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from vm_agent import (
    BOOT_ID_FILE,
    IN_FLIGHT,
    METADATA_URL,
    AgentError,
    Metadata,
    bearer,
    boot_id,
    metric_values,
    read_metrics,
    request,
    utc,
    utc_precise,
)

GAUGES = IN_FLIGHT
COUNTERS = ("llamacpp:prompt_tokens_total", "llamacpp:tokens_predicted_total")

DEFAULT_COMPUTE_URL = "https://compute.googleapis.com/compute/v1"
DEFAULT_LOGGING_URL = "https://logging.googleapis.com/v2"
GUEST_ATTR_PATH = "instance/guest-attributes/qwen36/idle"
LOG_NAME = "qwen36-autostop"

DEFAULT_POLL_S = 15.0
# The watcher's report of the last request is written at most this often: guest attributes take
# about 10 writes a minute per VM, shared with the boot's reports (infra/boot_protocol.py).
DEFAULT_REPORT_INTERVAL_S = 60.0
# A failed stop call is tried this many times, RETRY_PAUSE_S doubling between tries (10+20+40+80 s);
# after that the window starts again and the next full idle window tries again.
DEFAULT_STOP_ATTEMPTS = 5
DEFAULT_RETRY_PAUSE_S = 10.0
DOOR_STOP_PATH = "/_qwen36/idle-stop"


class NotInGroupError(AgentError):
    """The VM is not a managed instance: there is no group to resize."""


class DoorBusyError(AgentError):
    """The door holds or streams a request: not idle after all."""


def log(message: str) -> None:
    print(f"{utc(time.time())} qwen36-idle: {message}", flush=True)


@dataclass(frozen=True)
class Sample:
    busy: int
    counters: tuple[float, ...]


def parse_metrics(text: str) -> Sample:
    """The two gauges and two counters from llama-server's Prometheus text."""
    values = metric_values(text, (*GAUGES, *COUNTERS))
    return Sample(busy=int(sum(values[g] for g in GAUGES)), counters=tuple(values[c] for c in COUNTERS))


@dataclass(frozen=True)
class Group:
    """The group named by ``created-by``: ``projects/<num>/regions/<r>/instanceGroupManagers/<n>``."""

    project: str
    region: str
    name: str

    @classmethod
    def parse(cls, created_by: str, project_id: str | None = None) -> Group:
        """``project_id`` (the metadata server's) replaces the number in ``created-by``: the API
        takes either, and the id is what the deployer's tools and logs show."""
        parts = created_by.strip().split("/")
        if len(parts) != 6 or parts[0] != "projects" or parts[4] != "instanceGroupManagers":
            raise AgentError(f"created-by {created_by!r} is not a managed instance group")
        if parts[2] != "regions":
            raise AgentError(f"created-by {created_by!r} is a zonal group; autostop resizes regional groups")
        return cls(project=project_id or parts[1], region=parts[3], name=parts[5])

    def path(self) -> str:
        return f"/projects/{self.project}/regions/{self.region}/instanceGroupManagers/{self.name}"


class Cloud:
    """The VM's view of GCE: metadata server (identity, group, guest attributes), Compute, Logging."""

    def __init__(self, metadata: Metadata, compute_url: str, logging_url: str) -> None:
        self.metadata = metadata
        self.compute_url = compute_url.rstrip("/")
        self.logging_url = logging_url.rstrip("/")

    def group(self) -> Group:
        created_by = self.metadata.created_by()
        if created_by is None:
            raise NotInGroupError("the metadata key created-by is not set")
        return Group.parse(created_by, self.metadata.project_id())

    def put_guest_attribute(self, value: str) -> None:
        # NOTE: best effort; needs enable-guest-attributes=TRUE on the VM.
        # https://cloud.google.com/compute/docs/metadata/manage-guest-attributes
        try:
            self.metadata.put(GUEST_ATTR_PATH, value)
        except (OSError, AgentError) as exc:
            log(f"warning: guest attribute qwen36/idle not written ({exc})")

    def _auth(self) -> dict[str, str]:
        return bearer(self.metadata.token())

    def group_target_size(self, group: Group) -> int:
        # https://cloud.google.com/compute/docs/reference/rest/v1/regionInstanceGroupManagers/get
        status, body = request("GET", self.compute_url + group.path(), self._auth())
        if status != 200:
            raise AgentError(f"GET group answered {status}: {body[:200]!r}")
        return int(json.loads(body).get("targetSize", 0))

    def resize_to_zero(self, group: Group, request_id: str) -> dict[str, object]:
        # The same requestId on every try: if a try reached GCE but its answer was lost, the retry is
        # recognised as the same request rather than a second resize. The tries are Watcher.stop's
        # (bounded, logged), so this call itself is tried once.
        query = urllib.parse.urlencode({"size": 0, "requestId": request_id})
        url = f"{self.compute_url}{group.path()}/resize?{query}"
        status, body = request("POST", url, self._auth(), b"")
        if status != 200:
            raise AgentError(f"resize answered {status}: {body[:300]!r}")
        operation: dict[str, object] = json.loads(body)
        if operation.get("error"):
            raise AgentError(f"resize operation {operation.get('name')} failed: {operation['error']}")
        return operation

    def door_stop(self, door_url: str, audience: str) -> dict[str, object]:
        """Asks the door for the stop (it resizes the group); DoorBusyError on its 409."""
        token = self.metadata.identity_token(audience)
        headers = bearer(token)
        status, body = request("POST", door_url.rstrip("/") + DOOR_STOP_PATH, headers, b"{}")
        if status == 409:
            raise DoorBusyError(f"the door refused: {body[:200]!r}")
        if status != 200:
            raise AgentError(f"the door's idle stop answered {status}: {body[:300]!r}")
        answer: dict[str, object] = json.loads(body)
        return answer

    def write_log_entry(self, payload: dict[str, object], severity: str = "NOTICE") -> None:
        """One Cloud Logging entry (best effort): it outlives the deleted VM's journal."""
        # https://cloud.google.com/logging/docs/reference/v2/rest/v2/entries/write
        try:
            labels = self.metadata.instance_labels()
            # An insertId and a timestamp make a retried write safe: Logging treats entries with the
            # same insertId and timestamp as duplicates of one another and keeps one.
            # https://cloud.google.com/logging/docs/reference/v2/rest/v2/LogEntry (insertId)
            entry = {
                "logName": f"projects/{labels['project_id']}/logs/{LOG_NAME}",
                "resource": {"type": "gce_instance", "labels": labels},
                "severity": severity,
                "jsonPayload": payload,
                "insertId": uuid.uuid4().hex,
                "timestamp": utc_precise(time.time()),
            }
            body = json.dumps({"entries": [entry]}).encode()
            status, answer = request(
                "POST", f"{self.logging_url}/entries:write", self._auth(), body, idempotent=True
            )
            if status != 200:
                log(f"warning: Cloud Logging entry not written ({status}: {answer[:200]!r})")
        except (OSError, AgentError, ValueError, KeyError) as exc:
            log(f"warning: Cloud Logging entry not written ({exc})")


@dataclass
class Settings:
    metrics_url: str
    key_file: Path | None
    idle_s: float
    poll_s: float = DEFAULT_POLL_S
    report_interval_s: float = DEFAULT_REPORT_INTERVAL_S
    stop_attempts: int = DEFAULT_STOP_ATTEMPTS
    retry_pause_s: float = DEFAULT_RETRY_PAUSE_S
    boot_id_file: Path = Path(BOOT_ID_FILE)
    door_url: str = ""
    """The front door's URL: when set, the door makes the stop (the VM's account cannot)."""
    door_audience: str = ""
    """The ID token's audience (the door's own URL, which it checks); defaults to ``door_url``."""


class Watcher:
    def __init__(
        self,
        settings: Settings,
        cloud: Cloud,
        *,
        clock: Callable[[], float] = time.monotonic,
        wall: Callable[[], float] = time.time,
        sleep: Callable[[float], None] = time.sleep,
    ) -> None:
        self.s = settings
        self.cloud = cloud
        self.clock, self.wall, self.sleep = clock, wall, sleep
        self.boot_id = boot_id(self.s.boot_id_file)
        self.started_wall = wall()
        self.last_use_wall: float | None = None  # wall time a request was last seen; None: none yet
        self.last_report = -math.inf
        self.answering: bool | None = None

    def read(self) -> Sample | None:
        """One /metrics sample, or None when the server does not answer it."""
        try:
            sample = parse_metrics(read_metrics(self.s.metrics_url, self.s.key_file))
        except (OSError, AgentError, ValueError) as exc:
            if self.answering is not False:
                log(f"llama-server not answering /metrics ({exc}); not idle while it does not answer")
            self.answering = False
            return None
        if self.answering is False:
            log("llama-server answers /metrics again; the idle window starts now")
        self.answering = True
        return sample

    def report(self, phase: str, detail: str) -> None:
        """``<phase> <utc> <boot-id> <detail>``: the shape of infra/boot_protocol.py's reports."""
        self.cloud.put_guest_attribute(f"{phase} {utc(self.wall())} {self.boot_id} {detail}")

    def last_request(self) -> str:
        return utc(self.last_use_wall) if self.last_use_wall is not None else "none"

    def run(self) -> int:
        """Watches until the group was resized to 0 (returns 0)."""
        group = self.cloud.group()
        minutes = self.s.idle_s / 60
        log(f"watching {self.s.metrics_url} for group {group.name}; idle stop after {minutes:g} min")
        window_start = self.clock()
        previous: Sample | None = None
        while True:
            now = self.clock()
            sample = self.read()
            used = sample is not None and (
                sample.busy > 0 or (previous is not None and sample.counters != previous.counters)
            )
            if used:
                self.last_use_wall = self.wall()
            if sample is None or previous is None or used:
                window_start = now
            previous = sample
            if now - self.last_report >= self.s.report_interval_s:
                self.report("watching", f"last-request={self.last_request()} idle-minutes={minutes:g}")
                self.last_report = now
            if sample is not None and now - window_start >= self.s.idle_s:
                if self.stop(group, idle_s=now - window_start):
                    return 0
                window_start = self.clock()
            self.sleep(self.s.poll_s)

    def stop(self, group: Group, *, idle_s: float) -> bool:
        detail = f"idle {idle_s / 60:.1f} min, last request {self.last_request()}"
        if self.s.door_url:
            return self._door_stop(group, idle_s, detail)
        try:
            size = self.cloud.group_target_size(group)
        except (OSError, AgentError, ValueError) as exc:
            log(f"idle ({detail}) but the group could not be read: {exc}; trying the resize anyway")
            size = None
        if size == 0:
            log(f"idle ({detail}); group {group.name} is already at size 0")
            return True
        if size is not None and size > 1:
            # Another member may be busy: one idle member must not stop the whole group.
            log(
                f"idle ({detail}) but group {group.name} has targetSize {size}; only a one-member group stops"
            )
            return False
        request_id = str(uuid.uuid4())
        operation = self._attempts("stop", lambda: self.cloud.resize_to_zero(group, request_id))
        if operation is None:
            return False
        self._stopped(group, idle_s, detail, operation, "name", by_door=False)
        return True

    def _door_stop(self, group: Group, idle_s: float, detail: str) -> bool:
        audience = self.s.door_audience or self.s.door_url
        try:
            answer = self._attempts("door stop", lambda: self.cloud.door_stop(self.s.door_url, audience))
        except DoorBusyError as exc:
            log(f"idle ({detail}) but {exc}; the idle window starts again")
            return False
        if answer is None:
            return False
        self._stopped(group, idle_s, detail, answer, "operation", by_door=True)
        return True

    def _attempts(self, what: str, call: Callable[[], dict[str, object]]) -> dict[str, object] | None:
        """``call``'s answer, tried up to stop_attempts times with a doubling pause; None when every
        attempt failed. The door's 409 (DoorBusyError) is an answer, not a failure: it goes up."""
        pause = self.s.retry_pause_s
        for attempt in range(1, self.s.stop_attempts + 1):
            try:
                return call()
            except DoorBusyError:
                raise
            except (OSError, AgentError, ValueError) as exc:
                log(f"{what} attempt {attempt}/{self.s.stop_attempts} failed: {exc}")
                if attempt < self.s.stop_attempts:
                    self.sleep(pause)
                    pause *= 2
        log(f"{what} failed after {self.s.stop_attempts} attempts; trying again after another idle window")
        return None

    def _stopped(
        self,
        group: Group,
        idle_s: float,
        detail: str,
        answer: dict[str, object],
        field: str,
        *,
        by_door: bool,
    ) -> None:
        """The stop's log line, report and Cloud Logging entry (``answer[field]`` names the operation)."""
        resized = "the door resized" if by_door else "resized"
        log(f"idle stop: {resized} group {group.name} to 0 ({detail}); operation {answer.get(field)}")
        self.report(
            "idle-stop", f"{detail}; group {group.name} resized to 0" + (" by the door" if by_door else "")
        )
        entry: dict[str, object] = {
            "event": "idle-stop",
            "message": f"{'qwen36 autostop: the door' if by_door else 'qwen36 autostop'} resized "
            f"{group.name} to 0: {detail}",
            "group": group.name,
            "region": group.region,
            "idleMinutes": round(idle_s / 60, 2),
            "lastRequest": self.last_request(),
            "bootId": self.boot_id,
            "operation": str(answer.get(field, "")),
        }
        if by_door:
            entry["via"] = "door"
        self.cloud.write_log_entry(entry)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="idle_watch.py", description=__doc__.splitlines()[0])
    parser.add_argument("--metrics-url", required=True)
    parser.add_argument("--key-file", type=Path, help="llama-server's API key file (absent: no key)")
    parser.add_argument("--idle-minutes", type=float, required=True)
    parser.add_argument("--poll-seconds", type=float, default=DEFAULT_POLL_S)
    parser.add_argument("--report-interval-seconds", type=float, default=DEFAULT_REPORT_INTERVAL_S)
    parser.add_argument("--stop-attempts", type=int, default=DEFAULT_STOP_ATTEMPTS)
    parser.add_argument("--retry-pause-seconds", type=float, default=DEFAULT_RETRY_PAUSE_S)
    parser.add_argument("--metadata-url", default=METADATA_URL)
    parser.add_argument("--compute-url", default=DEFAULT_COMPUTE_URL)
    parser.add_argument("--logging-url", default=DEFAULT_LOGGING_URL)
    parser.add_argument("--boot-id-file", type=Path, default=Path(BOOT_ID_FILE))
    parser.add_argument(
        "--door-url", default="", help="the front door: it makes the stop (absent: resize here)"
    )
    parser.add_argument("--door-audience", default="", help="the ID token's audience (default: --door-url)")
    args = parser.parse_args(argv)
    if args.idle_minutes <= 0:
        log("idle stop is off (idle minutes <= 0)")
        return 0
    settings = Settings(
        metrics_url=args.metrics_url,
        key_file=args.key_file,
        idle_s=args.idle_minutes * 60,
        poll_s=args.poll_seconds,
        report_interval_s=args.report_interval_seconds,
        stop_attempts=max(1, args.stop_attempts),
        retry_pause_s=args.retry_pause_seconds,
        boot_id_file=args.boot_id_file,
        door_url=args.door_url,
        door_audience=args.door_audience,
    )
    cloud = Cloud(Metadata(args.metadata_url), args.compute_url, args.logging_url)
    try:
        return Watcher(settings, cloud).run()
    except NotInGroupError as exc:
        # Exit 0: systemd restarts only failures, and waiting will not put this VM in a group.
        log(f"idle stop is off: this VM is not in a managed instance group ({exc})")
        return 0
    except (OSError, AgentError, ValueError) as exc:
        # systemd restarts the unit (Restart=on-failure), e.g. after a metadata-server hiccup.
        log(f"error: {exc}")
        return 1


if __name__ == "__main__":
    sys.exit(main())
