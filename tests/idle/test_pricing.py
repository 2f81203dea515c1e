"""The README's autostop cost table is what infra/pricing.py computes, and the computation holds."""

from __future__ import annotations

from pathlib import Path

import pytest

from infra.config import StackConfig
from infra.pricing import HOURS_PER_MONTH, WAKE_MINUTES, autostop_cost_table, autostop_costs

README = Path(__file__).resolve().parents[2] / "README.md"
START = "<!-- autostop-cost:start (infra.pricing.autostop_cost_table; tests/idle/test_pricing.py) -->"
END = "<!-- autostop-cost:end -->"


def test_readme_table_is_the_computed_one() -> None:
    text = README.read_text()
    assert START in text and END in text
    shown = text.split(START, 1)[1].split(END, 1)[0].strip()
    assert shown == autostop_cost_table(StackConfig())
    assert f"{WAKE_MINUTES}-minute wake" in text


def test_default_month() -> None:
    c = autostop_costs(StackConfig())
    # $0.24/h spot g2-standard-8 all month, plus 100 GB pd-ssd at $0.17/GB-month.
    assert c.always_on == pytest.approx(730 * 0.24 + 17.0)
    # 4 busy hours and two sessions of 30 idle minutes plus a 4-minute wake, each day.
    hours = (4 + 2 * 34 / 60) * HOURS_PER_MONTH / 24
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
