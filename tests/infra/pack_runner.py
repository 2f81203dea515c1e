"""Runs the policy pack's policies (policy/pack.py) directly, in the pack's own venv.

pulumi-policy's PolicyPack starts a gRPC server and never returns, but each policy's validate()
takes the same ResourceValidationArgs / StackValidationArgs the pack's servicer builds from the
engine's AnalyzeRequest: the props go through pulumi-policy's own deserialize_properties and
unknown_checking_proxy here too. Reads {"cases": {name: {"config", "resources"}}} on stdin and
writes {name: {"violations": [[policy, urn, message]], "not_run": [[policy, urn]]}} on stdout.
Standard library and the pack's venv only (tests/infra/test_policy_pack.py runs it as a subprocess).
"""

from __future__ import annotations

import json
import os
import sys
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

from pulumi_policy import (
    PolicyCustomTimeouts,
    PolicyResource,
    PolicyResourceOptions,
    ResourceValidationArgs,
    ResourceValidationPolicy,
    StackValidationArgs,
    StackValidationPolicy,
)
from pulumi_policy.deserialize import deserialize_properties
from pulumi_policy.proxy import UnknownValueError, unknown_checking_proxy

from policy.pack import policies


def _options(resource: dict[str, Any]) -> PolicyResourceOptions:
    return PolicyResourceOptions(
        False, list(resource["ignore_changes"]), None, [], PolicyCustomTimeouts(0, 0, 0), []
    )


def run_case(case: dict[str, Any], pack: list[Any]) -> dict[str, list[list[str]]]:
    # How the CLI hands the stack's config to a policy pack (PULUMI_CONFIG, a JSON object of strings).
    os.environ["PULUMI_CONFIG"] = json.dumps(case["config"])
    violations: list[list[str]] = []
    not_run: list[list[str]] = []
    stack: list[PolicyResource] = []
    for resource in case["resources"]:
        props = unknown_checking_proxy(deserialize_properties(resource["props"]))
        args = ResourceValidationArgs(
            resource["type"], props, resource["urn"], resource["name"], _options(resource), None
        )
        for policy in pack:
            if not isinstance(policy, ResourceValidationPolicy):
                continue
            try:
                policy.validate(
                    args, lambda m, _u=None, p=policy.name, r=resource: violations.append([p, r["urn"], m])
                )
            except UnknownValueError:
                not_run.append([policy.name, resource["urn"]])
        stack.append(
            PolicyResource(
                resource["type"],
                props,
                resource["urn"],
                resource["name"],
                _options(resource),
                None,
                None,
                [],
                {},
            )
        )
    by_urn = {r.urn: r for r in stack}
    for policy_resource, resource in zip(stack, case["resources"], strict=True):
        policy_resource.property_dependencies = {
            key: [by_urn[u] for u in urns if u in by_urn]
            for key, urns in resource["property_dependencies"].items()
        }
    for policy in pack:
        if not isinstance(policy, StackValidationPolicy):
            continue
        try:
            policy.validate(
                StackValidationArgs(stack),
                lambda m, u=None, p=policy.name: violations.append([p, u or "", m]),
            )
        except UnknownValueError:
            not_run.append([policy.name, ""])
    return {"violations": violations, "not_run": not_run}


def main() -> None:
    cases = json.load(sys.stdin)["cases"]
    pack = policies()
    json.dump({name: run_case(case, pack) for name, case in cases.items()}, sys.stdout)


if __name__ == "__main__":
    main()
