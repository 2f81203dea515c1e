"""IAM's rules: service-account ids, custom roles, grants and the resource types conditions evaluate."""

from __future__ import annotations

import json
import re
from collections.abc import Iterator
from typing import Any

from infra.policy.core import PolicyContext, Resource, UnknownInput


class Unknown:
    """A value the engine does not know yet. Any use of it (truth, comparison, text, iteration)
    raises UnknownInput, so a rule that needs it is skipped for that resource instead of judging a
    placeholder; rules that only look for strings (``_strings``) pass over it."""

    def _unknown(self, *_: Any, **__: Any) -> Any:
        raise UnknownInput

    __bool__ = __eq__ = __ne__ = __lt__ = __le__ = __gt__ = __ge__ = _unknown
    __str__ = __iter__ = __len__ = __getitem__ = __contains__ = __int__ = __float__ = _unknown
    __hash__ = None  # type: ignore[assignment]

    def __getattr__(self, name: str) -> Any:
        raise UnknownInput

    def __repr__(self) -> str:
        return "<unknown>"


def urn_type(urn: str) -> str:
    """The resource's own type token in a URN (``urn:pulumi:stack::project::parent$type::name``)."""
    parts = urn.split("::")
    return parts[2].rsplit("$", 1)[-1] if len(parts) >= 4 else ""


PROJECT_IAM_MEMBER = "gcp:projects/iAMMember:IAMMember"
PROJECT_IAM_BINDING = "gcp:projects/iAMBinding:IAMBinding"
# Roles that would let the VM (and anything that breaks into llama-server) manage every VM, disk
# and group in the project. Idle autostop needs one group: infra/autostop.py's custom role.
# https://cloud.google.com/compute/docs/access/iam#predefined_roles
BROAD_COMPUTE_ROLES = frozenset(
    {
        "roles/owner",
        "roles/editor",
        "roles/compute.admin",
        "roles/compute.instanceAdmin",
        "roles/compute.instanceAdmin.v1",
    }
)


def no_project_compute_admin_for_service_accounts(resource: Resource, _: PolicyContext) -> Iterator[str]:
    # The program's only service account is the VM's; a condition does not make these roles narrow.
    if resource.type == PROJECT_IAM_MEMBER:
        members = [resource.inputs.get("member")]
    elif resource.type == PROJECT_IAM_BINDING:
        members = list(resource.inputs.get("members") or [])
    else:
        return
    role = resource.inputs.get("role")
    if role not in BROAD_COMPUTE_ROLES:
        return
    for member in members:
        if str(member).startswith("serviceAccount:"):
            yield f"{role} on the whole project for {member}; grant only what it needs on its own group"


CUSTOM_ROLE = "gcp:projects/iAMCustomRole:IAMCustomRole"
SERVICE_ACCOUNT = "gcp:serviceaccount/account:Account"
# https://cloud.google.com/iam/docs/service-accounts-create
_ACCOUNT_ID = re.compile(r"^[a-z][-a-z0-9]{4,28}[a-z0-9]$")
# https://cloud.google.com/iam/docs/creating-custom-roles (role id, title)
_ROLE_ID = re.compile(r"^[A-Za-z0-9_.]{3,64}$")
MAX_ROLE_TITLE = 100
# resource.name collections IAM evaluates in a condition, from the resource types on
# https://cloud.google.com/iam/docs/conditions-resource-attributes that this program can meet;
# instance group managers are not on that list (nor instance groups), so a condition naming one
# never matches and the grant is dead. A collection not listed here must be checked there first.
CONDITION_COLLECTIONS = frozenset(
    {"buckets", "objects", "secrets", "versions", "instances", "disks", "images", "firewalls",
     "forwardingRules", "backendServices", "keyRings", "cryptoKeys"}
)  # fmt: skip
UNCONDITIONABLE_COLLECTIONS = frozenset({"instanceGroupManagers", "instanceGroups", "autoscalers"})
_RESOURCE_NAME_LITERAL = re.compile(r'resource\.name\s*(?:==|\.\w+\()\s*"([^"]*)"')


def _show(value: Any) -> str:
    return "<unknown>" if isinstance(value, Unknown) else repr(value)


def service_account_id_valid(resource: Resource, _: PolicyContext) -> Iterator[str]:
    """A service account id is 6-30 characters of [a-z0-9-], starting with a letter, not ending with '-'."""
    account_id = resource.inputs.get("accountId") if resource.type == SERVICE_ACCOUNT else None
    if isinstance(account_id, str) and not _ACCOUNT_ID.match(account_id):
        yield f"accountId {account_id!r} is not 6-30 characters of [a-z0-9-] starting with a letter"


def custom_role_valid(resource: Resource, _: PolicyContext) -> Iterator[str]:
    """A custom role: id of 3-64 characters of [A-Za-z0-9_.], a title of at most 100, some permissions."""
    if resource.type != CUSTOM_ROLE:
        return
    role_id, title = resource.inputs.get("roleId"), resource.inputs.get("title")
    if isinstance(role_id, str) and not _ROLE_ID.match(role_id):
        yield f"roleId {role_id!r} is not 3-64 characters of [A-Za-z0-9_.]"
    if isinstance(title, str) and len(title) > MAX_ROLE_TITLE:
        yield f"title is {len(title)} characters, over {MAX_ROLE_TITLE}"
    if not resource.inputs.get("permissions"):
        yield "a custom role needs at least one permission"


def custom_role_id_not_fixed(resource: Resource, _: PolicyContext) -> Iterator[str]:
    """A custom role's id comes from a random resource: IAM keeps a deleted role's id for up to 37
    days (7 soft-deleted, then up to 30 more), so a fixed per-stack id fails a redeploy in that window."""
    if resource.type != CUSTOM_ROLE:
        return
    sources = resource.property_dependencies.get("roleId") or ()
    if not any(urn_type(urn).startswith("random:") for urn in sources):
        role_id = _show(resource.inputs.get("roleId"))
        yield f"roleId {role_id} is fixed per stack; derive it from a random resource"


def _conditions(resource: Resource) -> Iterator[str]:
    kind = resource.type.rsplit(":", 1)[-1].lower()
    if kind.endswith(("iammember", "iambinding")):
        condition = resource.inputs.get("condition")
        if condition:
            yield str((condition or {}).get("expression") or "")


def iam_conditions_on_supported_types(resource: Resource, _: PolicyContext) -> Iterator[str]:
    """An IAM condition on resource.name names only resource types IAM evaluates attributes for;
    instance group managers are not among them, so such a grant never matches."""
    for expression in _conditions(resource):
        for literal in _RESOURCE_NAME_LITERAL.findall(expression):
            segments = set(literal.split("/"))
            bad = sorted(segments & UNCONDITIONABLE_COLLECTIONS)
            if bad:
                yield f"the condition names {', '.join(bad)}, which IAM conditions cannot match"
            elif not segments & CONDITION_COLLECTIONS:
                yield f"resource.name {literal!r} names no resource type known to support conditions"


def _grants(resource: Resource) -> Iterator[tuple[str, str]]:
    """(role, member) pairs of an IAM member, binding or policy resource of any service."""
    kind = resource.type.rsplit(":", 1)[-1].lower()
    role = str(resource.inputs.get("role") or "")
    if kind.endswith("iammember"):
        yield role, str(resource.inputs.get("member") or "")
    elif kind.endswith("iambinding"):
        yield from ((role, str(m)) for m in resource.inputs.get("members") or [])
    elif kind.endswith("iampolicy"):
        data = resource.inputs.get("policyData")
        document = json.loads(data) if isinstance(data, str) else {}
        for binding in document.get("bindings") or []:
            yield from ((str(binding.get("role")), str(m)) for m in binding.get("members") or [])
