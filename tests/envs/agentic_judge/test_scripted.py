"""The scripted players: stored-solution solvers and the rules of the rule-based judge."""

from __future__ import annotations

import json

from llm_zoo.envs.agentic_judge import scripted, text
from llm_zoo.envs.agentic_judge.tasks import load_tasks

STATEMENT = "Write `f(xs)`; it returns the values in any order and raises `ValueError` when empty.\n\n>>> f([1])\n[1]"
CHECK_OK = "OK 1\nEXAMPLES 1/1"


def report(*failures: str) -> str:
    return "test_solution.py: 1 of 2 tests passed\nPASS test_a\n" + "\n".join(failures)


def test_examples_that_fail_decide_fail():
    verdict, reason = scripted.decide(STATEMENT, report(), "BAD 1: got [], expected [1]\nEXAMPLES 0/1")
    assert verdict == "FAIL" and "BAD 1" in reason
    assert scripted.decide(STATEMENT, report(), "IMPORT-ERROR SyntaxError: 'x'")[0] == "FAIL"
    assert scripted.decide(STATEMENT, report(), None)[0] == "FAIL"


VISIBLE = """from solution import f, _helper


def test_b():
    try:
        f([])
    except ValueError as exc:
        assert str(exc) == 'empty list'
    assert _helper(2) == 3
"""


def test_free_failures_are_set_aside():
    helper = "FAIL test_b (line 1): from solution import f, _helper\n  ImportError: \"cannot import name '_helper' from 'solution'\""
    message = "FAIL test_b (line 9): assert str(exc) == 'empty list'\n  AssertionError\n  left: 'nothing'\n  right: 'empty list'"
    floats = "FAIL test_b (line 3): assert f([0.1]) == [0.30000000000000004]\n  AssertionError\n  left: [0.3]\n  right: [0.30000000000000004]"
    order = "FAIL test_b (line 3): assert f([1, 2]) == [2, 1]\n  AssertionError\n  left: [1, 2]\n  right: [2, 1]"
    helper_call = "FAIL test_b (line 9): assert _helper(2) == 3\n  TypeError: 'nope'"
    for failure in (helper, message, floats, order, helper_call):
        verdict, reason = scripted.decide(STATEMENT, report(failure), CHECK_OK + "\nMISSING _helper", visible=VISIBLE)
        assert verdict == "PASS", (failure, reason)
        assert "set aside" in reason


def test_what_the_solver_raised_never_excuses_a_failure():
    """Names and messages of exceptions are the solver's: a message naming a helper, an import failure whose
    names the check found present, or a str() of a value that is no exception are failures."""
    forged = ("FAIL test_b (line 3): assert f([1]) == [1]\n  AttributeError: \"module 'solution' has no attribute "
              "'_helper'\" (raised in solution.py line 2)")
    imported = "FAIL test_b (line 1): from solution import f, _helper\n  ImportError: \"cannot import name '_helper'\""
    not_exc = "FAIL test_b (line 9): assert str(f([1])) == 'empty list'\n  AssertionError\n  left: 'x'\n  right: 'empty list'"
    for failure, check in ((forged, CHECK_OK + "\nMISSING "), (imported, CHECK_OK + "\nMISSING "), (imported, CHECK_OK),
                           (not_exc, CHECK_OK)):
        verdict, reason = scripted.decide(STATEMENT, report(failure), check, visible=VISIBLE)
        assert verdict == "FAIL", (failure, reason)


def test_failures_the_statement_fixes_decide_fail():
    asked = "FAIL test_b (line 1): from solution import f\n  ImportError: \"cannot import name 'f' from 'solution'\""
    value = "FAIL test_b (line 3): assert f([1, 2]) == [1, 2, 3]\n  AssertionError\n  left: [1, 2]\n  right: [1, 2, 3]"
    crash = "FAIL test_b (line 3): assert f([]) == []\n  ZeroDivisionError: 'division by zero' (raised in solution.py line 2)"
    no_sides = "FAIL test_b (line 3): assert False, 'expected ValueError'\n  AssertionError: 'expected ValueError'"
    ordered = STATEMENT.replace("in any order", "sorted")
    for statement, failure in ((STATEMENT, asked), (STATEMENT, value), (STATEMENT, crash), (STATEMENT, no_sides),
                               (ordered, "FAIL test_b (line 3): assert f([1, 2]) == [2, 1]\n  AssertionError\n"
                                         "  left: [1, 2]\n  right: [2, 1]")):
        assert scripted.decide(statement, report(failure), CHECK_OK)[0] == "FAIL", failure


def test_read_failures_parses_the_report_format():
    failures = scripted.read_failures(report(
        "FAIL test_b (line 3): assert f(1) == 2\n  AssertionError\n  left: 1\n  right: 2\n  stdout: 'x'",
        "FAIL test_c\n  NoReport"))
    assert [(f.name, f.error, f.left, f.right) for f in failures] == [("test_b", "AssertionError", "1", "2"),
                                                                    ("test_c", "NoReport", None, None)]


def observation(*messages: tuple[str, str]) -> dict:
    return {"messages": tuple({"role": r, "content": c} for r, c in messages)}


def test_stored_solver_writes_then_submits():
    task = load_tasks()["mean"]
    first = observation(("system", "..."), ("user", text.task_message("mean", task.statement, "t.py", "", "s.py")))
    reply = scripted.StoredSolver("alt_fsum")(first)
    call = json.loads(reply.split("<tool_call>")[1].split("</tool_call>")[0])
    assert call == {"name": "write_file", "arguments": {"path": "solution.py", "content": task.solutions["alt_fsum"]}}
    assert '"run_tests"' in reply
    later = observation(*first["messages"], ("assistant", reply), ("tool", "wrote"))
    assert scripted.StoredSolver("alt_fsum")(later) == text.SUBMIT
    wrong = {scripted.StoredSolver("wrong", seed=s)(first) for s in range(8)}
    assert len(wrong) == 2  # both wrong solutions of the task get drawn
    assert scripted.StoredSolver("no_such")(first) == scripted.StoredSolver("reference")(first)
    assert scripted.StoredSolver()(observation(("user", "no task here"))) == text.SUBMIT


def test_players_are_named_factories():
    assert set(scripted.PLAYERS) == {"reference", "alternative", "wrong", "rule_judge", "strict_judge"}
    assert scripted.PLAYERS["rule_judge"](seed=3).name == "rule_judge"
    assert scripted.PLAYERS["wrong"](seed=1).name == "stored:wrong"


def test_the_strict_judge_trusts_every_visible_test_and_probes_nothing():
    # a failure the rule judge sets aside (a message the statement does not give) fails the strict judge
    free = report("FAIL test_b (line 9): assert str(exc) == 'empty list'\n  AssertionError\n  left: 'nothing'\n"
                  "  right: 'empty list'")
    assert scripted.decide(STATEMENT, free, CHECK_OK, visible=VISIBLE)[0] == "PASS"
    verdict, reason = scripted.decide_strict(STATEMENT, free, CHECK_OK)
    assert verdict == "FAIL" and "test_b" in reason
    assert scripted.decide_strict(STATEMENT, report(), CHECK_OK)[0] == "PASS"
    assert scripted.decide_strict(STATEMENT, report(), "BAD 1: got [], expected [1]\nEXAMPLES 0/1")[0] == "FAIL"
    assert scripted.decide_strict(STATEMENT, report(), "")[0] == "FAIL"  # a check that did not finish
    judge = scripted.PLAYERS["strict_judge"]()
    assert judge.name == "strict_judge" and judge.strict and not scripted.PLAYERS["rule_judge"]().strict


def test_the_corpus_holds_the_prompts_and_every_stored_solution():
    texts = scripted.corpus()
    joined = "\n".join(texts)
    assert any(t.startswith("You solve a Python coding task") for t in texts)  # the compact prompt
    assert sum("<tools>" in t for t in texts) == 1  # the full one
    for task in load_tasks().values():
        assert f"Task id: {task.id}" in joined
        for code in task.solutions.values():
            assert json.dumps(code) in joined


def test_numeric_comparisons_hold_for_any_value_a_solution_returns():
    """An int past any float (10**309), NaN and inf never raise inside the judge's rules; off the shown cases
    they are results of another kind, so a table that answers with them fails."""
    from llm_zoo.envs.agentic_judge import checks

    task = load_tasks()["balance"]
    n = len(scripted.probe_calls(task.statement, task.visible)) + len(scripted.nudged_calls(task.statement, task.visible))
    values = ["1" + "0" * 309, "inf", "nan", "-inf"]
    probe = "".join(f"PROBE {i} = {values[i % len(values)]}\n" for i in range(1, n + 1)) + f"PROBES {n}"
    verdict, reason = scripted.decide(task.statement, "", "OK 1\nOK 2\nEXAMPLES 2/2\n" + probe, None, task.visible,
                                      probe)
    assert verdict == "FAIL" and "another kind" in reason, reason
    assert not scripted._close(10 ** 309, 1.5) and not scripted._near(float("nan"), float("nan"))
    assert scripted.jumps([("f(1.0)", 2.5)] * 2, [("=", "-" + "9" * 400)] * 2) is not None
    assert checks._same(10 ** 400, 10 ** 400) and not checks._same(10 ** 400, 1.0)
    assert checks._repr(10 ** 5000).startswith("<int of")
