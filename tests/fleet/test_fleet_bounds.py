"""The fleet's derived bounds and cost estimate follow their named sources."""

from __future__ import annotations

import pytest

from infra.config import StackConfig
from infra.fleet_bounds import (
    COLD_START_BOUND_S,
    GENERATION_BOUND_S,
    MAX_DRAINING_S,
    draining_s,
    generation_bound_s,
)
from infra.pricing import (
    ARMOR_POLICY_USD_PER_MONTH,
    ARMOR_RULE_USD_PER_MONTH,
    HOURS_PER_MONTH,
    LB_FORWARDING_RULE_USD_PER_HOUR,
    edge_usd_per_hour,
    estimate_fleet_cost,
    estimate_hourly_cost,
)
from tests.fleet.fleet_program import deploy_fleet

RANGES = ["198.51.100.0/24"]


def test_generation_bound_is_the_default_context_at_a_third_of_the_measured_speed() -> None:
    # 56,320 tokens at 30 tok/s is 1,878 s, plus 120 s of prefill.
    assert GENERATION_BOUND_S == generation_bound_s(56_320) == 1998
    assert generation_bound_s(131_072) > GENERATION_BOUND_S
    assert draining_s(GENERATION_BOUND_S) == GENERATION_BOUND_S
    assert draining_s(generation_bound_s(262_144)) == MAX_DRAINING_S
    assert COLD_START_BOUND_S == 300


@pytest.mark.parametrize("ctx", [8192, 63744])  # 63744: the most that fits the L4 (infra/config.py)
def test_backend_timeout_follows_the_context(ctx: int) -> None:
    d = deploy_fleet({"replicas": 2, "sourceRanges": RANGES, "ctxSize": ctx, "degradedCtxSize": 4096})
    backend = d.one("gcp:compute/backendService:BackendService")
    assert backend.inputs["timeoutSec"] == generation_bound_s(ctx)
    assert backend.inputs["connectionDrainingTimeoutSec"] == min(generation_bound_s(ctx), MAX_DRAINING_S)


def test_edge_and_fleet_cost() -> None:
    rules = 2
    edge = edge_usd_per_hour(rules)
    expected = (
        LB_FORWARDING_RULE_USD_PER_HOUR
        + (ARMOR_POLICY_USD_PER_MONTH + rules * ARMOR_RULE_USD_PER_MONTH) / HOURS_PER_MONTH
    )
    assert edge == pytest.approx(expected)
    cfg = StackConfig(min_replicas=2, max_replicas=5, source_ranges=RANGES)
    server = estimate_hourly_cost(cfg).usd_per_hour
    cost = estimate_fleet_cost(cfg, servers_now=3, armor_rules=rules)
    assert cost.now_usd_per_hour == round(3 * server + edge, 2)
    assert cost.max_usd_per_hour == round(5 * server + edge, 2)
    assert cost.label.startswith("estimate only") and "as of" in cost.label
