"""A resource at the end of the program that blocks ``pulumi up`` until the server answers.

It is a ``command:local:Command`` on the deployer's machine running ``python -m qwen36 wait``
(``qwen36/health.py``), bounded by ``timeout_minutes``. A local command never runs on preview. It
is re-created when its ``triggers`` change: the instance id (a replaced VM) and the startup script's
sha256 (a changed boot). A change to its other inputs (the command line, which names this machine's
interpreter and the repo's path, or the environment) is an update, and with no ``update`` command
the provider runs ``create`` again: one more wait, which passes at its first poll when the server is
up. So an unchanged ``pulumi up`` does not wait again, and ``pulumi preview`` shows the gate
without blocking. https://www.pulumi.com/registry/packages/command/api-docs/local/command/
"""

from __future__ import annotations

import shlex
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Any, TypeVar

import pulumi
import pulumi_gcp as gcp
from pulumi_command import local

REPO_ROOT = Path(__file__).resolve().parent.parent
DEFAULT_TIMEOUT_MINUTES = 20
API_KEY_ENV = "QWEN36_API_KEY"  # qwen36/wait_cmd.py reads it; a command line would leak it

T = TypeVar("T")


@dataclass
class HealthGateArgs:
    instance: gcp.compute.Instance | pulumi.Input[str]
    """The server VM, or its name (then ``instance_id`` should carry its id for the trigger)."""
    zone: pulumi.Input[str]
    project: pulumi.Input[str]
    startup_script_sha256: pulumi.Input[str]
    url: pulumi.Input[str] | None = None
    """``http://<ip>:8080`` when the deployer can reach the port; None (IAP only) follows the VM's report."""
    api_key: pulumi.Input[str] | None = None
    timeout_minutes: int = DEFAULT_TIMEOUT_MINUTES
    poll_seconds: float = 5.0
    instance_id: pulumi.Input[str] | None = None


def wait_command(
    *,
    mode: str,
    project: str,
    zone: str,
    instance: str,
    timeout_minutes: int,
    poll_seconds: float,
    url: str | None,
    python: str = sys.executable,
) -> str:
    """The shell command the gate runs (every value quoted)."""
    argv = [python, "-m", "qwen36", "wait", "--mode", mode]
    if url is not None:
        argv += ["--url", url]
    argv += [
        "--project", project,
        "--zone", zone,
        "--instance", instance,
        "--timeout-minutes", str(timeout_minutes),
        "--poll-seconds", f"{poll_seconds:g}",
    ]  # fmt: skip
    return shlex.join(argv)


class HealthGate(pulumi.ComponentResource):
    ready: pulumi.Output[bool]
    """Resolves (True) once the server answered; ``after()`` holds any output back until then."""

    def __init__(self, name: str, args: HealthGateArgs, opts: pulumi.ResourceOptions | None = None) -> None:
        super().__init__("qwen36:infra:HealthGate", name, None, opts)
        depends_on: list[pulumi.Resource] = []
        if isinstance(args.instance, gcp.compute.Instance):
            instance_name: pulumi.Input[str] = args.instance.name
            instance_id: pulumi.Input[str] = args.instance.instance_id
            depends_on.append(args.instance)
        else:
            instance_name = args.instance
            instance_id = args.instance_id if args.instance_id is not None else args.instance

        self.mode = "http" if args.url is not None else "guest-attributes"
        command = pulumi.Output.all(
            project=args.project, zone=args.zone, instance=instance_name, url=args.url
        ).apply(
            lambda v: wait_command(
                mode=self.mode,
                project=v["project"],
                zone=v["zone"],
                instance=v["instance"],
                timeout_minutes=args.timeout_minutes,
                poll_seconds=args.poll_seconds,
                url=v["url"],
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
            triggers=[instance_id, args.startup_script_sha256],
            opts=pulumi.ResourceOptions(parent=self, depends_on=depends_on),
        )
        self.ready = self.command.stdout.apply(lambda _out: True)
        self.register_outputs({"ready": self.ready, "mode": self.mode})

    def after(self, value: pulumi.Input[T]) -> pulumi.Output[T]:
        """``value``, resolved only once the gate has passed (for the URL exports)."""

        def pick(pair: list[Any]) -> T:
            return pair[1]

        return pulumi.Output.all(self.ready, value).apply(pick)
