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
import os
import shutil
import subprocess
import sys
import time
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any

from infra import boot_protocol
from qwen36.group import ComputeApiReader, GroupTarget, Member

API_KEY_ENV = "QWEN36_API_KEY"
# The stack output the program exports for these commands (infra/autostop.py: autostop_outputs).
STACK_OUTPUT = "autostop"
PULUMI_TIMEOUT_S = 60
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
STARTING = "starting"


class StatusError(RuntimeError):
    pass


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


@dataclass(frozen=True)
class Status:
    state: str
    detail: str
    member: Member | None = None


def stack_outputs(stack: str) -> dict[str, Any]:
    """``pulumi stack output --json --show-secrets`` of ``stack`` (the API key is among them)."""
    pulumi = shutil.which("pulumi")
    if pulumi is None:
        raise StatusError("the pulumi CLI is not on PATH; pass --project, --region and --group instead")
    out = subprocess.run(
        [pulumi, "stack", "output", "--json", "--show-secrets", "--stack", stack],
        capture_output=True,
        text=True,
        timeout=PULUMI_TIMEOUT_S,
        check=False,
    )
    if out.returncode != 0:
        raise StatusError(f"pulumi stack output --stack {stack} failed: {out.stderr.strip()[:300]}")
    return dict(json.loads(out.stdout))


def where_from(args: argparse.Namespace) -> Where:
    if args.stack:
        outputs = stack_outputs(args.stack)
        spec = outputs.get(STACK_OUTPUT)
        if not isinstance(spec, dict):
            raise StatusError(f"stack {args.stack} has no {STACK_OUTPUT!r} output; run `pulumi up` first")
        urls = {k: str(outputs[k]) for k in ("webUiUrl", "apiBaseUrl") if outputs.get(k)}
        return Where(
            project=str(spec["project"]),
            region=str(spec["region"]),
            group=str(spec["group"]),
            size=int(spec.get("size", 1)),
            url=spec.get("url") or None,
            timeout_minutes=float(spec.get("timeoutMinutes", 20)),
            urls=urls,
            api_key=os.environ.get(API_KEY_ENV) or outputs.get("apiKey") or None,
        )
    missing = [f"--{name}" for name in ("project", "region", "group") if not getattr(args, name)]
    if missing:
        raise StatusError(f"give --stack, or {', '.join(missing)}")
    return Where(
        project=args.project,
        region=args.region,
        group=args.group,
        size=getattr(args, "size", 1),
        url=getattr(args, "url", None),
        timeout_minutes=getattr(args, "timeout_minutes", 20),
        api_key=os.environ.get(API_KEY_ENV) or None,
    )


class GroupApi:
    """The group through the gate's reader (qwen36/group.py), plus the one write: the resize.

    ``endpoint`` points both at a stand-in in tests.
    """

    def __init__(self, where: Where, endpoint: str | None = None, anonymous: bool = False) -> None:
        from google.api_core.client_options import ClientOptions
        from google.cloud import compute_v1

        credentials = None
        if anonymous:
            from google.auth.credentials import AnonymousCredentials

            credentials = AnonymousCredentials()
        self.reader = ComputeApiReader(api_endpoint=endpoint, credentials=credentials)
        self.target = GroupTarget(project=where.project, region=where.region, group=where.group)
        options = ClientOptions(api_endpoint=endpoint) if endpoint else None
        kw: dict[str, Any] = {"transport": "rest", "client_options": options, "credentials": credentials}
        self.groups = compute_v1.RegionInstanceGroupManagersClient(**kw)
        # Its own client: the one ExtendedOperation polls with ignores client_options (it always
        # calls compute.googleapis.com), so it would escape a stand-in endpoint.
        self.operations = compute_v1.RegionOperationsClient(**kw)
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
        name = str(self.groups.resize(**self._ids, size=size, timeout=COMPUTE_TIMEOUT_S).name)
        deadline = time.monotonic() + timeout_s
        while True:
            op = self.operations.wait(
                project=self.where.project, region=self.where.region, operation=name, timeout=OPERATION_WAIT_S
            )
            if op.error.errors:
                errors = "; ".join(f"{e.code}: {e.message}" for e in op.error.errors)
                raise StatusError(f"resize of {self.where.group} failed: {errors}")
            if op.status == op.Status.DONE:
                return name
            if time.monotonic() >= deadline:
                raise StatusError(f"resize operation {name} not done before the timeout")

    def members(self) -> list[Member]:
        return self.reader.members(self.target)

    def guest_attributes(self, member: Member) -> dict[str, str]:
        """The member's ``qwen36/`` guest attributes: the idle watcher's report and the boot's."""
        return self.reader.guest_attributes(member.target(self.where.project))


def classify(target_size: int, members: list[Member]) -> Status:
    """The group's state in one word, with the fact behind it."""
    if target_size == 0:
        return Status(IDLE_STOPPED, "the group is at size 0 (idle autostop or a manual stop)")
    for m in members:
        stockouts = [e.message for e in m.errors if e.stockout]
        if stockouts:
            return Status(STOCKED_OUT, f"{m.name}: {stockouts[0]} (the group keeps retrying)", m)
    if not members:
        return Status(STARTING, f"target size {target_size}; no member created yet")
    member = members[0]
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
    at = datetime.strptime(last, "%Y-%m-%dT%H:%M:%SZ").replace(tzinfo=UTC)
    minutes = max(0, int((now - at).total_seconds() // 60))
    return f"last request {minutes} min ago ({last})"


def describe(api: GroupApi, now: datetime | None = None) -> str:
    status = classify(api.target_size(), api.members())
    line = f"{status.state}: {status.detail}"
    if status.state == RUNNING and status.member is not None:
        now = now or datetime.now(UTC)
        attributes = api.guest_attributes(status.member)
        line += f"; {since_last_request(attributes.get(IDLE_KEY), now)}"
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
    parser.add_argument("--stack", help="read the group from this stack's outputs (needs the pulumi CLI)")
    parser.add_argument("--project")
    parser.add_argument("--region")
    parser.add_argument("--group", help="the managed instance group's name (the deployment name)")
    parser.add_argument("--compute-endpoint", help=argparse.SUPPRESS)
    parser.add_argument("--anonymous", action="store_true", help=argparse.SUPPRESS)


def register(subparsers: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    parser = subparsers.add_parser(
        "status",
        help="say whether the server runs, is idle-stopped, being repaired or stocked out",
        description=__doc__.splitlines()[0] if __doc__ else None,
    )
    add_group_arguments(parser)
    parser.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    try:
        where = where_from(args)
        print(describe(GroupApi(where, args.compute_endpoint, args.anonymous)), flush=True)
    except StatusError as exc:
        print(f"status: {exc}", file=sys.stderr)
        return 2
    return 0
