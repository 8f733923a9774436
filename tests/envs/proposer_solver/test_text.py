"""proposer_solver text: the proposal and answer formats, and the solver's problem view."""

from __future__ import annotations

import pytest

from llm_zoo.envs.proposer_solver import text
from llm_zoo.envs.proposer_solver.rules import Mode, Proposal, Task

PROGRAM = "def f(xs, k):\n    return sorted(xs)[:k]"


def test_a_deduction_proposal_with_reasoning_around_it():
    reply = f"Let me think about sorting.\n```python\n{PROGRAM}\n```\nINPUT: [3, 1, 2],  2\nThat is all."
    assert text.parse_proposal(reply, Mode.DEDUCTION) == Proposal(Mode.DEDUCTION, PROGRAM, ("[3, 1, 2], 2",))


def test_an_induction_proposal_with_a_message_and_an_integer_proposal():
    reply = f"```py\n{PROGRAM}\n```\n" + "".join(f"INPUT: [{i}, 1], 1\n" for i in range(5)) + "MESSAGE: smallest k"
    proposal = text.parse_proposal(reply, Mode.INDUCTION)
    assert len(proposal.inputs) == 5 and proposal.message == "smallest k"
    reply = "PROBLEM: Ana has 3 apples.\nShe eats one. How many are left?\n```python\ndef f():\n    return 2\n```"
    proposal = text.parse_proposal(reply, Mode.INTEGER)
    assert proposal.problem == "Ana has 3 apples.\nShe eats one. How many are left?"
    assert proposal.program == "def f():\n    return 2" and proposal.inputs == ()


@pytest.mark.parametrize(
    ("reply", "mode", "match"),
    [
        ("INPUT: 3", Mode.DEDUCTION, "exactly one ```python block"),
        (f"```python\n{PROGRAM}\n```\n```python\n{PROGRAM}\n```\nINPUT: 1", Mode.DEDUCTION, "found 2"),
        (f"```python\n{PROGRAM}\n```", Mode.DEDUCTION, "1 INPUT line; found 0"),
        (f"```python\n{PROGRAM}\n```\nINPUT: 1\nINPUT: 2", Mode.ABDUCTION, "found 2"),
        (f"```python\n{PROGRAM}\n```\nINPUT: x + 1", Mode.DEDUCTION, "INPUT line 1"),
        (f"```python\n{PROGRAM}\n```\nINPUT: 1\nMESSAGE: hi", Mode.DEDUCTION, "also has MESSAGE"),
        (f"```python\n{PROGRAM}\n```\nINPUT: 1\nINPUT: 2", Mode.INDUCTION, "4 to 8 INPUT lines"),
        (f"```python\n{PROGRAM}\n```\n" + "INPUT: 1\n" * 9, Mode.INDUCTION, "found 9"),
        (f"```python\n{PROGRAM}\n```\n" + "INPUT: 1\n" * 4 + "MESSAGE: a\nMESSAGE: b", Mode.INDUCTION, "one MESSAGE"),
        ("```python\ndef f():\n    return 1\n```", Mode.INTEGER, "one non-empty PROBLEM"),
        ("PROBLEM: x\n```python\ndef f():\n    return 1\n```\nINPUT: 1", Mode.INTEGER, "also has INPUT"),
    ],
)
def test_malformed_proposals_say_what_is_wrong(reply, mode, match):
    with pytest.raises(ValueError, match=match):
        text.parse_proposal(reply, mode)


@pytest.mark.parametrize(
    ("reply", "mode", "answer"),
    [
        ("It sorts, so\nANSWER: [1, 2]", Mode.DEDUCTION, "[1, 2]"),
        ("ANSWER: 5\nno wait\nanswer: [1, 2]", Mode.DEDUCTION, "[1, 2]"),
        ("ANSWER: '\\u65e5'", Mode.DEDUCTION, '"\\u65e5"'),
        ("ANSWER: {'b': True, 'a': None}", Mode.DEDUCTION, '{"a": null, "b": true}'),
        ("ANSWER: -12", Mode.INTEGER, "-12"),
        ("INPUT: [2, 1], 1", Mode.ABDUCTION, "[2, 1], 1"),
        ("Here:\n```python\ndef f(x):\n    return x\n```", Mode.INDUCTION, "def f(x):\n    return x"),
    ],
)
def test_answers_are_read_canonically(reply, mode, answer):
    assert text.parse_answer(reply, mode) == answer


@pytest.mark.parametrize(
    ("reply", "mode"),
    [("[1, 2]", Mode.DEDUCTION), ("ANSWER:", Mode.DEDUCTION), ("ANSWER: {1, 2}", Mode.DEDUCTION),
     ("ANSWER: 12.0", Mode.INTEGER), ("ANSWER: True", Mode.INTEGER), ("INPUT: y", Mode.ABDUCTION),
     ("def f(x): return x", Mode.INDUCTION)],
)
def test_malformed_answers_are_value_errors(reply, mode):
    with pytest.raises(ValueError):
        text.parse_answer(reply, mode)


@pytest.mark.parametrize("answer", ["{1: 1}", "(1, 2)", "{1, 2}", "[(1,)]", "{'a': {2: 3}}", "b'x'", "1j"])
def test_answers_compare_by_json_type_exactly(answer):
    # f returns {'1': 1} or [1, 2]: an int-keyed dict, a tuple or a set is another value, never right
    with pytest.raises(ValueError, match="exactly JSON data"):
        text.parse_answer(f"ANSWER: {answer}", Mode.DEDUCTION)


def test_a_view_is_ascii_and_reads_back_as_exactly_the_recorded_values():
    # the observation charset shows neither '日' nor a lone surrogate: both are written as escapes
    task = Task(Proposal(Mode.INDUCTION, PROGRAM, ("'\\u65e5'", "'a'", "'\\ud800'", "'b'")),
                ('"\\u65e5\\u00e9"', '"a"', '"\\ud800"', '"b"'), held_out=(1, 3))
    view = text.problem_view(task)
    assert view.isascii() and "\\u65e5" in view
    assert text.read_view(view)["pairs"] == [("'\\u65e5'", "\u65e5\u00e9"), ("'\\ud800'", "\ud800")]


def test_views_show_only_what_solvers_may_see_and_read_back():
    deduction = Task(Proposal(Mode.DEDUCTION, PROGRAM, ("[3, 1, 2], 2",)), ("[1, 2]",))
    assert text.read_view(text.problem_view(deduction)) == {"mode": Mode.DEDUCTION, "program": PROGRAM,
                                                           "call": "[3, 1, 2], 2"}
    abduction = Task(Proposal(Mode.ABDUCTION, PROGRAM, ("[3, 1, 2], 2",)), ("[1, 2]",))
    view = text.problem_view(abduction)
    assert "[3, 1, 2]" not in view and text.read_view(view)["output"] == [1, 2]
    induction = Task(Proposal(Mode.INDUCTION, PROGRAM, ("[3], 1", "[4], 1", "[5], 1", "[6], 1"), "a hint"),
                     ("[3]", "[4]", "[5]", "[6]"), held_out=(1, 2))
    view = text.problem_view(induction)
    assert "sorted" not in view and "[4]" not in view and "[5]" not in view
    assert text.read_view(view)["pairs"] == [("[3], 1", [3]), ("[6], 1", [6])]
    assert text.read_view(view)["hint"] == "a hint"
    integer = Task(Proposal(Mode.INTEGER, "def f():\n    return 41 + 1", problem="What is 41 + 1?"), ("42",))
    view = text.problem_view(integer)
    assert "return" not in view and text.read_view(view)["problem"] == "What is 41 + 1?"


def test_prompts_name_the_format_and_the_reward():
    prompt = text.proposer_prompt(Mode.INDUCTION, 4, "learnability", 1.0, 1.0)
    assert "INPUT:" in prompt and "MESSAGE:" in prompt and "4·p·(1−p)" in prompt and "scores -1" in prompt
    assert "a function of the share" in text.proposer_prompt(Mode.DEDUCTION, 3, None, 2.0, 0.5)
    assert "ANSWER:" in text.solver_prompt(Mode.INTEGER) and "```python" in text.solver_prompt(Mode.INDUCTION)
