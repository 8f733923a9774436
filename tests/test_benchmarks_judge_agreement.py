"""Smallest-setting run of benchmarks/judge_agreement.py: the table, and the JSON line last."""

from __future__ import annotations

import json

import pytest

from benchmarks import judge_agreement

pytestmark = pytest.mark.bwrap


def test_quick_run_prints_the_table_and_ends_with_the_json_line(capsys):
    figures = judge_agreement.main(["--quick", "--workers", "2"])
    out = capsys.readouterr().out.strip().splitlines()
    assert json.loads(out[-1]) == figures
    assert any(line.startswith("| visible tests |") for line in out)
    assert any(line.startswith("| scripted judge |") for line in out)
    assert figures["cases"] == 12 and figures["policies"] == {}
    for judge in ("visible_tests", "scripted_judge"):
        assert set(figures[judge]) == {"agreement", "false_pass", "false_fail", "abstain", "brittle_agreement",
                                       "weak_agreement"}
        assert 0.0 <= figures[judge]["agreement"] <= 1.0
    # the quick set holds a brittle and two weak cases: the visible tests get all three wrong
    assert figures["visible_tests"]["brittle_agreement"] == 0.0 and figures["visible_tests"]["weak_agreement"] == 0.0
    assert figures["scripted_judge"]["agreement"] > figures["visible_tests"]["agreement"]


def test_a_judge_policy_is_evaluated_beside_them(capsys):
    figures = judge_agreement.main(["--tasks", "mean", "--judge", "random", "--workers", "1"])
    assert figures["policies"]["random"]["abstain"] == 1.0  # random text is never a verdict
    assert "| policy random |" in capsys.readouterr().out


def test_unknown_tasks_are_refused():
    with pytest.raises(SystemExit):
        judge_agreement.main(["--tasks", "no_such_task"])
