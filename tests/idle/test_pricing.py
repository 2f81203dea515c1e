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


def test_the_door_costs_nothing_idle_and_bills_only_requests_in_flight() -> None:
    """The door's month (docs/door.md, README): Cloud Run's request-based billing after its free tier."""
    from infra.cold_start import DOOR_START_S, ttft_after_idle_stop_s
    from infra.pricing import (
        RUN_FREE_VCPU_SECONDS,
        RUN_USD_PER_GIB_SECOND,
        RUN_USD_PER_MILLION_REQUESTS,
        RUN_USD_PER_VCPU_SECOND,
        door_month,
    )

    idle = door_month(vcpus=1, memory_gib=0.5, busy_hours_per_day=0, sessions_per_day=0)
    assert idle.vcpu_seconds == idle.requests == idle.usd == idle.usd_without_free_tier == 0

    busy = door_month(vcpus=1, memory_gib=0.5)
    days = HOURS_PER_MONTH / 24
    seconds = (4 * 3600 + 2 * (ttft_after_idle_stop_s() + DOOR_START_S)) * days
    assert busy.vcpu_seconds == pytest.approx(seconds, abs=1)
    # Past the vCPU free tier; memory (half a GiB a second) and requests stay inside theirs.
    assert busy.usd == pytest.approx((seconds - RUN_FREE_VCPU_SECONDS) * RUN_USD_PER_VCPU_SECOND, abs=0.01)
    whole = (
        seconds * RUN_USD_PER_VCPU_SECOND
        + seconds * 0.5 * RUN_USD_PER_GIB_SECOND
        + busy.requests / 1e6 * RUN_USD_PER_MILLION_REQUESTS
    )
    assert busy.usd_without_free_tier == pytest.approx(whole, abs=0.01)
    # Half as much time in flight bills less; a quarter of it fits in the free tier.
    half = door_month(vcpus=1, memory_gib=0.5, in_flight_share=0.5)
    quarter = door_month(vcpus=1, memory_gib=0.5, in_flight_share=0.25)
    assert 0 == quarter.usd < half.usd < busy.usd
    # Two vCPUs bill twice the vCPU-seconds.
    assert door_month(vcpus=2, memory_gib=0.5).vcpu_seconds == pytest.approx(2 * busy.vcpu_seconds, abs=1)
