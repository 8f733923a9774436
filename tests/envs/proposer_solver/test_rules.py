"""proposer_solver rules: the reward formulas, static program checks, argument reading, the harness format."""

from __future__ import annotations

import json
import marshal

import pytest

from llm_zoo.envs.proposer_solver.rules import (
    INVALID_REASONS,
    Conditions,
    Mode,
    Proposal,
    Run,
    Task,
    TaskInvalid,
    azr_reward,
    call_values,
    canonical,
    check_outputs,
    check_program,
    check_run,
    harness_job,
    held_out_count,
    imported_modules,
    learnability,
    read_arguments,
    read_report,
    read_value,
)


@pytest.mark.parametrize(("correct", "expected"), [(0, 0.0), (1, 0.75), (2, 1.0), (3, 0.75), (4, 0.0)])
def test_learnability_of_k_right_out_of_four(correct, expected):
    assert learnability(correct / 4) == pytest.approx(expected)


def test_azr_reward_is_zero_at_the_ends():
    assert [azr_reward(k / 4) for k in range(5)] == [0.0, 0.75, 0.5, 0.25, 0.0]


@pytest.mark.parametrize(
    ("source", "code"),
    [
        ("def f(x)\n    return x", "syntax"),
        ("def g(x):\n    return x", "no_f"),
        ("class f:\n    pass", "no_f"),
        ("import os\ndef f(x):\n    return x", "import"),
        ("from os import path\ndef f(x):\n    return x", "import"),
        ("from . import x\ndef f(x):\n    return x", "import"),
        ("import socket, math\ndef f(x):\n    return x", "import"),
        ("def f(x):\n    return eval('1')", "forbidden"),
        ("def f(x):\n    return open('a').read()", "forbidden"),
        ("def f(x):\n    return __import__('os').getcwd()", "forbidden"),
        ("def f(x):\n    return ().__class__.__bases__", "forbidden"),
        ("def f(x):\n    return getattr(x, 'real')", "forbidden"),
        ("import collections\ndef f(x):\n    return len(collections._sys.modules)", "forbidden"),
        ("def f(x):\n    return '{0.__globals__}'.format(f)", "forbidden"),
        ("def f(x):\n    return '{0[__builtins__]}'.format_map(x)", "forbidden"),
        ("def f(x):\n    return '{:{0.real}}'.format(x)", "forbidden"),
        ("def f(x):\n    s = '{}'\n    return s.format(x)", "forbidden"),
        ("def f(x):\n    return str.format('{0.real}', x)", "forbidden"),
        ("def f(x):\n    def g():\n        yield 1\n    return g().gi_frame.f_back", "forbidden"),
        ("def f(x):\n    return type(x).mro()", "forbidden"),
        ("def f(x):\n    x._hidden = 1\n    return x", "forbidden"),
        ("def f(x):\n    match x:\n        case object(__class__=c):\n            return c\n    return 0", "forbidden"),
        ("def f(x):\n    return hasattr(x, 'real')", "forbidden"),
        ("A = type('A', (), {'__match_args__': ('__globals__',)})\ndef f(x):\n    match x:\n        case A(g):\n"
         "            return g\n    return 0", "forbidden"),
        ("def f(x):\n    int = type('A', (), {})\n    match x:\n        case int(g):\n            return g\n"
         "    return 0", "forbidden"),
        ("from collections import namedtuple as str\ndef f(x):\n    match x:\n        case str(g):\n"
         "            return g\n    return 0", "forbidden"),
        ("def f(x):\n    return x" + " " * 3000, "too_long"),
    ],
)
def test_check_program_names_the_broken_rule(source, code):
    with pytest.raises(TaskInvalid) as info:
        check_program(source)
    assert info.value.code == code and info.value.code in INVALID_REASONS


def test_check_program_accepts_allowed_imports_and_a_custom_allowlist():
    check_program("import math\nfrom collections import Counter\ndef f(x):\n    return math.gcd(x, 4)")
    check_program("import re\ndef f(s):\n    return re.compile('a+').findall(s)")  # compile as an attribute
    check_program("class Node:\n    def __init__(self, v):\n        self.v = v\ndef f(x):\n    return Node(x).v")
    check_program("def f(x):\n    return '{} {name:>{w}} {0!r:5}'.format(x, name='a', w=3)")  # a plain template
    check_program("def f(x):\n    match x:\n        case complex(real=r):\n            return r\n    return 0")
    check_program("def f(x):\n    match x:\n        case int(n) | str(n):\n            return n\n    return 0")
    with pytest.raises(TaskInvalid, match="__init__"):
        check_program("class A(int):\n    def __init__(self):\n        super().__init__()\ndef f(x):\n    return x")
    with pytest.raises(TaskInvalid, match="import"):
        check_program("import math\ndef f(x):\n    return x", allowed_imports=("re",))
    check_program("import os\ndef f(x):\n    return x", allowed_imports=("os",))


@pytest.mark.parametrize(
    ("text", "canonical_source"),
    [("[3, 1, 2], 2", "[3, 1, 2], 2"), ("  'ab'  ", "'ab'"), ("", ""), ("{'a': (1, 2)}", "{'a': (1, 2)}"),
     ("-5", "-5"), ("None, True", "None, True"), ("{1,2}", "{1, 2}")],
)
def test_read_arguments_canonicalises_literals(text, canonical_source):
    assert read_arguments(text) == canonical_source


@pytest.mark.parametrize("text", ["x", "1, y=2", "*[1]", "[1] * 3", "__import__('os')", "1)", "(", "len([])",
                                  "1" * 300])
def test_read_arguments_rejects_non_literals(text):
    with pytest.raises(ValueError):
        read_arguments(text)


def test_read_value_takes_python_or_json_and_canonical_rejects_non_json():
    assert read_value("[1, 'a', None]") == [1, "a", None]
    assert read_value("[true, null]") == [True, None]
    assert read_value("`3`") == 3
    with pytest.raises(ValueError):
        read_value("f(3)")
    assert canonical([1, 2]) == "[1, 2]" and canonical({"b": 1, "a": 2}) == '{"a": 2, "b": 1}'
    # exactly JSON data: what json.dumps would coerce ({1: 1} to {"1": 1}, a tuple to a list) is not
    assert canonical((1, 2)) is None and canonical({1: 1}) is None and canonical([{"a": (1,)}]) is None
    assert canonical({1, 2}) is None and canonical(float("nan")) is None and canonical(True) == "true"


def test_the_harness_job_is_plain_data_with_argument_values_and_the_modules_to_load():
    job = harness_job([("import math\nfrom collections import abc\ndef f(x, s):\n    return x", ["[1, (2,)], {3}", ""],
                        Conditions(7, 1e9, 5))], nonce="n0", timeout_s=1.0, allowed_imports=["math"], max_output=100)
    run = job["runs"][0]
    assert json.loads(json.dumps(job)) == job and job["nonce"] == "n0" and job["allowed"] == ["math"]
    assert marshal.loads(bytes.fromhex(run["calls"])) == [([1, (2,)], {3}), ()]
    assert run["preload"] == ["math", "collections", "collections.abc"] and (run["hash_seed"], run["pad"]) == (7, 5)
    assert call_values("1, 'a'") == (1, "a") and imported_modules("def f(:") == []


def test_the_harness_report_is_read_strictly():
    good = {"nonce": "n", "runs": [{"reason": None, "detail": "", "calls": [["ok", "1"]], "refused": []},
                                   {"reason": "timeout", "detail": "stopped"}]}
    runs = read_report(json.dumps(good), "n", 2)
    assert runs == [Run(None, "", (("ok", "1"),)), Run("timeout", "stopped")]
    assert check_run(runs[0], 1) == (("ok", "1"),)
    with pytest.raises(TaskInvalid, match="stopped") as info:
        check_run(runs[1], 1)
    assert info.value.code == "timeout"
    refused = Run(None, "", (("ok", "1"),), ("open('/etc/passwd')", "os.system('id')"))
    with pytest.raises(TaskInvalid, match=r"tried open\('/etc/passwd'\) \(and 1 more\)") as info:
        check_run(refused, 1)
    assert info.value.code == "forbidden"
    with pytest.raises(TaskInvalid) as info:
        check_run(Run(None, "", (("ok", "1"),), ("import of 'os' at run time",)), 1)
    assert info.value.code == "import"
    damaged = [json.dumps({**good, "nonce": "other"}), json.dumps(good)[:-1], json.dumps({**good, "runs": good["runs"][:1]}),
               json.dumps({**good, "runs": []}),
               json.dumps({"nonce": "n", "runs": [{"reason": "hacked", "detail": ""}] * 2}),
               json.dumps({"nonce": "n", "runs": [{"reason": None, "detail": "", "calls": [["ok", 1]]}] * 2}),
               'noise\n' + json.dumps(good)]
    for bad in damaged:
        with pytest.raises(ValueError):
            read_report(bad, "n", 2)


@pytest.mark.parametrize(
    ("results", "mode", "code"),
    [([("error", "ZeroDivisionError: x")], Mode.DEDUCTION, "error"),
     ([("error", "MemoryError: ")], Mode.DEDUCTION, "memory"),
     ([("not_json", "tuple")], Mode.DEDUCTION, "not_json"),
     ([("ok", '"' + "y" * 300 + '"')], Mode.DEDUCTION, "output_too_long"),
     ([("too_long", "5000 bytes as marshal data")], Mode.DEDUCTION, "output_too_long"),
     ([("ok", "true")], Mode.INTEGER, "not_integer"),
     ([("ok", "1.5")], Mode.INTEGER, "not_integer"),
     ([("ok", str(10**16))], Mode.INTEGER, "not_integer")],
)
def test_check_outputs_names_the_problem(results, mode, code):
    with pytest.raises(TaskInvalid) as info:
        check_outputs(results, mode)
    assert info.value.code == code


def test_task_ids_and_held_out_split():
    proposal = Proposal(Mode.INDUCTION, "def f(x):\n    return x", ("1", "2", "3", "4", "5"))
    task = Task(proposal, ("1", "2", "3", "4", "5"), held_out=(1, 3))
    assert task.shown == (0, 2, 4) and held_out_count(5) == 2 and held_out_count(8) == 4
    assert task.problem_id(7).startswith("7/") and task.problem_id(7) == Task(proposal, task.outputs, (1, 3)).problem_id(7)
    assert task.problem_id(7) != Task(proposal, task.outputs, (0, 3)).problem_id(7)
    assert task.to_info()["held_out"] == [1, 3]
