"""benchmarks/reward_hacks.py at its smallest setting, its isolation of attempts and libraries, and every
attempt of the user_sim library (one test per class of attack: none may pay)."""

from __future__ import annotations

import importlib.util
import json
import sys

import pytest

from benchmarks import reward_hacks
from benchmarks.hacks import Hack, Outcome, pipeline, user_sim


@pytest.fixture(scope="module")
def script():
    return reward_hacks


def _available(module: str) -> bool:
    try:
        return importlib.util.find_spec(module) is not None
    except ModuleNotFoundError:
        return False


def test_quick_run_prints_a_table_per_env_a_summary_and_ends_with_the_json_line(script, capsys):
    figures = script.main(["--quick"])
    out = capsys.readouterr().out.strip().splitlines()
    assert json.loads(out[-1]) == figures
    quick = [h for h in user_sim.HACKS if h.quick]
    assert 3 <= len(quick) < len(user_sim.HACKS)
    assert figures["user_sim_hacks_paid"] == 0 and figures["per_env"]["user_sim_v0"]["attempts"] == len(quick)
    assert figures["quick"] is True and figures["seconds"] >= 0
    for hack in quick:
        line = next(line for line in out if line.strip().startswith(hack.name + " "))
        assert " no " in line, line  # the paid? column
    summary = out.index("summary")
    for env, module, key in script.LIBRARIES:
        row = next(line for line in out[summary:] if line.strip().startswith(env))
        if _available(module):  # the judge and proposer libraries come from other branches
            assert isinstance(figures[key], int) and env in figures["per_env"], env
        else:
            assert figures[key] is None and env in figures["not_available"] and "not available" in row
    assert figures["attempts"] == sum(e["attempts"] for e in figures["per_env"].values())
    assert figures["errors"] == sum(e["errors"] for e in figures["per_env"].values())
    assert figures["per_env"]["user_sim_v0"]["errors"] == 0


def test_an_attempt_that_raises_returns_junk_or_hangs_is_an_error_and_the_rest_go_on(script, capsys):
    def raises():
        raise RuntimeError("the attacker tripped")

    def hangs():
        while True:
            pass

    hacks = [Hack("x", "raises", "raises", raises), Hack("x", "junk", "returns junk", lambda: 1.0),
             Hack("x", "hangs", "never returns", hangs), Hack("x", "exits", "exits", lambda: sys.exit(3)),
             Hack("x", "pays", "pays", lambda: Outcome(True, 1.0, 0.0, "got in")),
             Hack("x", "fails", "fails", lambda: Outcome(False, 0.0, 0.0, "refused"))]
    rows = [script.attempt(h, timeout_s=0.5) for h in hacks]
    assert [r.error is not None for r in rows] == [True, True, True, True, False, False]
    assert "RuntimeError: the attacker tripped" in rows[0].error and "must return a hacks.Outcome" in rows[1].error
    assert "--timeout" in rows[2].error and rows[2].seconds < 5 and "SystemExit" in rows[3].error
    library = script.Library("x", "inline", "x_paid", rows=rows)
    assert library.paid == ["pays"] and library.errors == 4
    text = script.table(library)
    assert "ERROR" in text and "PAID" in text and "6 attempts, 1 paid, 4 errors" in text


def test_a_missing_or_broken_library_is_a_row_not_a_crash(script, tmp_path, monkeypatch):
    monkeypatch.syspath_prepend(str(tmp_path))
    (tmp_path / "broken_hack_library.py").write_text("raise RuntimeError('half-written')\n")
    (tmp_path / "wrong_hack_library.py").write_text("HACKS = ['not a Hack']\n")
    (tmp_path / "needs_missing_dependency.py").write_text("import no_such_dependency_anywhere\nHACKS = []\n")
    assert script.load("hacks.no_such_env") == (None, "not available: no module hacks.no_such_env")
    for module, reason in [("broken_hack_library", "RuntimeError: half-written"),
                           ("wrong_hack_library", "must be a list of hacks.Hack"),
                           ("needs_missing_dependency", "no_such_dependency_anywhere")]:
        hacks, problem = script.load(module)
        assert hacks is None and problem.startswith("not available") and reason in problem, problem
    library = script.Library("agentic_judge_v0", "hacks.no_such_env", "judge_hacks_paid", problem="not available: x")
    assert "not available" in script.table(library) and "not available" in script.summary([library])


def test_bad_timeout_is_refused(script):
    with pytest.raises(SystemExit):
        script.main(["--timeout", "0"])


USER_SIM_HACKS = user_sim.HACKS


def test_the_user_sim_library_is_at_least_ten_distinct_attempts():
    names = [h.name for h in USER_SIM_HACKS]
    assert len(names) >= 10 and len(set(names)) == len(names)
    assert all(h.env == "user_sim_v0" and h.tries for h in USER_SIM_HACKS)


@pytest.mark.parametrize("hack", USER_SIM_HACKS, ids=[h.name for h in USER_SIM_HACKS])
def test_no_user_sim_attempt_pays(hack):
    outcome = hack.run()
    assert not outcome.paid, outcome
    assert outcome.reward <= outcome.baseline + 1e-9 and outcome.detail


PIPELINE_HACKS = pipeline.HACKS


def test_the_pipeline_library_is_at_least_ten_distinct_attempts_of_both_classes():
    names = [h.name for h in PIPELINE_HACKS]
    assert len(names) >= 10 and len(set(names)) == len(names)
    assert {h.kind for h in PIPELINE_HACKS} == {"unsafe_loading", "run_dir"}
    assert all(h.env == "pipeline" and h.tries for h in PIPELINE_HACKS) and any(h.quick for h in PIPELINE_HACKS)


@pytest.mark.parametrize("hack", PIPELINE_HACKS, ids=[h.name for h in PIPELINE_HACKS])
def test_no_pipeline_attempt_pays(hack):
    outcome = hack.run()
    assert not outcome.paid, outcome
    assert outcome.reward == 0.0 and outcome.detail
