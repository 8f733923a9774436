"""# Agentic judge

| | |
|---|---|
| Import | `from llm_zoo import agentic_judge_v0` |
| Registered as | `pettingzoo.make("aec", "llm_zoo/agentic_judge-v0")` |
| Agents | `solver`, `judge` (roles of the same names; the judge is frozen by default in training) |
| Turn order | the solver (tool calls keep the turn) until it submits, then the judge until its verdict |
| Action | a reply (`str`): tool calls `<tool_call>{"name": ..., "arguments": {...}}</tool_call>`, or text |
| Observation | `messages` (chat transcript) |
| Reward | at the end; solver: the judge's score (PASS 1, FAIL 0, ABSTAIN `abstain_score`), mixed with the visible pass rate by `visible_weight`; judge: 1 if its verdict agrees with the hidden tests, else 0 |
| Max turns | `max_tool_calls` per agent (default 32), plus retries; `max_steps` (default 256) in all |

A solver writes Python in a sandboxed workspace (`llm_zoo.sandbox`: bubblewrap, no network,
rlimits) for one task of the shipped set (`llm_zoo.envs.agentic_judge.tasks`, 40+ tasks, each
with visible tests, hidden tests and stored correct and wrong solutions). It submits, and a judge
who can look around in the submitted workspace decides whether the submission is correct. Hidden tests
define the truth, and it is computed where the solver's code cannot reach it: the env's own tests
(hidden and visible) run in the env's process, against a snapshot of the submission whose code runs
alone in the sandbox and answers calls with plain data only (`grading`, `llm_zoo.sandbox.plain`), so
neither the hidden tests nor their expected values ever enter a process that runs the solver's code
or any observation. A test that bounds how much work a solution does (`binary_search`'s `test_fast`)
reads `solution_cpu_seconds()`: the CPU time of every process and thread in the solution's sandbox,
read by the env from `/proc`, so a solution can neither pad its timings by sleeping nor hand its work
to a helper, and a busy machine neither fails a fast solution nor passes a slow one. Many tasks
have *brittle* visible tests (they reject a correct solution over an exact message, a helper's
name, a float's last digits or an order the statement leaves free) or *weak* ones (a wrong
solution passes them), so a judge that only reads the visible tests grades worse than one that
checks the statement (`benchmarks/judge_agreement.py`).

## Observation
`obs["messages"]`. The solver sees its system prompt (workflow, tools), then the task: its id, the
statement (with doctest-style examples) and the visible tests (`test_solution.py`, also in the
workspace), then its tool results. The judge's first message holds the task id and statement, the
judge's own cases (a few calls with their outputs, from the task file's `@@ judge` section, which the
solver never sees: a table of the cases the solver saw fails them), the solver's files, the visible tests, the visible tests' run on the submission, and the solver's
final reply as its note; then its own tool results. Everything the solver wrote and every output of
its code that the judge sees (files, its note, `read_file` and `run_python` results) is *quoted*:
each line behind `"| "`, a prefix none of the env's own lines has. Test reports are built by the env
from structured results; every string a program controls (messages, values, captured stdout,
exception and file names) is a Python `repr` or a single printable line of its own kind.

## Action
Any `str`. Tools (JSON schemas in the system prompt), all in the episode's workspace:

| Tool | Who | What |
|---|---|---|
| `write_file(path, content)` | solver | write a text file (`test_solution.py` is read-only) |
| `read_file(path)`, `list_files()` | both | read a file; list the files |
| `run_tests(file="test_solution.py")` | both | run a test module's `test*` functions and report each; the default runs the env's own copy of the visible tests, in the env's process, whatever is on disk; another file (one the judge writes with `run_python`, say) runs in a sandbox of its own, the solution in another, and its report says so |
| `run_python(code)` | both | run code with the workspace as cwd; exit status, stdout and stderr. The judge's code runs *beside* the solution: `import solution` gives a handle on it in a sandbox of its own (see below) |

The solver **submits** with a reply without tool calls (by convention `SUBMIT`, optionally with a
note for the judge); the workspace as it is then is the submission, and from then on the workspace
holds exactly the submitted files (at most 64, each under 1 MiB; links, fifos and the like are left
out) and the visible tests. From then on the solution's code never runs there again: every run of it
in review (the visible tests, a test file of the judge's, whatever the judge's `run_python` imports)
is a server on a fresh copy of the submission laid out as every grading copy is (the submitted files
alone: no copy the solution runs in holds the visible tests), in a sandbox of its own, answering the judge's program over a pipe with plain
data (`llm_zoo.sandbox.run_python_beside`). So the solution cannot tell review from grading by its
surroundings, cannot read the judge's programs, their expected values or their output, and cannot
write to what the judge reads: the judge reviews exactly what was graded. The judge **decides** with a
reply without tool calls whose last non-empty line is exactly `VERDICT: PASS`, `VERDICT: FAIL` or
`VERDICT: ABSTAIN` (`text.parse_verdict`). Only the judge's own reply is read for a verdict, never
tool results nor anything the solver wrote, and a reply with a tool call is never a verdict.

## Rewards
At the end: the solver gets `(1 - visible_weight) * score + visible_weight * visible_pass_rate`
with `score` = 1 for PASS, 0 for FAIL, `abstain_score` (default 0) for ABSTAIN (`solver_reward="judge"`,
the default). For experiments on the training signal, `solver_reward="visible"` pays the solver the
visible tests' pass rate instead, and `solver_reward="hidden"` the hidden tests' pass rate (an oracle no
real user has; it is computed in the env's process like the rest of the truth and enters no observation).
The judge still rules in every mode, and its verdict is recorded in `infos`. The judge gets 1 when
its verdict agrees with the hidden tests (PASS on a submission that passes them all, FAIL on one
that does not), else 0 (ABSTAIN never agrees). `infos` of both agents carry `task_id`, `group`
(the task id, for GRPO groups), `visible_pass_rate`, `visible_passed`/`visible_total`,
`hidden_pass` (the truth), `hidden_passed`/`hidden_total`, `verdict`, `verdict_source` (`judge`,
`default` or `forfeit`), `score`, `judge_agrees`, and `solution_kind` (`reference`,
`alternative`, `wrong`) with `solution_name` when the submitted `solution.py` is a stored one
(else None). Before the end these are None (score 0.0).

## Invalid moves
Malformed tool calls, unknown tools, bad arguments and refused paths come back as `error: ...` tool
results and keep the turn. A judge reply without a valid verdict line gets feedback and
`max_retries` more tries (default 1); after that the verdict is `default_verdict` (default
ABSTAIN, which scores `abstain_score`). An agent past its `max_tool_calls` budget is told to answer
without tools, then forfeits: a solver forfeit ends the episode with 0 for both; a judge forfeit
applies `default_verdict`. `max_steps` truncates the episode (infos then keep their None values).

## Options
`reset(options={"task": "<task id>"})` fixes the task (else it is drawn from `tasks` by the seed).
`options={"task": ..., "solution": "<stored solution name>"}` writes that stored solution as the
submission and starts at the judge's turn (the solver does not act): judge-only episodes for
evaluating or training judges. Other keys are ignored.

## Prompt
`prompt="full"` (default) declares the tools as JSON schemas; `prompt="compact"` gives the solver a
short system prompt with the tools by name and argument names (446 characters instead of 2806),
for small models whose cost grows with the prompt. The judge's prompt is the same in both.

## Version History
* v0: initial release.
"""

from __future__ import annotations

import random
from collections.abc import Mapping, Sequence
from typing import Any

from llm_zoo.envs.agentic_judge import grading, rules, text
from llm_zoo.envs.agentic_judge.rules import Verdict
from llm_zoo.envs.agentic_judge.tasks import Task, kind_of, load_tasks
from llm_zoo.envs.agentic_judge.tools import Submission, Workbench
from llm_zoo.envs.core import FastOrderEnforcingWrapper, InvalidReply, TextEnv, Tool
from llm_zoo.sandbox import SandboxUnavailable, sandbox_info

ENV_ID = "agentic_judge_v0"
AGENTS = ("solver", "judge")
REWARD_RANGE = (0.0, 1.0)
SOLUTION, VISIBLE = grading.SOLUTION_FILE, grading.VISIBLE_FILE
FILES_SHOWN_CHARS = 12_000  # of the solver's files in the judge's first message
UNSET = {"visible_pass_rate": None, "visible_passed": None, "visible_total": None, "hidden_pass": None,
         "hidden_passed": None, "hidden_total": None, "verdict": None, "verdict_source": None, "score": 0.0,
         "judge_agrees": None, "solution_kind": None, "solution_name": None}
"""The episode facts in ``infos`` before the submission and the verdict set them."""
LEARNING_TASKS = ("balance", "chunk",  # brittle: a correct alternative fails the visible tests
                  "caesar", "count_islands",  # weak: a wrong solution passes them
                  "binary_search", "count_vowels")  # neither
"""The tasks of the default training (``llm-zoo train agentic_judge_v0``): the first two (by id) of each kind, so a
tiny model learns their 24 stored solutions by heart in its warm start."""
SOLVER_REWARDS = ("judge", "visible", "hidden")
"""What the solver can be paid (``solver_reward``): the judge's score, the visible or the hidden tests' pass rate."""
PROMPTS = ("full", "compact")
"""The solver's system prompt styles (``prompt``)."""
BASE_DEFAULTS = {"max_reply_chars": 16384, "max_message_chars": 32768, "max_tool_calls": 32, "max_steps": 256}
"""This env's defaults for the base options: a reply may carry a whole file; the judge's first message is long."""


class raw_env(TextEnv):  # noqa: N801 - PettingZoo's module pattern names the class raw_env
    """A solver and an agentic judge on a sandboxed coding task; see the module docstring.

    Args:
        tasks: Task ids to draw from (default: the whole shipped set).
        visible_weight: Weight of the visible pass rate in the solver's reward, in [0, 1].
        default_verdict: Verdict applied when the judge gives none after its retries.
        abstain_score: The solver's score for an ABSTAIN verdict.
        python_timeout_s: Wall-clock limit of each ``run_python`` call.
        tests_timeout_s: Wall-clock limit of each test run (each test also has `grading.PER_TEST_S`, 4 s).
        allow_unsandboxed: Run code without bubblewrap where it is missing (unsafe; warned). Without
            it, making the env on such a host raises :class:`llm_zoo.sandbox.SandboxUnavailable`.
        solver_reward: What the solver is paid: ``"judge"`` (the judge's score, mixed by ``visible_weight``),
            ``"visible"`` (the visible tests' pass rate) or ``"hidden"`` (the hidden tests' pass rate: an oracle).
        prompt: The solver's system prompt: ``"full"`` (tools as JSON schemas) or ``"compact"`` (tools by name).
        **kwargs: The base options of :class:`llm_zoo.envs.core.TextEnv`; here ``max_reply_chars``
            defaults to 16384, ``max_message_chars`` to 32768, ``max_tool_calls`` to 32 and
            ``max_steps`` to 256.
    """

    metadata = {"render_modes": ["human", "ansi"], "name": ENV_ID, "is_parallelizable": False}
    reset_options = ("task", "solution")
    possible_agents = list(AGENTS)

    def __init__(self, *, tasks: Sequence[str] | None = None, visible_weight: float = 0.0,
                 default_verdict: str = "ABSTAIN", abstain_score: float = 0.0, python_timeout_s: float = 5.0,
                 tests_timeout_s: float = 20.0, allow_unsandboxed: bool = False, solver_reward: str = "judge",
                 prompt: str = "full", **kwargs: Any) -> None:
        known = load_tasks()
        self.task_ids = tuple(known) if tasks is None else tuple(tasks)
        unknown = [t for t in self.task_ids if t not in known]
        if not self.task_ids or unknown or isinstance(tasks, str):
            raise ValueError(f"tasks must be a non-empty list of task ids of the shipped set; got {tasks!r}"
                             + (f" (unknown: {unknown[:5]})" if unknown else ""))
        if not isinstance(visible_weight, (int, float)) or not 0.0 <= visible_weight <= 1.0:
            raise ValueError(f"visible_weight must be a number in [0, 1]; got {visible_weight!r}")
        if default_verdict not in Verdict.__members__:
            raise ValueError(f"default_verdict must be one of {list(Verdict.__members__)}; got {default_verdict!r}")
        if not isinstance(abstain_score, (int, float)) or not 0.0 <= abstain_score <= 1.0:
            raise ValueError(f"abstain_score must be a number in [0, 1]; got {abstain_score!r}")
        for name, value in (("python_timeout_s", python_timeout_s), ("tests_timeout_s", tests_timeout_s)):
            if not isinstance(value, (int, float)) or not 0 < value <= 600:
                raise ValueError(f"{name} must be a number of seconds in (0, 600]; got {value!r}")
        if solver_reward not in SOLVER_REWARDS:
            raise ValueError(f"solver_reward must be one of {list(SOLVER_REWARDS)}; got {solver_reward!r}")
        if prompt not in PROMPTS:
            raise ValueError(f"prompt must be one of {list(PROMPTS)}; got {prompt!r}")
        if not allow_unsandboxed and not sandbox_info().available:
            raise SandboxUnavailable(sandbox_info().problem)
        self.tasks: Mapping[str, Task] = known
        self.visible_weight = float(visible_weight)
        self.default_verdict = Verdict(default_verdict)
        self.abstain_score = float(abstain_score)
        self.solver_reward = solver_reward
        self.prompt = prompt
        self.sandbox_options = {"python_timeout_s": float(python_timeout_s), "tests_timeout_s": float(tests_timeout_s),
                                "allow_unsandboxed": bool(allow_unsandboxed)}
        self.possible_agents = list(AGENTS)
        self._bench: Workbench | None = None
        self._tools: dict[str, tuple[Tool, ...]] = {}
        super().__init__(**{**BASE_DEFAULTS, **kwargs})
        # stored solution text -> name, per task: recognises a submission of a stored solution
        self._stored = {t: {_normal(code): name for name, code in task.solutions.items()} for t, task in known.items()}

    # ---- hooks ----------------------------------------------------------------------------

    def system_prompt(self, agent: str) -> str:
        if agent == "solver":
            return text.solver_prompt() if self.prompt == "full" else text.compact_solver_prompt()
        return text.judge_prompt()

    def describe_tools(self, agent: str, tools: Sequence[Tool]) -> str:
        if agent == "solver" and self.prompt == "compact":
            return text.compact_tools(tools)
        return super().describe_tools(agent, tools)

    def start(self, rng: random.Random, options: Mapping[str, Any] | None) -> str:
        options = dict(options or {})  # other keys are ignored, as PettingZoo's api_test expects
        task_id = options.get("task", rng.choice(self.task_ids))
        if task_id not in self.tasks:
            raise ValueError(f"options['task'] must be a task id of the shipped set, e.g. {self.task_ids[0]!r}; "
                             f"got {task_id!r}")
        self.task = self.tasks[task_id]
        preset = options.get("solution")
        if preset is not None and preset not in self.task.solutions:
            raise ValueError(f"options['solution'] must name a stored solution of {task_id!r}, one of "
                             f"{list(self.task.solutions)}; got {preset!r}")
        self._bench = Workbench(self.task, **self.sandbox_options)
        self._tools = {agent: self._bench.tools(agent) for agent in AGENTS}
        self._verdict_misses = 0
        for agent in AGENTS:
            self.infos[agent].update(UNSET, task_id=task_id, group=task_id)
        self.tell("solver", text.task_message(task_id, self.task.statement, VISIBLE, self.task.visible, SOLUTION))
        self.narrate(f"Task {task_id}" + (f"; preset submission {preset!r}" if preset else ""))
        if preset is None:
            return "solver"
        self._bench.workspace.write_file(SOLUTION, self.task.solutions[preset])
        self.tell("solver", f"The stored solution {preset!r} was submitted for you; the judge reviews it.")
        self._submit("")
        return "judge"

    def tools(self, agent: str) -> Sequence[Tool]:
        return self._tools.get(agent, ())

    def parse(self, agent: str, reply: str) -> tuple[Verdict | str, str]:
        if agent == "solver":
            return (text.SUBMIT, reply)
        verdict = text.parse_verdict(reply)
        if verdict is not None:
            return (verdict, "judge")
        self._verdict_misses += 1
        if self._verdict_misses <= self.max_retries:
            raise InvalidReply(text.verdict_feedback(reply))
        return (self.default_verdict, "default")

    def play(self, agent: str, move: tuple[Verdict | str, str]) -> None:
        if agent == "solver":
            self._submit(move[1])
            self.pass_turn("judge")
            return
        verdict, source = move
        assert isinstance(verdict, Verdict)
        rewards = self._outcome(verdict, source)
        for a in AGENTS:
            self.tell(a, text.verdict_line(verdict, source))
        self.narrate(f"-- verdict {verdict.value} ({source}); hidden tests pass: {self.infos['judge']['hidden_pass']}")
        self.end(rewards)

    def forfeit_rewards(self, agent: str) -> dict[str, float]:
        if agent == "solver":  # no submission: nothing to judge
            return {"solver": 0.0, "judge": 0.0}
        return self._outcome(self.default_verdict, "forfeit")

    def on_close(self) -> None:
        if self._bench is not None:
            self._bench.close()
            self._bench = None

    # ---- internals ------------------------------------------------------------------------

    def _submit(self, note: str) -> None:
        """Freeze the submission, record its test results, and show it to the judge."""
        assert self._bench is not None, "the workbench exists from reset to close"
        sub: Submission = self._bench.submit()
        name = self._stored[self.task.id].get(_normal(sub.files.get(SOLUTION, b"").decode("utf-8", "replace")))
        facts = {"visible_pass_rate": sub.visible.pass_rate, "visible_passed": sub.visible.passed,
                 "visible_total": sub.visible.total, "hidden_pass": sub.hidden.all_passed,
                 "hidden_passed": sub.hidden.passed, "hidden_total": sub.hidden.total, "solution_name": name,
                 "solution_kind": kind_of(name) if name is not None else None}
        for agent in AGENTS:
            self.infos[agent].update(facts)
        shown, not_shown = sub.text_files()
        self.tell("judge", text.handoff_message(
            self.task.id, self.task.statement, text.files_block(shown, not_shown, FILES_SHOWN_CHARS), VISIBLE,
            self.task.visible, sub.visible.format(), note, self.task.judge))
        if self.render_mode is not None:
            self.narrate(f"-- submitted {sorted(sub.files)}: visible {sub.visible.passed}/{sub.visible.total}, "
                         f"hidden {sub.hidden.passed}/{sub.hidden.total}, stored solution {name}")

    def _outcome(self, verdict: Verdict, source: str) -> dict[str, float]:
        """Record the verdict's facts in infos and return both agents' rewards."""
        info = self.infos["judge"]
        hidden_pass = bool(info["hidden_pass"])
        judge_score = rules.score(verdict, self.abstain_score)
        facts = {"verdict": verdict.value, "verdict_source": source, "score": judge_score,
                 "judge_agrees": rules.agrees(verdict, hidden_pass)}
        for agent in AGENTS:
            self.infos[agent].update(facts)
        if self.solver_reward == "visible":
            solver = float(info["visible_pass_rate"] or 0.0)
        elif self.solver_reward == "hidden":  # the oracle: computed here, never shown to anyone
            solver = (info["hidden_passed"] or 0) / max(1, info["hidden_total"] or 0)
        else:
            solver = rules.solver_reward(judge_score, info["visible_pass_rate"] or 0.0, self.visible_weight)
        return {"solver": solver, "judge": rules.judge_reward(verdict, hidden_pass)}


def _normal(code: str) -> str:
    """Normalise source for recognising a stored solution: no trailing spaces, no blank edges."""
    return "\n".join(line.rstrip() for line in code.strip().splitlines())


def env(**kwargs: Any) -> FastOrderEnforcingWrapper:
    """Make the agentic judge env with the standard wrappers (call-order checks); see :class:`raw_env`."""
    return FastOrderEnforcingWrapper(raw_env(**kwargs))
