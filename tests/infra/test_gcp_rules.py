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
    "vm-compute-admin": (
        "no_project_compute_admin_for_service_accounts",
        policy.PROJECT_IAM_MEMBER,
        "identity-logging-logwriter",
        _set("role", "roles/compute.admin"),
    ),
}


@pytest.mark.parametrize("fixture", BAD_FIXTURES)
def test_each_rule_fails_on_a_bad_fixture(good: Deployment, fixture: str) -> None:
    rule, token, name, change = BAD_FIXTURES[fixture]
    bad = _edit(good, token, change, name)
    violations = policy.check(bad, PolicyContext(secrets=[MOCK_API_KEY]))
    assert violations, fixture
    assert {v.rule for v in violations} == {rule}, [str(v) for v in violations]


def test_every_rule_has_a_bad_fixture() -> None:
    assert {rule.__name__ for rule in policy.RULES} == {rule for rule, *_ in BAD_FIXTURES.values()}


def test_public_internet_needs_the_opt_in(good: Deployment) -> None:
    bad = _edit(good, policy.FIREWALL, _set("sourceRanges", ["0.0.0.0/0"]), "network-server")
    assert policy.check(bad, PolicyContext(allow_public_internet=True)) == []
    assert [v.rule for v in policy.check(bad, PolicyContext())] == ["no_open_firewall"]


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
    violations = policy.check(grants, PolicyContext())
    assert [v.resource.split("::")[1] for v in violations] == ["m", "c", "b"]
    assert {v.rule for v in violations} == {"no_project_compute_admin_for_service_accounts"}
    # A person holding the role is the project's business, not the VM's.
    person = Resource(policy.PROJECT_IAM_MEMBER, "p", {"role": role, "member": "user:ops@example.com"})
    assert policy.check([person], PolicyContext()) == []
