"""infra/output_reference.py names exactly what the program exports, in each mode it exports it."""

from __future__ import annotations

import re
from typing import Any

import pytest
from program_mocks import deploy

from infra.config import PROJECT, parse_config
from infra.output_reference import OUTPUTS, When

RANGES = ["203.0.113.0/24"]
MODES: dict[str, dict[str, Any]] = {
    "single server": {},
    "single server, no door": {"door": False},
    "single server, open range": {"door": False, "externalIp": True, "sourceRanges": ["203.0.113.7/32"]},
    "single server, autostop off": {"idleStopMinutes": 0},
    "single server, no key": {"door": False, "apiKey": False},
    "fixed fleet": {"replicas": 3, "sourceRanges": RANGES},
    "autoscaled fleet with a domain": {
        "minReplicas": 1,
        "maxReplicas": 4,
        "sourceRanges": RANGES,
        "domain": "llm.example.com",
    },
}


def _expected(overrides: dict[str, Any]) -> set[str]:
    cfg = parse_config({f"{PROJECT}:{k}": v for k, v in overrides.items()})
    modes: set[When] = {"always"}
    if cfg.autostop_minutes:
        modes.add("autostop")
    if cfg.front_door:
        modes.add("door")
    if cfg.fleet:
        modes.add("fleet")
    return {key for group in OUTPUTS for key in group.keys if group.when in modes}


def test_every_key_is_named_once() -> None:
    keys = [key for group in OUTPUTS for key in group.keys]
    assert len(keys) == len(set(keys))


CASES = [(mode, False) for mode in MODES] + [("single server", True)]


@pytest.mark.parametrize(("mode", "first_deployment"), CASES, ids=[f"{m}{', bake' * b}" for m, b in CASES])
def test_the_program_exports_exactly_the_documented_outputs(mode: str, first_deployment: bool) -> None:
    """``first_deployment``: no tooling image yet, so the program bakes one."""
    exported = set(deploy("dev", MODES[mode], tooling_image=not first_deployment).outputs)
    expected = _expected(MODES[mode])
    assert exported - expected == set(), "exported but not in infra/output_reference.py"
    assert expected - exported == set(), "in infra/output_reference.py but not exported"


def _strings(value: Any) -> list[str]:
    if isinstance(value, str):
        return [value]
    if isinstance(value, dict):
        return [s for v in value.values() for s in _strings(v)]
    if isinstance(value, list):
        return [s for v in value for s in _strings(v)]
    return []


@pytest.mark.parametrize("mode", ["single server", "fixed fleet"])
def test_every_command_an_output_prints_is_the_qwen36_console_script(mode: str) -> None:
    """Pasted into any shell, they run: ``qwen36 <command>`` (installed by scripts/install_cli.sh),
    never ``python -m qwen36``, which needs the project's venv and its directory."""
    from qwen36.__main__ import build_parser

    parser = build_parser()
    commands = next(a.choices for a in parser._actions if a.choices)  # the subcommands
    texts = _strings(deploy("dev", MODES[mode]).outputs)
    assert not [t for t in texts if "python -m qwen36" in t]
    named = {m for t in texts for m in re.findall(r"(?:^|[`\s])qwen36 ([a-z]+)", t)}
    assert named and named <= set(commands), named - set(commands)
