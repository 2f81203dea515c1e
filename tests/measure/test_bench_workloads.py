"""The prompts: seven kinds, every repetition distinct from its first words on."""

from __future__ import annotations

import pytest

from qwen36.measure.workloads import MAX_REPS, WARMUP_PROMPT, WORKLOAD_NAMES, WORKLOADS, all_prompts, select

# Long enough to cover the opening words (the part a prompt cache would reuse).
PREFIX_CHARS = 12


def test_the_seven_kinds_in_order() -> None:
    assert tuple(w.name for w in WORKLOADS) == WORKLOAD_NAMES
    assert WORKLOAD_NAMES == ("prose", "code", "json", "chat", "math", "multilingual", "summarization")


def test_no_two_prompts_share_an_opening() -> None:
    prompts = [*all_prompts(), WARMUP_PROMPT]
    openings = [p[:PREFIX_CHARS] for p in prompts]
    assert len(set(openings)) == len(openings)


def test_every_workload_has_the_advertised_repetitions() -> None:
    assert MAX_REPS >= 2
    for workload in WORKLOADS:
        assert len(set(workload.prompts)) == len(workload.prompts) >= MAX_REPS


def test_select_keeps_canonical_order_and_rejects_unknown_names() -> None:
    assert [w.name for w in select(["math", "prose"])] == ["prose", "math"]
    assert select(None) == WORKLOADS
    with pytest.raises(ValueError, match="poetry"):
        select(["poetry"])
