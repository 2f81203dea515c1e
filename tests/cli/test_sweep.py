"""Issue 21's table, kept at zero: every bad input of tests/cli/sweep.py ends in its exit code and one
line that names the cause; none tracebacks, hangs or exits 0 on a failure."""

from __future__ import annotations

import pytest

from tests.cli import sweep

# ~215 cases at well under a second each on two cores; the hang bound is per case.
SWEEP_TIMEOUT_S = 600


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
    assert summary["inputs tried"] >= 200
    assert bad == [], "\n".join(bad)


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
    progress = sweep.Outcome(
        sweep.Case("y", (), 1, "no RUNNING"), 1, "", "tunnel: m in z\ntunnel: error: no RUNNING member\n", 0.1
    )
    assert sweep.judge(progress) == []
