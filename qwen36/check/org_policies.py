"""The organization-policy constraints that can refuse what the program creates, and how to read them.

Each is read with the Organization Policy API v2 ``projects.policies.getEffectivePolicy``: the policy
in force on the project after merging the hierarchy and evaluating conditions ("the returned policy
will not have an etag or condition set").
https://cloud.google.com/resource-manager/docs/reference/orgpolicy/rest/v2/projects.policies/getEffectivePolicy
A ``Policy`` holds ``spec.rules[]``; a rule of a boolean constraint says ``enforce``, a rule of a list
constraint ``allowAll``, ``denyAll`` or ``values {allowedValues, deniedValues}``, where ``is:`` marks a
plain value, ``under:`` a subtree and ``in:`` a Google-curated value group.
https://cloud.google.com/resource-manager/docs/reference/orgpolicy/rest/v2/organizations.policies#Policy
The constraints and their values: https://cloud.google.com/resource-manager/docs/organization-policy/org-policy-constraints

A value group the check cannot expand, or an ``under:`` subtree it cannot place, is a warning that
names the command showing the policy, never a guess.
"""

from __future__ import annotations

import shlex
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from qwen36.check.plan import Plan
from qwen36.check.report import Fact, block, ok, warn
from qwen36.gate_blockers import describe_command

# The regional value groups of gcp.resourceLocations are `in:<region>-locations`; the continental
# ones that hold every region of a prefix: in:us-locations, in:europe-locations, in:asia-locations...
# (https://cloud.google.com/resource-manager/docs/organization-policy/defining-locations#value_groups).
# `in:eu-locations` (EU member states only) and the other groups are left as "cannot tell".
UNSURE = "a value group or subtree the check cannot expand"
_CONTINENTS = ("us", "europe", "asia", "australia", "northamerica", "southamerica", "me", "africa")


@dataclass(frozen=True)
class Effective:
    """A v2 effective policy reduced to what decides for us."""

    set: bool
    enforced: bool = False
    allow_all: bool = False
    deny_all: bool = False
    allowed: tuple[str, ...] = ()
    denied: tuple[str, ...] = ()


def parse_effective(policy: dict[str, Any]) -> Effective:
    rules = [r for r in (policy.get("spec") or {}).get("rules") or [] if isinstance(r, dict)]
    if not rules:
        return Effective(set=False)
    allowed: list[str] = []
    denied: list[str] = []
    for rule in rules:
        values = rule.get("values") or {}
        allowed += [str(v) for v in values.get("allowedValues") or []]
        denied += [str(v) for v in values.get("deniedValues") or []]
    return Effective(
        set=True,
        enforced=any(r.get("enforce") is True for r in rules),
        allow_all=any(r.get("allowAll") is True for r in rules),
        deny_all=any(r.get("denyAll") is True for r in rules),
        allowed=tuple(allowed),
        denied=tuple(denied),
    )


Match = Callable[[str, str], bool | None]
"""Whether a policy entry covers a value we need: True, False, or None (cannot tell)."""


def _plain(entry: str) -> str:
    return entry.removeprefix("is:")


def exact(entry: str, value: str) -> bool | None:
    if entry.startswith(("under:", "in:")):
        return None
    return _plain(entry) == value


@dataclass(frozen=True)
class Verdict:
    refused: tuple[str, ...] = ()
    unsure: tuple[str, ...] = ()


def judge(effective: Effective, needed: list[str], match: Match) -> Verdict:
    """Which of ``needed`` the list policy refuses, and which it may refuse (cannot tell)."""
    if not effective.set:
        return Verdict()
    if effective.deny_all:
        return Verdict(refused=tuple(needed))
    refused: list[str] = []
    unsure: list[str] = []
    for value in needed:
        denied = [match(entry, value) for entry in effective.denied]
        if True in denied:
            refused.append(value)
            continue
        if effective.allowed and not effective.allow_all:
            allowed = [match(entry, value) for entry in effective.allowed]
            if True not in allowed:
                (unsure if None in allowed else refused).append(value)
                continue
        if None in denied:
            unsure.append(value)
    return Verdict(tuple(refused), tuple(unsure))


def exception_fix(project: str, constraint: str, what: str = "") -> str:
    return (
        f"{what}ask your organization's policy administrator for an exception on project {project} "
        f"(e.g. gcloud org-policies reset {constraint} --project={shlex.quote(project)}, which needs "
        f"roles/orgpolicy.policyAdmin); see it: {describe_command(project, constraint)}"
    )


@dataclass(frozen=True)
class Constraint:
    name: str
    applies: Callable[[Plan], bool]
    evaluate: Callable[[Plan, Effective], Fact]


def _subject(name: str) -> str:
    return f"org policy {name}"


# --- boolean constraints --------------------------------------------------------------------------


def _require_shielded_vm(plan: Plan, eff: Effective) -> Fact:
    from infra import shielded

    subject = _subject("compute.requireShieldedVm")
    if not eff.enforced:
        return ok(subject, "not enforced")
    # The bake's last verdict, the tooling image's `secure-boot` label (infra/shielded.py), where the
    # preflight read it. No image read: a deploy that bakes proves it first; one that does not boots
    # the stock image (its DKMS module).
    verdict = plan.secure_boot_verdict
    decision = shielded.from_verdict(verdict) if verdict is not None else None
    if not plan.cfg.use_tooling_image or (decision is None and not plan.bakes):
        decision = shielded.STOCK
    if decision is None or decision.on:
        why = (
            "the bake's last verdict was on"
            if decision is not None
            else "the bake proves Secure Boot on a test VM before the group uses the image"
        )
        return ok(subject, f"enforced; the image builder and the servers run with Secure Boot on ({why})")
    return warn(
        subject,
        f"enforced, and the servers would run with Secure Boot off ({decision.reason_line}): GCE refuses "
        "such VMs, so the group would get no member",
        "bake again (a new llama.cpp build or bake script bakes a new image, whose GPU test may pass), "
        "or " + exception_fix(plan.project, "compute.requireShieldedVm"),
    )


def _require_os_login(plan: Plan, eff: Effective) -> Fact:
    from infra.server_group import instance_metadata

    subject = _subject("compute.requireOsLogin")
    value = instance_metadata("").get("enable-oslogin", "")
    if value.upper() != "TRUE":
        if eff.enforced:
            return block(
                subject,
                f"enforced, and the members set enable-oslogin={value or 'nothing'}",
                exception_fix(plan.project, "compute.requireOsLogin"),
            )
        return ok(subject, "not enforced")
    why = "the members and the image builder set enable-oslogin=TRUE"
    if eff.enforced:
        return ok(subject, f"enforced; does not block: {why}")
    return ok(subject, f"not enforced (and would not block: {why})")


def _disable_sa_creation(plan: Plan, eff: Effective) -> Fact:
    subject = _subject("iam.disableServiceAccountCreation")
    if not eff.enforced:
        return ok(subject, "not enforced")
    return block(
        subject,
        "enforced: the program creates the server's own service account (infra/identity.py)",
        exception_fix(plan.project, "iam.disableServiceAccountCreation"),
    )


def _disable_guest_attributes(plan: Plan, eff: Effective) -> Fact:
    subject = _subject("compute.disableGuestAttributesAccess")
    if not eff.enforced:
        return ok(subject, "not enforced")
    text = "enforced: the Compute API cannot read the VMs' guest attributes, where the boot reports"
    if plan.gate_reads_guest_attributes or plan.bakes:
        return block(
            subject,
            f"{text}; the deploy's health gate (and the image bake) follow those reports",
            exception_fix(plan.project, "compute.disableGuestAttributesAccess"),
        )
    return warn(
        subject,
        f"{text}; the gate decides by HTTP here, but a failed boot shows no reason",
        exception_fix(plan.project, "compute.disableGuestAttributesAccess"),
    )


# --- list constraints -----------------------------------------------------------------------------


def _listed(values: tuple[str, ...]) -> str:
    return ", ".join(values)


def _list_fact(plan: Plan, name: str, verdict: Verdict, what: str, fix: str, set_: bool) -> Fact:
    subject = _subject(name)
    if verdict.refused:
        return block(subject, f"refuses {_listed(verdict.refused)}: {what}", fix)
    if verdict.unsure:
        return warn(
            subject,
            f"may refuse {_listed(verdict.unsure)} ({UNSURE}): {what}",
            f"read it: {describe_command(plan.project, name)}",
        )
    return ok(subject, "allows what the stack creates" if set_ else "not set")


def _external_ip(plan: Plan, eff: Effective) -> Fact:
    name = "compute.vmExternalIpAccess"
    subject = _subject(name)
    if not plan.cfg.external_ip:
        # No VM of the stack has an access config (infra/network.py): Cloud NAT carries their egress.
        if not eff.set or eff.allow_all:
            return ok(subject, "not restricted" if not eff.set else "allows every VM")
        return ok(
            subject,
            "restricted; does not block: the stack needs no external IP (Cloud NAT carries the VMs' egress)",
        )
    what = (
        "externalIp: true gives the members (and the image builder) ephemeral external IPs for their "
        "egress to apt, ghcr.io and Hugging Face"
    )
    fix = "set externalIp: false (the stack then uses Cloud NAT), or " + exception_fix(plan.project, name)
    if not eff.set or eff.allow_all:
        return ok(subject, "not restricted" if not eff.set else "allows every VM")
    if eff.deny_all:
        return block(subject, f"denies every VM an external IP: {what}", fix)
    if not eff.allowed:
        # A deny list names instances; the group's members have names it cannot know in advance.
        return ok(subject, "denies only the VMs it names")
    own = {f"under:projects/{plan.project}"}
    if own & set(eff.allowed):
        return ok(subject, f"allows every VM of project {plan.project}")
    if any(entry.startswith("under:") for entry in eff.allowed):
        return warn(
            subject,
            f"allows external IPs for a subtree the check cannot place project {plan.project} in",
            f"read it: {describe_command(plan.project, name)}",
        )
    return block(
        subject,
        "allows external IPs only for the VMs it names, and the group's members get new names on "
        f"every repair: {what}",
        fix,
    )


def _region_of(location: str) -> str:
    """``us-central1-a`` -> ``us-central1`` (every region name has one dash); a region is its own."""
    parts = location.split("-")
    return "-".join(parts[:2]) if len(parts) == 3 else location


def _location_match(entry: str, location: str) -> bool | None:
    if entry.startswith("under:"):
        return None
    entry = _plain(entry)
    region = _region_of(location)
    if not entry.startswith("in:"):
        if entry == location:
            return True
        # A bare region entry and a zone of it: the docs recommend value groups; do not guess.
        return None if entry == region and location != region else False
    group = entry.removeprefix("in:").removesuffix("-locations")
    if location == "global":
        return None
    if group == region:
        return True
    if group in _CONTINENTS:
        return region.startswith(group + "-")
    return None


def _resource_locations(plan: Plan, eff: Effective) -> Fact:
    # scripts/deploy.sh makes the stack's secrets key in a Cloud KMS key ring in `global`, which the
    # constraint covers too: "creation of new resources (e.g key rings, keys, key versions) is limited
    # to the specified locations" (https://cloud.google.com/kms/docs/org-policy-constraints).
    needed = [plan.region, *plan.zones, "global"]
    why = (
        f"the VMs, subnet, template, group and bucket live in {plan.region} and its zones; "
        "scripts/deploy.sh's KMS key ring for the stack's secrets is in global"
    )
    if plan.cfg.api_key:
        # https://cloud.google.com/secret-manager/docs/choosing-replication: "a secret with an automatic
        # replication policy can only be created if resource creation in global is allowed".
        why += ", and so is the API key's secret (automatic replication)"
    verdict = judge(eff, needed, _location_match)
    fix = (
        "deploy to a region the policy allows (qwen36-mtp-l4:region and :zones in "
        f"Pulumi.{plan.stack}.yaml), or " + exception_fix(plan.project, "gcp.resourceLocations")
    )
    return _list_fact(plan, "gcp.resourceLocations", verdict, why, fix, eff.set)


def _project_match(entry: str, value: str) -> bool | None:
    if entry.startswith("under:"):
        return True if entry == f"under:{value}" else None
    return exact(entry, value)


def _trusted_images(plan: Plan, eff: Effective) -> Fact:
    needed = [f"projects/{p}" for p in plan.image_projects]
    verdict = judge(eff, needed, _project_match)
    why = f"the servers boot {plan.cfg.image_project}/{plan.cfg.image_family}" + (
        " and this project's tooling image" if plan.cfg.use_tooling_image else ""
    )
    return _list_fact(
        plan,
        "compute.trustedImageProjects",
        verdict,
        why,
        exception_fix(plan.project, "compute.trustedImageProjects"),
        eff.set,
    )


def _invoker_iam(plan: Plan, eff: Effective) -> Fact:
    # The door turns Cloud Run's invoker check off (it checks the API key itself) instead of granting
    # allUsers, which domain-restricted sharing (iam.allowedPolicyMemberDomains) would refuse; this
    # managed constraint, off unless an administrator enforces it, is what can refuse that instead.
    # https://cloud.google.com/run/docs/securing/managing-access#invoker_check
    name = "run.managed.requireInvokerIam"
    subject = _subject(name)
    if not eff.enforced:
        return ok(subject, "not enforced (the door turns Cloud Run's invoker check off and checks the key)")
    return block(
        subject,
        "enforced: Cloud Run services must keep the invoker IAM check, which the front door turns off "
        "(OpenAI clients send the API key, not a Google identity)",
        "set door: false (the server is then reached through an IAP tunnel), or "
        + exception_fix(plan.project, name),
    )


def _run_ingress(plan: Plan, eff: Effective) -> Fact:
    verdict = judge(eff, ["all"], exact)
    return _list_fact(
        plan,
        "run.allowedIngress",
        verdict,
        "the front door is reached from the internet on its run.app URL (ingress all)",
        exception_fix(plan.project, "run.allowedIngress"),
        eff.set,
    )


def _egress_match(entry: str, value: str) -> bool | None:
    # The constraint's values are written lower-case with dashes (`private-ranges-only`); the
    # service's own field says PRIVATE_RANGES_ONLY. Either spelling is the same setting.
    if entry.startswith(("under:", "in:")):
        return None
    return _plain(entry).lower().replace("_", "-") == value


def _vpc_egress(plan: Plan, eff: Effective) -> Fact:
    # The door's Direct VPC egress sends only private ranges through the VPC (infra/door.py
    # egress="PRIVATE_RANGES_ONLY"); constraints/run.allowedVPCEgress lists the egress settings a
    # Cloud Run revision may have, `private-ranges-only` and `all-traffic`
    # (https://cloud.google.com/resource-manager/docs/organization-policy/org-policy-constraints,
    # https://cloud.google.com/run/docs/configuring/vpc-direct-vpc). An org that allows only
    # `all-traffic` refuses the door's revision.
    verdict = judge(eff, ["private-ranges-only"], _egress_match)
    return _list_fact(
        plan,
        "run.allowedVPCEgress",
        verdict,
        "the front door's Direct VPC egress sends only private ranges through the VPC "
        "(PRIVATE_RANGES_ONLY: its calls to Google APIs go out directly)",
        exception_fix(plan.project, "run.allowedVPCEgress"),
        eff.set,
    )


def _service_usage(plan: Plan, eff: Effective) -> Fact:
    verdict = judge(eff, plan.services, exact)
    return _list_fact(
        plan,
        "gcp.restrictServiceUsage",
        verdict,
        "the deploy calls these APIs",
        exception_fix(plan.project, "gcp.restrictServiceUsage"),
        eff.set,
    )


def _non_cmek(plan: Plan, eff: Effective) -> Fact:
    # The deny list names the services whose new resources must use a customer-managed key; the
    # program encrypts nothing with one.
    name = "gcp.restrictNonCmekServices"
    ours = [
        s
        for s in plan.services
        if s in ("compute.googleapis.com", "storage.googleapis.com", "secretmanager.googleapis.com")
    ]
    required = [s for s in ours if eff.deny_all or s in {_plain(v) for v in eff.denied}]
    if required:
        return block(
            _subject(name),
            f"requires customer-managed keys for {_listed(tuple(required))}: the disks, bucket and "
            "secret use Google's keys",
            exception_fix(plan.project, name),
        )
    return ok(
        _subject(name),
        "requires no customer-managed key for what the stack creates" if eff.set else "not set",
    )


def _non_confidential(plan: Plan, eff: Effective) -> Fact:
    name = "compute.restrictNonConfidentialComputing"
    if eff.deny_all or "compute.googleapis.com" in {_plain(v) for v in eff.denied}:
        return block(
            _subject(name),
            "requires Confidential VMs, and the servers are G2 machines with an L4, not confidential",
            exception_fix(plan.project, name),
        )
    return ok(_subject(name), "allows non-confidential VMs" if eff.set else "not set")


def _load_balancer_types(plan: Plan, eff: Effective) -> Fact:
    verdict = judge(eff, ["GLOBAL_EXTERNAL_MANAGED_HTTP_HTTPS"], exact)
    return _list_fact(
        plan,
        "compute.restrictLoadBalancerCreationForTypes",
        verdict,
        "the fleet is behind a global external Application Load Balancer (EXTERNAL_MANAGED)",
        exception_fix(plan.project, "compute.restrictLoadBalancerCreationForTypes"),
        eff.set,
    )


def _always(plan: Plan) -> bool:
    return True


CONSTRAINTS: tuple[Constraint, ...] = (
    Constraint("compute.vmExternalIpAccess", _always, _external_ip),
    Constraint("compute.requireShieldedVm", _always, _require_shielded_vm),
    Constraint("compute.requireOsLogin", _always, _require_os_login),
    Constraint("gcp.resourceLocations", _always, _resource_locations),
    Constraint("compute.trustedImageProjects", _always, _trusted_images),
    Constraint("iam.disableServiceAccountCreation", _always, _disable_sa_creation),
    Constraint("compute.disableGuestAttributesAccess", _always, _disable_guest_attributes),
    Constraint("gcp.restrictServiceUsage", _always, _service_usage),
    Constraint("gcp.restrictNonCmekServices", _always, _non_cmek),
    Constraint("compute.restrictNonConfidentialComputing", _always, _non_confidential),
    Constraint(
        "compute.restrictLoadBalancerCreationForTypes", lambda plan: plan.cfg.fleet, _load_balancer_types
    ),
    Constraint("run.managed.requireInvokerIam", lambda plan: plan.door, _invoker_iam),
    Constraint("run.allowedIngress", lambda plan: plan.door, _run_ingress),
    Constraint("run.allowedVPCEgress", lambda plan: plan.door, _vpc_egress),
)


def applicable(plan: Plan) -> list[Constraint]:
    return [c for c in CONSTRAINTS if c.applies(plan)]
