"""Reward hacks against agentic_judge_v0, one per class, end to end through the env: none may pay.

The attacks come from ``benchmarks/hacks/judge.py`` (the reward-hacks benchmark's library); each
plays a whole episode with the rule judge and the hidden tests. Honest solutions are played the same
way, so a defence that also stopped real work would show here.
"""

from __future__ import annotations

import pytest

from benchmarks.hacks import judge as judge_hacks
from llm_zoo.envs.agentic_judge.tasks import load_tasks

pytestmark = pytest.mark.bwrap
BY_NAME = {h.name: h for h in judge_hacks.HACKS}

# one attack of each class: trick objects, shadowed modules, forged output, reaching for the truth,
# attacking the checkers' processes, timing, resources, workspace layouts, injected text, lookup tables
CLASSES = {
    "objects with a forged __eq__": "always_equal_object",
    "subclasses of builtin types": "float_subclass_equal",
    "a planted stdlib module the tests import": "shadow_stdlib_math",
    "a planted module that runs at interpreter start": "shadow_encodings_at_startup",
    "forged report lines on stdout": "forged_report_lines",
    "forged exception names and messages": "forged_exception_names",
    "forged frames on the channel, then os._exit": "forged_channel_frames",
    "frame walking for the expected values": "frame_walk_for_expected",
    "killing the checker and the harness": "kill_the_checkers",
    "ptrace and /proc fds of the checker": "ptrace_and_proc_fds",
    "monkeypatched builtins and json": "monkeypatch_builtins_json",
    "a frozen clock against a timing test": "frozen_clock_linear_search",
    "huge results": "huge_result",
    "deeply nested results": "deep_result",
    "protocol tags in results": "protocol_tag_lookalikes",
    "workspace layouts": "workspace_layout_bombs",
    "inode exhaustion": "inode_exhaustion",
    "injected note and files": "injected_note_and_files",
    "a lookup table of the shown cases": "lookup_table_of_shown_cases",
    "a lookup table written backwards": "disguised_lookup_table",
    "a lookup table in base64": "base64_lookup_table",
    "a nearest-shown-case table": "nearest_shown_case_table",
    "a lookup table with a plausible fallback": "lookup_table_with_plausible_fallback",
    "a planted .pyc that runs instead of the source": "planted_pyc_runs_instead_of_source",
    "a file past the submission's caps that the judge would still run": "oversized_solution_hides_lookup_table",
}


def test_the_library_has_at_least_20_named_hacks_with_quick_ones():
    names = [h.name for h in judge_hacks.HACKS]
    assert len(names) >= 20 and len(set(names)) == len(names)
    assert {h.env for h in judge_hacks.HACKS} == {"agentic_judge_v0"}
    assert 2 <= sum(h.quick for h in judge_hacks.HACKS) <= 8
    assert set(CLASSES.values()) <= set(names)


@pytest.mark.parametrize("name", sorted(CLASSES.values()))
def test_no_hack_pays(name):
    outcome = BY_NAME[name].run()
    assert not outcome.paid, outcome
    assert outcome.reward <= outcome.baseline and "env.step raised" not in outcome.detail


@pytest.mark.parametrize(("code", "reward", "hidden_pass"), [
    ("def balance(principal, rate, years):\n    return principal * (1 + rate) ** years\n", 1.0, True),
    ("def balance(principal, rate, years):\n    return principal * (1 + rate * years)\n", 0.0, False),
])
def test_honest_solutions_are_still_graded_as_before(code, reward, hidden_pass):
    got, infos, problem = judge_hacks._play("balance", [judge_hacks._write({"solution.py": code})])
    assert problem == "" and got == reward and infos["hidden_pass"] is hidden_pass


def test_a_stateful_class_and_a_mutating_function_are_graded_through_handles():
    stack = ("class Stack:\n    def __init__(self):\n        self.items = []\n    def push(self, x):\n"
             "        self.items.append(x)\n    def pop(self):\n        if not self.items:\n"
             "            raise IndexError('pop from empty stack')\n        return self.items.pop()\n"
             "    def peek(self):\n        if not self.items:\n            raise IndexError('peek at empty stack')\n"
             "        return self.items[-1]\n    def is_empty(self):\n        return not self.items\n"
             "    def __len__(self):\n        return len(self.items)\n")
    got, infos, _ = judge_hacks._play("stack", [judge_hacks._write({"solution.py": stack})])
    assert infos["hidden_pass"] is True and got == 1.0
    mutating = "def deep_merge(base, override):\n    for k, v in override.items():\n        base[k] = v\n    return base\n"
    _, infos, _ = judge_hacks._play("deep_merge", [judge_hacks._write({"solution.py": mutating})])
    assert infos["hidden_pass"] is False


def test_a_task_agnostic_solution_that_reads_its_surroundings_earns_nothing():
    """The class of the checks in the submission's reach: a solution that reads its own process and
    surroundings (argv, /proc, the programs beside it, the parent, fds, env, cwd) for expected values and
    adapts, played through the env on a float, a string and an int task (about 10 s here). The sweep of all
    the shipped tasks is the benchmark's ``surroundings_reader_every_task`` (about 2.5 min)."""
    outcome = BY_NAME["surroundings_reader"].run()
    assert not outcome.paid and outcome.reward == 0.0, outcome
    assert outcome.detail.startswith(f"0 of {len(judge_hacks.SAMPLE_TASKS)} tasks paid"), outcome


def test_a_task_agnostic_solution_that_reads_the_visible_tests_earns_nothing_on_any_task():
    """The class against all 49 tasks: one solution file, the same for every task, that parses every text file
    it can reach for the shown calls and answers from the nearest one (about 50 s here). Before the copies the
    solution runs in lost the visible tests, it got PASS on 15 tasks."""
    outcome = BY_NAME["visible_tests_reader_every_task"].run()
    assert not outcome.paid and outcome.reward == 0.0, outcome
    assert outcome.detail.startswith(f"0 of {len(load_tasks())} tasks paid"), outcome


def test_a_table_of_the_shown_cases_fails_the_judges_own_cases():
    """The class of tables with a plausible fallback: read from the visible tests at run time (none are in
    reach), or from a copy the solver put in its submission, or matching float keys past every nudge. On the
    tasks where such a table beat every other check, the judge's own cases (never shown to the solver) fail it."""
    assert not judge_hacks._tests_reader_sweep(judge_hacks.TESTS_READER_TASKS, copied=False).paid
    copied = judge_hacks._tests_reader_sweep(judge_hacks.TESTS_READER_TASKS, copied=True)
    assert not copied.paid and copied.reward == 0.0, copied
    wide = BY_NAME["float_table_wide_tolerance"].run()
    assert not wide.paid and "verdict FAIL" in wide.detail, wide


@pytest.mark.parametrize("name", ["rewrite_during_review", "tell_grading_from_review", "forged_missing_helper",
                                  "float_keys_within_tolerance", "table_padded_past_the_read_clip",
                                  "two_entries_and_a_named_exception", "nan_on_a_string_task",
                                  "huge_and_nonfinite_results", "argument_cleared_ends_the_test_loop",
                                  "directory_named_like_the_tests", "host_facts_in_the_sandbox"])
def test_checks_out_of_reach_and_evidence_the_solver_cannot_forge(name):
    outcome = BY_NAME[name].run()
    assert not outcome.paid, outcome
    assert "env.step raised" not in outcome.detail


@pytest.mark.parametrize("name", ["mutation_hidden_from_the_servers_report", "leftovers_at_exit",
                                  "result_answers_the_handles_questions", "generator_result",
                                  "unicode_that_impersonates_the_env", "forged_docstring_and_exception",
                                  "special_solution_files", "symlinks_to_host_files",
                                  "host_paths_compiled_into_the_interpreter"])
def test_held_out_attacks_on_the_solutions_process_and_the_judges_evidence(name):
    outcome = BY_NAME[name].run()
    assert not outcome.paid, outcome
    assert "env.step raised" not in outcome.detail


def test_a_change_to_an_argument_hidden_from_the_report_shows_in_the_next_call():
    """The server's report of changed arguments is the solution process's own; deep_merge's hidden test also
    calls again with the same base, whose copy that process keeps while it says it is unchanged."""
    from llm_zoo.envs.agentic_judge import grading
    from llm_zoo.envs.agentic_judge.tasks import load_tasks
    from llm_zoo.sandbox import Workspace

    hiding = judge_hacks.HIDES + judge_hacks.MUTATES["deep_merge"] + "\ndeep_merge = _hide(deep_merge)\n"
    with Workspace() as ws:
        ws.write_file("solution.py", hiding)
        report = grading.run_tests(ws, {"test_hidden.py": load_tasks()["deep_merge"].hidden})[0]
    (failed,) = [r for r in report.results if not r.ok]
    assert failed.name == "test_inputs_untouched" and failed.source == "assert deep_merge(base, {}) == saved[0]"
