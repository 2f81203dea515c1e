"""Our checks of GCP's rules (infra/policy.py) pass on what the program declares, and catch each breach."""

from __future__ import annotations

import copy
from collections.abc import Callable
from typing import Any

import pytest
from program_mocks import MOCK_API_KEY, Deployment, deploy

from infra import policy
from infra.policy import PolicyContext, Resource

VARIANTS: dict[str, dict[str, Any]] = {
    "defaults": {},
    "standard": {"provisioningModel": "STANDARD"},
    "own-ranges": {"sourceRanges": ["198.51.100.7/32"]},
    "public-opted-in": {"sourceRanges": ["0.0.0.0/0"], "allowPublicInternet": True},
    "no-api-key": {"apiKey": False},
}


def context(d: Deployment, overrides: dict[str, Any]) -> PolicyContext:
    return PolicyContext(
        allow_public_internet=bool(overrides.get("allowPublicInternet")),
        secrets=[MOCK_API_KEY],
    )


@pytest.mark.parametrize("variant", VARIANTS)
def test_program_passes_every_rule(stack: str, variant: str) -> None:
    d = deploy(stack, VARIANTS[variant])
    assert policy.check(d.resources, context(d, VARIANTS[variant])) == []


@pytest.fixture(scope="module")
def good() -> Deployment:
    return deploy("dev", {"sourceRanges": ["198.51.100.7/32"]})


def _edit(
    d: Deployment, token: str, change: Callable[[dict[str, Any]], None], name: str | None = None
) -> list[Resource]:
    """A copy of the recorded resources with one resource's inputs changed."""
    edited = []
    for r in d.resources:
        inputs = copy.deepcopy(dict(r.inputs))
        if r.type == token and (name is None or r.name == name):
            change(inputs)
        edited.append(Resource(r.type, r.name, inputs))
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
        policy.INSTANCE,
        None,
        _set("scheduling.preemptible", False),
    ),
    "spot-restart-left-default": (
        "spot_is_preemptible_without_restart",
        policy.INSTANCE,
        None,
        _set("scheduling.automaticRestart", _DELETE),
    ),
    "spot-restarts": (
        "spot_is_preemptible_without_restart",
        policy.INSTANCE,
        None,
        _set("scheduling.automaticRestart", True),
    ),
    "gpu-migrates": (
        "gpu_terminates_on_maintenance",
        policy.INSTANCE,
        None,
        _set("scheduling.onHostMaintenance", "MIGRATE"),
    ),
    "no-vtpm": ("shielded_vm_on", policy.INSTANCE, None, _set("shieldedInstanceConfig.enableVtpm", False)),
    "no-shielded-config": ("shielded_vm_on", policy.INSTANCE, None, _set("shieldedInstanceConfig", _DELETE)),
    "default-sa": (
        "own_service_account",
        policy.INSTANCE,
        None,
        _set("serviceAccount.email", "123456789012-compute@developer.gserviceaccount.com"),
    ),
    "no-sa": ("own_service_account", policy.INSTANCE, None, _set("serviceAccount", _DELETE)),
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
        policy.INSTANCE,
        None,
        _set("metadata.llama-api-key", MOCK_API_KEY),
    ),
    "key-in-startup-script": (
        "secret_stays_secret",
        policy.INSTANCE,
        None,
        lambda i: i.update(metadataStartupScript=i["metadataStartupScript"] + f"\nKEY={MOCK_API_KEY}\n"),
    ),
    "key-in-labels": ("secret_stays_secret", policy.BUCKET, None, _set("labels.key", MOCK_API_KEY)),
}


@pytest.mark.parametrize("fixture", BAD_FIXTURES)
def test_each_rule_fails_on_a_bad_fixture(good: Deployment, fixture: str) -> None:
    rule, token, name, change = BAD_FIXTURES[fixture]
    bad = _edit(good, token, change, name)
    violations = policy.check(bad, PolicyContext(secrets=[MOCK_API_KEY]))
    assert violations, fixture
    assert {v.rule for v in violations} == {rule}, [str(v) for v in violations]


def test_every_rule_has_a_bad_fixture() -> None:
    fixtures = {**BAD_FIXTURES, **FLEET_BAD_FIXTURES}
    assert {rule.__name__ for rule in policy.RULES} == {rule for rule, *_ in fixtures.values()}


def test_public_internet_needs_the_opt_in(good: Deployment) -> None:
    bad = _edit(good, policy.FIREWALL, _set("sourceRanges", ["0.0.0.0/0"]), "network-server")
    assert policy.check(bad, PolicyContext(allow_public_internet=True)) == []
    assert [v.rule for v in policy.check(bad, PolicyContext())] == ["no_open_firewall"]


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
        "autoscaled_group_is_even_or_balanced",
        policy.REGION_GROUP,
        None,
        _set("distributionPolicyTargetShape", "ANY"),
    ),
    "autoscaled-group-one-zone": (
        "autoscaled_group_is_even_or_balanced",
        policy.REGION_GROUP,
        None,
        _set("distributionPolicyTargetShape", "ANY_SINGLE_ZONE"),
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
            allows=[{"protocol": "tcp", "ports": ["8000-9000"]}], sourceRanges=["198.51.100.0/24"]
        ),
    ),
}
FLEET_CONTEXT = PolicyContext(secrets=[MOCK_API_KEY], fleet=True)


@pytest.fixture(scope="module")
def fleet_good() -> Deployment:
    from tests.fleet.fleet_program import deploy_fleet

    return deploy_fleet({"minReplicas": 1, "maxReplicas": 4, "sourceRanges": ["198.51.100.0/24"]})


@pytest.mark.parametrize("overrides", [{"replicas": 3}, {"replicas": 2, "domain": "llm.example.com"}])
def test_fleet_programs_pass_every_rule(fleet_good: Deployment, overrides: dict[str, Any]) -> None:
    from tests.fleet.fleet_program import deploy_fleet

    assert policy.check(fleet_good.resources, FLEET_CONTEXT) == []
    other = deploy_fleet({"sourceRanges": ["198.51.100.0/24"], **overrides})
    assert policy.check(other.resources, FLEET_CONTEXT) == []


@pytest.mark.parametrize("fixture", FLEET_BAD_FIXTURES)
def test_each_fleet_rule_fails_on_a_bad_fixture(fleet_good: Deployment, fixture: str) -> None:
    rule, token, name, change = FLEET_BAD_FIXTURES[fixture]
    bad = _edit(fleet_good, token, change, name)
    violations = policy.check(bad, FLEET_CONTEXT)
    assert violations, fixture
    assert {v.rule for v in violations} == {rule}, [str(v) for v in violations]


def test_single_server_firewall_is_not_a_fleets(good: Deployment) -> None:
    # The single server opens 8080 to sourceRanges; in a fleet that rule must not exist (the load
    # balancer and Cloud Armor take its place), and the check says so.
    assert policy.check(good.resources, PolicyContext(secrets=[MOCK_API_KEY])) == []
    assert {v.rule for v in policy.check(good.resources, FLEET_CONTEXT)} == {"fleet_port_only_from_google"}
