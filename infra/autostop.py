"""Who may read and resize the server's group: the front door (wake and idle stop) or, without a
door, the VM's idle watcher. One custom role with exactly ``compute.instanceGroupManagers.get`` and
``compute.instanceGroupManagers.update`` (what ``regionInstanceGroupManagers.get``, ``.resize`` and
``.listManagedInstances`` check), bound on the project.

Why project-wide, with no condition: a managed instance group has no IAM policy of its own (pulumi-gcp
has ``InstanceIAMMember``, ``DiskIAMMember``... and nothing for instance group managers), and IAM
evaluates ``resource.name`` conditions only for the resource types it lists, which do not include
instance group managers: a condition naming the group would never match, and the grant would be
denied for ever. https://cloud.google.com/iam/docs/conditions-resource-attributes
So the grant lets its holder read, resize and patch *every* managed instance group of the project;
that is its blast radius, kept small by the holder: with a front door, only the door's own service
account holds it (code that touches this one group and nothing else, reachable only with the API
key), and the VM, which runs a large C++ server exposed to clients, holds no Compute permission at
all. A project of its own for the deployment is the way to scope it further.
https://cloud.google.com/compute/docs/reference/rest/v1/regionInstanceGroupManagers/resize

The group itself creates and deletes its members with Google's own service agent, so the holder
needs no ``compute.instances.*`` permission for that.

NOTE: custom roles are soft-deleted: after ``pulumi destroy`` the role id is held for 7 days and then
for up to 30 more days in which it is purged and cannot be reused
(https://cloud.google.com/iam/docs/creating-custom-roles#deleting-custom-role). Within the first 7
days the provider's create finds the soft-deleted role and undeletes and updates it (magic-modules
services/resourcemanager/resource_google_project_iam_custom_role.go, create path), so a fixed id
would fail a redeploy in days 7-37 after a destroy. The id carries a random suffix, new for each
deployment (the ``RandomId`` lives in the stack's state, so later ``up``s keep it).
"""

from __future__ import annotations

import re
import shlex
from collections.abc import Sequence
from dataclasses import dataclass, field

import pulumi
import pulumi_gcp as gcp
import pulumi_random as random

PERMISSIONS = ("compute.instanceGroupManagers.get", "compute.instanceGroupManagers.update")
# The front door also reads the current member for its internal address (instances.get); unlike a
# group, an instance is a resource type IAM conditions evaluate, so this read is held to the group's
# members by their names (the group names them <group>-<suffix>).
# https://cloud.google.com/iam/docs/conditions-resource-attributes#resource-name
MEMBER_READ_PERMISSIONS = ("compute.instances.get",)
# The group fields the watcher changes, for ServerGroupArgs.ignore_changes: `pulumi up` sets the
# size when it creates the group and never resizes it back after an idle stop.
IGNORE_CHANGES = ("targetSize",)
_ROLE_ID_UNSAFE = re.compile(r"[^A-Za-z0-9_.]")
# Role ids: 3-64 characters of [A-Za-z0-9_.]. https://cloud.google.com/iam/docs/reference/rest/v1/projects.roles/create
ROLE_ID_MAX = 64
ROLE_SUFFIX_BYTES = 4
# The stack output qwen36/status.py and qwen36/wake.py read with --stack.
STACK_OUTPUT = "autostop"


def role_id(deployment: str, suffix: str) -> str:
    """A custom role id for one deployment, e.g. ``qwen36_dev_group_3f9a1c2e``; ``suffix`` is random."""
    stem = _ROLE_ID_UNSAFE.sub("_", f"{deployment}_group")
    return f"{stem[: ROLE_ID_MAX - len(suffix) - 1]}_{suffix}"


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
    deployment: str
    """The deployment's name (``qwen36-dev``), the stem of the role id."""
    member: pulumi.Input[str]
    """The grant's holder as an IAM member (``serviceAccount:<email>``): the door's account, or the
    VM's where there is no door."""
    read_members_of: str | None = None
    """A group whose members the holder may also read (the door: it proxies to the member's address)."""
    depends_on: Sequence[pulumi.Resource] = field(default_factory=list)


# A managed group names its members <base instance name>-<4 random characters of [a-z0-9]>
# (https://cloud.google.com/compute/docs/instance-groups/creating-groups-of-managed-instances: "the
# base instance name ... followed by a hyphen and four random characters"). A prefix test alone would
# also match another stack's group (qwen36-dev- prefixes qwen36-dev-2-abcd), so the whole name is
# matched: CEL's matches() (RE2), per the CEL language definition that the IAM attribute reference
# defers to (https://cloud.google.com/iam/docs/conditions-attribute-reference).
MEMBER_SUFFIX = "-[a-z0-9]{4}"


def member_condition(group: str) -> str:
    """CEL that matches the instances of ``group`` only (``<group>-<4 characters>``, the whole name);
    a GCE name has no character a regular expression treats specially ([a-z0-9-])."""
    pattern = f"^{group}{MEMBER_SUFFIX}$"
    return (
        'resource.type == "compute.googleapis.com/Instance" && '
        f'resource.name.extract("/instances/{{name}}").matches("{pattern}")'
    )


class Autostop(pulumi.ComponentResource):
    """The permission to read and resize the server's group, for one holder."""

    suffix: random.RandomId
    role: gcp.projects.IAMCustomRole
    read_role: gcp.projects.IAMCustomRole | None
    binding: gcp.projects.IAMMember
    role_name: pulumi.Output[str]

    def __init__(self, name: str, args: AutostopArgs, opts: pulumi.ResourceOptions | None = None) -> None:
        super().__init__("qwen36:infra:Autostop", name, None, opts)
        self.suffix = random.RandomId(
            f"{name}-role-suffix", byte_length=ROLE_SUFFIX_BYTES, opts=pulumi.ResourceOptions(parent=self)
        )
        self.role = gcp.projects.IAMCustomRole(
            f"{name}-role",
            project=args.project,
            role_id=self.suffix.hex.apply(lambda suffix: role_id(args.deployment, suffix)),
            title="qwen36: read and resize the server group",
            description="Wake on request and idle autostop of the qwen36-mtp-l4 server group",
            permissions=list(PERMISSIONS),
            opts=pulumi.ResourceOptions(parent=self, depends_on=list(args.depends_on)),
        )
        self.role_name = self.role.name
        # No condition: IAM cannot scope one to an instance group manager (see the module docstring).
        self.binding = gcp.projects.IAMMember(
            f"{name}-binding",
            project=args.project,
            role=self.role.name,
            member=args.member,
            opts=pulumi.ResourceOptions(parent=self),
        )
        self.read_role = None
        if args.read_members_of is not None:
            self.read_role = gcp.projects.IAMCustomRole(
                f"{name}-read-role",
                project=args.project,
                role_id=self.suffix.hex.apply(lambda suffix: role_id(f"{args.deployment}_read", suffix)),
                title="qwen36: read the server group's members",
                description="The front door reads the current member's internal address",
                permissions=list(MEMBER_READ_PERMISSIONS),
                opts=pulumi.ResourceOptions(parent=self, depends_on=list(args.depends_on)),
            )
            gcp.projects.IAMMember(
                f"{name}-read-binding",
                project=args.project,
                role=self.read_role.name,
                member=args.member,
                condition=gcp.projects.IAMMemberConditionArgs(
                    title="only this group's members",
                    description="the instances the server group creates, by their names",
                    expression=member_condition(args.read_members_of),
                ),
                opts=pulumi.ResourceOptions(parent=self),
            )
        self.register_outputs({"role_name": self.role_name})
