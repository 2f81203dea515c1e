"""Wait until the deployed server group serves, or fail with a diagnosis a person can act on.

The server is a regional managed instance group (``infra/server_group.py``); its member may be
created, preempted, repaired into another zone or stocked out while the deployer waits. So every
``GATE_POLL_MIN_S`` or more the wait asks the Compute API for the group's current member and the
group's errors (``qwen36/group.py``), and passes when a member is RUNNING and the server answers:

* ``http``: the deployer reaches port 8080, so ``<url>/health`` decides. Connection refused, a
  503 while the model loads, a 401 or anything but ``200 {"status": "ok"}`` is "not ready"; with an
  API key, an authenticated ``/v1/models`` must also answer 200, so a key mismatch is caught here.
* ``guest-attributes``: the port is open only to an IAP tunnel, so the member's own report decides
  (``infra/boot_protocol.py``, key ``report``), read with the deployer's credentials.

Only a report written during the member's current start counts (its time against the instance's
``lastStartTimestamp``): a ``failed`` or ``ready`` left by an earlier boot is ignored. Without a
current report the serial console's last boot line stands in as progress. A current ``failed``
stops the wait at once, and so does a group error that cannot clear (a quota, an organization-policy
violation, a missing permission: qwen36/gate_blockers.py); a stockout is reported, with what the user
can do, while GCE keeps trying. Every wait is bounded by a deadline.
"""

from __future__ import annotations

import json
import shlex
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta

import httpx

from infra import boot_protocol
from qwen36.errors import Exit, QwenError
from qwen36.gate_blockers import cannot_clear, zone_without_accelerator
from qwen36.group import (
    CONTAINER_NAME,
    SERIAL_PORT,
    GroupError,
    GroupReader,
    GroupTarget,
    InstanceInfo,
    Member,
    SingleVmReader,
    Target,
    current_report,
    find_member,
)

HTTP_REQUEST_TIMEOUT_S = 10.0
DEFAULT_POLL_S = 5.0
HEARTBEAT_S = 30.0
# In HTTP mode, how long the VM may report ready while its port stays unreachable from the deployer
# before the wait gives up: the usual cause is a deployer IP outside sourceRanges, not a slow server.
VM_READY_UNREACHABLE_S = 120.0
SERIAL_TAIL_LINES = 30
# The prefix GCE gives the startup script's lines on serial port 1.
STARTUP_PREFIX = "startup-script:"
# Group errors older than the wait (minus this slack for clock skew) belong to an earlier deploy.
ERROR_CLOCK_SLACK_S = 60.0
# GCE's unit that runs startup scripts.
STARTUP_UNIT = "google-startup-scripts.service"
QUOTAS_CONSOLE = "https://console.cloud.google.com/iam-admin/quotas"


class WaitFailed(RuntimeError):
    """The server did not become ready; ``str()`` is the full diagnosis, ``exit_code`` its cause's
    code (1; 7 when the group was never read because the Compute API did not answer as documented)."""

    def __init__(self, diagnosis: str, exit_code: int = Exit.FAILED) -> None:
        super().__init__(diagnosis)
        self.exit_code = int(exit_code)

    def reported(self) -> QwenError:
        """Prints the diagnosis past its first line (what the wait saw, where to look next) to
        stdout and returns that first line as the command's one error line. `pulumi up` shows both:
        pulumi-command's local.Command reports a failed command with its stdout and stderr together
        (provider/pkg/provider/local/commandOutputs.go, "running %q:\n%s")."""
        first, _, rest = str(self).partition("\n")
        if rest:
            print(rest, flush=True)
        return QwenError(first, self.exit_code)


@dataclass(frozen=True)
class Observation:
    """One look at the server: ``state`` is a short word, ``detail`` free text."""

    state: str
    detail: str = ""
    ready: bool = False
    failed: bool = False


# --- HTTP ------------------------------------------------------------------------------------


def probe_http(client: httpx.Client, url: str, api_key: str | None = None) -> Observation:
    """One readiness probe of llama-server at ``url`` (no trailing ``/health``)."""
    base = url.rstrip("/")
    try:
        response = client.get(f"{base}/health")
    except httpx.ConnectError:
        return Observation("unreachable", "connection refused")
    except httpx.TimeoutException:
        return Observation("unreachable", "no answer within the request timeout")
    except httpx.TransportError as exc:
        return Observation("unreachable", type(exc).__name__)
    if response.status_code == 503:
        return Observation("loading", error_message(response) or "503")
    if response.status_code != 200:
        return Observation(f"http-{response.status_code}", error_message(response) or response.text[:120])
    try:
        body = response.json()
    except ValueError:
        return Observation("unexpected", f"/health answered 200 with a non-JSON body: {response.text[:80]!r}")
    if not isinstance(body, dict) or body.get("status") != "ok":
        return Observation("unexpected", f"/health answered 200 with {json.dumps(body)[:80]}")
    if api_key is None:
        return Observation("ok", "/health ok", ready=True)
    return _probe_authenticated(client, base, api_key)


def _probe_authenticated(client: httpx.Client, base: str, api_key: str) -> Observation:
    try:
        response = client.get(f"{base}/v1/models", headers={"Authorization": f"Bearer {api_key}"})
    except httpx.TransportError as exc:
        return Observation("unreachable", f"/v1/models: {type(exc).__name__}")
    if response.status_code == 401:
        return Observation("key-rejected", "/health ok but /v1/models rejects the API key")
    if response.status_code != 200:
        return Observation(f"http-{response.status_code}", f"/v1/models: {error_message(response)}")
    return Observation("ok", "/health ok, API key accepted", ready=True)


def error_message(response: httpx.Response) -> str:
    try:
        body = response.json()
    except ValueError:
        return ""
    if isinstance(body, dict) and isinstance(body.get("error"), dict):
        return str(body["error"].get("message", ""))
    return ""


# --- the group, its member and the member's report ---------------------------------------------


def observe_member(members: list[Member] | None, problem: str = "") -> tuple[Member | None, Observation]:
    if members is None:
        return None, Observation("unreadable", problem)
    member = find_member(members)
    if member is None:
        return None, Observation("none", "the group has no member yet")
    where = f"{member.name} in {member.zone}" if member.zone else member.name
    state = member.status or member.action.lower() or "pending"
    return member, Observation(state, where)


def observe_report(reader: GroupReader, target: Target) -> Observation:
    """The member's current report as an observation; API errors are "not ready", never fatal."""
    try:
        info = reader.instance(target)
        attrs = reader.guest_attributes(target)
    except Exception as exc:  # the Compute API's errors vary by transport; the wait is bounded anyway
        return Observation("no-report", f"report unreadable: {type(exc).__name__}: {str(exc)[:160]}")
    report, why = current_report(attrs, info.last_start)
    if report is None:
        return Observation("no-report", _with_serial_hint(why, reader, target))
    return Observation(report.phase, report.detail, ready=report.ready, failed=report.failed)


def _with_serial_hint(why: str, reader: GroupReader, target: Target) -> str:
    """Without a current report, the boot's last line on the serial console shows how far it got."""
    try:
        lines = reader.serial_tail(target, SERIAL_TAIL_LINES)
    except Exception:  # the console is a hint only
        return why
    boot_lines = [line for line in lines if STARTUP_PREFIX in line]
    if not boot_lines:
        return why
    last = boot_lines[-1].split(STARTUP_PREFIX, 1)[1].strip()
    return f"{why}; serial console: {last[:200]}"


def error_line(error: GroupError, tried: list[str], target: GroupTarget, bound: str) -> str:
    """One line that tells a stockout, a quota error and anything else apart."""
    if error.stockout:
        spare = (
            f"; zones with capacity now: {', '.join(error.zones_available)}" if error.zones_available else ""
        )
        zones = ", ".join(tried) or "the group's zones"
        return (
            f"group: stockout ({error.code}) in {zones}: GCE has no capacity for this machine and GPU "
            f"there{spare}. GCE keeps trying by itself and this wait goes on (up to {bound}); to help it, "
            "add zones to qwen36-mtp-l4:zones, set qwen36-mtp-l4:provisioningModel to STANDARD "
            "(on-demand, about 3x the price), or wait"
        )
    if error.quota:
        return quota_message(error, target)
    where = f" ({error.instance or 'member'} in {error.zone})" if error.zone else ""
    return f"group: {error.code}: {error.message}{where}"


def quota_message(error: GroupError, target: GroupTarget) -> str:
    metric = error.quota_metric or "a quota"
    region = error.quota_region or target.region
    project = shlex.quote(target.project)
    if metric == "GPUS_ALL_REGIONS":
        show = f"gcloud compute project-info describe --project={project} --format='json(quotas)'"
        scope = "all regions"
    else:
        show = (
            f"gcloud compute regions describe {shlex.quote(region)} --project={project} "
            "--format='json(quotas)'"
        )
        scope = f"region {region}"
    return (
        f"group: quota exceeded ({error.code}): {metric} in {scope}: {error.message}. GCE will not create "
        f"the server until the limit is raised. See the limit: {show}; ask for more at "
        f"{QUOTAS_CONSOLE}?project={target.project} (filter by {metric})"
    )


# --- the wait --------------------------------------------------------------------------------


@dataclass
class WaitSettings:
    timeout_s: float
    poll_s: float = DEFAULT_POLL_S
    heartbeat_s: float = HEARTBEAT_S
    vm_ready_unreachable_s: float = VM_READY_UNREACHABLE_S
    compute_poll_s: float = boot_protocol.GATE_POLL_MIN_S
    """How often the Compute API is read; never below GATE_POLL_MIN_S (guest attributes' write budget)."""


@dataclass
class _Progress:
    started: float
    emit: Callable[[str], None]
    heartbeat_s: float
    last_key: tuple[str, ...] | None = None
    last_emit: float = 0.0
    history: list[str] = field(default_factory=list)

    def update(self, now: float, parts: dict[str, Observation]) -> None:
        key = tuple(
            f"{label}:{obs.state}:{obs.detail if label == 'member' else ''}" for label, obs in parts.items()
        )
        changed = key != self.last_key
        if not changed and now - self.last_emit < self.heartbeat_s:
            return
        line = f"[{_elapsed(now - self.started)}] " + "; ".join(
            f"{label} {obs.state}" + (f" ({obs.detail})" if obs.detail else "")
            for label, obs in parts.items()
        )
        if not changed:
            line += " (still waiting)"
        self.say(line)
        self.last_key, self.last_emit = key, now

    def say(self, line: str) -> None:
        self.emit(line)
        self.history.append(line)


@dataclass
class _GroupView:
    """What the last Compute API read showed: the member followed, its report, the errors seen."""

    member: Member | None = None
    readable: bool = False
    """Whether the group was ever readable: without that, HTTP alone decides (and says so)."""
    parts: dict[str, Observation] = field(default_factory=dict)
    seen_errors: set[tuple[str, str, str]] = field(default_factory=set)
    stockout_zones: list[str] = field(default_factory=list)
    stopped: bool = False
    """The group is at size 0: idle autostop (or a person) stopped it, and no member will come."""
    unread: QwenError | None = None
    """Why the last read of the group failed, when it is one of our errors (a bad answer, retries spent)."""


def _elapsed(seconds: float) -> str:
    minutes, secs = divmod(int(seconds), 60)
    return f"{minutes}m{secs:02d}s"


def _utcnow() -> datetime:
    return datetime.now(UTC)


@dataclass(frozen=True)
class Ready:
    """How a wait ended well: its one-line summary, and whether the group was stopped (size 0) with
    no server to wait for."""

    summary: str
    stopped: bool = False


def wait_ready(
    *,
    settings: WaitSettings,
    group: GroupTarget | None = None,
    reader: GroupReader | None = None,
    url: str | None = None,
    api_key: str | None = None,
    emit: Callable[[str], None] = print,
    clock: Callable[[], float] = time.monotonic,
    sleep: Callable[[float], None] = time.sleep,
    wall: Callable[[], datetime] = _utcnow,
) -> Ready:
    """Blocks until ready (HTTP mode when ``url`` is given, else the member's report decides).

    Returns how it ended; raises :class:`WaitFailed` with a diagnosis on timeout, on a
    ``failed`` report from the member's current start, or on a quota error.
    """
    if url is None and (group is None or reader is None):
        raise ValueError("guest-attribute mode needs the group and a Compute API reader")
    started = clock()
    errors_since = wall() - timedelta(seconds=ERROR_CLOCK_SLACK_S)
    deadline = started + settings.timeout_s
    compute_every = max(settings.compute_poll_s, boot_protocol.GATE_POLL_MIN_S)
    next_compute = started
    progress = _Progress(started=started, emit=emit, heartbeat_s=settings.heartbeat_s)
    view = _GroupView()
    vm_ready_since: float | None = None
    bound = _elapsed(settings.timeout_s)
    with httpx.Client(timeout=HTTP_REQUEST_TIMEOUT_S) as client:
        while True:
            now = clock()
            if group is not None and reader is not None and now >= next_compute:
                next_compute = now + compute_every
                _read_group(reader, group, view, errors_since, bound, progress)
            parts = dict(view.parts)
            if url is not None:
                parts["http"] = probe_http(client, url, api_key)
            now = clock()
            progress.update(now, parts)
            member_up = view.member is not None and view.member.running
            vm = parts.get("vm")
            if url is not None:
                decider = parts["http"]
                # Without Compute API access the HTTP answer alone decides.
                ready = decider.ready and (member_up or reader is None or not view.readable)
            else:
                decider = vm or Observation("no-report")
                ready = decider.ready and member_up
            if view.stopped:
                summary = (
                    f"group {group.group if group else ''} is stopped (size 0, e.g. by idle autostop): "
                    "nothing to wait for; `qwen36 wake` starts it from the current template"
                )
                emit(summary)
                return Ready(summary, stopped=True)
            if ready:
                where = f" on {view.member.name} in {view.member.zone}" if view.member else ""
                summary = f"ready after {_elapsed(now - started)}{where}: {decider.detail}"
                emit(summary)
                return Ready(summary)
            if vm is not None and vm.failed:
                raise WaitFailed(
                    diagnose(f"the VM reported failure: {vm.detail}", parts, group, view, reader, progress)
                )
            if url is not None and vm is not None and vm.ready:
                vm_ready_since = vm_ready_since if vm_ready_since is not None else now
                if now - vm_ready_since >= settings.vm_ready_unreachable_s:
                    reason = (
                        f"the VM reports ready ({vm.detail}) but {url} has not answered ok from this "
                        f"machine for {_elapsed(now - vm_ready_since)}; check that this machine's public "
                        "IP is in qwen36-mtp-l4:sourceRanges, or empty sourceRanges to go through IAP"
                    )
                    raise WaitFailed(diagnose(reason, parts, group, view, reader, progress))
            if now >= deadline:
                reason = f"not ready after {bound} (the timeout)"
                if not view.readable and view.unread is not None:
                    # Never read at all: the cause is the Compute API's answer, not the server.
                    reason += f"; the group was never read: {view.unread.message}"
                    failed = WaitFailed(
                        diagnose(reason, parts, group, view, reader, progress), view.unread.exit_code
                    )
                    raise failed
                raise WaitFailed(diagnose(reason, parts, group, view, reader, progress))
            sleep(max(0.0, min(settings.poll_s, deadline - now)))


def _read_group(
    reader: GroupReader,
    group: GroupTarget,
    view: _GroupView,
    errors_since: datetime,
    bound: str,
    progress: _Progress,
) -> None:
    """One round of Compute API reads: members, errors (one line each, once), the member's report."""
    try:
        members: list[Member] | None = reader.members(group)
        problem = ""
    except QwenError as exc:  # the boundary's own line (qwen36/cloud_answers.py, qwen36/retry.py)
        members, problem = None, f"group unreadable: {type(exc).__name__}: {exc.message}"
        view.unread = exc
    except Exception as exc:  # unreadable now is "not ready", and said so
        members, problem = None, f"group unreadable: {type(exc).__name__}: {str(exc)[:160]}"
    errors: list[GroupError] = [e for m in members or [] for e in m.errors]
    try:
        if members is not None:
            errors += [e for e in reader.errors(group) if e.timestamp is None or e.timestamp >= errors_since]
    except Exception as exc:
        progress.say(f"group errors unreadable: {type(exc).__name__}: {str(exc)[:160]}")
    for error in errors:
        if error.stockout and error.zone and error.zone not in view.stockout_zones:
            view.stockout_zones.append(error.zone)
    for error in errors:
        # The same stockout shows in listErrors and in the member's last attempt: one line per zone.
        key = ("stockout", error.zone, "") if error.stockout else (error.code, error.zone, error.message)
        if key in view.seen_errors:
            continue
        view.seen_errors.add(key)
        line = zone_without_accelerator(error) or error_line(error, view.stockout_zones, group, bound)
        # A quota, an org policy or a missing permission cannot clear while we wait (qwen36/gate_blockers.py).
        fatal = line.removeprefix("group: ") if error.quota else cannot_clear(error, group)
        if fatal:
            raise WaitFailed(diagnose(fatal, view.parts, group, view, reader, progress))
        progress.say(line)
    member, member_obs = observe_member(members, problem)
    if members is None:
        # An unreadable round keeps following the member seen last.
        view.parts = {"member": member_obs, **{k: v for k, v in view.parts.items() if k != "member"}}
        return
    view.readable = True
    view.unread = None
    view.member = member
    view.parts = {"member": member_obs}
    if not members:
        # With autostop, targetSize is left to the watcher (ignore_changes), so a `pulumi up` that
        # changes the template finds the group at 0: nothing will come up until `wake`.
        try:
            view.stopped = reader.target_size(group) == 0
        except Exception as exc:
            progress.say(f"group size unreadable: {type(exc).__name__}: {str(exc)[:160]}")
    if member is not None and member.running:
        view.parts["vm"] = observe_report(reader, member.target(group.project))


def diagnose(
    reason: str,
    last: dict[str, Observation],
    group: GroupTarget | None,
    view: _GroupView,
    reader: GroupReader | None,
    progress: _Progress | None = None,
) -> str:
    lines = [f"llama-server is not ready: {reason}"]
    for label, obs in last.items():
        lines.append(f"last {label} state: {obs.state}" + (f" ({obs.detail})" if obs.detail else ""))
    if progress is not None and progress.history:
        lines.append("progress seen:")
        lines += [f"  {entry}" for entry in progress.history[-10:]]
    target = view.member.target(group.project) if view.member is not None and group is not None else None
    if target is not None and reader is not None:
        lines += _vm_facts(target, reader)
    if group is not None:
        lines.append("look further with:")
        commands = look_further_commands(group, target, plain_vm=isinstance(reader, SingleVmReader))
        lines += [f"  {command}" for command in commands]
    return "\n".join(lines)


def _vm_facts(target: Target, reader: GroupReader) -> list[str]:
    lines: list[str] = []
    try:
        info: InstanceInfo = reader.instance(target)
        lines.append(f"instance {target.instance} in {target.zone}: status {info.status}")
    except Exception as exc:  # diagnosis is best effort: report what could not be read
        lines.append(f"instance status unreadable: {type(exc).__name__}: {str(exc)[:160]}")
    try:
        tail = reader.serial_tail(target, SERIAL_TAIL_LINES)
        lines.append(f"last {len(tail)} lines of serial port {SERIAL_PORT}:")
        lines += [f"  | {line}" for line in tail]
    except Exception as exc:
        lines.append(f"serial console unreadable: {type(exc).__name__}: {str(exc)[:160]}")
    return lines


def look_further_commands(group: GroupTarget, target: Target | None, *, plain_vm: bool = False) -> list[str]:
    where_group = f"--region={shlex.quote(group.region)} --project={shlex.quote(group.project)}"
    commands = [
        f"gcloud compute instance-groups managed list-instances {shlex.quote(group.group)} {where_group}",
        f"gcloud compute instance-groups managed list-errors {shlex.quote(group.group)} {where_group}",
    ]
    if plain_vm:
        commands = []
    if target is None:
        return commands
    where = f"--zone={shlex.quote(target.zone)} --project={shlex.quote(target.project)}"
    name = shlex.quote(target.instance)
    query = f"--query-path={boot_protocol.NAMESPACE}/"
    ssh = f"gcloud compute ssh {name} {where} --tunnel-through-iap --command"
    return [
        *commands,
        f"gcloud compute instances get-serial-port-output {name} {where} --port={SERIAL_PORT}",
        f"gcloud compute instances get-guest-attributes {name} {where} {query}",
        f"{ssh} {shlex.quote(f'sudo journalctl -u {STARTUP_UNIT} --no-pager -n 200')}",
        f"{ssh} {shlex.quote(f'sudo docker logs --tail 200 {CONTAINER_NAME}')}",
    ]
