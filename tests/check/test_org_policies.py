"""The reading of an effective policy, rule by rule, away from the fake: what a list policy refuses, what
it may refuse (a value group or subtree the check cannot expand), and the location groups it can."""

from __future__ import annotations

import pytest

from qwen36.check.org_policies import (
    Effective,
    _location_match,
    _project_match,
    exact,
    judge,
    parse_effective,
)
from qwen36.check.plan import Plan


def rules(*items: dict[str, object]) -> Effective:
    return parse_effective({"name": "projects/1/policies/x", "spec": {"rules": list(items)}})


def test_no_spec_and_default_rules_read_as_nothing_set_or_nothing_refused() -> None:
    assert parse_effective({"name": "projects/1/policies/x"}) == Effective(set=False)
    assert not rules({"enforce": False}).enforced
    assert judge(rules({"allowAll": True}), ["a"], exact).refused == ()


@pytest.mark.parametrize(
    ("policy", "refused", "unsure"),
    [
        (rules({"denyAll": True}), ("a", "b"), ()),
        (rules({"values": {"deniedValues": ["is:a"]}}), ("a",), ()),
        (rules({"values": {"allowedValues": ["a"]}}), ("b",), ()),
        (rules({"values": {"allowedValues": ["a", "in:some-group"]}}), (), ("b",)),
        (rules({"values": {"deniedValues": ["under:folders/7"]}}), (), ("a", "b")),
        # Rules are merged: one rule's allowAll does not lift another's denied value.
        (rules({"allowAll": True}, {"values": {"deniedValues": ["b"]}}), ("b",), ()),
    ],
)
def test_a_list_policy_refuses_what_it_names_and_is_unsure_of_what_it_cannot_expand(
    policy: Effective, refused: tuple[str, ...], unsure: tuple[str, ...]
) -> None:
    verdict = judge(policy, ["a", "b"], exact)
    assert (verdict.refused, verdict.unsure) == (refused, unsure)


@pytest.mark.parametrize(
    ("entry", "location", "covered"),
    [
        ("in:us-central1-locations", "us-central1-a", True),
        ("in:us-locations", "us-central1", True),
        ("in:us-locations", "europe-west4", False),
        ("in:europe-locations", "europe-west4-b", True),
        ("in:eu-locations", "europe-west4", None),  # EU member states: not expanded here
        ("us-central1", "us-central1", True),
        ("us-central1", "us-central1-a", None),  # a bare region and one of its zones: not guessed
        ("is:us-central1-a", "us-central1-a", True),
        ("in:us-locations", "global", None),
        ("global", "global", True),
        ("under:organizations/1", "us-central1", None),
    ],
)
def test_location_entries(entry: str, location: str, covered: bool | None) -> None:
    assert _location_match(entry, location) is covered


def test_an_image_project_subtree_counts_only_when_it_is_that_project() -> None:
    assert _project_match(
        "under:projects/deeplearning-platform-release", "projects/deeplearning-platform-release"
    )
    assert _project_match("under:folders/9", "projects/deeplearning-platform-release") is None
    assert _project_match("projects/acme", "projects/deeplearning-platform-release") is False


# --- the two rules issue 30 changed: external IPs and shielded VMs ---------------------------------


def _plan(verdict: str | None = None, **config: object) -> Plan:
    from infra.config import PROJECT, parse_config

    cfg = parse_config({f"{PROJECT}:{k}": v for k, v in config.items()})
    return Plan(stack="dev", project="acme", cfg=cfg, bakes=verdict is None, secure_boot_verdict=verdict)


DENY_ALL = rules({"denyAll": True})
ONLY_NAMED = rules({"values": {"allowedValues": ["projects/acme/zones/us-central1-a/instances/x"]}})


@pytest.mark.parametrize("policy", [DENY_ALL, ONLY_NAMED])
def test_external_ips_refused_do_not_block_a_stack_that_needs_none(policy: Effective) -> None:
    from qwen36.check.org_policies import _external_ip

    fact = _external_ip(_plan(), policy)
    assert fact.level.value == "ok" and "needs no external IP" in fact.text


@pytest.mark.parametrize("policy", [DENY_ALL, ONLY_NAMED])
def test_external_ips_refused_block_the_opt_in(policy: Effective) -> None:
    from qwen36.check.org_policies import _external_ip

    fact = _external_ip(_plan(externalIp=True), policy)
    assert fact.level.value == "BLOCK" and "externalIp: true" in fact.text and "externalIp: false" in fact.fix


@pytest.mark.parametrize(
    ("verdict", "config", "level"),
    [
        ("on", {}, "ok"),
        (None, {}, "ok"),  # no image read: this deploy bakes, and its GPU test proves Secure Boot first
        ("unsigned", {}, "warn"),
        ("", {}, "warn"),  # an image baked before the GPU test
        ("on", {"useToolingImage": False}, "warn"),  # the stock image: its DKMS module
    ],
)
def test_shielded_vms_warn_only_when_the_last_verdict_was_off(
    verdict: str | None, config: dict[str, object], level: str
) -> None:
    from qwen36.check.org_policies import _require_shielded_vm

    enforced = rules({"enforce": True})
    fact = _require_shielded_vm(_plan(verdict, **config), enforced)
    assert fact.level.value == level, fact
    assert _require_shielded_vm(_plan(verdict, **config), rules({"enforce": False})).level.value == "ok"
