"""Issue 21's table, kept at zero, with issue 29's two columns: every bad input of tests/cli/sweep.py
(and tests/cli/sweep_corpus.py) ends in its exit code and one line that names the cause; none
tracebacks, hangs, exits 0 on a failure, ends in an internal error (70) or has its bad value accepted."""

from __future__ import annotations

import pytest

from tests.cli import sweep

# ~500 cases at well under a second each on two cores; the hang bound is per case.
SWEEP_TIMEOUT_S = 1500


@pytest.mark.slow
@pytest.mark.timeout(SWEEP_TIMEOUT_S)
def test_every_bad_input_ends_in_one_line_and_its_code() -> None:
    outcomes = [sweep.run_case(case) for case in sweep.cases()]
    bad = [
        f"{o.case.name}: {', '.join(o.verdicts)} (exit {o.code}, want {o.case.code}): "
        f"{(sweep._error_lines(o.err) or [''])[-1][:200]}"
        for o in outcomes
        if o.verdicts
    ]
    summary = sweep.table(outcomes)
    assert summary["inputs tried"] >= 480
    assert bad == [], "\n".join(bad)
    assert summary["internal error (70)"] == 0 and summary["accepted bad value"] == 0


def test_the_corpus_covers_issue_29() -> None:
    every = sweep.cases(include_pending=True)
    names = {c.name for c in every}
    for must in (
        "29 exposure all but 8.8.8.8 (32 CIDRs)",
        "29 exposure 0.0.0.0/1",
        "29 wake outputs size 100",
        "29 status outputs a list",
        "29 wait door 401",
        "29 bench /metrics metrics-html",
        "29 stage a header-only GGUF",
        "29 tune --sweep calibrate with a failing server",
        "29 status compute answers 200 html",
    ):
        assert must in names, must
    # The malformed-200 cases wait on the parse-error boundary (helper "check"): marked, not dropped.
    pending = [c for c in every if c.pending]
    assert pending and all(c.pending == "check" for c in pending)
    assert not [c for c in sweep.cases(include_pending=False) if c.pending]
    assert sum(c.bad_value for c in every) >= 250


def test_the_judge_sees_each_failure_kind() -> None:
    """The classifier itself: a traceback, a usage block, an exit 0 and a hang are each caught."""
    case = sweep.Case("x", (), 2, "--flag")
    usage = sweep.Outcome(case, 2, "", "usage: prog [-h]\nprog: error: argument --flag: bad\n", 0.1)
    assert sweep.judge(usage) == ["not one line"]
    vague = sweep.Outcome(case, 2, "", "prog: error: something went wrong\n", 0.1)
    assert sweep.judge(vague) == ["unclear"]
    one = sweep.Outcome(case, 2, "", "prog: error: argument --flag: bad (see prog --help)\n", 0.1)
    assert sweep.judge(one) == []
    trace = sweep.Outcome(case, 1, "", "Traceback (most recent call last):\n  ...\nValueError: x\n", 0.1)
    assert sweep.judge(trace) == ["traceback", "wrong code"]
    assert sweep.judge(sweep.Outcome(case, 0, "", "", 0.1)) == ["exit-0 failure", "unclear"]
    assert sweep.judge(sweep.Outcome(case, None, "", "", 40.0)) == ["hang"]
    bug = sweep.Outcome(case, 70, "", "x: error: internal error (ValueError: v); rerun with --debug\n", 0.1)
    assert sweep.judge(bug) == ["internal error", "wrong code", "unclear"]
    accepted = sweep.Outcome(sweep.Case("v", (), 3, "ctxSize", bad_value=True), 0, "", "", 0.1)
    assert sweep.judge(accepted) == ["accepted bad value", "exit-0 failure", "unclear"]
    past = sweep.Outcome(sweep.Case("v", (), 3, "ctxSize", bad_value=True), 7, "", "x: error: no GCS\n", 0.1)
    assert sweep.judge(past) == ["accepted bad value", "wrong code", "unclear"]
    progress = sweep.Outcome(
        sweep.Case("y", (), 1, "no RUNNING"), 1, "", "tunnel: m in z\ntunnel: error: no RUNNING member\n", 0.1
    )
    assert sweep.judge(progress) == []
