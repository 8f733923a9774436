"""# Proposer-solver

| | |
|---|---|
| Import | `from llm_zoo import proposer_solver_v0` |
| Registered as | `pettingzoo.make("aec", "llm_zoo/proposer_solver-v0")` |
| Agents | `proposer` (role `proposer`), `solver_0` … `solver_{n-1}` (role `solver`; `num_solvers=4`) |
| Turn order | the proposer once, then each solver once, in order |
| Action | a reply (`str`): a task in the mode's format (proposer), an answer (solver) |
| Observation | `messages` (chat transcript) |
| Reward | solver: 1 if right, else 0; proposer: 4·p·(1−p) for pass rate p, or −`invalid_penalty` |
| Max turns | 1 + `num_solvers`, plus retries |

A self-calibrating curriculum with verifiable tasks. The proposer gets a seed topic (one of the 40
in `topics.txt`, drawn from the seed) and a mode, and writes a task: a short deterministic Python
program defining `f` with its input(s), or in `integer` mode a word problem with a program `f()`
computing its integer answer. The env validates the task in the sandbox; each solver then answers
on its own, and answers are checked by running programs or by exact comparison, never by a model.
The proposer earns most for tasks that about half of the solvers get right.

| Mode | Solvers see | Solvers answer | Correct when |
|---|---|---|---|
| `deduction` | f and an input | `ANSWER: <value>` | the value equals f's output |
| `abduction` | f and an output | `INPUT: <arguments>` | f on those arguments gives the output |
| `induction` | outputs of f on half of 4–8 inputs, the proposer's hint | a python code block defining f | it gives f's outputs on all the inputs |
| `integer` | a word problem (a story in `story.py`'s grammar) | `ANSWER: <integer>` | the integer equals the answer the env reads from the story, which the proposer's f() must return |

## Observation
`obs["messages"]` holds what the agent may see. The proposer: the system prompt (the mode's task
format, the rules a task must keep, the reward), then its topic and mode, and once the episode ends
its result (how many solvers were right, never their replies). A solver: the system prompt (the
mode's answer format), then the problem, and once the episode ends its own verdict. No solver sees
another's reply, the proposer's reply, the held-out pairs, or integer mode's program.

## Action
The proposer's reply holds exactly one fenced python block and the mode's `KEY:` lines outside it
(other text is ignored): deduction and abduction one `INPUT:` line of f's arguments as Python
literals (`INPUT: [3, 1, 2], 2`); induction 4 to 8 different `INPUT:` lines and at most one
`MESSAGE:` hint; integer one `PROBLEM:` (it may run over several lines). A valid task's program has
at most 2000 characters, defines `f` at the top level, imports only from `rules.ALLOWED_IMPORTS`
(`allowed_imports=`), names no `eval`/`exec`/`open`/`getattr`/… and no dunder, reads no attribute
`rules.DENIED_ATTRIBUTES` matches (`x.__class__`, `x._cache`, `g.gi_frame`, `.format` of anything
but a plain string literal), matches class patterns by position only for builtin types (`case
int(n)`; `__match_args__` would read any attribute), and, run eight times in the sandbox (`sandbox_timeout_s`,
`sandbox_memory_mb`), returns the same JSON data (at most 200 characters as JSON; an int in integer
mode) on every input: once under `rules.REFERENCE`, the fixed conditions its outputs are recorded
under, and seven times under conditions that vary all that must not matter (hash seed, clock, heap
layout, recursion limit, time zone, memory headroom, the seed `random` takes when given none). The solvers see the
task exactly as it is graded: values are shown as ASCII literals with escapes (`'\\u65e5'`), and a
task whose view an observation would change (a character outside `core.CHARSET`, a view past
`max_message_chars`) is invalid (`unseen`). The program runs with capabilities, not names
(`harness.py`): curated builtins and namespaces of the allowed modules, none of whose attributes
leads to `sys`, `os`, `builtins` or the import machinery, inside a harness process that also
refuses, at run time, every import outside the allowlist, file, process and system access and frame
and `gc` introspection, and sends its results on a channel the program cannot write. Answers that
run a program are checked as validation is: in abduction f runs on the solver's input, in induction
the solver's f on every input, eight times under the same kinds of conditions, and an answer is right
only if every run gives the recorded outputs. Deduction answers compare by JSON type exactly
(`{1: 1}` is not `{'1': 1}`, a tuple is not a list: such an answer is sent back as malformed). In
integer mode the env reads the answer from the PROBLEM itself, so it is a function of what the
solvers see: the PROBLEM is a story about one person and one kind of item in the sentence forms of
`story.FORMS` ("Ana has 12 apples." ... "Then Ana buys 3 bags of 4." ... "How many apples does Ana
have now?"), one quantity operation per sentence, in ASCII letters, digits, spaces and `. , ?`
only, numbers as digits up to `story.MAX_NUMBER`, the item one of `story.ITEMS`. A PROBLEM the
reader cannot read in full, every sentence matching exactly one form, is invalid (`undetermined`,
naming the first sentence it could not read and listing the forms): "I flipped a coin" is no story.
The recorded answer is the reading, and f() (run as any program is) must return it, else the task
is invalid (`disagrees`). A solver's reply ends with its `ANSWER:` or `INPUT:` line (the last
counts), or holds one python block (induction).

## Rewards
When the solvers have answered, each gets 1 if right and 0 otherwise, and the proposer gets
`proposer_reward` of the pass rate p: `"learnability"` (default, 4·p·(1−p): 0, .75, 1, .75, 0 for
0–4 right of 4), `"azr"` (1−p for 0<p<1, else 0) or any callable `p -> float`. An invalid task ends
the episode at once: the proposer gets −`invalid_penalty` (default 1), the solvers 0.

`infos` of every agent: `mode`, `topic`, `group`, `valid`, `pass_rate` (None for an invalid task),
`results` (solver -> right) and, for a valid task, `problem_id`. A solver's also has `answer` and
`correct` once it answered a valid task; the proposer's has `task` (program, inputs, outputs, held-out indices) or `invalid_reason` (a code of
`rules.INVALID_REASONS`: `format`, `syntax`, `import`, `timeout`, `nondeterministic`, …) with
`invalid_detail`. `group` is the hierarchical-GRPO comparison group: the problem id
(`"<seed>/<task hash>"`; `"<seed>/<topic>/<mode>"` while no valid task exists) for solvers, the
seed topic for the proposer.

## Invalid moves
A reply that does not follow the format (no python block, wrong number of `INPUT:` lines, an input
that is not a literal, a solver's program that breaks the rules) is answered with feedback and the
agent replies again, up to `max_retries` times (default 1). Then a proposer forfeits (reason
`format`, −`invalid_penalty`, the episode ends) and a solver is counted wrong (the others go on). A
task that is well formed but fails validation (a syntax error, a disallowed import, a timeout, …)
ends the episode with no retry.

## Options
`reset(options={"mode": "abduction", "topic": "recursion"})` fixes the episode's mode and topic.
`topics="training"` draws from the 30 training topics and `topics="held_out"` from the 10 others
(every fourth line of `topics.txt`, `HELD_OUT_TOPICS`), which a training run never sees: the
default training uses the first and its evaluation the second.

## Version History
* v0: initial release. Since then, without a change of name (valid deterministic tasks score as
  before): programs run in the sandboxed harness with run-time import and system refusals, and
  validation runs a program five times under different hash seeds, fake clocks and heap layouts.
  Then: programs run with capabilities (curated builtins and module namespaces) and may not read
  private attributes; outputs are recorded under fixed reference conditions and eight runs vary the
  recursion limit, time zone and entropy seed too; abduction and induction answers are checked over
  the same runs; answers compare by JSON type exactly; views are ASCII and a task its solvers would
  not see as graded is invalid; an integer-mode PROBLEM is a story in a small grammar whose answer the
  env reads from its text, and f() must agree.
"""

from __future__ import annotations

import random
from collections.abc import Callable, Mapping, Sequence
from importlib import resources
from typing import Any

from llm_zoo.envs.core import FastOrderEnforcingWrapper, InvalidReply, TextEnv, sanitize
from llm_zoo.envs.proposer_solver import text, verify
from llm_zoo.envs.proposer_solver.rules import (
    ALLOWED_IMPORTS,
    MODES,
    REWARD_FORMULAS,
    Mode,
    Proposal,
    Task,
    TaskInvalid,
    check_program,
    held_out_count,
)

ENV_ID = "proposer_solver_v0"
PROPOSER = "proposer"
TOPICS: tuple[str, ...] = tuple(
    line.strip() for line in (resources.files(__package__) / "topics.txt").read_text().splitlines() if line.strip())
"""The shipped seed topics, one of which each episode's proposer gets."""
HELD_OUT_TOPICS: tuple[str, ...] = TOPICS[3::4]
"""Every fourth shipped topic (10 of 40): never used in training, the evaluation's topics (``topics="held_out"``)."""
TRAINING_TOPICS: tuple[str, ...] = tuple(t for t in TOPICS if t not in HELD_OUT_TOPICS)
"""The other 30 shipped topics: those a training run draws from (``topics="training"``)."""
TOPIC_SPLITS: dict[str, tuple[str, ...]] = {"all": TOPICS, "training": TRAINING_TOPICS, "held_out": HELD_OUT_TOPICS}
"""Name -> topics, for the ``topics`` option: a name of this table or a list of topics."""


class raw_env(TextEnv):  # noqa: N801 - PettingZoo's module pattern names the class raw_env
    """Proposer-solver as a text AEC env; see the module docstring.

    Args:
        num_solvers: solvers per task (>= 1).
        modes: the modes an episode draws from, uniformly (names of ``rules.Mode``).
        topics: seed topics to draw from: a list, or a name of :data:`TOPIC_SPLITS` (``"training"``: the 30
            topics a training run uses; ``"held_out"``: the 10 others, for evaluation); None uses all of :data:`TOPICS`.
        proposer_reward: ``"learnability"``, ``"azr"``, or a callable from pass rate to reward.
        invalid_penalty: reward lost by a proposer whose task is invalid (>= 0).
        sandbox_timeout_s: wall-clock limit of each sandboxed run, in seconds.
        sandbox_memory_mb: address-space cap of each sandboxed run, in MiB.
        allowed_imports: top-level modules a program may import.
        **kwargs: the base options of :class:`llm_zoo.envs.core.TextEnv` (``render_mode``,
            ``max_retries``, ``max_reply_chars``, ...).
    """

    metadata = {"render_modes": ["human", "ansi"], "name": ENV_ID, "is_parallelizable": False}
    reset_options = ("mode", "topic")

    def __init__(self, *, num_solvers: int = 4, modes: Sequence[str] = MODES, topics: Sequence[str] | str | None = None,
                 proposer_reward: str | Callable[[float], float] = "learnability", invalid_penalty: float = 1.0,
                 sandbox_timeout_s: float = 1.0, sandbox_memory_mb: int = 128,
                 allowed_imports: Sequence[str] = ALLOWED_IMPORTS, **kwargs: Any) -> None:
        if not isinstance(num_solvers, int) or isinstance(num_solvers, bool) or not 1 <= num_solvers <= 64:
            raise ValueError(f"num_solvers must be an integer in [1, 64]; got {num_solvers!r}")
        if isinstance(modes, str) or not modes or any(m not in MODES for m in modes):
            raise ValueError(f"modes must be a non-empty list of {list(MODES)}; got {modes!r}")
        topics = TOPICS if topics is None else TOPIC_SPLITS.get(topics, topics) if isinstance(topics, str) else topics
        if isinstance(topics, str) or not topics or not all(isinstance(t, str) and t.strip() for t in topics):
            raise ValueError(f"topics must be a non-empty list of non-empty strings, one of {sorted(TOPIC_SPLITS)}, "
                             f"or None; got {topics!r:.200}")
        if not callable(proposer_reward) and proposer_reward not in REWARD_FORMULAS:
            raise ValueError(f"proposer_reward must be one of {sorted(REWARD_FORMULAS)} or a callable "
                             f"pass_rate -> reward; got {proposer_reward!r}")
        if not isinstance(invalid_penalty, (int, float)) or isinstance(invalid_penalty, bool) or invalid_penalty < 0:
            raise ValueError(f"invalid_penalty must be a number >= 0; got {invalid_penalty!r}")
        if isinstance(allowed_imports, str) or not all(isinstance(m, str) and m.isidentifier() for m in allowed_imports):
            raise ValueError(f"allowed_imports must be a list of module names such as 'math'; got {allowed_imports!r}")
        self.num_solvers = num_solvers
        self.modes = tuple(Mode(m) for m in modes)
        self.topics = tuple(topics)
        self.proposer_reward = proposer_reward
        self._reward_of = proposer_reward if callable(proposer_reward) else REWARD_FORMULAS[proposer_reward]
        self.invalid_penalty = float(invalid_penalty)
        self.settings = verify.SandboxSettings(sandbox_timeout_s, sandbox_memory_mb)
        self.allowed_imports = tuple(allowed_imports)
        self.solvers = [f"solver_{i}" for i in range(num_solvers)]
        self.possible_agents = [PROPOSER, *self.solvers]
        super().__init__(**kwargs)

    # ---- hooks ----------------------------------------------------------------------------

    def system_prompt(self, agent: str) -> str:
        if agent == PROPOSER:
            reward = None if callable(self.proposer_reward) else self.proposer_reward
            return text.proposer_prompt(self._mode, self.num_solvers, reward, self.invalid_penalty,
                                        self.settings.timeout_s, self.allowed_imports)
        return text.solver_prompt(self._mode, self.allowed_imports)

    def start(self, rng: random.Random, options: Mapping[str, Any] | None) -> str:
        options = dict(options or {})  # other keys are ignored, as PettingZoo's api_test expects
        if "mode" in options and options["mode"] not in MODES:
            raise ValueError(f"options['mode'] must be one of {list(MODES)}; got {options['mode']!r}")
        if "topic" in options and not (isinstance(options["topic"], str) and options["topic"].strip()):
            raise ValueError(f"options['topic'] must be a non-empty string; got {options['topic']!r}")
        self._mode = Mode(options["mode"]) if "mode" in options else rng.choice(self.modes)
        self._topic = options["topic"] if "topic" in options else rng.choice(self.topics)
        self._task: Task | None = None
        self._answers: dict[str, str | None] = {}
        unposed = f"{self.episode_seed}/{self._topic}/{self._mode.value}"
        for agent in self.possible_agents:
            self.infos[agent].update(mode=self._mode.value, topic=self._topic,
                                     group=self._topic if agent == PROPOSER else unposed)
        self.tell(PROPOSER, text.topic_message(self._topic, self._mode))
        if self.render_mode is not None:
            self.narrate(f"Proposer-solver: {self._mode.value} task on {self._topic!r} for {self.num_solvers} solvers.")
        return PROPOSER

    def parse(self, agent: str, reply: str) -> Proposal | str:
        try:
            if agent == PROPOSER:
                return text.parse_proposal(reply, self._mode)
            answer = text.parse_answer(reply, self._mode)
            if self._mode is Mode.INDUCTION:
                check_program(answer, self.allowed_imports)
            return answer
        except ValueError as exc:
            raise InvalidReply(str(exc)) from None
        except TaskInvalid as exc:
            raise InvalidReply(f"your program breaks a rule ({exc.code}): {exc.detail}.") from None

    def play(self, agent: str, move: Proposal | str) -> None:
        if agent == PROPOSER:
            assert isinstance(move, Proposal)
            self._pose(move)
        else:
            assert isinstance(move, str)
            self._answers[agent] = move
            self.infos[agent]["answer"] = move
            self._next_after(agent)

    def forfeit(self, agent: str, reason: str) -> None:
        """End the episode for a proposer's malformed reply; count a solver's as wrong and go on.

        The base ends every episode at a forfeit; here one solver's forfeit must not end the others' turns.
        """
        self.infos[agent]["forfeit"] = True
        if agent == PROPOSER:
            self._reject("format", reason, forfeited_by=agent, forfeit_reason=reason)
            return
        self.narrate(f"-- {agent} forfeits: {reason}")
        self._answers[agent] = None
        self.infos[agent]["answer"] = None
        self._next_after(agent)

    def forfeit_rewards(self, agent: str) -> dict[str, float]:
        return {agent: -self.invalid_penalty if agent == PROPOSER else 0.0}

    # ---- internals ------------------------------------------------------------------------

    def _pose(self, proposal: Proposal) -> None:
        try:
            outputs, conditions = verify.validate(proposal, self.settings, self.allowed_imports)
        except TaskInvalid as exc:
            self._reject(exc.code, exc.detail)
            return
        n = len(proposal.inputs)
        held_out = tuple(sorted(self.rng.sample(range(n), held_out_count(n)))) if proposal.mode is Mode.INDUCTION else ()
        task = Task(proposal, outputs, held_out, conditions)
        view = text.problem_view(task)
        shown = sanitize(view, self.max_message_chars)
        if shown != view:  # a solver must see exactly what grading compares
            self._reject("unseen", text.unseen_detail(view, shown))
            return
        self._task = task
        problem_id = task.problem_id(self.episode_seed)
        self.infos[PROPOSER]["task"] = task.to_info()
        for agent in self.possible_agents:
            self.infos[agent]["problem_id"] = problem_id
        for solver in self.solvers:
            self.infos[solver]["group"] = problem_id
            self.tell(solver, view)
        if self.render_mode is not None:
            self.narrate(f"-- valid task {problem_id}; outputs {', '.join(outputs)[:200]}; held out {list(held_out)}")
        self.pass_turn(self.solvers[0])

    def _reject(self, code: str, detail: str, **facts: Any) -> None:
        self.infos[PROPOSER].update(invalid_reason=code, invalid_detail=detail)
        self.tell(PROPOSER, text.proposer_invalid(code, detail, self.invalid_penalty))
        self.narrate(f"-- invalid task ({code}): {detail}")
        self.end({PROPOSER: -self.invalid_penalty}, valid=False, pass_rate=None, results={}, **facts)

    def _next_after(self, solver: str) -> None:
        index = self.solvers.index(solver) + 1
        if index < self.num_solvers:
            self.pass_turn(self.solvers[index])
        else:
            self._grade()

    def _grade(self) -> None:
        assert self._task is not None
        correct = verify.grade(self._task, {s: self._answers.get(s) for s in self.solvers}, self.settings,
                               self.allowed_imports)
        num_correct = sum(correct.values())
        pass_rate = num_correct / self.num_solvers
        proposer_reward = float(self._reward_of(pass_rate))
        for solver in self.solvers:
            self.infos[solver]["correct"] = correct[solver]
            self.tell(solver, text.solver_result(correct[solver]))
        self.tell(PROPOSER, text.proposer_result(num_correct, self.num_solvers, proposer_reward))
        if self.render_mode is not None:
            self.narrate(f"-- {num_correct} of {self.num_solvers} right: "
                         + ", ".join(f"{s} {'right' if c else 'wrong'}" for s, c in correct.items())
                         + f"; proposer reward {proposer_reward:+.3g}")
        self.end({PROPOSER: proposer_reward, **{s: float(c) for s, c in correct.items()}},
                 valid=True, pass_rate=pass_rate, results=dict(correct))


def env(**kwargs: Any) -> FastOrderEnforcingWrapper:
    """Make proposer-solver with the standard wrappers (call-order checks); see :class:`raw_env`."""
    return FastOrderEnforcingWrapper(raw_env(**kwargs))
