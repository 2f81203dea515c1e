"""``qwen36 status``: is the server running, idle-stopped, being repaired or stocked out?

It reads the server's managed instance group through the Compute API with the deployer's
credentials: the group's target size (0 after an idle stop), its member's status and current
action, the member's last creation error (a spot stockout) and, when it runs, the idle watcher's
report (guest attribute ``qwen36/idle``) for the time since the last request.
https://cloud.google.com/compute/docs/reference/rest/v1/regionInstanceGroupManagers/listManagedInstances
"""

from __future__ import annotations

import argparse
import json
import math
import os
import time
from dataclasses import dataclass, field, replace
from datetime import UTC, datetime
from typing import Any

from infra import boot_protocol
from infra.config_rules import check_project_id, check_region, check_rfc1035
from qwen36.argtypes import (
    api_key_problem,
    http_url,
    project_id,
    region_name,
    resource_name,
    stack_name,
    url_problem,
)
from qwen36.errors import (
    ApiError,
    Exit,
    NotFoundError,
    QwenError,
    UsageError,
)
from qwen36.group import ComputeApiReader, GroupTarget, Member
from qwen36.pulumi_cli import INSTEAD, pulumi_stdout

API_KEY_ENV = "QWEN36_API_KEY"
# The stack output the program exports for these commands (infra/autostop.py: autostop_outputs).
STACK_OUTPUT = "autostop"
KEYS_OUTPUT = "keysSecret"
COMPUTE_TIMEOUT_S = 15.0
# regionOperations.wait itself answers within about 2 minutes; the HTTP call may take that long.
OPERATION_WAIT_S = 150.0
IDLE_KEY = "idle"
# A member that is not there to serve: preempted (a spot VM is TERMINATED or STOPPED), or being rebuilt.
DOWN_STATUSES = frozenset({"TERMINATED", "STOPPED", "STOPPING", "SUSPENDED", "SUSPENDING"})

RUNNING = "running"
IDLE_STOPPED = "idle-stopped"
REPAIRING = "preempted-and-repairing"
STOCKED_OUT = "stocked-out"
QUOTA_BLOCKED = "quota-blocked"
STARTING = "starting"


class StatusError(QwenError):
    """A status or wake failure; the exit code says its cause (qwen36/errors.py)."""


@dataclass(frozen=True)
class Where:
    """The group as the stack outputs name it."""

    project: str
    region: str
    group: str
    size: int = 1
    url: str | None = None
    timeout_minutes: float = 20
    urls: dict[str, str] = field(default_factory=dict)
    api_key: str | None = None
    keys_secret: str | None = None
    """The door's named-key set (the stack output keysSecret): each key's use is shown with it."""


@dataclass(frozen=True)
class Status:
    state: str
    detail: str
    member: Member | None = None


def stack_outputs(stack: str) -> dict[str, Any]:
    """``pulumi stack output --json --show-secrets`` of ``stack`` (the API key is among them)."""
    stdout = pulumi_stdout(
        ["stack", "output", "--json", "--show-secrets", "--stack", stack],
        shown=f"pulumi stack output --stack {stack}",
        timeout_note=f"; or {INSTEAD}",
    )
    try:
        outputs = json.loads(stdout or "{}")
    except json.JSONDecodeError:
        raise NotFoundError(
            f"`pulumi stack output --json --stack {stack}` did not print JSON; check the stack "
            f"(`pulumi stack ls`), or {INSTEAD}"
        ) from None
    if not isinstance(outputs, dict):
        raise NotFoundError(
            f"`pulumi stack output --json --stack {stack}` printed a {type(outputs).__name__}, not the "
            f"outputs' mapping; check the stack, or {INSTEAD}"
        )
    return outputs


def where_from(args: argparse.Namespace) -> Where:
    if args.stack:
        outputs = stack_outputs(args.stack)
        spec = outputs.get(STACK_OUTPUT)
        if not isinstance(spec, dict):
            raise NotFoundError(f"stack {args.stack} has no {STACK_OUTPUT!r} output; run `pulumi up` first")
        urls = {k: str(outputs[k]) for k in ("webUiUrl", "apiBaseUrl") if outputs.get(k)}
        missing = [key for key in ("project", "region", "group") if key not in spec]
        if missing:
            raise NotFoundError(
                f"stack {args.stack}'s {STACK_OUTPUT!r} output lacks {', '.join(missing)} (an older "
                "program?); run `pulumi up`, or pass --project, --region and --group"
            )
        source = f"stack {args.stack}'s {STACK_OUTPUT!r} output"
        key = os.environ.get(API_KEY_ENV) or outputs.get("apiKey") or None
        keys_secret = outputs.get(KEYS_OUTPUT)
        return checked_where(
            Where(
                project=spec["project"],
                region=spec["region"],
                group=spec["group"],
                size=spec.get("size", 1),
                url=spec.get("url") or None,
                timeout_minutes=spec.get("timeoutMinutes", 20),
                urls=urls,
                api_key=key if isinstance(key, str) else None,
                keys_secret=keys_secret if isinstance(keys_secret, str) and keys_secret else None,
            ),
            source,
        )
    missing = [f"--{name}" for name in ("project", "region", "group") if not getattr(args, name)]
    if missing:
        raise UsageError(f"give --stack, or {', '.join(missing)}")
    return checked_where(
        Where(
            project=args.project,
            region=args.region,
            group=args.group,
            size=getattr(args, "size", 1),
            url=getattr(args, "url", None),
            timeout_minutes=getattr(args, "timeout_minutes", 20),
            api_key=os.environ.get(API_KEY_ENV) or None,
        ),
        "the flags",
    )


# What a wake may ask of the group, whoever names it: the program's own bounds (infra/config.py
# MAX_REPLICAS, wait's MAX_TIMEOUT_MINUTES). Stack outputs are data from elsewhere (a hand-edited
# state, an older program): `autostop.size` 100 would have resized the group to 100 servers.
MAX_WAKE_SIZE = 8
MAX_WAKE_MINUTES = 24 * 60


def checked_where(where: Where, source: str) -> Where:
    """``where`` with every value checked against the rule GCE or the program holds it to; a bad one
    is a NotFoundError (a stack output) or a UsageError (a flag) naming it."""
    error: type[QwenError] = UsageError if source == "the flags" else NotFoundError
    fix = "fix the flag" if error is UsageError else "run `pulumi up` to export it again, or pass the flags"

    def bad(name: str, value: object, why: str) -> QwenError:
        return error(f"{source}: {name} {value!r} {why}; {fix}")

    for name, value in (("project", where.project), ("region", where.region), ("group", where.group)):
        if not isinstance(value, str):
            raise bad(name, value, "is not a name")
    try:
        check_project_id(where.project, new_project_rules=False)
    except ValueError as exc:
        raise bad("project", where.project, str(exc)) from None
    try:
        check_region(where.region)
    except ValueError as exc:
        raise bad("region", where.region, str(exc)) from None
    try:
        check_rfc1035(where.group, "a group name")
    except ValueError as exc:
        raise bad("group", where.group, str(exc)) from None
    size, minutes = where.size, where.timeout_minutes
    if isinstance(size, bool) or not isinstance(size, int) or not 1 <= size <= MAX_WAKE_SIZE:
        raise bad("size", size, f"is not a whole number of servers from 1 to {MAX_WAKE_SIZE}")
    if (
        isinstance(minutes, bool)
        or not isinstance(minutes, int | float)
        or not math.isfinite(minutes)
        or not 0 < minutes <= MAX_WAKE_MINUTES
    ):
        raise bad("timeoutMinutes", minutes, f"is not a number of minutes in (0, {MAX_WAKE_MINUTES}]")
    if where.url is not None and (not isinstance(where.url, str) or url_problem(where.url)):
        raise bad("url", where.url, "is not an http:// or https:// URL")
    for name, value in where.urls.items():
        if url_problem(value):
            raise bad(name, value, "is not an http:// or https:// URL")
    if where.api_key is not None and api_key_problem(where.api_key):
        raise bad("apiKey", "…", f"(the API key) {api_key_problem(where.api_key)}")
    return replace(where, timeout_minutes=float(minutes))


class GroupApi:
    """The group through the gate's reader (qwen36/group.py), plus the one write: the resize.

    ``endpoint`` points both at a stand-in in tests.
    """

    def __init__(self, where: Where, endpoint: str | None = None, anonymous: bool = False) -> None:
        from google.api_core.client_options import ClientOptions
        from google.cloud import compute_v1

        from qwen36.retry import RetryingClient

        credentials = None
        if anonymous:
            from google.auth.credentials import AnonymousCredentials

            credentials = AnonymousCredentials()
        # The target first: a bad name is a usage error before credentials are looked for.
        self.target = GroupTarget(project=where.project, region=where.region, group=where.group)
        self.reader = ComputeApiReader(api_endpoint=endpoint, credentials=credentials)
        options = ClientOptions(api_endpoint=endpoint) if endpoint else None
        kw: dict[str, Any] = {"transport": "rest", "client_options": options, "credentials": credentials}
        self.groups = RetryingClient(
            compute_v1.RegionInstanceGroupManagersClient(**kw),
            "regionInstanceGroupManagers",
            mutating=frozenset({"resize"}),
        )
        # Its own client: the one ExtendedOperation polls with ignores client_options (it always
        # calls compute.googleapis.com), so it would escape a stand-in endpoint.
        self.operations = RetryingClient(compute_v1.RegionOperationsClient(**kw), "regionOperations")
        self._v1 = compute_v1
        self.where = where
        self._ids = {"project": where.project, "region": where.region, "instance_group_manager": where.group}

    def target_size(self) -> int:
        return self.reader.target_size(self.target)

    def resize(self, size: int, timeout_s: float) -> str:
        """Resizes and waits for GCE to accept it (the operation DONE); returns the operation's name.

        ``regionOperations.wait`` returns when the operation is DONE or after about 2 minutes, so it
        is called again until DONE or the deadline.
        https://cloud.google.com/compute/docs/reference/rest/v1/regionOperations/wait
        """
        # One requestId for every try (qwen36.retry): a resize GCE accepted but whose answer was
        # lost is recognised when it is sent again, not applied twice.
        request = self._v1.ResizeRegionInstanceGroupManagerRequest(**self._ids, size=size)
        name = str(self.groups.resize(request=request, timeout=COMPUTE_TIMEOUT_S).name)
        deadline = time.monotonic() + timeout_s
        while True:
            op = self.operations.wait(
                project=self.where.project, region=self.where.region, operation=name, timeout=OPERATION_WAIT_S
            )
            if op.error.errors:
                errors = "; ".join(f"{e.code}: {e.message}" for e in op.error.errors)
                raise ApiError(f"resize of {self.where.group} failed: {errors}")
            if op.status == op.Status.DONE:
                return name
            if time.monotonic() >= deadline:
                raise StatusError(
                    f"resize operation {name} not done before the timeout; `qwen36 status` "
                    "shows whether it went through"
                )

    def members(self) -> list[Member]:
        return self.reader.members(self.target)

    def guest_attributes(self, member: Member) -> dict[str, str]:
        """The member's guest attributes under ``qwen36/``: the boot report, the agents' reports."""
        return self.reader.guest_attributes(member.target(self.where.project))


def classify(target_size: int, members: list[Member]) -> Status:
    """The group's state in one word, with the fact behind it."""
    if target_size == 0:
        return Status(IDLE_STOPPED, "the group is at size 0 (idle autostop or a manual stop)")
    for m in members:
        quota = [e for e in m.errors if e.quota]
        if quota:
            error = quota[0]
            metric = f" {error.quota_metric}" if error.quota_metric else ""
            return Status(
                QUOTA_BLOCKED,
                f"{m.name}: GCE cannot create it: quota{metric} exceeded ({error.message}); it will not "
                "start until the limit is raised (console: IAM & Admin > Quotas)",
                m,
            )
        stockouts = [e.message for e in m.errors if e.stockout]
        if stockouts:
            return Status(STOCKED_OUT, f"{m.name}: {stockouts[0]} (the group keeps retrying)", m)
    if not members:
        return Status(STARTING, f"target size {target_size}; no member created yet")
    member = members[0]
    if not member.status:
        errors = "; ".join(f"{e.code}: {e.message}" for e in member.errors)
        suffix = f"; last error {errors}" if errors else ""
        action = member.action.lower() or "pending"
        return Status(STARTING, f"{member.name} not created yet (action {action}){suffix}", member)
    if member.status == "RUNNING" and member.action == "NONE":
        return Status(RUNNING, f"{member.name} in {member.zone}", member)
    if member.action == "RECREATING" or member.status in DOWN_STATUSES:
        errors = "; ".join(f"{e.code}: {e.message}" for e in member.errors)
        suffix = f"; last error {errors}" if errors else ""
        return Status(REPAIRING, f"{member.name} is {member.status}, action {member.action}{suffix}", member)
    return Status(STARTING, f"{member.name} is {member.status}, action {member.action}", member)


def since_last_request(report: str | None, now: datetime) -> str:
    """From the watcher's ``watching <time> <boot-id> last-request=<time|none> ...`` report."""
    if not report:
        return "no report from the idle watcher yet"
    fields = dict(part.split("=", 1) for part in report.split(" ")[3:] if "=" in part)
    last = fields.get("last-request")
    if last is None:
        return f"unreadable idle report {report[:80]!r}"
    if last == "none":
        started = report.split(" ")[1]
        return f"no request since the watcher started (report of {started})"
    try:
        at = datetime.strptime(last, "%Y-%m-%dT%H:%M:%SZ").replace(tzinfo=UTC)
    except ValueError:
        return f"unreadable idle report {report[:80]!r}"
    minutes = max(0, int((now - at).total_seconds() // 60))
    return f"last request {minutes} min ago ({last})"


def serving(attributes: dict[str, str]) -> str:
    """What the member serves and how fast: the calibration's choice from its boot report, and the
    acceptance guard's last report (startup/accept_guard.py); '' when neither says anything."""
    parts = []
    fields = _fields(attributes.get(boot_protocol.KEY_REPORT))
    if fields.get(boot_protocol.FIELD_FLAGS):
        chosen = (
            f"serving {fields[boot_protocol.FIELD_FLAGS]} ({fields.get(boot_protocol.FIELD_VERDICT, '?')}"
        )
        if fields.get(boot_protocol.FIELD_PINNED):
            chosen += f"; {fields[boot_protocol.FIELD_PINNED]} from the stack config"
        parts.append(chosen + ")")
    guard = attributes.get(boot_protocol.KEY_ACCEPT)
    live = _fields(guard)
    if live:
        state = guard.split(" ", 1)[0] if guard else ""
        expect = live.get("expect", "none")
        line = f"acceptance {_pct(live.get('acceptance'))}"
        line += f" (verdict {_pct(expect)})" if expect != "none" else ""
        line += f", decode {live.get('decode-tps', 'none')} tok/s since the server started"
        if state in ("low", "stale"):
            line += f"; recent acceptance {_pct(live.get('recent-acceptance'))}: {state}"
        parts.append(line)
    return "; ".join(parts)


def _fields(report: str | None) -> dict[str, str]:
    if not report:
        return {}
    try:
        return boot_protocol.detail_fields(boot_protocol.parse_report(report).detail)
    except boot_protocol.ReportFormatError:
        return {}


def _pct(value: str | None) -> str:
    try:
        return f"{float(value or ''):.1%}"
    except ValueError:
        return "n/a"


def describe(api: GroupApi, now: datetime | None = None) -> str:
    status = classify(api.target_size(), api.members())
    line = f"{status.state}: {status.detail}"
    if status.state == RUNNING and status.member is not None:
        now = now or datetime.now(UTC)
        attributes = api.guest_attributes(status.member)
        line += f"; {since_last_request(attributes.get(IDLE_KEY), now)}"
        if extra := serving(attributes):
            line += f"; {extra}"
        line += boot_figures(attributes.get(boot_protocol.KEY_REPORT))
    return line


def boot_figures(report: str | None) -> str:
    """``; boot: model from gcs at ... MB/s (...), loaded in ... s, ready ... s after boot`` from the
    member's ready report (infra/boot_protocol.py ready_figures), or nothing."""
    try:
        figures = boot_protocol.ready_figures(boot_protocol.parse_report(report)) if report else None
    except boot_protocol.ReportFormatError:
        return ""
    return f"; boot: {figures}" if figures else ""


def add_group_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--stack", type=stack_name, help="read the group from this stack's outputs (needs the pulumi CLI)"
    )
    parser.add_argument("--project", type=project_id)
    parser.add_argument("--region", type=region_name)
    parser.add_argument(
        "--group", type=resource_name, help="the managed instance group's name (the deployment name)"
    )
    parser.add_argument("--compute-endpoint", type=http_url, help=argparse.SUPPRESS)
    parser.add_argument("--anonymous", action="store_true", help=argparse.SUPPRESS)


def register(subparsers: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    parser = subparsers.add_parser(
        "status",
        help="say whether the server runs, is idle-stopped, being repaired or stocked out",
        description=__doc__.splitlines()[0] if __doc__ else None,
    )
    add_group_arguments(parser)
    # Cloud Monitoring at <root>/v3 (a stand-in in tests); the Compute stand-in is --compute-endpoint.
    parser.add_argument("--api-root", help=argparse.SUPPRESS)
    parser.set_defaults(func=run)


def key_usage_lines(project: str, api_root: str | None, now: datetime | None = None) -> list[str]:
    """One line per key the door's series name in the last 30 days (qwen36/keys/usage.py)."""
    from qwen36.keys import credentials
    from qwen36.keys.usage import Monitoring, key_usage

    monitoring = Monitoring(project, credentials(), f"{api_root.rstrip('/')}/v3" if api_root else None)
    used = key_usage(monitoring, now)
    if not used:
        return ["keys: no request through the door in the last 30 days"]
    return [f"key {name}: {use.describe()}" for name, use in sorted(used.items())]


def run(args: argparse.Namespace) -> int:
    where = where_from(args)
    print(describe(GroupApi(where, args.compute_endpoint, args.anonymous)), flush=True)
    if where.keys_secret:
        for line in key_usage_lines(where.project, args.api_root):
            print(line, flush=True)
    return Exit.OK
