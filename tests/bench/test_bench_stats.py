"""Percentiles as numpy computes them (linear interpolation between closest ranks)."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

from qwen36.bench.load import percentile


@given(
    st.lists(st.floats(min_value=0, max_value=1e4, allow_nan=False), min_size=1, max_size=50),
    st.sampled_from([0, 50, 95, 100]),
)
def test_percentile_matches_numpy(values: list[float], q: int) -> None:
    assert percentile(values, q) == pytest.approx(float(np.percentile(values, q)), rel=1e-9, abs=1e-9)


def test_percentile_of_nothing_is_none() -> None:
    assert percentile([], 50) is None
