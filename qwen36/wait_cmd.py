"""``python -m qwen36 wait``: block until the deployed server group serves (the Pulumi health gate runs it).

The API key comes from the environment (``QWEN36_API_KEY``) so it never appears in a command
line, a process list or Pulumi's state of the command; it is never printed.
"""

from __future__ import annotations

import argparse
import os
import shlex
import time

from qwen36.argtypes import (
    api_key_problem,
    bounded_float,
    http_url,
    project_id,
    region_name,
    resource_name,
    zone_name,
)
from qwen36.errors import QwenError, UsageError, as_error

API_KEY_ENV = "QWEN36_API_KEY"
MODES = ("http", "guest-attributes")
# Mirrors qwen36.health's defaults; that module (httpx, the Compute client) loads only on run.
DEFAULT_POLL_S = 5.0
DEFAULT_HEARTBEAT_S = 30.0
# The gate's own bound (infra/config.py healthTimeoutMinutes allows 1-120); a wait is never unbounded.
MAX_TIMEOUT_MINUTES = 24 * 60
# A pause between looks longer than an hour would outlast any wait worth making.
MAX_PAUSE_S = 3600.0


def register(subparsers: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    parser = subparsers.add_parser(
        "wait",
        help="wait until the server answers, or fail with a diagnosis",
        description=__doc__.splitlines()[0] if __doc__ else None,
    )
    parser.add_argument("--mode", choices=MODES, required=True)
    parser.add_argument(
        "--url", type=http_url, help="http mode: the server's base URL, e.g. http://203.0.113.7:8080"
    )
    parser.add_argument("--project", type=project_id, required=True)
    parser.add_argument("--region", type=region_name, help="the server group's region")
    parser.add_argument("--group", type=resource_name, help="the regional managed instance group's name")
    parser.add_argument(
        "--zone", type=zone_name, help="with --instance: wait on one plain VM (the tooling image's builder)"
    )
    parser.add_argument("--instance", type=resource_name, help="with --zone: the plain VM's name")
    parser.add_argument(
        "--door-url",
        type=http_url,
        help="once the group serves, the front door's URL must reach it (qwen36/door_probe.py)",
    )
    parser.add_argument(
        "--door-service",
        type=resource_name,
        help="with --door-url: the door's Cloud Run service, for its logs",
    )
    parser.add_argument("--timeout-minutes", type=bounded_float(MAX_TIMEOUT_MINUTES), required=True)
    parser.add_argument("--poll-seconds", type=bounded_float(MAX_PAUSE_S), default=DEFAULT_POLL_S)
    parser.add_argument("--heartbeat-seconds", type=bounded_float(MAX_PAUSE_S), default=DEFAULT_HEARTBEAT_S)
    parser.add_argument(
        "--compute-endpoint", type=http_url, help="Compute API endpoint override (a local stand-in in tests)"
    )
    parser.add_argument(
        "--anonymous", action="store_true", help="no credentials (only for a local Compute API stand-in)"
    )
    parser.set_defaults(func=run, check=check)


def check(args: argparse.Namespace) -> None:
    if args.mode == "http" and not args.url:
        raise UsageError("--mode http needs --url")
    if args.url is not None and not args.url.startswith(("http://", "https://")):
        raise UsageError(f"--url {args.url!r}: give an http:// or https:// URL")
    if args.door_url is not None:
        if not args.door_url.startswith(("http://", "https://")):
            raise UsageError(f"--door-url {args.door_url!r}: give an http:// or https:// URL")
        if not os.environ.get(API_KEY_ENV):
            raise UsageError(
                f"--door-url needs the API key in {API_KEY_ENV}: the door admits nothing without it"
            )
    key = os.environ.get(API_KEY_ENV)
    problem = api_key_problem(key) if key else None
    if problem:
        raise UsageError(f"the API key in {API_KEY_ENV} {problem}")
    if not (args.region and args.group) and not (args.zone and args.instance):
        raise UsageError("needs --region and --group (a server group), or --zone and --instance")


def run(args: argparse.Namespace) -> int:
    from qwen36.group import ComputeApiReader, GroupReader, GroupTarget, SingleVmReader, Target
    from qwen36.health import WaitFailed, WaitSettings, wait_ready

    credentials = None
    if args.anonymous:
        from google.auth.credentials import AnonymousCredentials

        credentials = AnonymousCredentials()
    # The target first: a bad name is a usage error before credentials are looked for.
    if args.region and args.group:
        group = GroupTarget(project=args.project, region=args.region, group=args.group)
    else:
        group = GroupTarget(project=args.project, region=args.zone.rsplit("-", 1)[0], group=args.instance)
    reader: GroupReader | None
    try:
        reader = ComputeApiReader(api_endpoint=args.compute_endpoint, credentials=credentials)
    except Exception as exc:  # e.g. no application-default credentials on this machine
        if args.mode != "http":
            known = as_error(exc)
            if known is None:
                raise
            raise QwenError(
                f"cannot read the server group through the Compute API: {known.message}", known.exit_code
            ) from exc
        print(f"wait: no Compute API access ({type(exc).__name__}); probing HTTP only", flush=True)
        reader = None
    if not (args.region and args.group):
        vm = Target(project=args.project, zone=args.zone, instance=args.instance)
        reader = SingleVmReader(reader, vm) if reader is not None else None
    started = time.monotonic()
    try:
        ready = wait_ready(
            settings=WaitSettings(
                timeout_s=args.timeout_minutes * 60,
                poll_s=args.poll_seconds,
                heartbeat_s=args.heartbeat_seconds,
            ),
            url=args.url if args.mode == "http" else None,
            api_key=os.environ.get(API_KEY_ENV) or None,
            group=group,
            reader=reader,
            emit=lambda line: print(line, flush=True),
        )
    except WaitFailed as exc:
        raise exc.reported() from None
    if args.door_url is not None:
        from qwen36.door_probe import DOOR_BOUND_S, wait_door

        logs = ""
        if args.door_service and args.region:
            where = ["--region", args.region, "--project", args.project]
            logs = shlex.join(["gcloud", "run", "services", "logs", "read", args.door_service, *where])
        # The door's look shares --timeout-minutes with the wait before it (issue 29: it took its
        # own 180 s however short the timeout).
        left_s = args.timeout_minutes * 60 - (time.monotonic() - started)
        wait_door(
            args.door_url,
            os.environ[API_KEY_ENV],
            server_stopped=ready.stopped,
            bound_s=max(1.0, min(DOOR_BOUND_S, left_s)),
            poll_s=args.poll_seconds,
            heartbeat_s=args.heartbeat_seconds,
            logs_command=logs,
            emit=lambda line: print(line, flush=True),
        )
    return 0
