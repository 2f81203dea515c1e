"""Pulumi.yaml declares exactly the keys StackConfig reads, with the same types and defaults."""

from __future__ import annotations

import math
from typing import Any, Literal, get_args, get_origin

import pytest
import yaml
from program_mocks import PROJECT, ROOT, as_pulumi_config
from pydantic.alias_generators import to_camel

from infra.config import StackConfig, parse_config

PULUMI_TYPES = {"string", "integer", "boolean", "array"}  # the only types Pulumi's project schema knows


def project_file() -> dict[str, Any]:
    return dict(yaml.safe_load((ROOT / "Pulumi.yaml").read_text()))


DECLARED: dict[str, dict[str, Any]] = project_file()["config"]
FIELDS = {to_camel(name): info for name, info in StackConfig.model_fields.items()}


def pulumi_type(annotation: Any) -> str:
    """The Pulumi project-config type a StackConfig field is declared with."""
    if get_origin(annotation) is Literal:
        (kind,) = {type(arg) for arg in get_args(annotation)}
        return pulumi_type(kind)
    if get_origin(annotation) is list:
        return "array"
    # Pulumi has no number type: a float is declared as a string and decoded by the program.
    return {str: "string", bool: "boolean", int: "integer", float: "string"}[annotation]


def accepted_by_pulumi(kind: str, value: Any) -> bool:
    """Pulumi's own check of a typed default (pkg/workspace/project.go, ValidateConfigValue)."""
    if kind == "string":
        return isinstance(value, str)
    if kind == "integer":
        return (isinstance(value, int) and not isinstance(value, bool)) or (
            isinstance(value, float) and math.trunc(value) == value
        )
    if kind == "boolean":
        return isinstance(value, bool) or value in {"true", "false"}
    return isinstance(value, list)


def test_project_identity() -> None:
    project = project_file()
    assert project["name"] == PROJECT
    assert project["runtime"]["name"] == "python"
    assert project["runtime"]["options"]["virtualenv"] == ".venv"


def test_declares_exactly_the_config_keys() -> None:
    assert set(DECLARED) == set(FIELDS)


@pytest.mark.parametrize("key", sorted(FIELDS))
def test_key_is_typed_described_and_valid_for_pulumi(key: str) -> None:
    entry = DECLARED[key]
    assert entry.keys() >= {"type", "default", "description"}, entry
    assert entry["description"].strip()
    assert entry["type"] in PULUMI_TYPES
    assert entry["type"] == pulumi_type(FIELDS[key].annotation)
    if entry["type"] == "array":
        assert entry["items"] == {"type": "string"}
    assert accepted_by_pulumi(entry["type"], entry["default"])
    assert ":" not in key, "project keys are declared unprefixed; typed keys cannot carry a namespace"


@pytest.mark.parametrize("as_cli_passes_it", [False, True], ids=["yaml-values", "cli-strings"])
def test_declared_defaults_are_the_code_defaults(as_cli_passes_it: bool) -> None:
    bag = {f"{PROJECT}:{key}": entry["default"] for key, entry in DECLARED.items()}
    parsed = parse_config(as_pulumi_config(bag) if as_cli_passes_it else bag)
    assert parsed == StackConfig()


@pytest.mark.parametrize("key", sorted(FIELDS))
def test_each_default_matches_its_field(key: str) -> None:
    parsed = parse_config(as_pulumi_config({f"{PROJECT}:{key}": DECLARED[key]["default"]}))
    field_name = next(name for name in StackConfig.model_fields if to_camel(name) == key)
    assert getattr(parsed, field_name) == FIELDS[key].get_default(call_default_factory=True)


def test_pulumi_refreshes_before_every_update_and_keeps_state_where_deploy_sh_does() -> None:
    """The group changes outside Pulumi (idle stop, wake, repairs), and a stale fingerprint in the
    state makes the next PATCH fail with 412; the state backend is the project's, for every shell."""
    project = project_file()
    assert project["options"]["refresh"] == "always"
    url = project["backend"]["url"]
    assert url == "file://~/.qwen36-mtp-l4/state"
    deploy = (ROOT / "scripts" / "deploy.sh").read_text()
    assert "STATE_DIR=$HOME/.qwen36-mtp-l4\n" in deploy and 'mkdir -p "$STATE_DIR/state"' in deploy
