"""infra/required_permissions.py is derived from what the program declares: every resource type the
program registers under the mocks, for each kind of stack, is covered by a group that applies to that
stack; and every group names only types the program still declares (or a script that makes it)."""

from __future__ import annotations

import re
from typing import Any

import pytest
from program_mocks import deploy, stack_config

from infra.config import StackConfig, parse_config
from infra.required_permissions import CONDITIONS, GROUPS, applicable, required

# (overrides, the family holds an image): the kinds of stack the program can be asked for.
STACKS: dict[str, tuple[dict[str, Any], bool]] = {
    "single server, later deploy": ({}, True),
    "single server, first deploy (bakes)": ({}, False),
    # The door wakes the group, so its resize role is made without an idle stop too.
    "door, no idle stop": ({"idleStopMinutes": 0}, True),
    "no door, no key, bucket destroyed, no autostop": (
        {
            "door": False,
            "apiKey": False,
            "keepModelBucket": False,
            "selfStageModel": False,
            "idleStopMinutes": 0,
        },
        True,
    ),
    "fixed fleet over HTTP": (
        {"replicas": 3, "sourceRanges": ["203.0.113.0/24"], "idleStopMinutes": 0},
        True,
    ),
    "autoscaled fleet over HTTPS": (
        {
            "minReplicas": 1,
            "maxReplicas": 4,
            "sourceRanges": ["203.0.113.0/24"],
            "idleStopMinutes": 0,
            "domain": "llm.example.com",
        },
        True,
    ),
}
OUTSIDE_PULUMI = "scripts/deploy.sh"
_PERMISSION = re.compile(r"^[a-z]+(\.[a-zA-Z0-9]+){2,}$")


def _config(overrides: dict[str, Any]) -> StackConfig:
    config = stack_config("dev")
    config.update({f"qwen36-mtp-l4:{k}": v for k, v in overrides.items()})
    return parse_config(config)


@pytest.fixture(scope="module")
def declared() -> dict[str, tuple[StackConfig, bool, set[str]]]:
    """Per kind of stack: its config, whether it bakes, and the resource types the program declared."""
    out = {}
    for name, (overrides, has_image) in STACKS.items():
        deployment = deploy("dev", overrides, tooling_image=has_image)
        types = {r.type for r in deployment.resources if not r.type.startswith("qwen36:")}
        out[name] = (_config(overrides), not has_image, types)
    return out


def test_every_declared_resource_is_covered_by_a_group_that_applies(
    declared: dict[str, tuple[StackConfig, bool, set[str]]],
) -> None:
    for name, (cfg, bakes, types) in declared.items():
        covered = {token for group in applicable(cfg, bakes=bakes) for token in group.declares}
        missing = sorted(types - covered)
        assert not missing, f"{name}: no group of infra/required_permissions.py covers {missing}"


def test_every_group_covers_only_what_the_program_declares(
    declared: dict[str, tuple[StackConfig, bool, set[str]]],
) -> None:
    for group in GROUPS:
        if group.when == "door" and "door" not in StackConfig.model_fields:
            continue  # the front door's change adds its config key and its resources together
        seen: set[str] = set()
        for cfg, bakes, types in declared.values():
            if CONDITIONS[group.when](cfg, bakes):
                seen |= types
        stale = sorted(t for t in group.declares if t != OUTSIDE_PULUMI and t not in seen)
        assert not stale, f"group {group.name!r} names {stale}, which no stack it applies to declares"


def test_a_bake_and_a_fleet_ask_for_more_than_a_later_single_server(
    declared: dict[str, tuple[StackConfig, bool, set[str]]],
) -> None:
    later = set(required(applicable(declared["single server, later deploy"][0], bakes=False)))
    first = set(required(applicable(declared["single server, first deploy (bakes)"][0], bakes=True)))
    fleet = set(required(applicable(declared["autoscaled fleet over HTTPS"][0], bakes=False)))
    assert {"compute.images.create", "compute.disks.useReadOnly", "compute.instances.stop"} <= first - later
    assert {"compute.autoscalers.create", "compute.sslCertificates.create"} <= fleet - later
    assert "iam.roles.create" in later and "iam.roles.create" not in fleet  # autostop is single-server only
    # The gcpkms secrets key is made by scripts/deploy.sh for every stack.
    assert "cloudkms.cryptoKeyVersions.useToDecrypt" in later & first & fleet


def test_permission_names_have_iams_shape_and_every_one_says_why() -> None:
    for group in GROUPS:
        assert group.permissions, group.name
        for permission in group.permissions:
            assert _PERMISSION.match(permission.name), permission.name
            assert len(permission.why) > 8, permission
        assert group.service.endswith(".googleapis.com"), group
        assert group.when in CONDITIONS, group
        assert group.role.startswith("roles/"), group
