"""Fleet config (replicas, min/maxReplicas, domain) fails early, naming the key and what is allowed."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import yaml

from infra.config import DEFAULT_IDLE_STOP_MINUTES, PROJECT, ConfigError, parse_config

ROOT = Path(__file__).resolve().parents[2]

RANGES = ["198.51.100.0/24"]
FLEET = {"replicas": 2, "sourceRanges": RANGES}

# name -> (settings, the key blamed, a fragment saying what is allowed)
INVALID: dict[str, tuple[dict[str, Any], str, str]] = {
    "replicas-zero": ({"replicas": 0}, "replicas", "greater than or equal to 1"),
    "min-without-max": ({"minReplicas": 2, "sourceRanges": RANGES}, "minReplicas", "maxReplicas"),
    "both-fixed-and-auto": (
        {"replicas": 3, "minReplicas": 1, "maxReplicas": 4, "sourceRanges": RANGES},
        "replicas",
        "not both",
    ),
    "max-one": ({"minReplicas": 1, "maxReplicas": 1, "sourceRanges": RANGES}, "maxReplicas", ">= 2"),
    "min-zero": ({"minReplicas": 0, "maxReplicas": 4, "sourceRanges": RANGES}, "minReplicas", "below one"),
    "min-above-max": ({"minReplicas": 5, "maxReplicas": 4, "sourceRanges": RANGES}, "minReplicas", "exceed"),
    "fleet-without-ranges": ({"replicas": 2}, "sourceRanges", "Cloud Armor"),
    "autoscaled-without-ranges": ({"minReplicas": 1, "maxReplicas": 3}, "sourceRanges", "CIDR"),
    "fleet-open-without-opt-in": (
        {"replicas": 2, "sourceRanges": ["0.0.0.0/0"]},
        "sourceRanges",
        "allowPublicInternet",
    ),
    "domain-single-server": ({"domain": "llm.example.com"}, "domain", "replicas >= 2"),
    "domain-with-scheme": (
        {"replicas": 2, "sourceRanges": RANGES, "domain": "https://llm.example.com"},
        "domain",
        "DNS name",
    ),
    "domain-wildcard": ({**FLEET, "domain": "*.example.com"}, "domain", "wildcard"),
    "domain-upper": ({**FLEET, "domain": "LLM.example.com"}, "domain", "lowercase"),
    "fleet-with-an-idle-stop": ({**FLEET, "idleStopMinutes": 60}, "idleStopMinutes", "a fleet scales"),
}


def _parse(values: dict[str, Any]) -> Any:
    return parse_config({f"{PROJECT}:{k}": v for k, v in values.items()})


@pytest.mark.parametrize("case", INVALID)
def test_invalid_fleet_config_names_key_and_allowed(case: str) -> None:
    values, key, allowed = INVALID[case]
    with pytest.raises(ConfigError) as err:
        _parse(values)
    assert err.value.key == f"{PROJECT}:{key}"
    assert allowed in err.value.message


def test_single_server_is_the_default() -> None:
    cfg = _parse({})
    assert (cfg.replicas, cfg.min_replicas, cfg.max_replicas, cfg.domain) == (1, 0, 0, "")
    assert not cfg.fleet and not cfg.autoscaled


def test_fixed_fleet() -> None:
    cfg = _parse({"replicas": 3, "sourceRanges": RANGES})
    assert cfg.fleet and not cfg.autoscaled
    assert (cfg.initial_servers, cfg.max_servers) == (3, 3)


def test_autoscaled_fleet_from_pulumi_strings() -> None:
    # The CLI hands every non-string value over as JSON text.
    cfg = _parse({"minReplicas": "1", "maxReplicas": "4", "sourceRanges": '["198.51.100.0/24"]'})
    assert cfg.fleet and cfg.autoscaled
    assert (cfg.initial_servers, cfg.max_servers) == (1, 4)


def test_public_fleet_with_opt_in_and_domain() -> None:
    public = {"sourceRanges": ["0.0.0.0/0"], "allowPublicInternet": True}
    cfg = _parse({"replicas": 2, **public, "domain": "llm.example.com"})
    assert cfg.domain == "llm.example.com"


@pytest.mark.parametrize("fleet", [FLEET, {"minReplicas": 1, "maxReplicas": 4, "sourceRanges": RANGES}])
def test_a_fleet_takes_the_default_idle_stop_that_pulumi_applies(fleet: dict[str, Any]) -> None:
    """Pulumi sets every key Pulumi.yaml gives a default to (idleStopMinutes: 30 included) before the
    program runs: a fleet recipe that never names the key must pass, and never autostops."""
    declared = yaml.safe_load((ROOT / "Pulumi.yaml").read_text())["config"]
    assert declared["idleStopMinutes"]["default"] == DEFAULT_IDLE_STOP_MINUTES
    for idle in (DEFAULT_IDLE_STOP_MINUTES, 0):
        cfg = _parse({**fleet, "idleStopMinutes": idle})
        assert cfg.fleet and cfg.autostop_minutes == 0
    assert (
        _parse({"idleStopMinutes": DEFAULT_IDLE_STOP_MINUTES}).autostop_minutes == DEFAULT_IDLE_STOP_MINUTES
    )
