"""The policy pack's adapter: pulumi-policy's arguments in, infra/policy/'s pure rules out.

A rule that needs one resource's inputs is a ResourceValidationPolicy, so the engine stops a
misconfigured resource before it is created (in the preview, and again in the update with every
input known). A rule over the whole program, or one that needs what a single resource's arguments
lack (the secret values, property dependencies), is a StackValidationPolicy. A value the engine does
not know yet (an output of a resource not created) is not judged: the rule that needs it reports
pulumi-policy's "can't run during preview" advisory for that resource, and runs again in the update.
https://www.pulumi.com/docs/iac/using-pulumi/crossguard/
"""

from __future__ import annotations

import functools
import json
import sys
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parent.parent
if str(REPO) not in sys.path:  # the pack runs from its own folder; the rules live in infra/
    sys.path.insert(0, str(REPO))

import pulumi.runtime  # noqa: E402
import yaml  # noqa: E402
from pulumi_policy import (  # noqa: E402
    EnforcementLevel,
    PolicyResource,
    ReportViolation,
    ResourceValidationArgs,
    ResourceValidationPolicy,
    StackValidationArgs,
    StackValidationPolicy,
)
from pulumi_policy.proxy import UNKNOWN_STRING_VALUE, UnknownValueError, _is_unknown  # noqa: E402

from infra import policy as rules  # noqa: E402

PACK_NAME = "qwen36-mtp-l4"
PROJECT = "qwen36-mtp-l4"
PASSWORD = "random:index/randomPassword:RandomPassword"  # noqa: S105 (a type token)


def plain(value: Any) -> Any:
    """pulumi-policy's unknown-checking proxies as plain data, an unknown value as ``rules.Unknown``.

    The proxies raise on reading an unknown; their own containers (name-mangled ``__target``) are
    read raw here, so a rule meets ``rules.Unknown`` and skips only where it needs that value.
    """
    if _is_unknown(value):
        return rules.Unknown()
    if isinstance(value, Mapping):
        raw = getattr(value, "_DictProxy__target", value)
        return {key: plain(item) for key, item in raw.items()}
    if isinstance(value, Sequence) and not isinstance(value, str | bytes):
        return [plain(item) for item in getattr(value, "_ListProxy__target", value)]
    return value


def _config() -> dict[str, Any]:
    """The stack's config as the CLI hands it to a policy pack (PULUMI_CONFIG: with the Python language
    plugin the CLI takes the RunPlugin path, and pulumi-language-python's ConfigureStack sets it before
    running ``python -m pulumi.policy``, sdk/python/cmd/pulumi-language-python/main.go; the legacy
    analyzer_plugin.go constructEnv is not that path), over Pulumi.yaml's defaults for keys the stack
    does not set."""
    project = _project_document()
    declared = (project.get("config") or {}).items()
    values: dict[str, Any] = {key: spec.get("default") for key, spec in declared if isinstance(spec, dict)}
    for key, raw in pulumi.runtime.get_config_env().items():
        if key.startswith(f"{PROJECT}:"):
            try:
                values[key.split(":", 1)[1]] = json.loads(raw)
            except ValueError:
                values[key.split(":", 1)[1]] = raw
    return values


@functools.cache
def _project_document() -> dict[str, Any]:
    # Read once per pack process: the analyzer lives for one command, and the file does not change.
    return dict(yaml.safe_load((REPO / "Pulumi.yaml").read_text()) or {})


def context(resources: Sequence[rules.Resource] = ()) -> rules.PolicyContext:
    """The rules' context from the stack config, Pulumi.yaml and (stack policies) the resources."""
    config = _config()
    replicas, max_replicas = int(config.get("replicas") or 1), int(config.get("maxReplicas") or 0)
    secrets = [
        r.inputs["result"]
        for r in resources
        if r.type == PASSWORD and isinstance(r.inputs.get("result"), str) and r.inputs["result"]
    ]
    return rules.PolicyContext(
        allow_public_internet=bool(config.get("allowPublicInternet")),
        secrets=secrets,
        fleet=replicas > 1 or max_replicas > 1,
        external_ip=bool(config.get("externalIp")),
        project_options=dict(_project_document().get("options") or {}),
    )


def _unknown() -> UnknownValueError:
    return UnknownValueError(UNKNOWN_STRING_VALUE, ["<a value this rule reads>"])


def resource_of(args: ResourceValidationArgs | PolicyResource) -> rules.Resource:
    dependencies = getattr(args, "property_dependencies", None) or {}
    return rules.Resource(
        type=args.resource_type,
        name=args.name,
        inputs=plain(args.props),
        urn=args.urn,
        ignore_changes=tuple(getattr(args.opts, "ignore_changes", None) or ()),
        property_dependencies={key: tuple(dep.urn for dep in deps) for key, deps in dependencies.items()},
    )


def _resource_validation(rule: rules.Rule) -> Callable[[ResourceValidationArgs, ReportViolation], None]:
    def validate(args: ResourceValidationArgs, report: ReportViolation) -> None:
        messages, unknown = rules.run_rule(rule, resource_of(args), context())
        for message in messages:
            report(message, None)
        if unknown:
            raise _unknown()

    return validate


def _stack_validation(
    rule: rules.Rule | None = None, program_rule: rules.ProgramRule | None = None
) -> Callable[[StackValidationArgs, ReportViolation], None]:
    def validate(args: StackValidationArgs, report: ReportViolation) -> None:
        resources = [resource_of(r) for r in args.resources]
        ctx = context(resources)
        unknown = False
        if program_rule is not None:
            pairs, unknown = rules.run_program_rule(program_rule, resources, ctx)
            for resource, message in pairs:
                report(message, resource.urn or None)
        if rule is not None:
            for resource in resources:
                messages, skipped = rules.run_rule(rule, resource, ctx)
                unknown = unknown or skipped
                for message in messages:
                    report(message, resource.urn or None)
        if unknown:
            raise _unknown()

    return validate


def _description(rule: Callable[..., Any]) -> str:
    return f"{rules.describe(rule)} ({rules.RULE_LINKS[rule.__name__]})"


def policies() -> list[ResourceValidationPolicy | StackValidationPolicy]:
    """One policy per rule, named as the rule, mandatory, with the rule's link."""
    found: list[ResourceValidationPolicy | StackValidationPolicy] = []
    for rule in rules.RULES:
        name, url = rule.__name__, rules.RULE_LINKS[rule.__name__]
        if name in rules.STACK_LEVEL_RULES:
            found.append(
                StackValidationPolicy(
                    name=name,
                    description=_description(rule),
                    validate=_stack_validation(rule=rule),
                    enforcement_level=EnforcementLevel.MANDATORY,
                    url=url,
                )
            )
        else:
            found.append(
                ResourceValidationPolicy(
                    name=name,
                    description=_description(rule),
                    validate=_resource_validation(rule),
                    enforcement_level=EnforcementLevel.MANDATORY,
                    url=url,
                )
            )
    for program_rule in rules.PROGRAM_RULES:
        found.append(
            StackValidationPolicy(
                name=program_rule.__name__,
                description=_description(program_rule),
                validate=_stack_validation(program_rule=program_rule),
                enforcement_level=EnforcementLevel.MANDATORY,
                url=rules.RULE_LINKS[program_rule.__name__],
            )
        )
    return found
