"""The autostop cost computation holds (docs/autostop.md shows its table: tests/test_docs.py)."""

from __future__ import annotations

import pytest

from infra.cold_start import cold_start_s
from infra.config import StackConfig
from infra.pricing import HOURS_PER_MONTH, WAKE_MINUTES, autostop_cost_table, autostop_costs


def test_default_month() -> None:
    c = autostop_costs(StackConfig())
    # $0.24/h spot g2-standard-8 all month, plus 100 GB pd-ssd at $0.17/GB-month.
    assert c.always_on == pytest.approx(730 * 0.24 + 17.0)
    # 4 busy hours and two sessions of 30 idle minutes plus a wake (the cached cold start), each day.
    assert cold_start_s("tooling", "gcs") / 60 == WAKE_MINUTES
    hours = (4 + 2 * (30 + WAKE_MINUTES) / 60) * HOURS_PER_MONTH / 24
    assert c.running_hours == pytest.approx(hours, abs=0.05)
    assert c.resize_to_zero == pytest.approx(hours * 0.24 + 17.0 * hours / HOURS_PER_MONTH, abs=0.01)
    assert c.stop_instances == pytest.approx(hours * 0.24 + 17.0, abs=0.01)
    assert c.resize_to_zero < c.stop_instances < c.always_on


def test_off_is_always_on_and_a_longer_window_costs_more() -> None:
    off = autostop_costs(StackConfig(idle_stop_minutes=0))
    assert off.resize_to_zero == off.stop_instances == off.always_on
    costs = [autostop_costs(StackConfig(idle_stop_minutes=m)).resize_to_zero for m in (10, 30, 120)]
    assert costs == sorted(costs) and len(set(costs)) == 3
    # Never more hours than the month has.
    assert (
        autostop_costs(StackConfig(idle_stop_minutes=1440), busy_hours_per_day=20).running_hours
        == HOURS_PER_MONTH
    )


def test_the_table_shows_the_computed_month() -> None:
    c = autostop_costs(StackConfig())
    table = autostop_cost_table(StackConfig())
    for usd in (c.always_on, c.resize_to_zero, c.stop_instances):
        assert f"${usd:.2f}" in table
    assert f"| {c.running_hours:g} |" in table
