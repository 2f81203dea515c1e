"""``qwen36 verify [--stack S] [--no-wake] [--json PATH]``: settle the live checks on the real project.

Run after a deploy, it settles every item of docs/live-checks.md that a command can and prints one
line each: ``ok``, ``FAIL`` (what it saw and the fix) or ``skip`` (why, and when to rerun). A fresh
shell reaches the stack; a second preview proposes no change; the door answers with llama-server's
own ``/props`` and streams the thinking as ``reasoning_content``; a wrong key and a forged idle-stop
token are refused; the calibration's verdict is in the bucket; the boot's measured phases beside the
cold-start model's; a timed wake (it stops the server, unless ``--no-wake``); and the last idle stop
made by the door. Then the whole record as JSON (``verify.schema.json``). Exit 0 when nothing FAILs,
1 when a check does; the usual codes when it cannot run (docs/development.md).
"""

from __future__ import annotations

import argparse
import sys
import time
from collections.abc import Callable
from datetime import datetime
from pathlib import Path
from typing import TYPE_CHECKING

from qwen36.argtypes import STDOUT, positive_float, writable_file
from qwen36.errors import CAUSES, Exit, LocalIOError, as_error
from qwen36.verify.checks import (
    BOOT,
    DOOR_PROPS,
    STOP_FORGED,
    STOP_VIA_DOOR,
    THINKING,
    VERDICT,
    WAKE,
    WAKE_BOOT,
    WRONG_KEY,
    Check,
    fail,
    skip,
)

if TYPE_CHECKING:
    import httpx

    from qwen36.status import GroupApi
    from qwen36.verify.boot_phases import Serving
    from qwen36.verify.deployment import Deployment

DEFAULT_STACK = "dev"
POLL_S = 5.0
# GCE deletes a VM in well under this (a spot L4's shutdown included); past it the stop is reported.
STOP_BOUND_S = 600.0
# After the door's answer, the member's ready report may wait for room under the guest-attribute
# ration (infra/boot_protocol.py): this long at most.
REPORT_BOUND_S = 120.0


def register(subparsers: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    parser = subparsers.add_parser(
        "verify",
        help="settle the live checks on the deployed stack, one ok/FAIL/skip line each, and keep the record",
        description=__doc__.splitlines()[0] if __doc__ else None,
    )
    parser.add_argument("--stack", default=DEFAULT_STACK, help=f"the stack (default {DEFAULT_STACK})")
    parser.add_argument(
        "--no-wake",
        action="store_true",
        help="do not stop the server for the timed wake (it is then skipped)",
    )
    parser.add_argument(
        "--json",
        metavar="PATH",
        type=writable_file(),
        help="the record's path, or - for stdout (default: ~/.cache/qwen36-mtp-l4/reports/verify-*.json)",
    )
    parser.add_argument("--project-dir", type=Path, help="where Pulumi.yaml lives (default: this folder)")
    parser.add_argument("--compute-endpoint", help=argparse.SUPPRESS)
    parser.add_argument("--logging-endpoint", help=argparse.SUPPRESS)
    parser.add_argument("--anonymous", action="store_true", help=argparse.SUPPRESS)
    parser.add_argument("--poll-seconds", type=positive_float, default=POLL_S, help=argparse.SUPPRESS)
    parser.set_defaults(func=run)


def guarded(name: str, look: Callable[[], Check]) -> Check:
    """``look()``, with a failure of its own cloud call as its FAIL line; missing credentials or tools
    and Ctrl-C end the run (their exit codes), and a bug stays a bug."""
    try:
        return look()
    except Exception as exc:
        error = as_error(exc)
        if error is None or error.exit_code in (Exit.NO_CREDENTIALS, Exit.MISSING_TOOL, Exit.INTERRUPTED):
            raise
        return fail(name, error.message, CAUSES[Exit(error.exit_code)][1])


def run(args: argparse.Namespace) -> int:
    import httpx

    from qwen36.group import find_member
    from qwen36.status import GroupApi, Where
    from qwen36.verify import boot_phases, cloud, deployment, door_checks, record

    started = cloud.now_utc()
    project_dir = args.project_dir or Path.cwd()
    checks: list[Check] = []

    # With the record on stdout, the lines go to stderr so that stdout stays one JSON document.
    lines = sys.stderr if args.json == STDOUT else sys.stdout

    def say(text: str) -> None:
        print(text, file=lines, flush=True)

    def emit(check: Check) -> Check:
        checks.append(check)
        say(check.line())
        return check

    say(f"verify: stack {args.stack}")
    outputs, reached = deployment.read_outputs(args.stack, project_dir)
    emit(reached)
    dep = deployment.deployment(args.stack, project_dir, outputs)
    say(f"verify: {dep.project} {dep.region} group {dep.group}; door {dep.door_url or 'none'}")
    emit(guarded("preview", lambda: deployment.second_preview(args.stack, project_dir)))
    api = GroupApi(Where(dep.project, dep.region, dep.group), args.compute_endpoint, args.anonymous)
    door, key, alias = dep.door_url, dep.api_key or "", dep.cfg.alias
    no_door = "door: false: there is no front door"
    client = httpx.Client(timeout=door_checks.REQUEST_TIMEOUT_S)

    with client:
        if door is None:
            emit(skip(WRONG_KEY, f"{no_door} (llama-server checks the key itself)"))
            emit(skip(STOP_FORGED, f"{no_door} (the VM's watcher resizes the group itself)"))
        else:
            emit(guarded(WRONG_KEY, lambda: door_checks.wrong_key(client, door, key)))
            emit(guarded(STOP_FORGED, lambda: door_checks.stop_forged(client, door)))
        emit(guarded(STOP_VIA_DOOR, lambda: _stop_via_door(dep, args)))

        member = find_member(api.members()) if api.target_size() > 0 else None
        running = member is not None and member.running
        wake_asked = not args.no_wake and door is not None
        woke_first = False
        if not running and wake_asked:
            emit(guarded(WAKE, lambda: _wake(api, dep, client, args, stop=False)))
            woke_first = True
            member = find_member(api.members())
            running = member is not None and member.running

        before = boot_phases.read_serving(api, member) if running and member else None
        if door is None:
            emit(skip(DOOR_PROPS, no_door))
            emit(skip(THINKING, no_door))
        elif not running:
            why = "the group is at 0 (idle-stopped) and " + (
                "the wake did not bring it up" if woke_first else "--no-wake keeps it there"
            )
            rerun = "`qwen36 wake --stack " + dep.stack + "`, then `qwen36 verify --no-wake`"
            emit(skip(DOOR_PROPS, why, rerun))
            emit(skip(THINKING, why, rerun))
        else:
            emit(guarded(DOOR_PROPS, lambda: door_checks.props(client, door, key)))
            emit(guarded(THINKING, lambda: door_checks.thinking(client, door, key, alias)))
        emit(guarded(VERDICT, lambda: _verdict(dep, before)))
        if before is None:
            emit(skip(BOOT, "no member runs (the group is at 0)", "after `qwen36 wake`"))
        else:
            emit(before.check(BOOT, dep.cfg))

        if woke_first:
            emit(skip(WAKE_BOOT, "the group was at 0: the boot line above is this wake's boot"))
        elif not wake_asked:
            why = no_door if door is None else "--no-wake"
            rerun = "" if door is None else f"`qwen36 verify --stack {dep.stack}` (it stops the server)"
            emit(skip(WAKE, why, rerun))
            emit(skip(WAKE_BOOT, why))
        else:
            wake = emit(guarded(WAKE, lambda: _wake(api, dep, client, args, stop=True)))
            after = None
            if wake.state == "ok":
                after = _after_wake(api, args, before.boot_id if before else "")
            if after is None:
                emit(skip(WAKE_BOOT, f"the wake did not end in a serving member ({wake.state})"))
            else:
                emit(after.check(WAKE_BOOT, dep.cfg))

    failed = any(c.state == "FAIL" for c in checks)
    code = Exit.FAILED if failed else Exit.OK
    doc = record.record(
        stack=dep.stack, project=dep.project, region=dep.region, group=dep.group, door_url=door,
        wake=not args.no_wake, checks=checks, started=started, finished=cloud.now_utc(), exit_code=int(code),
    )  # fmt: skip
    counts = doc["counts"]
    try:
        where = record.write(doc, args.json)
    except OSError as exc:
        raise LocalIOError(f"could not write the record ({exc})") from None
    say(f"result: {counts['ok']} ok, {counts['FAIL']} FAIL, {counts['skip']} skip; record: {where}")
    return int(code)


def _after_wake(api: GroupApi, args: argparse.Namespace, old_boot: str) -> Serving | None:
    """The woken member once its ready report (of a new boot) is in, within REPORT_BOUND_S."""
    from qwen36.group import find_member
    from qwen36.verify.boot_phases import read_serving

    deadline = time.monotonic() + REPORT_BOUND_S
    while True:
        member = find_member(api.members())
        if member is not None and member.running:
            serving = read_serving(api, member)
            report = serving.report
            if report is not None and report.ready and report.boot_id != old_boot:
                return serving
            if time.monotonic() >= deadline:
                return serving
        elif time.monotonic() >= deadline:
            return None
        time.sleep(args.poll_seconds)


def _verdict(dep: Deployment, serving: Serving | None) -> Check:
    from infra import boot_protocol
    from qwen36.verify import cloud

    doc, problem = cloud.read_verdict(dep.bucket, dep.verdict_object, dep.project)
    boot: dict[str, str] = {}
    ready_at: datetime | None = None
    report = serving.report if serving else None
    if report is not None and report.ready:
        boot = {**boot_protocol.detail_fields(report.detail), "boot_id": report.boot_id}
        ready_at = report.time
    uri = f"gs://{dep.bucket}/{dep.verdict_object}"
    return cloud.verdict_check(doc, problem, uri, boot, ready_at, cloud.now_utc())


def _stop_via_door(dep: Deployment, args: argparse.Namespace) -> Check:
    from qwen36.verify import cloud

    if dep.door_url is None:
        return skip(STOP_VIA_DOOR, "door: false: the VM's watcher stops the group itself")
    if not dep.cfg.autostop_minutes:
        return skip(STOP_VIA_DOOR, "idleStopMinutes is 0: the server never stops itself")
    try:
        entries = cloud.autostop_entries(dep.project, args.logging_endpoint, args.anonymous)
    except cloud.LoggingError as exc:
        fix = "grant roles/logging.viewer on the project" if exc.status in (401, 403) else "rerun later"
        return fail(STOP_VIA_DOOR, str(exc), fix)
    return cloud.stop_via_door_check(entries, dep.cfg.autostop_minutes, dep.project, cloud.now_utc())


def _wake(
    api: GroupApi, dep: Deployment, client: httpx.Client, args: argparse.Namespace, *, stop: bool
) -> Check:
    from qwen36.verify import door_checks

    door, key = dep.door_url, dep.api_key or ""
    assert door is not None
    stop_s: float | None = None
    if stop:
        held = door_checks.busy(client, door, key)
        if held:
            return skip(
                WAKE,
                f"the door holds or streams {held} request(s): verify does not stop a server in use",
                "when nobody uses it",
            )
        started = time.monotonic()
        api.resize(0, timeout_s=STOP_BOUND_S)
        while api.members():
            if time.monotonic() - started >= STOP_BOUND_S:
                return fail(
                    WAKE,
                    f"the group is at 0 but its VM was still there after {STOP_BOUND_S:.0f} s",
                    "`qwen36 status`; the next request through the door (or `qwen36 wake`) starts it again",
                )
            time.sleep(args.poll_seconds)
        stop_s = time.monotonic() - started

    before = (
        f"{dep.group} was at 0 (idle-stopped)"
        if stop_s is None
        else f"stopped {dep.group} (resize to 0; its VM gone after {stop_s:.0f} s)"
    )
    # The door holds a request at most doorWakeBoundSeconds, then answers 503: a client waits longer.
    timeout = dep.cfg.door_wake_bound_seconds + 60.0
    result = door_checks.timed_requests(door, key, dep.cfg.alias, timeout)
    return door_checks.wake_check(result, before=before, stop_s=stop_s)
