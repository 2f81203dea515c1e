"""``qwen36 tunnel|ssh|logs``: reach the server group's current member, wherever it runs now.

A repaired member may come back with a new name or in another zone, so a fixed
``gcloud compute start-iap-tunnel <vm> --zone=<zone>`` goes stale. These commands ask the Compute
API for the group's current RUNNING member and its zone, then run gcloud for it (IAP TCP
forwarding; the user needs roles/iap.tunnelResourceAccessor). The group comes from the flags the
stack outputs print, or from ``--stack`` (read with ``pulumi stack output``).
"""

from __future__ import annotations

import argparse
import json
import os
import shlex
import shutil
import sys
from collections.abc import Sequence

from qwen36.argtypes import http_url, port, project_id, region_name, resource_name, stack_name
from qwen36.errors import Exit, MissingToolError, NotFoundError, QwenError, UsageError
from qwen36.pulumi_cli import pulumi_stdout

PORT = 8080  # infra/server_args.PORT; infra (and pulumi) is not imported by the CLI
LOCAL_HOST = "localhost"
SERIAL_LINES = 400
EXIT_NO_MEMBER = Exit.FAILED


def _common(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--project", type=project_id, help="the Google Cloud project (default: the stack's gcp:project)"
    )
    parser.add_argument(
        "--region", type=region_name, help="the group's region (default: the stack's region output)"
    )
    parser.add_argument(
        "--group", type=resource_name, help="the group's name (default: the stack's groupName output)"
    )
    parser.add_argument("--stack", type=stack_name, help="read the three values above from this Pulumi stack")
    parser.add_argument("--print", action="store_true", help="print the gcloud command instead of running it")
    parser.add_argument(
        "--compute-endpoint", type=http_url, help="Compute API endpoint override (a local stand-in in tests)"
    )
    parser.add_argument("--anonymous", action="store_true", help="no credentials (only for a local stand-in)")


def register(subparsers: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    tunnel = subparsers.add_parser(
        "tunnel", help="open an IAP tunnel to the server group's current member (localhost:8080)"
    )
    _common(tunnel)
    tunnel.add_argument("--local-port", type=port, default=PORT)
    tunnel.set_defaults(func=run, verb="tunnel")

    ssh = subparsers.add_parser("ssh", help="SSH (through IAP) into the server group's current member")
    _common(ssh)
    ssh.add_argument("command", nargs="*", help="a command to run instead of a shell")
    ssh.set_defaults(func=run, verb="ssh")

    logs = subparsers.add_parser("logs", help="follow the server container's logs on the current member")
    _common(logs)
    logs.add_argument(
        "--serial", action="store_true", help="print the boot's serial console lines instead (no SSH needed)"
    )
    logs.set_defaults(func=run, verb="logs")


def _pulumi(args: list[str]) -> str:
    return pulumi_stdout(args, shown=shlex.join(["pulumi", *args]))


def stack_defaults(stack: str) -> dict[str, str]:
    """``groupName``/``region`` outputs and ``gcp:project`` of a Pulumi stack, through the pulumi CLI."""
    try:
        outputs = json.loads(_pulumi(["stack", "output", "--json", "--stack", stack]) or "{}")
    except json.JSONDecodeError:
        raise NotFoundError(
            f"`pulumi stack output --json --stack {stack}` did not print JSON; check the stack, or pass "
            "--project, --region and --group"
        ) from None
    missing = [k for k in ("region", "groupName") if not isinstance(outputs, dict) or not outputs.get(k)]
    if missing:
        raise NotFoundError(
            f"stack {stack} has no {' or '.join(missing)} output; run `pulumi up` first, or pass "
            "--project, --region and --group"
        )
    project = _pulumi(["config", "get", "gcp:project", "--stack", stack]).strip()
    found = {"project": project, "region": str(outputs["region"]), "group": str(outputs["groupName"])}
    # What the stack says goes to gcloud and the Compute API's paths: held to the flags' own rules.
    for (name, text), check in zip(found.items(), (project_id, region_name, resource_name), strict=True):
        try:
            check(text)
        except argparse.ArgumentTypeError as exc:
            raise NotFoundError(
                f"stack {stack}'s {name}: {exc}; run `pulumi up`, or pass --project, --region and --group"
            ) from None
    return found


def gcloud_argv(verb: str, args: argparse.Namespace, *, project: str, zone: str, instance: str) -> list[str]:
    from qwen36.group import CONTAINER_NAME

    where = [f"--zone={zone}", f"--project={project}"]
    if verb == "tunnel":
        local = f"--local-host-port={LOCAL_HOST}:{args.local_port}"
        return ["gcloud", "compute", "start-iap-tunnel", instance, str(PORT), local, *where]
    ssh = ["gcloud", "compute", "ssh", instance, *where, "--tunnel-through-iap"]
    if verb == "logs":
        return [*ssh, "--command", f"sudo docker logs -f {CONTAINER_NAME}"]
    return [*ssh, "--command", shlex.join(args.command)] if args.command else ssh


def run(args: argparse.Namespace) -> int:
    from qwen36.group import ComputeApiReader, GroupTarget, find_member

    values = {"project": args.project, "region": args.region, "group": args.group}
    if args.stack and not all(values.values()):
        values = {**stack_defaults(args.stack), **{k: v for k, v in values.items() if v}}
    missing = [f"--{k}" for k, v in values.items() if not v]
    if missing:
        raise UsageError(f"needs {', '.join(missing)} (or --stack)")
    group = GroupTarget(project=values["project"], region=values["region"], group=values["group"])
    credentials = None
    if args.anonymous:
        from google.auth.credentials import AnonymousCredentials

        credentials = AnonymousCredentials()
    reader = ComputeApiReader(api_endpoint=args.compute_endpoint, credentials=credentials)
    members = reader.members(group)
    member = find_member(members)
    if member is None or not member.running:
        state = "no member" if member is None else f"{member.name} is {member.status or member.action}"
        raise QwenError(
            f"the group {group.group} has no RUNNING member now ({state}); GCE is bringing one "
            f"up. Watch it with: gcloud compute instance-groups managed list-instances {group.group} "
            f"--region={group.region} --project={group.project}",
            EXIT_NO_MEMBER,
        )
    print(f"{args.verb}: {member.name} in {member.zone}", file=sys.stderr, flush=True)
    if args.verb == "logs" and args.serial:
        for line in reader.serial_tail(member.target(group.project), SERIAL_LINES):
            print(line)
        return 0
    argv = gcloud_argv(args.verb, args, project=group.project, zone=member.zone, instance=member.name)
    if args.print:
        print(shlex.join(argv))
        return 0
    return _exec(argv)


def _exec(argv: Sequence[str]) -> int:
    if shutil.which(argv[0]) is None:
        raise MissingToolError(
            f"{argv[0]} is not installed (https://cloud.google.com/sdk/docs/install); --print shows the "
            "command to run elsewhere"
        )
    os.execvp(argv[0], list(argv))  # noqa: S606 (gcloud replaces this process and owns the terminal)
    return 0  # pragma: no cover
