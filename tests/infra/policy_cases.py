"""What the rule tests and the policy-pack test share: the contexts, the rules that wait for the
integrator, and the stacks' mock dumps the pack is run over."""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any

import yaml
from program_mocks import MOCK_API_KEY, ROOT, STACKS, Deployment, deploy

from infra import policy
from infra.policy import PolicyContext, Resource, Violation

# Rules that today's main fails by design until the integrator lands the program the design notes
# decided (/work/design.md): each maps to that decision. test_limit_rules.py shows each one still
# failing on main (and says to drop it here once it passes); every other test checks the rest.
# Rules that fail on main until the integrator lands the change that satisfies them (empty: the
# design decisions they waited for are on main; tests/infra/test_limit_rules.py shows each failing
# on a bad fixture).
PENDING_ON_MAIN: Mapping[str, str] = {}

# The fleet recipes the README gives (infra/fleet.py), beside the three stack files.
FLEET_RECIPES: Mapping[str, dict[str, Any]] = {
    "fleet-fixed": {"replicas": 3, "sourceRanges": ["198.51.100.7/32"]},
    "fleet-autoscaled": {"minReplicas": 1, "maxReplicas": 4, "sourceRanges": ["198.51.100.7/32"]},
    "fleet-https": {"replicas": 2, "domain": "llm.example.com", "sourceRanges": ["198.51.100.7/32"]},
}


def project_options() -> dict[str, Any]:
    """Pulumi.yaml's `options` as the repo has it now (the pack reads the same file)."""
    document = yaml.safe_load((ROOT / "Pulumi.yaml").read_text())
    return dict(document.get("options") or {})


def context(d: Deployment, overrides: Mapping[str, Any]) -> PolicyContext:
    return PolicyContext(
        allow_public_internet=bool(overrides.get("allowPublicInternet")),
        secrets=[MOCK_API_KEY],
        fleet=bool(overrides.get("replicas", 1) > 1 or overrides.get("maxReplicas", 0) > 1),
        external_ip=bool(overrides.get("externalIp")),
        project_options=project_options(),
    )


def settled(violations: Iterable[Violation]) -> list[Violation]:
    """The violations of every rule that does not wait for the integrator."""
    return [v for v in violations if v.rule not in PENDING_ON_MAIN]


def check_settled(resources: Iterable[Resource], ctx: PolicyContext) -> list[Violation]:
    return settled(policy.check(resources, ctx))


def dumps() -> dict[str, tuple[Deployment, dict[str, Any]]]:
    """Every stack file's mock run (and the first deployment of a build, which bakes), and the
    fleet recipes: the dumps the policy pack is shown over."""
    runs: dict[str, tuple[Deployment, dict[str, Any]]] = {s: (deploy(s), {}) for s in STACKS}
    runs["dev-first-bake"] = (deploy("dev", tooling_image=False), {})
    runs.update({name: (deploy("dev", o), dict(o)) for name, o in FLEET_RECIPES.items()})
    return runs
