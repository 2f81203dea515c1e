"""Percentiles as numpy computes them, and the bench's token-weighted headline against the mean of rates."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

from qwen36.measure.bench import BenchResult, WorkloadResult
from qwen36.measure.client import Completion, parse_completion
from qwen36.measure.load import percentile
from qwen36.measure.report import bench_json


@given(
    st.lists(st.floats(min_value=0, max_value=1e4, allow_nan=False), min_size=1, max_size=50),
    st.sampled_from([0, 50, 95, 100]),
)
def test_percentile_matches_numpy(values: list[float], q: int) -> None:
    assert percentile(values, q) == pytest.approx(float(np.percentile(values, q)), rel=1e-9, abs=1e-9)


def test_percentile_of_nothing_is_none() -> None:
    assert percentile([], 50) is None


def _completion(n: int, ms: float) -> Completion:
    return Completion(
        prompt_n=8, prompt_per_second=100.0, predicted_n=n, predicted_per_second=n / ms * 1000,
        draft_n=None, draft_n_accepted=None, wall_s=ms / 1000, predicted_ms=ms,
    )  # fmt: skip


def test_the_headline_weighs_every_token_and_the_mean_of_rates_does_not() -> None:
    # A short fast request and a long slow one: 10 tokens at 100 tok/s, 300 tokens at 30 tok/s.
    result = BenchResult(url="http://x", max_tokens=300, reps=1, planned=2)
    result.workloads = [
        WorkloadResult("chat", [_completion(10, 100.0)]),
        WorkloadResult("prose", [_completion(300, 10_000.0)]),
    ]
    assert result.weighted_tps == pytest.approx(310 / 10.1)
    assert result.mean_tps == pytest.approx(65.0)
    assert result.minimum is not None and result.minimum.decode_tps == pytest.approx(30.0)
    summary = bench_json(result)["summary"]
    assert summary["weighted_decode_tps"] == pytest.approx(30.69, abs=0.01)
    assert summary["mean_decode_tps"] == 65.0 and summary["min_decode_tps"] == 30.0


def test_decode_time_comes_from_the_timings_or_from_the_rate() -> None:
    timings = {"predicted_n": 50, "predicted_per_second": 25.0, "predicted_ms": 2004.0}
    assert parse_completion({"timings": timings}, 2.1).predicted_ms == 2004.0
    del timings["predicted_ms"]
    assert parse_completion({"timings": timings}, 2.1).predicted_ms == pytest.approx(2000.0)
