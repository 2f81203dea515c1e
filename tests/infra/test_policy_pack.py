"""The policy pack (policy/) over every stack's mock dump and over the bad fixtures, run in the
pack's own venv as the CLI would: its policies' validate() with pulumi-policy's own argument types.

Skipped when that venv is absent; scripts/test.sh builds it (policy/.venv, or QWEN36_POLICY_VENV)."""

from __future__ import annotations

import json
import os
import subprocess
from pathlib import Path
from typing import Any

import pulumi
import pytest
from policy_cases import FLEET_RECIPES, PENDING_ON_MAIN, dumps
from program_mocks import (
    MOCK_API_KEY,
    MOCK_IP,
    PROJECT,
    ROOT,
    Deployment,
    as_pulumi_config,
    deploy,
    stack_config,
)
from test_gcp_rules import BAD_FIXTURES, FLEET_BAD_FIXTURES, _edit
from test_limit_rules import LIMIT_FIXTURES, _base
from test_private_network import EGRESS_FIXTURES

from infra import policy
from infra.policy import Resource

VENV = Path(os.environ.get("QWEN36_POLICY_VENV") or ROOT / "policy" / ".venv")
PYTHON = VENV / "bin" / "python"
RUNNER = Path(__file__).with_name("pack_runner.py")
pytestmark = pytest.mark.skipif(
    not PYTHON.exists(),
    reason=f"no policy-pack venv at {VENV}: scripts/test.sh builds it "
    "(python3 -m venv policy/.venv && policy/.venv/bin/pip install -r policy/requirements.txt)",
)
PASSWORD = "random:index/randomPassword:RandomPassword"


# The outputs the stack policies read that the recorded inputs lack, as the mocks compute them
# (program_mocks.RecordingMocks): a stack policy sees each resource's outputs.
COMPUTED = {PASSWORD: {"result": MOCK_API_KEY}, "gcp:compute/address:Address": {"address": MOCK_IP}}


def _asset(value: Any) -> dict[str, str]:
    if isinstance(value, pulumi.FileAsset):
        return {"path": str(value.path)}
    raise TypeError(f"{type(value).__name__} is not a wire value")


def _wire(resources: list[Resource]) -> list[dict[str, Any]]:
    """The resources as the engine sends them to the pack, with the computed outputs above."""
    wired = []
    for r in resources:
        # An asset reaches a policy as the engine serializes it (its path and hash), not as an object.
        props = json.loads(json.dumps(dict(r.inputs) | COMPUTED.get(r.type, {}), default=_asset))
        wired.append(
            {
                "type": r.type,
                "name": r.name,
                "urn": r.urn or f"urn:pulumi:dev::{PROJECT}::{r.type}::{r.name}",
                "props": props,
                "ignore_changes": list(r.ignore_changes),
                "property_dependencies": {k: list(v) for k, v in r.property_dependencies.items()},
            }
        )
    return wired


def _config(stack: str, overrides: dict[str, Any]) -> dict[str, str]:
    values = stack_config(stack) | {f"{PROJECT}:{k}": v for k, v in overrides.items()}
    return as_pulumi_config(values)


def run_pack(cases: dict[str, dict[str, Any]]) -> dict[str, dict[str, list[list[str]]]]:
    result = subprocess.run(
        [str(PYTHON), str(RUNNER)],
        input=json.dumps({"cases": cases}),
        capture_output=True,
        text=True,
        timeout=300,
        cwd=ROOT,
        check=False,
    )
    assert result.returncode == 0, result.stderr[-4000:]
    return json.loads(result.stdout)


def _rules(outcome: dict[str, list[list[str]]]) -> set[str]:
    return {name for name, *_ in outcome["violations"]}


@pytest.fixture(scope="module")
def dump_runs() -> dict[str, tuple[Deployment, dict[str, Any]]]:
    return dumps()


@pytest.fixture(scope="module")
def over_dumps(dump_runs: dict[str, tuple[Deployment, dict[str, Any]]]) -> dict[str, Any]:
    cases = {
        name: {
            "config": _config(name if name in ("dev", "europe-west4", "asia-southeast1") else "dev", o),
            "resources": _wire(d.resources),
        }
        for name, (d, o) in dump_runs.items()
    }
    return run_pack(cases)


def test_the_pack_has_one_mandatory_policy_per_rule() -> None:
    probe = (
        "import sys, json; sys.path.insert(0, '.'); from policy.pack import policies; "
        "print(json.dumps([[p.name, p.enforcement_level.value, p.url, type(p).__name__] "
        "for p in policies()]))"
    )
    out = subprocess.run(
        [str(PYTHON), "-c", probe], capture_output=True, text=True, cwd=ROOT, check=True, timeout=120
    )
    listed = json.loads(out.stdout)
    names = [rule.__name__ for rule in (*policy.RULES, *policy.PROGRAM_RULES)]
    assert [name for name, *_ in listed] == names
    assert {level for _, level, *_ in listed} == {"mandatory"}
    assert all(url == policy.RULE_LINKS[name] for name, _, url, _ in listed)
    stack_level = {name for name, _, _, kind in listed if kind == "StackValidationPolicy"}
    assert stack_level == policy.STACK_LEVEL_RULES | {r.__name__ for r in policy.PROGRAM_RULES}


def test_over_every_stack_only_the_pending_rules_fail(over_dumps: dict[str, Any]) -> None:
    for name, outcome in over_dumps.items():
        assert _rules(outcome) <= set(PENDING_ON_MAIN), (name, outcome["violations"])
        assert outcome["not_run"] == [], (name, outcome["not_run"])


def test_the_pack_agrees_with_the_rules_on_every_dump(
    dump_runs: dict[str, tuple[Deployment, dict[str, Any]]], over_dumps: dict[str, Any]
) -> None:
    from policy_cases import context

    for name, (d, overrides) in dump_runs.items():
        direct = {v.rule for v in policy.check(d.resources, context(d, overrides))}
        assert _rules(over_dumps[name]) == direct, name


def test_the_pack_passes_every_dump_of_the_program(over_dumps: dict[str, Any]) -> None:
    """Every stack file, the first deployment of a build and the fleet recipes: no rule fires."""
    fired = {name: _rules(outcome) for name, outcome in over_dumps.items()}
    assert fired == {name: set() for name in fired}


def _fixture_cases(good: Deployment, single: Deployment, fleet: Deployment) -> dict[str, dict[str, Any]]:
    cases: dict[str, dict[str, Any]] = {}
    ranges = {"door": False, "externalIp": True, "sourceRanges": ["198.51.100.7/32"]}
    for fixture, (rule, token, name, change) in BAD_FIXTURES.items():
        extra = [] if rule != "autoscaler_needs_even_or_balanced" else [AUTOSCALER]
        cases[f"bad:{fixture}"] = {
            "rule": rule,
            "config": _config("dev", ranges),
            "resources": _wire(_edit(good, token, change, name) + extra),
        }
        cases[f"base:{fixture}"] = {
            "config": _config("dev", ranges),
            "resources": _wire(list(good.resources) + extra),
        }
    fleet_recipe = {"minReplicas": 1, "maxReplicas": 4, "sourceRanges": ["198.51.100.0/24"]}
    fleet_good = deploy("dev", fleet_recipe)
    for fixture, (rule, token, name, change) in FLEET_BAD_FIXTURES.items():
        cases[f"bad:{fixture}"] = {
            "rule": rule,
            "config": _config("dev", fleet_recipe),
            "resources": _wire(_edit(fleet_good, token, change, name)),
        }
        cases[f"base:{fixture}"] = {
            "config": _config("dev", fleet_recipe),
            "resources": _wire(fleet_good.resources),
        }
    for fixture, (rule, which, change) in LIMIT_FIXTURES.items():
        resources, _ = _base(which, single, fleet)
        overrides = FLEET_RECIPES["fleet-fixed"] if which == "fleet" else {}
        cases[f"bad:{fixture}"] = {
            "rule": rule,
            "config": _config("dev", overrides),
            "resources": _wire(change(resources)),
        }
        cases[f"base:{fixture}"] = {"config": _config("dev", overrides), "resources": _wire(resources)}
    # The egress rules, over the first deployment of a build (its builder beside the template).
    private = list(deploy("dev", tooling_image=False).resources)
    for fixture, (rule, change) in EGRESS_FIXTURES.items():
        cases[f"bad:{fixture}"] = {
            "rule": rule,
            "config": _config("dev", {}),
            "resources": _wire(change(private)),
        }
        cases[f"base:{fixture}"] = {"config": _config("dev", {}), "resources": _wire(private)}
    return cases


AUTOSCALER = Resource(
    policy.AUTOSCALER,
    "fleet-autoscaler",
    {
        "region": "us-central1",
        "target": "projects/acme-llm-test/regions/us-central1/instanceGroupManagers/qwen36-dev",
        "autoscalingPolicy": {"cooldownPeriod": 600, "scaleInControl": {"maxScaledInReplicas": {"fixed": 1}}},
    },
)


def test_each_rule_fails_on_its_bad_fixture_through_the_pack() -> None:
    good = deploy("dev", {"door": False, "externalIp": True, "sourceRanges": ["198.51.100.7/32"]})
    single, fleet = deploy("dev"), deploy("dev", FLEET_RECIPES["fleet-fixed"])
    cases = _fixture_cases(good, single, fleet)
    outcomes = run_pack(
        {name: {k: v for k, v in case.items() if k != "rule"} for name, case in cases.items()}
    )
    shown: set[str] = set()
    for name, case in cases.items():
        if not name.startswith("bad:"):
            continue
        base = name.replace("bad:", "base:", 1)
        before = {(p, urn) for p, urn, _ in outcomes[base]["violations"]}
        new = {p for p, urn, _ in outcomes[name]["violations"] if (p, urn) not in before}
        # A fixture may break a pending rule too (ANY_SINGLE_ZONE also stops alternate-zone repair).
        assert case["rule"] in new and new - {case["rule"]} <= set(PENDING_ON_MAIN), (
            name,
            outcomes[name]["violations"],
        )
        shown.add(case["rule"])
    # refresh_before_update reads Pulumi.yaml, the same file for every case here: it is shown failing
    # on a context without the option (tests/infra/test_limit_rules.py).
    assert shown | set(PENDING_ON_MAIN) >= {r.__name__ for r in (*policy.RULES, *policy.PROGRAM_RULES)} - {
        "refresh_before_update",
        "no_default_network",
        "no_ssh_from_anywhere",
        "secure_boot_on",
        "valid_bucket_name",
        "builder_not_default_account",
    }


def test_a_preview_unknown_is_not_judged_and_a_known_breach_still_stops_it() -> None:
    """As in a first preview: the VM's service account and the door's subnet do not exist yet, so
    their values are pulumi-policy's unknown sentinels; the rules that need them report "can't run
    during preview", and a spot template that asks for a restart is still refused."""
    from pulumi_policy_sentinels import UNKNOWN

    d = deploy("dev")
    wired = _wire(list(d.resources))  # the default program carries the door
    for r in wired:
        if r["type"] == policy.TEMPLATE:
            r["props"]["serviceAccount"]["email"] = UNKNOWN
            r["props"]["scheduling"]["automaticRestart"] = True
        if r["type"] == policy.CLOUD_RUN_SERVICE:
            r["props"]["template"]["vpcAccess"]["networkInterfaces"][0]["subnetwork"] = UNKNOWN
    (outcome,) = run_pack({"preview": {"config": _config("dev", {}), "resources": wired}}).values()
    not_run = {p for p, _ in outcome["not_run"]}
    assert {"own_service_account", "direct_vpc_subnet_fits", "door_port_only_from_door"} <= not_run
    assert "spot_is_preemptible_without_restart" in _rules(outcome)
    assert _rules(outcome) - set(PENDING_ON_MAIN) == {"spot_is_preemptible_without_restart"}
