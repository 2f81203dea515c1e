"""The check itself: read the project through its APIs and compare it with what the stack would create.

Order matters only where one read decides another: the APIs' state first (a disabled Compute API
means the quotas cannot be read yet), the tooling-image family before the permissions (a deploy that
bakes needs more of them). Every read that fails becomes an ``UNREAD`` line naming what was not read,
what answered and how to read it: never a traceback and never a pass. An answer that is not the
method's documented shape is unread too, never taken for a finding (a permission "missing" from a
proxy's page). A disabled Service Usage API is a blocker: the deploy enables every other API through it.
"""

from __future__ import annotations

import dataclasses
import shlex

from qwen36.check.gcp import NOT_TRIED, ApiError, Apis
from qwen36.check.org_policies import applicable as applicable_constraints
from qwen36.check.org_policies import parse_effective
from qwen36.check.plan import GLOBAL_GPU_METRIC, SPOT_GPU_METRIC, STANDARD_GPU_METRIC, Plan
from qwen36.check.report import Fact, block, ok, unread, warn
from qwen36.gate_blockers import roles_command

QUOTAS_CONSOLE = "https://console.cloud.google.com/iam-admin/quotas"
# Service Usage's batchGet takes at most 30 names; testIamPermissions is sent in slices of 100.
BATCH_GET_MAX = 30
TEST_PERMISSIONS_MAX = 100
ENABLE_PERMISSION = "serviceusage.services.enable"
SERVICE_USAGE = "serviceusage.googleapis.com"
ADC_LOGIN = "gcloud auth application-default login"


def _chunks(items: list[str], size: int) -> list[list[str]]:
    return [items[i : i + size] for i in range(0, len(items), size)]


def _short(service: str) -> str:
    return service.removesuffix(".googleapis.com")


def _consumer_id(error: ApiError, fallback: str) -> str:
    return error.consumer.removeprefix("projects/") or fallback


def not_read(subject: str, what: str, error: ApiError, project: str, *, extra: str = "") -> Fact:
    """A read that failed: a disabled API says where to enable it; anything else says what answered
    and what to do about that answer."""
    if error.disabled:
        service = error.service or "the API"
        where = _consumer_id(error, project)
        return unread(
            subject,
            f"{what} not read: {service} is disabled in project {where}{extra}",
            f"gcloud services enable {service} --project={shlex.quote(where)}, then rerun the check",
        )
    if error.status == 401:
        fix = f"{ADC_LOGIN}, then rerun the check"
    elif error.status == 403:
        fix = "read the API's message: a role or the quota project's grant is missing; then rerun the check"
    elif error.reason == NOT_TRIED:
        fix = "check the network, then rerun the check"
    elif error.malformed:
        fix = "check the network (a proxy or captive portal answers for Google?), then rerun the check"
    elif error.transient:
        fix = "check the network and https://status.cloud.google.com, then rerun the check"
    else:
        fix = "read the API's message, then rerun the check"
    return unread(subject, f"{what} not read ({error}{extra})", fix)


@dataclasses.dataclass
class Checked:
    """What the reads found, for the facts that combine several of them."""

    enabled: dict[str, bool] | None = None
    granted: set[str] | None = None


def check(plan: Plan, apis: Apis, *, caller: str) -> list[Fact]:
    """Every fact after credentials and project, in the order they print."""
    found = Checked()
    service_facts, stop = _services(plan, apis, found)
    if stop:
        return service_facts
    billing = _billing(plan, apis)
    compute, plan = _compute(plan, apis, found)
    policies = _org_policies(plan, apis)
    permissions = _permissions(plan, apis, found, caller)
    return [*service_facts, *_apis_fact(plan, found), billing, *compute, *policies, *permissions]


# --- Service Usage --------------------------------------------------------------------------------


def _services(plan: Plan, apis: Apis, found: Checked) -> tuple[list[Fact], bool]:
    """The state of the APIs the deploy calls.
    https://cloud.google.com/service-usage/docs/reference/rest/v1/services/batchGet: ``{"services":
    [Service]}``, one per name asked, each with its ``state`` (ENABLED, DISABLED, STATE_UNSPECIFIED)."""
    states: dict[str, bool] = {}
    try:
        for names in _chunks(plan.services, BATCH_GET_MAX):
            body = apis.get(
                "serviceusage",
                f"v1/projects/{plan.project}/services:batchGet",
                params=[("names", f"projects/{plan.project}/services/{name}") for name in names],
            )
            states.update(_service_states(body, names))
    except ApiError as exc:
        if exc.not_found:
            return [
                block(
                    "project",
                    f"{plan.project} was not found ({exc.message})",
                    "check the id (gcloud projects list), then gcloud config set project <id> or "
                    f"pulumi config set gcp:project <id> -s {plan.stack}",
                )
            ], True
        if exc.disabled and (exc.service or SERVICE_USAGE) == SERVICE_USAGE:
            # The deploy enables every other API through Service Usage (pulumi-gcp's projects.Service).
            where = _consumer_id(exc, plan.project)
            return [
                block(
                    "apis",
                    f"{SERVICE_USAGE} is disabled in project {where}: the deploy enables the APIs it "
                    "needs through it, and nothing else can be read about them",
                    f"gcloud services enable {SERVICE_USAGE} --project={shlex.quote(where)}",
                )
            ], False
        return [not_read("apis", "the project's APIs", exc, plan.project)], False
    found.enabled = states
    return [], False


def _service_states(body: object, names: list[str]) -> dict[str, bool]:
    known = ("ENABLED", "DISABLED", "STATE_UNSPECIFIED")
    services = body.get("services") if isinstance(body, dict) else None
    if not isinstance(services, list) or not all(isinstance(s, dict) for s in services):
        raise _shape("serviceusage", "a list of services", body)
    states: dict[str, bool] = {}
    for service in services:
        name = str(
            (service.get("config") or {}).get("name") or str(service.get("name", "")).rsplit("/", 1)[-1]
        )
        if service.get("state") not in known:
            raise _shape("serviceusage", "a service's state", body)
        states[name] = service.get("state") == "ENABLED"
    missing = [n for n in names if n not in states]
    if missing:
        raise _shape("serviceusage", f"the state of {', '.join(missing)}", body)
    return states


def _shape(service: str, what: str, body: object) -> ApiError:
    """A 2xx answer without what its method documents: unread, never a finding."""
    import json

    from qwen36.check.gcp import answer_error

    try:
        raw = json.dumps(body).encode()
    except (TypeError, ValueError):
        raw = None
    return answer_error(service, what, raw)


def _apis_fact(plan: Plan, found: Checked) -> list[Fact]:
    if found.enabled is None:
        return []
    disabled = [s for s in plan.services if not found.enabled.get(s, False)]
    if not disabled:
        return [ok("apis", f"all {len(plan.services)} the deploy calls are enabled")]
    by_program = [s for s in disabled if plan.enabled_by(s)]
    orphans = [s for s in disabled if not plan.enabled_by(s)]
    facts: list[Fact] = []
    can_enable = None if found.granted is None else ENABLE_PERMISSION in found.granted
    enable = f"gcloud services enable {' '.join(disabled)} --project={shlex.quote(plan.project)}"
    if by_program:
        who = sorted({plan.enabled_by(s) for s in by_program})
        names, one = ", ".join(_short(s) for s in by_program), len(by_program) == 1
        verb, pronoun = ("is", "it") if one else ("are", "them")
        text = f"{names} {verb} disabled; the deploy enables {pronoun} ({', '.join(who)})"
        if can_enable is False:
            facts.append(
                block(
                    "apis",
                    f"{text}, but you may not ({ENABLE_PERMISSION} is not granted)",
                    f"ask a project owner to run: {enable}",
                )
            )
        elif can_enable is None:
            facts.append(
                warn("apis", f"{text}, if you may (your permissions were not read)", f"or run: {enable}")
            )
        else:
            facts.append(ok("apis", text))
    if orphans:
        facts.append(
            block(
                "apis",
                f"{', '.join(orphans)} {'is' if len(orphans) == 1 else 'are'} disabled, and nothing in the "
                "deploy enables it",
                f"gcloud services enable {' '.join(orphans)} --project={shlex.quote(plan.project)}",
            )
        )
    return facts


# --- Cloud Billing --------------------------------------------------------------------------------


def _billing(plan: Plan, apis: Apis) -> Fact:
    """https://cloud.google.com/billing/docs/reference/rest/v1/projects/getBillingInfo"""
    try:
        info = apis.get("cloudbilling", f"v1/projects/{plan.project}/billingInfo")
        # ProjectBillingInfo: {name, projectId, billingAccountName, billingEnabled}; proto3's JSON
        # leaves out a false billingEnabled, so only its type is checked, and the name must be there.
        # https://cloud.google.com/billing/docs/reference/rest/v1/ProjectBillingInfo
        if (
            not isinstance(info, dict)
            or not (info.get("name") or info.get("projectId"))
            or not isinstance(info.get("billingEnabled", False), bool)
        ):
            raise _shape("cloudbilling", "a project's billing info", info)
    except ApiError as exc:
        return not_read("billing", "the billing account", exc, plan.project)
    if info.get("billingEnabled") is True:
        return ok("billing", f"enabled ({info.get('billingAccountName') or 'an open billing account'})")
    account = info.get("billingAccountName")
    state = f"its billing account {account} is closed" if account else "no billing account is linked"
    return block(
        "billing",
        f"not enabled on {plan.project}: {state}, and GCE creates no VM without it",
        f"gcloud billing projects link {shlex.quote(plan.project)} --billing-account=<ACCOUNT_ID> "
        "(the accounts you may use: gcloud billing accounts list)",
    )


# --- Compute Engine -------------------------------------------------------------------------------


def _compute(plan: Plan, apis: Apis, found: Checked) -> tuple[list[Fact], Plan]:
    if found.enabled is not None and not found.enabled.get("compute.googleapis.com", False):
        why = (
            ": the deploy enables it, but a new project's GPU quotas are often 0 until asked for; "
            "enable it now to read them"
        )
        error = ApiError(403, "", reason="SERVICE_DISABLED", service="compute.googleapis.com")
        what = "the GPU quotas, the zones and the tooling image"
        # The family unknown: assume the bake, so that its permissions are tested too.
        baking = dataclasses.replace(plan, bakes=plan.cfg.use_tooling_image and plan.cfg.build_tooling_image)
        return [not_read("quotas", what, error, plan.project, extra=why)], baking
    facts = [*_quotas(plan, apis), *_zones(plan, apis)]
    image, plan = _tooling_image(plan, apis)
    return [*facts, *image], plan


def _quota_line(plan: Plan, metric: str, scope: str, limit: float, usage: float, show: str) -> Fact:
    subject = f"quota {metric}"
    need, most = plan.gpus_initial, plan.gpus_max
    wanted = f"the stack needs {need}" + (f", up to {most} when it scales out" if most > need else "")
    ask = f"ask for {most} at {QUOTAS_CONSOLE}?project={plan.project} (filter by {metric}); see it: {show}"
    if limit < need:
        return block(subject, f"limit {limit:g} {scope}: {wanted}", ask)
    if limit < most:
        return warn(
            subject, f"limit {limit:g} {scope}: the autoscaler can reach only {limit:g} of {most}", ask
        )
    if limit - usage < need:
        return warn(
            subject,
            f"limit {limit:g} {scope}, {usage:g} in use: {wanted}; fine if those are this stack's own "
            "servers (a redeploy), else the group waits for quota",
            ask,
        )
    return ok(subject, f"limit {limit:g} {scope}, {usage:g} in use: {wanted}")


def _quotas(plan: Plan, apis: Apis) -> list[Fact]:
    project_show = (
        f"gcloud compute project-info describe --project={shlex.quote(plan.project)} --format='json(quotas)'"
    )
    region_show = (
        f"gcloud compute regions describe {plan.region} --project={shlex.quote(plan.project)} "
        "--format='json(quotas)'"
    )
    facts: list[Fact] = []
    try:
        project_quotas = apis.project_quotas(plan.project)
    except ApiError as exc:
        facts.append(not_read("quotas", "the project's GPU quota", exc, plan.project))
    else:
        if GLOBAL_GPU_METRIC in project_quotas:
            limit, usage = project_quotas[GLOBAL_GPU_METRIC]
            facts.append(_quota_line(plan, GLOBAL_GPU_METRIC, "in all regions", limit, usage, project_show))
        else:
            facts.append(
                warn(f"quota {GLOBAL_GPU_METRIC}", "not in the project's quotas", f"see them: {project_show}")
            )
    try:
        region_quotas = apis.region_quotas(plan.project, plan.region)
    except ApiError as exc:
        facts.append(not_read("quotas", f"the GPU quota of {plan.region}", exc, plan.project))
        return facts
    facts.append(_regional_gpu(plan, region_quotas, region_show))
    return facts


def _regional_gpu(plan: Plan, quotas: dict[str, tuple[float, float]], show: str) -> Fact:
    scope = f"in {plan.region}"
    metric = plan.regional_gpu_metric
    if metric == SPOT_GPU_METRIC:
        spot = quotas.get(SPOT_GPU_METRIC, (0.0, 0.0))
        standard = quotas.get(STANDARD_GPU_METRIC)
        if spot[0] == 0 and standard is not None and standard[0] >= plan.gpus_initial:
            # "To prevent Spot VMs from consuming your quotas for standard VMs' CPUs, GPUs, and disks,
            # consider requesting preemptible quota" (compute/docs/instances/create-use-spot): without
            # preemptible quota they count against the standard one. Not verified live.
            return warn(
                f"quota {SPOT_GPU_METRIC}",
                f"0 {scope}: spot servers then count against {STANDARD_GPU_METRIC} "
                f"(limit {standard[0]:g}, {standard[1]:g} in use), per the Spot VM docs",
                f"ask for {plan.gpus_max} {SPOT_GPU_METRIC} at {QUOTAS_CONSOLE}?project={plan.project} "
                f"to keep them apart; see it: {show}",
            )
        if SPOT_GPU_METRIC not in quotas and standard is None:
            return _no_l4_quota(plan, show)
        return _quota_line(plan, SPOT_GPU_METRIC, scope, *spot, show)
    if metric not in quotas:
        return _no_l4_quota(plan, show)
    return _quota_line(plan, metric, scope, *quotas[metric], show)


def _no_l4_quota(plan: Plan, show: str) -> Fact:
    return block(
        f"quota {plan.regional_gpu_metric}",
        f"{plan.region} lists no L4 GPU quota: it offers no nvidia-l4",
        "pick a region with L4 (gcloud compute accelerator-types list --filter=name=nvidia-l4); "
        f"see it: {show}",
    )


def _zones(plan: Plan, apis: Apis) -> list[Fact]:
    accelerator = plan.cfg.accelerator_type
    try:
        offering = apis.zones_offering(plan.project, accelerator)
    except ApiError as exc:
        return [not_read("zones", f"the zones offering {accelerator}", exc, plan.project)]
    good = [z for z in plan.zones if offering.get(z)]
    here = sorted(z for z, has in offering.items() if has and z.startswith(plan.region + "-"))
    alternatives = f"zones of {plan.region} that offer it: {', '.join(here) or 'none'}"
    facts = [ok("zones", f"{accelerator} is offered in {', '.join(good)}")] if good else []
    for zone in plan.zones:
        if offering.get(zone):
            continue
        problem = f"{accelerator} is not offered there" if zone in offering else "no such zone in the project"
        facts.append(
            block(
                f"zone {zone}",
                problem,
                f"list only zones that offer it in qwen36-mtp-l4:zones (Pulumi.{plan.stack}.yaml); "
                f"{alternatives}",
            )
        )
    return facts


def _tooling_image(plan: Plan, apis: Apis) -> tuple[list[Fact], Plan]:
    from infra.shielded import VERDICT_LABEL
    from infra.tooling_image import tooling_family

    if not plan.cfg.use_tooling_image:
        return [
            ok("tooling image", "not used (useToolingImage: false): the servers boot the stock image")
        ], plan
    family = tooling_family(plan.cfg.llama_cpp_build)
    try:
        found = apis.family_image(plan.project, family)
    except ApiError as exc:
        # Unknown: assume the bake, so that its permissions are tested too.
        facts = [not_read("tooling image", f"the family {family}", exc, plan.project)]
        return facts, dataclasses.replace(plan, bakes=plan.cfg.build_tooling_image)
    if found is not None:
        image, labels = found
        verdict = labels.get(VERDICT_LABEL, "")
        plan = dataclasses.replace(plan, secure_boot_verdict=verdict)
        return [ok("tooling image", f"{image} in family {family}: no bake")], plan
    if not plan.cfg.build_tooling_image:
        return [
            ok("tooling image", f"family {family} is empty and buildToolingImage is false: the stock image")
        ], plan
    text = f"family {family} is empty: this deploy bakes it before it creates the group"
    return [ok("tooling image", text)], dataclasses.replace(plan, bakes=True)


# --- Organization Policy --------------------------------------------------------------------------


def _org_policies(plan: Plan, apis: Apis) -> list[Fact]:
    facts: list[Fact] = []
    for constraint in applicable_constraints(plan):
        try:
            policy = apis.get(
                "orgpolicy", f"v2/projects/{plan.project}/policies/{constraint.name}:getEffectivePolicy"
            )
            _check_policy(policy)
        except ApiError as exc:
            if exc.disabled or exc.status in (401, 403) or exc.transient or exc.malformed:
                # One answer for all: the API is off, the caller may not read policies here, or it
                # kept failing after its tries or answered junk (the rest would get the same answer).
                left = [c.name for c in applicable_constraints(plan)][len(facts) :]
                denied = exc.status == 403 and not exc.disabled
                extra = "; reading them needs orgpolicy.policies.get" if denied else ""
                what = "the organization policies" + (f" ({len(left)} left)" if facts else "")
                return [*facts, not_read("org policies", what, exc, plan.project, extra=extra)]
            facts.append(not_read(f"org policy {constraint.name}", "the effective policy", exc, plan.project))
            continue
        facts.append(constraint.evaluate(plan, parse_effective(policy)))
    return facts


def _check_policy(policy: object) -> None:
    """A Policy {name, spec: {rules: [PolicyRule]}}; anything else is not the API's answer.
    https://cloud.google.com/resource-manager/docs/reference/orgpolicy/rest/v2/organizations.policies#Policy"""
    if not isinstance(policy, dict) or not isinstance(policy.get("name"), str):
        raise _shape("orgpolicy", "a policy", policy)
    spec = policy.get("spec", {})
    rules = spec.get("rules", []) if isinstance(spec, dict) else None
    if not isinstance(rules, list) or not all(isinstance(r, dict) for r in rules):
        raise _shape("orgpolicy", "a policy's rules", policy)


# --- Cloud Resource Manager: the caller's permissions ---------------------------------------------


def _granted(body: object, asked: list[str]) -> set[str]:
    """``{"permissions": [...]}``, a subset of those asked (``{}`` when none is granted: proto3's JSON
    leaves out an empty list). Anything else (another field, a permission not asked) is not the API's
    answer, and never read as "missing": that would blame the caller's roles for a proxy's page."""
    if not isinstance(body, dict) or set(body) - {"permissions"}:
        raise _shape("cloudresourcemanager", "a list of permissions", body)
    permissions = body.get("permissions", [])
    if not isinstance(permissions, list) or not set(map(str, permissions)) <= set(asked):
        raise _shape("cloudresourcemanager", "a subset of the permissions asked", body)
    return {str(p) for p in permissions}


def _permissions(plan: Plan, apis: Apis, found: Checked, caller: str) -> list[Fact]:
    """https://cloud.google.com/resource-manager/reference/rest/v1/projects/testIamPermissions"""
    from infra.required_permissions import required

    groups = plan.groups
    wanted = required(groups)
    granted: set[str] = set()
    try:
        for names in _chunks(wanted, TEST_PERMISSIONS_MAX):
            body = apis.post(
                "cloudresourcemanager",
                f"v1/projects/{plan.project}:testIamPermissions",
                {"permissions": names},
            )
            granted |= _granted(body, names)
    except ApiError as exc:
        return [not_read("permissions", "your permissions", exc, plan.project)]
    found.granted = granted
    facts: list[Fact] = []
    show = roles_command(plan.project, caller)
    for group in groups:
        missing = [p for p in group.permissions if p.name not in granted]
        if not missing:
            continue
        listed = "; ".join(f"{p.name} ({p.why})" for p in missing)
        facts.append(
            block(
                f"permissions for {group.name}",
                f"{len(missing)} missing: {listed}",
                f"ask a project owner for {group.role} on {plan.project}; yours: {show}",
            )
        )
    if not facts:
        facts.append(
            ok(
                "permissions",
                f"all {len(wanted)} the deploy needs are granted (infra/required_permissions.py)",
            )
        )
    return facts
