"""Our checks of GCP's rules (infra/policy/) pass on what the program declares, and catch each breach."""

from __future__ import annotations

import copy
import dataclasses
import shlex
from collections.abc import Callable
from typing import Any

import pytest
from policy_cases import check_settled, context
from program_mocks import MOCK_API_KEY, Deployment, deploy

from infra import fleet_bounds, policy
from infra.policy import PolicyContext, Resource

VARIANTS: dict[str, dict[str, Any]] = {
    "defaults": {},
    "fleet": {"replicas": 3, "sourceRanges": ["198.51.100.7/32"]},
    "autoscaled": {"minReplicas": 1, "maxReplicas": 4, "sourceRanges": ["198.51.100.7/32"]},
    "fleet-https": {"replicas": 2, "domain": "llm.example.com", "sourceRanges": ["198.51.100.7/32"]},
    "standard": {"provisioningModel": "STANDARD"},
    # Without the front door: the VM's own port for the ranges, or an IAP tunnel with no key.
    "own-ranges": {"door": False, "externalIp": True, "sourceRanges": ["198.51.100.7/32"]},
    "public-opted-in": {
        "door": False,
        "externalIp": True,
        "sourceRanges": ["0.0.0.0/0"],
        "allowPublicInternet": True,
    },
    "no-api-key": {"door": False, "apiKey": False},
}


@pytest.mark.parametrize("variant", VARIANTS)
def test_program_passes_every_rule(stack: str, variant: str) -> None:
    d = deploy(stack, VARIANTS[variant])
    assert check_settled(d.resources, context(d, VARIANTS[variant])) == []


@pytest.fixture(scope="module")
def good() -> Deployment:
    return deploy("dev", {"door": False, "externalIp": True, "sourceRanges": ["198.51.100.7/32"]})


def _edit(
    d: Deployment, token: str, change: Callable[[dict[str, Any]], None], name: str | None = None
) -> list[Resource]:
    """A copy of the recorded resources with one resource's inputs changed."""
    edited = []
    for r in d.resources:
        inputs = copy.deepcopy(dict(r.inputs))
        if r.type == token and (name is None or r.name == name):
            change(inputs)
        edited.append(dataclasses.replace(r, inputs=inputs))
    return edited


def _set(path: str, value: Any) -> Callable[[dict[str, Any]], None]:
    def change(inputs: dict[str, Any]) -> None:
        *parents, leaf = path.split(".")
        node = inputs
        for part in parents:
            node = node[part]
        if value is _DELETE:
            node.pop(leaf, None)
        else:
            node[leaf] = value

    return change


_DELETE = object()

# (rule expected to fire, resource type, resource name or None, edit)
BAD_FIXTURES: dict[str, tuple[str, str, str | None, Callable[[dict[str, Any]], None]]] = {
    "spot-not-preemptible": (
        "spot_is_preemptible_without_restart",
        policy.TEMPLATE,
        None,
        _set("scheduling.preemptible", False),
    ),
    "spot-restart-left-default": (
        "spot_is_preemptible_without_restart",
        policy.TEMPLATE,
        None,
        _set("scheduling.automaticRestart", _DELETE),
    ),
    "spot-restarts": (
        "spot_is_preemptible_without_restart",
        policy.TEMPLATE,
        None,
        _set("scheduling.automaticRestart", True),
    ),
    "gpu-migrates": (
        "gpu_terminates_on_maintenance",
        policy.TEMPLATE,
        None,
        _set("scheduling.onHostMaintenance", "MIGRATE"),
    ),
    "no-vtpm": ("shielded_vm_on", policy.TEMPLATE, None, _set("shieldedInstanceConfig.enableVtpm", False)),
    "no-shielded-config": ("shielded_vm_on", policy.TEMPLATE, None, _set("shieldedInstanceConfig", _DELETE)),
    "default-sa": (
        "own_service_account",
        policy.TEMPLATE,
        None,
        _set("serviceAccount.email", "123456789012-compute@developer.gserviceaccount.com"),
    ),
    "no-sa": ("own_service_account", policy.TEMPLATE, None, _set("serviceAccount", _DELETE)),
    "open-firewall": (
        "no_open_firewall",
        policy.FIREWALL,
        "network-server",
        _set("sourceRanges", ["0.0.0.0/0"]),
    ),
    "sourceless-firewall": (
        "no_open_firewall",
        policy.FIREWALL,
        "network-iap",
        _set("sourceRanges", _DELETE),
    ),
    "acl-bucket": ("private_bucket", policy.BUCKET, None, _set("uniformBucketLevelAccess", False)),
    "pap-inherited": ("private_bucket", policy.BUCKET, None, _set("publicAccessPrevention", "inherited")),
    "key-in-metadata": (
        "secret_stays_secret",
        policy.TEMPLATE,
        None,
        _set("metadata.llama-api-key", MOCK_API_KEY),
    ),
    "key-in-startup-script": (
        "secret_stays_secret",
        policy.TEMPLATE,
        None,
        lambda i: i["metadata"].update(
            {"startup-script": i["metadata"]["startup-script"] + f"\nKEY={MOCK_API_KEY}\n"}
        ),
    ),
    "balanced-redistributes": (
        "uneven_shape_needs_no_redistribution",
        policy.GROUP,
        None,
        _set("updatePolicy.instanceRedistributionType", "PROACTIVE"),
    ),
    "single-zone-redistributes": (
        "uneven_shape_needs_no_redistribution",
        policy.GROUP,
        None,
        # A one-zone shape cannot repair into another zone either: that is another rule's.
        lambda i: i.update(
            distributionPolicyTargetShape="ANY_SINGLE_ZONE",
            updatePolicy={"type": "PROACTIVE"},
            instanceLifecyclePolicy={"onRepair": {"allowChangingZone": "NO"}},
        ),
    ),
    "healing-delay-too-long": (
        "autohealing_delay_in_range",
        policy.GROUP,
        None,
        _set("autoHealingPolicies.initialDelaySec", 7200),
    ),
    "healing-delay-negative": (
        "autohealing_delay_in_range",
        policy.GROUP,
        None,
        _set("autoHealingPolicies.initialDelaySec", -1),
    ),
    "autoscaled-any-shape": (
        "autoscaler_needs_even_or_balanced",
        policy.GROUP,
        None,
        _set("distributionPolicyTargetShape", "ANY"),
    ),
    "health-checks-blocked": (
        "health_checks_admitted",
        policy.FIREWALL,
        "network-health-checks",
        _set("sourceRanges", ["35.191.0.0/16"]),
    ),
    "health-checks-other-port": (
        "health_checks_admitted",
        policy.FIREWALL,
        "network-health-checks",
        _set("allows", [{"protocol": "tcp", "ports": ["80"]}]),
    ),
    "key-in-description": (
        "secret_stays_secret",
        policy.TEMPLATE,
        None,
        _set("description", f"key {MOCK_API_KEY}"),
    ),
    "vm-compute-admin": (
        "no_project_compute_admin_for_service_accounts",
        policy.PROJECT_IAM_MEMBER,
        "identity-logging-logwriter",
        _set("role", "roles/compute.admin"),
    ),
}


# An autoscaler (the fleet's) on the group, so that the shape rule has something to check.
AUTOSCALER = Resource(
    policy.AUTOSCALER,
    "fleet-autoscaler",
    {
        "region": "us-central1",
        "target": "projects/acme/regions/us-central1/instanceGroupManagers/qwen36-dev",
        "autoscalingPolicy": {
            "cooldownPeriod": fleet_bounds.COLD_START_BOUND_S,
            "scaleInControl": {"maxScaledInReplicas": {"fixed": 1}},
        },
    },
)


def test_an_autoscaled_balanced_group_passes(good: Deployment) -> None:
    with_scaler = [*good.resources, AUTOSCALER]
    assert check_settled(with_scaler, PolicyContext(external_ip=True, secrets=[MOCK_API_KEY])) == []


@pytest.mark.parametrize("fixture", BAD_FIXTURES)
def test_each_rule_fails_on_a_bad_fixture(good: Deployment, fixture: str) -> None:
    rule, token, name, change = BAD_FIXTURES[fixture]
    bad = _edit(good, token, change, name)
    if rule == "autoscaler_needs_even_or_balanced":
        bad.append(AUTOSCALER)
    violations = check_settled(bad, PolicyContext(external_ip=True, secrets=[MOCK_API_KEY]))
    assert violations, fixture
    assert {v.rule for v in violations} == {rule}, [str(v) for v in violations]


def test_a_bare_spot_vm_is_still_checked(good: Deployment) -> None:
    (template,) = [r for r in good.resources if r.type == policy.TEMPLATE]
    scheduling = {**template.inputs["scheduling"], "automaticRestart": True}
    vm = Resource(policy.INSTANCE, "bare", {**template.inputs, "scheduling": scheduling})
    assert [v.rule for v in check_settled([vm], PolicyContext(external_ip=True))] == [
        "spot_is_preemptible_without_restart"
    ]


# --- Issue 15's rules: each on the deployment it concerns, with the context that isolates it ------

DEFAULT_VPC = "https://www.googleapis.com/compute/v1/projects/acme-llm-test/global/networks/default"


@pytest.fixture(scope="module")
def baking() -> Deployment:
    return deploy("dev", tooling_image=False)


def _builder_flags(change: Callable[[list[str]], list[str]]) -> Callable[[dict[str, Any]], None]:
    """Rewrite the builder's gcloud create line (the flags only; the rest of the script stays)."""

    def edit(inputs: dict[str, Any]) -> None:
        lines = inputs["create"].splitlines()
        for i, line in enumerate(lines):
            if "gcloud compute instances create" in line:
                indent = line[: len(line) - len(line.lstrip())]
                lines[i] = indent + shlex.join(change(shlex.split(line.strip())))
        inputs["create"] = "\n".join(lines)

    return edit


def _without(argv: list[str], prefixes: tuple[str, ...]) -> list[str]:
    return [a for a in argv if not a.startswith(prefixes)]


def _nic(**values: Any) -> Callable[[dict[str, Any]], None]:
    return lambda inputs: inputs["networkInterfaces"][0].update(values)


PLAIN = PolicyContext(external_ip=True)
OPTED_IN = PolicyContext(external_ip=True, allow_public_internet=True)
NO_EXCEPTION = PolicyContext(external_ip=True, secure_boot_reasons={})
NO_NETWORK_FLAGS = ("--network=", "--subnet=")
Edit = Callable[[dict[str, Any]], None]

# (rule, which deployment, context, resource type, resource name or None, edit)
ISSUE15_FIXTURES: dict[str, tuple[str, str, PolicyContext, str, str | None, Edit]] = {
    "vm-on-default": (
        "no_default_network", "good", PLAIN, policy.TEMPLATE, None, _nic(network="default", subnetwork=None)
    ),
    "vm-without-network": (
        "no_default_network", "good", PLAIN, policy.TEMPLATE, None, _nic(network=None, subnetwork=None)
    ),
    "firewall-on-default": (
        "no_default_network", "good", PLAIN, policy.FIREWALL, "network-iap", _set("network", DEFAULT_VPC)
    ),
    "builder-on-default": (
        "no_default_network", "baking", PLAIN, policy.LOCAL_COMMAND, "tooling-builder",
        _builder_flags(lambda a: [*_without(a, NO_NETWORK_FLAGS), "--network=default"]),
    ),
    # Opted in to the public internet, tcp:22 from anywhere is still refused.
    "ssh-from-anywhere": (
        "no_ssh_from_anywhere", "good", OPTED_IN, policy.FIREWALL, "network-iap",
        _set("sourceRanges", ["0.0.0.0/0"]),
    ),
    "all-ports-from-anywhere": (
        "no_ssh_from_anywhere", "good", OPTED_IN, policy.FIREWALL, "network-server",
        lambda i: i.update(sourceRanges=["::/0"], allows=[{"protocol": "all"}]),
    ),
    # Secure Boot off (the image's verdict) without the documented reasons is a violation...
    "secure-boot-off-undocumented": (
        "secure_boot_on", "good", NO_EXCEPTION, policy.INSTANCE, None, lambda _: None
    ),
    # ...and so is a template that records no reason, or one this version does not know.
    "secure-boot-off-without-reason": (
        "secure_boot_on", "good", PLAIN, policy.TEMPLATE, None, lambda i: i["labels"].pop("secure-boot-off")
    ),
    "secure-boot-off-unknown-reason": (
        "secure_boot_on", "good", PLAIN, policy.TEMPLATE, None,
        lambda i: i["labels"].update({"secure-boot-off": "x"}),
    ),
    "builder-without-secure-boot": (
        "secure_boot_on", "baking", PLAIN, policy.LOCAL_COMMAND, "tooling-builder",
        _builder_flags(lambda a: [x for x in a if x != "--shielded-secure-boot"]),
    ),
    # The first version's name for a project id that starts with "goog".
    "goog-bucket-name": (
        "valid_bucket_name", "good", PLAIN, policy.BUCKET, None,
        _set("name", "goog-research-qwen36-dev-us-central1"),
    ),
    "google-in-bucket-name": (
        "valid_bucket_name", "good", PLAIN, policy.BUCKET, None, _set("name", "qwen36-google-dev-1a2b")
    ),
    "builder-default-account": (
        "builder_not_default_account", "baking", PLAIN, policy.LOCAL_COMMAND, "tooling-builder",
        _builder_flags(
            lambda a: [x for x in a if not x.startswith("--service-account=")]
            + ["--service-account=123456789012-compute@developer.gserviceaccount.com"]
        ),
    ),
    "builder-without-account": (
        "builder_not_default_account", "baking", PLAIN, policy.LOCAL_COMMAND, "tooling-builder",
        _builder_flags(lambda a: [x for x in a if not x.startswith("--service-account=")]),
    ),
}  # fmt: skip


@pytest.mark.parametrize("fixture", ISSUE15_FIXTURES)
def test_each_issue15_rule_fails_on_a_bad_fixture(good: Deployment, baking: Deployment, fixture: str) -> None:
    rule, which, ctx, token, name, change = ISSUE15_FIXTURES[fixture]
    deployment = {"good": good, "baking": baking}[which]
    # Unedited, it passes under the same context with the documented secure-boot exception.
    documented = dataclasses.replace(ctx, secure_boot_reasons=PLAIN.secure_boot_reasons)
    assert check_settled(deployment.resources, documented) == [], "the unedited deployment passes"
    violations = check_settled(_edit(deployment, token, change, name), ctx)
    assert violations, fixture
    assert {v.rule for v in violations} == {rule}, [str(v) for v in violations]


def test_a_goog_project_gets_a_valid_bucket_name() -> None:
    d = deploy("dev", gcp_project="goog-research-42")
    assert check_settled(d.resources, context(d, {})) == []
    assert not d.one(policy.BUCKET).inputs["name"].startswith("goog")


def test_the_secure_boot_exception_is_documented() -> None:
    from infra import shielded
    from tests.infra.program_mocks import ROOT

    page = (ROOT / "docs" / "security.md").read_text()
    assert "install-drivers-gpu#secure-boot" in page
    # Every reason the bake can record is said on the page, by its code.
    assert all(f"`{code}`" in page for code in shielded.OFF_REASONS)


def test_public_internet_needs_the_opt_in(good: Deployment) -> None:
    bad = _edit(good, policy.FIREWALL, _set("sourceRanges", ["0.0.0.0/0"]), "network-server")
    assert check_settled(bad, PolicyContext(external_ip=True, allow_public_internet=True)) == []
    assert [v.rule for v in check_settled(bad, PolicyContext(external_ip=True))] == ["no_open_firewall"]
    # Issue 29: all but one address is the internet too, and GCE's range limit holds.
    import ipaddress

    all_but_one = [
        str(n)
        for n in ipaddress.IPv4Network("0.0.0.0/0").address_exclude(ipaddress.IPv4Network("8.8.8.8/32"))
    ]
    almost = _edit(good, policy.FIREWALL, _set("sourceRanges", all_but_one), "network-server")
    assert [v.rule for v in check_settled(almost, PolicyContext(external_ip=True))] == ["no_open_firewall"]
    many = [f"{ipaddress.IPv4Address('10.0.0.0') + i}/32" for i in range(5001)]
    crowded = _edit(good, policy.FIREWALL, _set("sourceRanges", many), "network-server")
    assert [v.rule for v in check_settled(crowded, PolicyContext(external_ip=True))] == ["no_open_firewall"]


# --- the fleet's rules (infra/fleet.py), over a fleet program with a stand-in server group ----

FLEET_BAD_FIXTURES: dict[str, tuple[str, str, str | None, Callable[[dict[str, Any]], None]]] = {
    "backend-default-timeout": (
        "backend_timeout_covers_generation",
        policy.BACKEND_SERVICE,
        None,
        _set("timeoutSec", _DELETE),
    ),
    "backend-ten-minutes": (
        "backend_timeout_covers_generation",
        policy.BACKEND_SERVICE,
        None,
        _set("timeoutSec", 600),
    ),
    "backend-no-draining": (
        "backend_timeout_covers_generation",
        policy.BACKEND_SERVICE,
        None,
        _set("connectionDrainingTimeoutSec", _DELETE),
    ),
    "autoscaled-group-any": (
        "autoscaler_needs_even_or_balanced",
        policy.REGION_GROUP,
        None,
        _set("distributionPolicyTargetShape", "ANY"),
    ),
    "autoscaled-group-one-zone": (
        "autoscaler_needs_even_or_balanced",
        policy.REGION_GROUP,
        None,
        lambda i: i.update(
            distributionPolicyTargetShape="ANY_SINGLE_ZONE",
            instanceLifecyclePolicy={"onRepair": {"allowChangingZone": "NO"}},
        ),
    ),
    "cooldown-default": (
        "autoscaler_waits_for_cold_start",
        policy.REGION_AUTOSCALER,
        None,
        _set("autoscalingPolicy.cooldownPeriod", _DELETE),
    ),
    "cooldown-two-minutes": (
        "autoscaler_waits_for_cold_start",
        policy.REGION_AUTOSCALER,
        None,
        _set("autoscalingPolicy.cooldownPeriod", 120),
    ),
    "no-scale-in-control": (
        "autoscaler_waits_for_cold_start",
        policy.REGION_AUTOSCALER,
        None,
        _set("autoscalingPolicy.scaleInControl", _DELETE),
    ),
    "lb-without-armor": (
        "public_backend_has_armor",
        policy.BACKEND_SERVICE,
        None,
        _set("securityPolicy", _DELETE),
    ),
    "member-port-from-clients": (
        "fleet_port_only_from_google",
        policy.FIREWALL,
        "network-health-checks",
        _set("sourceRanges", ["35.191.0.0/16", "130.211.0.0/22", "198.51.100.0/24"]),
    ),
    "member-port-in-a-range": (
        "fleet_port_only_from_google",
        policy.FIREWALL,
        "network-health-checks",
        lambda i: i.update(
            allows=[{"protocol": "tcp", "ports": ["8000-9000"]}],
            sourceRanges=["35.191.0.0/16", "130.211.0.0/22", "198.51.100.0/24"],
        ),
    ),
}
FLEET_CONTEXT = PolicyContext(external_ip=True, secrets=[MOCK_API_KEY], fleet=True)


@pytest.fixture(scope="module")
def fleet_good() -> Deployment:
    from tests.fleet.fleet_program import deploy_fleet

    return deploy_fleet({"minReplicas": 1, "maxReplicas": 4, "sourceRanges": ["198.51.100.0/24"]})


@pytest.mark.parametrize("overrides", [{"replicas": 3}, {"replicas": 2, "domain": "llm.example.com"}])
def test_fleet_programs_pass_every_rule(fleet_good: Deployment, overrides: dict[str, Any]) -> None:
    from tests.fleet.fleet_program import deploy_fleet

    assert check_settled(fleet_good.resources, FLEET_CONTEXT) == []
    other = deploy_fleet({"sourceRanges": ["198.51.100.0/24"], **overrides})
    assert check_settled(other.resources, FLEET_CONTEXT) == []


@pytest.mark.parametrize("fixture", FLEET_BAD_FIXTURES)
def test_each_fleet_rule_fails_on_a_bad_fixture(fleet_good: Deployment, fixture: str) -> None:
    rule, token, name, change = FLEET_BAD_FIXTURES[fixture]
    bad = _edit(fleet_good, token, change, name)
    violations = check_settled(bad, FLEET_CONTEXT)
    assert violations, fixture
    assert {v.rule for v in violations} == {rule}, [str(v) for v in violations]


def test_single_server_firewall_is_not_a_fleets(good: Deployment) -> None:
    # The single server opens 8080 to sourceRanges; in a fleet that rule must not exist (the load
    # balancer and Cloud Armor take its place), and the check says so.
    assert check_settled(good.resources, PolicyContext(external_ip=True, secrets=[MOCK_API_KEY])) == []
    fleet_context = PolicyContext(external_ip=True, secrets=[MOCK_API_KEY], fleet=True)
    assert {v.rule for v in check_settled(good.resources, fleet_context)} == {"fleet_port_only_from_google"}


@pytest.mark.parametrize("role", sorted(policy.BROAD_COMPUTE_ROLES))
def test_no_broad_compute_role_for_the_vm_account(role: str) -> None:
    """Autostop needs one group; a project-wide compute role on the VM's account is refused, bound
    member by member or as a binding, with or without a condition."""
    member = "qwen36-dev@acme-llm-test.iam.gserviceaccount.com"
    grants = [
        Resource(policy.PROJECT_IAM_MEMBER, "m", {"role": role, "member": f"serviceAccount:{member}"}),
        Resource(
            policy.PROJECT_IAM_MEMBER,
            "c",
            {"role": role, "member": f"serviceAccount:{member}", "condition": {"expression": "true"}},
        ),
        Resource(policy.PROJECT_IAM_BINDING, "b", {"role": role, "members": [f"serviceAccount:{member}"]}),
    ]
    violations = check_settled(grants, PolicyContext(external_ip=True))
    assert [v.resource.split("::")[1] for v in violations] == ["m", "c", "b"]
    assert {v.rule for v in violations} == {"no_project_compute_admin_for_service_accounts"}
    # A person holding the role is the project's business, not the VM's.
    person = Resource(policy.PROJECT_IAM_MEMBER, "p", {"role": role, "member": "user:ops@example.com"})
    assert check_settled([person], PolicyContext(external_ip=True)) == []
