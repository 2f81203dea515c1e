"""Our checks of GCP's rules (infra/policy.py) pass on what the program declares, and catch each breach."""

from __future__ import annotations

import copy
from collections.abc import Callable
from typing import Any

import pytest
from program_mocks import MOCK_API_KEY, MOCK_IP, Deployment, deploy

from infra import policy
from infra.policy import PolicyContext, Resource

VARIANTS: dict[str, dict[str, Any]] = {
    "defaults": {},
    "replicas": {"replicas": 3},
    "standard": {"provisioningModel": "STANDARD"},
    "own-ranges": {"sourceRanges": ["198.51.100.7/32"]},
    "public-opted-in": {"sourceRanges": ["0.0.0.0/0"], "allowPublicInternet": True},
    "no-api-key": {"apiKey": False},
}


def addresses(resources: list[Resource]) -> dict[str, str]:
    """The reserved address's resolved IP (the mocks hand out MOCK_IP) and the region it asked for."""
    regions = [r.inputs["region"] for r in resources if r.type == "gcp:compute/address:Address"]
    return {MOCK_IP: regions[0]} if regions else {}


def context(d: Deployment, overrides: dict[str, Any]) -> PolicyContext:
    return PolicyContext(
        allow_public_internet=bool(overrides.get("allowPublicInternet")),
        secrets=[MOCK_API_KEY],
        addresses=addresses(d.resources),
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
        lambda i: i.update(
            distributionPolicyTargetShape="ANY_SINGLE_ZONE", updatePolicy={"type": "PROACTIVE"}
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
    "stateful-ip-other-region": (
        "stateful_ip_in_group_region",
        "gcp:compute/address:Address",
        None,
        _set("region", "europe-west4"),
    ),
    "template-other-region": (
        "stateful_ip_in_group_region",
        policy.GROUP,
        None,
        lambda i: i["versions"][0].update(
            instanceTemplate=i["versions"][0]["instanceTemplate"].replace("/us-central1/", "/europe-west4/")
        ),
    ),
    "key-in-labels": ("secret_stays_secret", policy.BUCKET, None, _set("labels.key", MOCK_API_KEY)),
}


# An autoscaler (the fleet's) on the group, so that the shape rule has something to check.
AUTOSCALER = Resource(
    policy.AUTOSCALER,
    "fleet-autoscaler",
    {"region": "us-central1", "target": "projects/acme/regions/us-central1/instanceGroupManagers/qwen36-dev"},
)


def test_an_autoscaled_balanced_group_passes(good: Deployment) -> None:
    with_scaler = [*good.resources, AUTOSCALER]
    assert (
        policy.check(with_scaler, PolicyContext(secrets=[MOCK_API_KEY], addresses=addresses(with_scaler)))
        == []
    )


@pytest.mark.parametrize("fixture", BAD_FIXTURES)
def test_each_rule_fails_on_a_bad_fixture(good: Deployment, fixture: str) -> None:
    rule, token, name, change = BAD_FIXTURES[fixture]
    bad = _edit(good, token, change, name)
    if rule == "autoscaler_needs_even_or_balanced":
        bad.append(AUTOSCALER)
    violations = policy.check(bad, PolicyContext(secrets=[MOCK_API_KEY], addresses=addresses(bad)))
    assert violations, fixture
    assert {v.rule for v in violations} == {rule}, [str(v) for v in violations]


def test_every_rule_has_a_bad_fixture() -> None:
    names = {rule.__name__ for rule in (*policy.RULES, *policy.PROGRAM_RULES)}
    assert names == {rule for rule, *_ in BAD_FIXTURES.values()}


def test_a_bare_spot_vm_is_still_checked(good: Deployment) -> None:
    (template,) = [r for r in good.resources if r.type == policy.TEMPLATE]
    scheduling = {**template.inputs["scheduling"], "automaticRestart": True}
    vm = Resource(policy.INSTANCE, "bare", {**template.inputs, "scheduling": scheduling})
    assert [v.rule for v in policy.check([vm], PolicyContext())] == ["spot_is_preemptible_without_restart"]


def test_public_internet_needs_the_opt_in(good: Deployment) -> None:
    bad = _edit(good, policy.FIREWALL, _set("sourceRanges", ["0.0.0.0/0"]), "network-server")
    known = addresses(bad)
    assert policy.check(bad, PolicyContext(allow_public_internet=True, addresses=known)) == []
    assert [v.rule for v in policy.check(bad, PolicyContext(addresses=known))] == ["no_open_firewall"]
