"""The first deployment's move from the stock image onto the tooling image baked beside it.

The first ``pulumi up`` of a build must not wait ~10 minutes for the bake before it starts the
server, so the group starts on a template with the stock image (infra/server_group.py) and the bake
runs in parallel (infra/tooling_image.py). Once the server has passed the health gate and the baked
template exists, this step points the group at that template. The group's PROACTIVE update policy
then replaces the member (``maxSurge 0``: one cold start from the baked image, while the same
``pulumi up`` is still running), and a second health gate waits until the new member serves. Every
later VM of the group, repairs and scale-outs alike, boots the baked image.

The group's template is set with gcloud rather than through the group resource: one resource cannot
take two templates in one deployment. The next ``pulumi up`` finds the family, declares the group on
that same baked template (so the change is already live, and nothing is replaced) and drops the stock
one. https://cloud.google.com/sdk/gcloud/reference/compute/instance-groups/managed/set-instance-template
"""

from __future__ import annotations

import shlex
from dataclasses import dataclass, replace

import pulumi
from pulumi_command import local

from infra.health_gate import HealthGate, HealthGateArgs

# Waits bounded by the health gate's own bound: the recreate of one member (the old VM deleted, the
# new one created) comes before its cold start, which the second gate then waits for.
# https://cloud.google.com/sdk/gcloud/reference/compute/instance-groups/managed/wait-until
SECONDS_PER_MINUTE = 60


def switch_command(*, project: str, region: str, group: str, template: str, timeout_s: int) -> str:
    """Point the group at ``template`` (a self link) and wait until its members run it."""
    scope = [f"--project={project}", f"--region={region}"]
    set_template = ["gcloud", "compute", "instance-groups", "managed", "set-instance-template", group]
    wait_until = ["gcloud", "compute", "instance-groups", "managed", "wait-until", group]
    return (
        "set -eu\n"
        + shlex.join([*set_template, f"--template={template}", *scope])
        + "\n"
        + shlex.join([*wait_until, "--version-target-reached", f"--timeout={timeout_s}", *scope])
        + "\n"
    )


@dataclass
class ImageSwitchArgs:
    gate: HealthGateArgs
    """The health gate to run once the group has moved: its ``template_id`` is the baked template's
    self link (``ServerGroup.pending_template``), which resolves only after the bake."""
    after: list[pulumi.Resource]
    """The first health gate: the server serves on the stock image before it is moved."""


class ImageSwitch(pulumi.ComponentResource):
    """Moves the group onto the baked template, then waits until it serves again."""

    gate: HealthGate
    ready: pulumi.Output[bool]

    def __init__(self, name: str, args: ImageSwitchArgs, opts: pulumi.ResourceOptions | None = None) -> None:
        super().__init__("qwen36:infra:ImageSwitch", name, None, opts)
        gate = args.gate
        command = pulumi.Output.all(
            project=gate.project, region=gate.region, group=gate.group_name, template=gate.template_id
        ).apply(
            lambda v: switch_command(
                project=v["project"],
                region=v["region"],
                group=v["group"],
                template=v["template"],
                timeout_s=gate.timeout_minutes * SECONDS_PER_MINUTE,
            )
        )
        self.command = local.Command(
            f"{name}-set-template",
            create=command,
            # Only a new baked template moves the group again; nothing to undo on delete: the next
            # deployment declares the group on this template itself.
            triggers=[gate.template_id],
            opts=pulumi.ResourceOptions(parent=self, depends_on=args.after),
        )
        self.gate = HealthGate(
            f"{name}-health",
            replace(gate, depends_on=[self.command]),
            opts=pulumi.ResourceOptions(parent=self),
        )
        self.ready = self.gate.ready
        self.register_outputs({"ready": self.ready})
