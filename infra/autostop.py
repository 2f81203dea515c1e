"""What the idle watcher on the VM (startup/idle_watch.py) may do: read and resize its own group.

The grant is the narrowest GCE allows for a regional managed instance group, which has no IAM
policy of its own (pulumi-gcp has ``InstanceIAMMember``, ``DiskIAMMember``... but nothing for
instance group managers): a custom role holding only ``compute.instanceGroupManagers.get`` and
``.update`` (what ``regionInstanceGroupManagers.get`` and ``.resize`` check), bound on the project
with an IAM condition on the group's resource name, so it applies to this one group and nothing else.
https://cloud.google.com/compute/docs/reference/rest/v1/regionInstanceGroupManagers/resize
https://cloud.google.com/iam/docs/conditions-resource-attributes#resource-name

The group itself creates and deletes its members with Google's own service agent, so the VM's
account needs no ``compute.instances.*`` permission.

NOTE: custom roles are soft-deleted: after ``pulumi destroy`` the role id is held for 7 days (the
provider undeletes it on a new ``up`` within them) and then for up to 30 more days in which the id
cannot be reused. https://cloud.google.com/iam/docs/creating-custom-roles#deleting-custom-role
"""

from __future__ import annotations

import re
import shlex
from collections.abc import Sequence
from dataclasses import dataclass, field

import pulumi
import pulumi_gcp as gcp

PERMISSIONS = ("compute.instanceGroupManagers.get", "compute.instanceGroupManagers.update")
# The group fields the watcher changes, for ServerGroupArgs.ignore_changes: `pulumi up` sets the
# size when it creates the group and never resizes it back after an idle stop.
IGNORE_CHANGES = ("targetSize",)
_ROLE_ID_UNSAFE = re.compile(r"[^A-Za-z0-9_.]")
# The stack output qwen36/status.py and qwen36/wake.py read with --stack.
STACK_OUTPUT = "autostop"


def role_id(deployment: str) -> str:
    """A custom role id (``[A-Za-z0-9_.]{3,64}``) for the deployment, e.g. ``qwen36_dev_autostop``."""
    return _ROLE_ID_UNSAFE.sub("_", f"{deployment}_autostop")[:64]


def group_condition(region: str, group_name: str) -> str:
    """The CEL expression that limits the grant to the one regional group.

    ``endsWith`` rather than ``==``: the binding lives on this project, so only its resources are
    in scope, and the match does not depend on whether GCE spells the project as id or number.
    """
    return f'resource.name.endsWith("/regions/{region}/instanceGroupManagers/{group_name}")'


def wake_command(stack: str) -> str:
    return f"qwen36 wake --stack {shlex.quote(stack)}"


def status_command(stack: str) -> str:
    return f"qwen36 status --stack {shlex.quote(stack)}"


def autostop_output(
    *,
    project: str,
    region: str,
    group: str,
    size: int,
    url: str | None,
    timeout_minutes: int,
    idle_minutes: int,
) -> dict[str, object]:
    """The ``autostop`` stack output: where ``wake`` and ``status --stack`` find the group."""
    return {
        "project": project,
        "region": region,
        "group": group,
        "size": size,
        "url": url,
        "timeoutMinutes": timeout_minutes,
        "idleStopMinutes": idle_minutes,
    }


def export_outputs(
    *,
    stack: str,
    project: pulumi.Input[str],
    region: str,
    group_name: pulumi.Input[str],
    size: int,
    url: pulumi.Input[str] | None,
    timeout_minutes: int,
    idle_minutes: int,
) -> None:
    """The stack outputs ``wakeCommand``, ``statusCommand`` and ``autostop`` (what ``--stack`` reads)."""
    pulumi.export("wakeCommand", wake_command(stack))
    pulumi.export("statusCommand", status_command(stack))
    spec = pulumi.Output.all(project=project, group=group_name, url=url).apply(
        lambda v: autostop_output(
            project=v["project"],
            region=region,
            group=v["group"],
            size=size,
            url=v["url"],
            timeout_minutes=timeout_minutes,
            idle_minutes=idle_minutes,
        )
    )
    pulumi.export(STACK_OUTPUT, spec)


@dataclass
class AutostopArgs:
    project: pulumi.Input[str]
    region: str
    group_name: pulumi.Input[str]
    """The group's GCE name (ServerGroup.group_name: the deployment name)."""
    member: pulumi.Input[str]
    """The VM's service account as an IAM member (``serviceAccount:<email>``)."""
    role_id: str
    depends_on: Sequence[pulumi.Resource] = field(default_factory=list)


class Autostop(pulumi.ComponentResource):
    """The VM's permission to resize its own group to 0, and nothing more."""

    role: gcp.projects.IAMCustomRole
    binding: gcp.projects.IAMMember
    role_name: pulumi.Output[str]
    condition: pulumi.Output[str]

    def __init__(self, name: str, args: AutostopArgs, opts: pulumi.ResourceOptions | None = None) -> None:
        super().__init__("qwen36:infra:Autostop", name, None, opts)
        self.role = gcp.projects.IAMCustomRole(
            f"{name}-role",
            project=args.project,
            role_id=args.role_id,
            title="qwen36 autostop: resize one group",
            description="Lets the server VM read and resize its own managed instance group (idle autostop)",
            permissions=list(PERMISSIONS),
            opts=pulumi.ResourceOptions(parent=self, depends_on=list(args.depends_on)),
        )
        self.role_name = self.role.name
        self.condition = pulumi.Output.from_input(args.group_name).apply(
            lambda group: group_condition(args.region, group)
        )
        self.binding = gcp.projects.IAMMember(
            f"{name}-binding",
            project=args.project,
            role=self.role.name,
            member=args.member,
            condition=gcp.projects.IAMMemberConditionArgs(
                title="only this server group",
                description="idle autostop resizes this group and no other",
                expression=self.condition,
            ),
            opts=pulumi.ResourceOptions(parent=self),
        )
        self.register_outputs({"role_name": self.role_name, "condition": self.condition})
