"""The shipped task set: its shape, the file format, and (in the sandbox) that its metadata is true."""

from __future__ import annotations

import pytest

from llm_zoo.envs.agentic_judge import grading
from llm_zoo.envs.agentic_judge.tasks import SOLUTION_KINDS, kind_of, load_tasks, parse_task

needs_sandbox = pytest.mark.bwrap


def test_the_set_has_enough_tasks_of_each_kind():
    tasks = load_tasks()
    assert len(tasks) >= 40
    assert sum(bool(t.brittle) for t in tasks.values()) >= 10
    assert sum(bool(t.weak) for t in tasks.values()) >= 10
    for task in tasks.values():
        assert {kind_of(n) for n in task.solutions} == set(SOLUTION_KINDS), task.id
        assert next(iter(task.solutions)) == "reference"
        assert task.entry and all(name in task.solutions["reference"] for name in task.entry), task.id
        assert grading.parse_examples(task.statement), f"{task.id}: no >>> examples in the statement"
        assert grading.test_names(task.visible) and grading.test_names(task.hidden), task.id
    kinds = {"brittle": set(), "weak": set()}
    for task in tasks.values():
        kinds["brittle"] |= set(task.brittle.values())
        kinds["weak"] |= set(task.weak.values())
    assert any("message" in why for why in kinds["brittle"]) and any("helper" in why for why in kinds["brittle"])
    assert any("float" in why for why in kinds["brittle"]) and any("order" in why for why in kinds["brittle"])


@needs_sandbox
def test_every_stored_solution_is_what_the_metadata_says():
    """References and alternatives pass the hidden tests, wrong ones fail them; brittle and weak are exact."""
    problems, checks = grading.validate_tasks(load_tasks().values(), max_workers=4)
    assert not problems, "\n".join(problems)
    assert len(checks) == sum(len(t.solutions) for t in load_tasks().values())
    brittle = [c for c in checks if c.name in load_tasks()[c.task].brittle]
    weak = [c for c in checks if c.name in load_tasks()[c.task].weak]
    assert brittle and all(c.hidden.all_passed and not c.visible.all_passed for c in brittle)
    assert weak and all(c.visible.all_passed and not c.hidden.all_passed for c in weak)


GOOD = """@@ meta
{"entry": "f", "weak": {"wrong_x": "why"}}
@@ statement
Write `f`.

>>> f()
1
@@ visible
from solution import f


def test_f():
    assert f() == 1
@@ hidden
from solution import f


def test_f():
    assert f() == 1
@@ solution reference
def f():
    return 1
@@ solution alt_y
f = lambda: 1
@@ solution wrong_x
def f():
    return 2
"""


def test_parse_task_reads_sections_and_metadata():
    task = parse_task("t", GOOD)
    assert task.entry == ("f",) and task.weak == {"wrong_x": "why"} and not task.brittle
    assert list(task.solutions) == ["reference", "alt_y", "wrong_x"]
    assert task.correct == ("reference", "alt_y") and task.wrong == ("wrong_x",)
    assert task.of_kind("alternative") == ("alt_y",)
    assert task.statement.startswith("Write `f`.")


@pytest.mark.parametrize(("edit", "match"), [
    (lambda s: s.replace("@@ meta\n", "junk\n@@ meta\n"), "start with"),
    (lambda s: s.replace("@@ hidden", "@@ visible"), "twice"),
    (lambda s: s.replace('"entry": "f", ', ""), "entry"),
    (lambda s: s.replace("@@ solution alt_y", "@@ solution other_y"), "solution name"),
    (lambda s: s.split("@@ solution wrong_x")[0], "at least one"),
    (lambda s: s.replace('"weak": {"wrong_x"', '"weak": {"alt_y"'), "weak"),
    (lambda s: s.replace('{"entry"', '{"bogus": 1, "entry"'), "meta must be"),
    (lambda s: s.replace('"why"}}', '"why"}'), "not JSON"),
])
def test_parse_task_names_the_problem(edit, match):
    with pytest.raises(ValueError, match=match):
        parse_task("t", edit(GOOD))


def test_kind_of_refuses_other_names():
    with pytest.raises(ValueError, match="reference"):
        kind_of("solution_1")


@needs_sandbox
def test_binary_search_hidden_timing_fails_every_scan_and_passes_the_searches():
    # test_fast bounds the CPU time of the solution's sandbox (read from /proc outside it) over 100 searches near
    # the list's end: a scan at C speed (items.index), one that sleeps first (wall time bought with no CPU, which
    # fooled the wall-clock comparison of near and far targets), and one handed to a thread all spend a second or
    # more there, where a search spends about 0.01 s
    from llm_zoo.sandbox import Workspace

    task = load_tasks()["binary_search"]
    index = "    try:\n        return items.index(target)\n    except ValueError:\n        return -1\n"
    scans = {"index_scan": "def find(items, target):\n" + index,
             "in_then_index": "def find(items, target):\n    return items.index(target) if target in items else -1\n",
             "sleep_then_scan": "import time\n\n\ndef find(items, target):\n    time.sleep(0.002)\n" + index,
             "thread_scan": "import queue\nimport threading\n\nasks, answers = queue.Queue(), queue.Queue()\n\n\n"
                            "def work():\n    while True:\n        items, target = asks.get()\n"
                            "        answers.put(items.index(target) if target in items else -1)\n\n\n"
                            "threading.Thread(target=work, daemon=True).start()\n\n\n"
                            "def find(items, target):\n    asks.put((items, target))\n    return answers.get()\n"}
    outcome = {}
    for name, source in {**scans, "reference": task.solutions["reference"],
                         "alt_bisect": task.solutions["alt_bisect"]}.items():
        with Workspace() as ws:
            ws.write_file(grading.SOLUTION_FILE, source)
            (report,) = grading.run_tests(ws, {grading.HIDDEN_FILE: task.hidden})
        outcome[name] = {r.name: r.ok for r in report.results}
    assert outcome["reference"] == outcome["alt_bisect"] == {"test_found": True, "test_missing": True, "test_fast": True}
    for name in scans:
        assert outcome[name] == {"test_found": True, "test_missing": True, "test_fast": False}, name


def test_every_judge_section_is_what_the_script_writes_and_leaves_no_task_of_calls_without_cases():
    """``scripts/judge_cases.py --check``: the judge's own cases are the correct solutions' agreed outputs on
    inputs derived from the shown ones; every task whose statement shows plain calls has at least two."""
    import runpy
    from pathlib import Path

    script = runpy.run_path(str(Path(__file__).resolve().parents[3] / "scripts" / "judge_cases.py"))
    assert script["main"](["--check"]) == 0
    for task in load_tasks().values():
        own = grading.parse_examples(task.judge)
        if task.id in ("stack", "lru_cache"):  # classes with state: no plain call to derive from
            assert own == []
        else:
            assert len(own) >= 2, task.id
            statement = {e.source for e in grading.parse_examples(task.statement)}
            assert not statement & {e.source for e in own}, task.id  # never a call the solver was shown

