"""Our checks of GCP's rules (infra/policy.py) pass on what the program declares, and catch each breach."""

from __future__ import annotations

import copy
import dataclasses
import shlex
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
    covered = {rule for rule, *_ in BAD_FIXTURES.values()} | {rule for rule, *_ in ISSUE15_FIXTURES.values()}
    assert {rule.__name__ for rule in policy.RULES} == covered


# --- Issue 15's rules: each on the deployment it concerns, with the context that isolates it ------

DEFAULT_VPC = "https://www.googleapis.com/compute/v1/projects/acme-llm-test/global/networks/default"


@pytest.fixture(scope="module")
def baking() -> Deployment:
    return deploy("dev", {"buildToolingImage": True})


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


PLAIN = PolicyContext()
OPTED_IN = PolicyContext(allow_public_internet=True)
NO_EXCEPTION = PolicyContext(secure_boot_exception="")
NO_NETWORK_FLAGS = ("--network=", "--subnet=")
Edit = Callable[[dict[str, Any]], None]

# (rule, which deployment, context, resource type, resource name or None, edit)
ISSUE15_FIXTURES: dict[str, tuple[str, str, PolicyContext, str, str | None, Edit]] = {
    "vm-on-default": (
        "no_default_network", "good", PLAIN, policy.INSTANCE, None, _nic(network="default", subnetwork=None)
    ),
    "vm-without-network": (
        "no_default_network", "good", PLAIN, policy.INSTANCE, None, _nic(network=None, subnetwork=None)
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
    # Secure boot is off today; without the documented exception that is a violation.
    "secure-boot-off-undocumented": (
        "secure_boot_on", "good", NO_EXCEPTION, policy.INSTANCE, None, lambda _: None
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
    documented = dataclasses.replace(ctx, secure_boot_exception=PLAIN.secure_boot_exception)
    assert policy.check(deployment.resources, documented) == [], "the unedited deployment passes"
    violations = policy.check(_edit(deployment, token, change, name), ctx)
    assert violations, fixture
    assert {v.rule for v in violations} == {rule}, [str(v) for v in violations]


def test_a_goog_project_gets_a_valid_bucket_name() -> None:
    d = deploy("dev", gcp_project="goog-research-42")
    assert policy.check(d.resources, context(d, {})) == []
    assert not d.one(policy.BUCKET).inputs["name"].startswith("goog")


def test_the_secure_boot_exception_is_documented_in_the_readme() -> None:
    from infra import shielded
    from tests.infra.program_mocks import ROOT

    assert shielded.SECURE_BOOT or "install-drivers-gpu#secure-boot" in (ROOT / "README.md").read_text()


def test_public_internet_needs_the_opt_in(good: Deployment) -> None:
    bad = _edit(good, policy.FIREWALL, _set("sourceRanges", ["0.0.0.0/0"]), "network-server")
    assert policy.check(bad, PolicyContext(allow_public_internet=True)) == []
    assert [v.rule for v in policy.check(bad, PolicyContext())] == ["no_open_firewall"]
