"""A resource at the end of the program that blocks ``pulumi up`` until the group serves.

It is a ``command:local:Command`` on the deployer's machine running ``python -m qwen36 wait``
(``qwen36/health.py``) against the regional managed instance group, bounded by
``timeout_minutes``: it passes once a member is RUNNING and its server answers, and tells stockouts
and quota errors apart while it waits. A local command never runs on preview. It is re-created when
its ``triggers`` change: the instance template's self link (every change to the VM's shape or boot
is a new template, which the group rolls out) and the startup script's sha256. A change to its
other inputs (the command line, which names this machine's interpreter, or the environment) is an
update, and with no ``update`` command the provider runs ``create`` again: one more wait, which
passes at its first poll when the server is up. So an unchanged ``pulumi up`` does not wait again.
With a front door the wait ends by asking the door's URL for the server (qwen36/door_probe.py), and
a new door revision (its source archive) is a trigger too.
https://www.pulumi.com/registry/packages/command/api-docs/local/command/
"""

from __future__ import annotations

import shlex
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Any, TypeVar

import pulumi
from pulumi_command import local

REPO_ROOT = Path(__file__).resolve().parent.parent
DEFAULT_TIMEOUT_MINUTES = 20
API_KEY_ENV = "QWEN36_API_KEY"  # qwen36/wait_cmd.py reads it; a command line would leak it

T = TypeVar("T")


@dataclass
class HealthGateArgs:
    project: pulumi.Input[str]
    region: pulumi.Input[str]
    group_name: pulumi.Input[str]
    """The regional group's GCE name; the wait finds its current member through the Compute API."""
    template_id: pulumi.Input[str]
    """The instance template's self link: a new template means a rollout, so the gate waits again."""
    startup_script_sha256: pulumi.Input[str]
    url: pulumi.Input[str] | None = None
    """``http://<ip>:8080`` when the deployer can reach the port; None (IAP only) follows the VM's report."""
    api_key: pulumi.Input[str] | None = None
    door_url: pulumi.Input[str] | None = None
    """The front door's URL: once the group serves, it must reach the server too (qwen36/door_probe.py)."""
    door_service: pulumi.Input[str] | None = None
    """The door's Cloud Run service name, for the logs command a failed look names."""
    door_revision: pulumi.Input[str] | None = None
    """What makes a new door revision (its source archive): a new one is looked at again."""
    timeout_minutes: int = DEFAULT_TIMEOUT_MINUTES
    poll_seconds: float = 5.0
    depends_on: list[pulumi.Resource] | None = None


def wait_command(
    *,
    mode: str,
    project: str,
    timeout_minutes: int,
    poll_seconds: float,
    url: str | None,
    region: str | None = None,
    group: str | None = None,
    zone: str | None = None,
    instance: str | None = None,
    door_url: str | None = None,
    door_service: str | None = None,
    python: str = sys.executable,
) -> str:
    """The shell command the gate runs (every value quoted): for a group (region and group), or for
    one plain VM (zone and instance, the tooling image's builder)."""
    argv = [python, "-m", "qwen36", "wait", "--mode", mode]
    if url is not None:
        argv += ["--url", url]
    argv += ["--project", project]
    if group is not None and region is not None:
        argv += ["--region", region, "--group", group]
    elif zone is not None and instance is not None:
        argv += ["--zone", zone, "--instance", instance]
    else:
        raise ValueError("wait_command needs region and group, or zone and instance")
    if door_url is not None:
        argv += ["--door-url", door_url]
        if door_service is not None:
            argv += ["--door-service", door_service]
    argv += ["--timeout-minutes", str(timeout_minutes), "--poll-seconds", f"{poll_seconds:g}"]
    return shlex.join(argv)


class HealthGate(pulumi.ComponentResource):
    ready: pulumi.Output[bool]
    """Resolves (True) once the server answered; ``after()`` holds any output back until then."""

    def __init__(self, name: str, args: HealthGateArgs, opts: pulumi.ResourceOptions | None = None) -> None:
        super().__init__("qwen36:infra:HealthGate", name, None, opts)
        self.mode = "http" if args.url is not None else "guest-attributes"
        command = pulumi.Output.all(
            project=args.project,
            region=args.region,
            group=args.group_name,
            url=args.url,
            door_url=args.door_url,
            door_service=args.door_service,
        ).apply(
            lambda v: wait_command(
                mode=self.mode,
                project=v["project"],
                region=v["region"],
                group=v["group"],
                timeout_minutes=args.timeout_minutes,
                poll_seconds=args.poll_seconds,
                url=v["url"],
                door_url=v["door_url"],
                door_service=v["door_service"],
            )
        )
        environment: dict[str, pulumi.Input[str]] = {"PYTHONUNBUFFERED": "1"}
        if args.api_key is not None:
            environment[API_KEY_ENV] = pulumi.Output.secret(args.api_key)

        self.command = local.Command(
            f"{name}-wait",
            create=command,
            dir=str(REPO_ROOT),
            environment=environment,
            triggers=[args.template_id, args.startup_script_sha256]
            + ([args.door_revision] if args.door_revision is not None else []),
            opts=pulumi.ResourceOptions(parent=self, depends_on=list(args.depends_on or [])),
        )
        self.ready = self.command.stdout.apply(lambda _out: True)
        self.register_outputs({"ready": self.ready, "mode": self.mode})

    def after(self, value: pulumi.Input[T]) -> pulumi.Output[T]:
        """``value``, resolved only once the gate has passed (for the URL exports)."""

        def pick(pair: list[Any]) -> T:
            return pair[1]

        return pulumi.Output.all(self.ready, value).apply(pick)
