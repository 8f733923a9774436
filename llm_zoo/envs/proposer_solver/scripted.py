"""Scripted proposer-solver players: a proposer of chosen difficulty, solvers of chosen skill.

The proposer writes tasks from template families whose difficulty is one integer. A solver has a
*skill*: how many steps of simulation it can afford per answer (its budget, jittered by ``noise``).
It works like a careful but bounded person, in the sandbox and only from what its observation shows:

| Mode | What the solver does | Cost in steps |
|---|---|---|
| deduction | runs f on the input | the traced lines f executes |
| abduction | tries inputs of f's annotated types, smallest first, until one gives the output | traced lines over all tries |
| induction | reads the family from the hint, tries its programs on the shown pairs | traced lines over all tries |
| integer | reads the story sentence by sentence | :data:`SENTENCE_COST` per sentence |

Within budget it answers right (abduction and induction: if its search finds an answer); past it,
it guesses (induction: a program that memorises the shown pairs). So pass rates fall with the
proposer's difficulty and rise with the solvers' skill, which is what the curriculum needs.

:class:`AdaptiveProposer` (``proposer_adaptive``) is that curriculum in its simplest form: a
scripted proposer whose difficulty goes up one when the solvers' mean pass rate over its last
``window`` episodes is above one half, and down one when below (optionally one difficulty per
mode). ``benchmarks/learnability.py`` compares it with proposers of fixed difficulty
(``proposer_d1`` ... ``proposer_d9``). :class:`MixedProposer` (``proposer_mixed``) draws each task's
difficulty from 1 to 9: the warm start of a learned proposer is fitted to its tasks.
"""

from __future__ import annotations

import ast
import functools
import itertools
import json
import random
import re
import sys
from collections import deque
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from importlib import resources
from typing import TYPE_CHECKING

from llm_zoo.envs.proposer_solver import text
from llm_zoo.envs.proposer_solver.env import TOPICS
from llm_zoo.envs.proposer_solver.rules import (
    ALLOWED_IMPORTS,
    DENIED_ATTRIBUTES,
    MODES,
    REFERENCE,
    Mode,
    TaskInvalid,
    imported_modules,
)
from llm_zoo.envs.proposer_solver.story import read
from llm_zoo.policy import Observation, Policy, Reply, SeededPolicy
from llm_zoo.sandbox import Limits, run_many

if TYPE_CHECKING:
    from llm_zoo.episode import Episode

if sys.version_info >= (3, 12):
    from typing import override
else:  # typing_extensions comes with gymnasium, a core dependency
    from typing_extensions import override

SENTENCE_COST = 20
"""Steps an integer-mode solver spends on one sentence of a story."""
MAX_BUDGET = 50_000
"""Most steps any solver spends on one answer (an unlimited solver's budget)."""
MAX_CANDIDATES = 5000
"""Most candidate programs an induction solver considers."""
MAX_DIFFICULTY = 9
"""The highest difficulty whose tasks are valid in every mode (a story of 10 may pass PROBLEM's 1000 characters)."""
_SANDBOX = {"timeout_s": 5.0, "memory_mb": 256, "limits": Limits(processes=8, file_mb=1, tmp_mb=1)}
_PRIMES = (11, 13, 17, 19, 23, 29, 31, 37, 41, 43, 47, 53, 59, 61, 67, 71, 73, 79, 83, 89, 97)
_LETTERS = "abcdefghijklmnopqrstuvwxyz"

# ---- the template families --------------------------------------------------------------------


@dataclass(frozen=True)
class Template:
    """One task drawn from a family: the program, a way to draw inputs, and a hint for induction."""

    program: str
    draw_input: Callable[[random.Random], str]
    hint: str


def _affine(rng: random.Random, difficulty: int) -> Template:
    a, b, m = rng.randint(2, 9), rng.randint(1, 9), rng.choice(_PRIMES)
    return Template(_affine_program(a, b, m, 5 * difficulty), lambda r: str(r.randrange(10 * difficulty)),
                    f"repeats x = (x * {a} + {b}) % {m} a number of times")


def _affine_program(a: int, b: int, m: int, n: int) -> str:
    return f"def f(x: int) -> int:\n    for _ in range({n}):\n        x = (x * {a} + {b}) % {m}\n    return x"


def _fold(rng: random.Random, difficulty: int) -> Template:
    a, m = rng.randint(2, 9), rng.choice(_PRIMES)
    c = rng.randrange(m)
    return Template(_fold_program(a, m, c), lambda r: str([r.randrange(10) for _ in range(3 * difficulty)]),
                    f"folds the list with acc = (acc * {a} + v) % {m} from a hidden start value")


def _fold_program(a: int, m: int, c: int) -> str:
    return f"def f(xs: list) -> int:\n    acc = {c}\n    for v in xs:\n        acc = (acc * {a} + v) % {m}\n    return acc"


STRING_STEPS: dict[str, str] = {
    "reverse": "s = s[::-1]",
    "swapcase": "s = s.swapcase()",
    "rotate": "s = s[1:] + s[:1]",
    "stutter": "s = s[:1] + s",
    "devowel": "s = ''.join(c for c in s if c not in 'aeiou')",
    "alternate": "s = ''.join(c.upper() if i % 2 == 0 else c for i, c in enumerate(s))",
}
"""Step name -> its line of code, for the string family."""


def _strings(rng: random.Random, difficulty: int) -> Template:
    steps = [rng.choice(sorted(STRING_STEPS)) for _ in range(difficulty)]
    return Template(_string_program(steps),
                    lambda r: repr("".join(r.choice(_LETTERS) for _ in range(3 + difficulty))),
                    f"applies {difficulty} steps, each one of: {', '.join(sorted(STRING_STEPS))}")


def _string_program(steps: Sequence[str]) -> str:
    return "def f(s: str) -> str:\n" + "".join(f"    {STRING_STEPS[s]}\n" for s in steps) + "    return s"


FAMILIES: dict[str, Callable[[random.Random, int], Template]] = {
    "affine": _affine, "fold": _fold, "strings": _strings,
}
"""Program families of the scripted proposer: name -> (rng, difficulty) -> template."""

# family hint -> the candidate programs an induction solver tries, in order
_HINTS: tuple[tuple[re.Pattern[str], Callable[[re.Match[str]], list[str]]], ...] = (
    (re.compile(r"repeats x = \(x \* (\d+) \+ (\d+)\) % (\d+) a number of times"),
     lambda m: [_affine_program(int(m[1]), int(m[2]), int(m[3]), n) for n in range(200)]),
    (re.compile(r"folds the list with acc = \(acc \* (\d+) \+ v\) % (\d+) from a hidden start value"),
     lambda m: [_fold_program(int(m[1]), int(m[2]), c) for c in range(int(m[2]))]),
    (re.compile(r"applies (\d+) steps, each one of: ([a-z, ]+)"),
     lambda m: [_string_program(s) for s in itertools.islice(
         itertools.product([w for w in m[2].split(", ") if w in STRING_STEPS], repeat=int(m[1])), MAX_CANDIDATES)]),
)

_NAMES = ("Ana", "Ben", "Chloe", "Dev", "Emil", "Fatima", "Goran", "Hana")
_ITEMS = ("apple", "marble", "stamp", "coin", "shell", "card")
# story sentence -> its code line, {name} and {k}/{j} filled in: forms of story.STEPS, which the solvers read with
# story.read like any other story
_STORY: dict[str, str] = {
    "Then {name} finds {k} more.": "n = n + {k}",
    "Then {name} gives away {k}.": "n = n - {k}",
    "Then {name} buys {k} bags of {j}.": "n = n + {k} * {j}",
    "Then {name} doubles them.": "n = n * 2",
    "Then {name} loses half of them, rounded down.": "n = n // 2",
}


def story(rng: random.Random, difficulty: int) -> tuple[str, str]:
    """Return an integer-mode (problem, program): a story of ``3 * difficulty`` steps."""
    name, item, start = rng.choice(_NAMES), rng.choice(_ITEMS), rng.randint(5, 40)
    sentences, code = [f"{name} has {start} {item}s."], [f"    n = {start}"]
    for _ in range(3 * difficulty):
        template = rng.choice(sorted(_STORY))
        k, j = rng.randint(1, 9), rng.randint(2, 6)
        sentences.append(template.format(name=name, k=k, j=j))
        code.append("    " + _STORY[template].format(k=k, j=j))
    sentences.append(f"How many {item}s does {name} have now?")
    return " ".join(sentences), "def f():\n" + "\n".join(code) + "\n    return n"


def read_story(problem: str) -> tuple[int, int] | None:
    """Return (answer, sentences) of a story as the env reads it (:func:`story.read`), or None if it reads as none."""
    try:
        reading = read(problem)
    except TaskInvalid:
        return None
    return reading.answer, reading.sentences


# ---- the proposer -----------------------------------------------------------------------------


class ScriptedProposer(SeededPolicy):
    """Proposes tasks of a fixed ``difficulty`` (>= 1) from ``family`` (None: a random family per task).

    ``difficulty`` is a plain attribute: a caller may change it between episodes (an adaptive curriculum).
    """

    remote_ok = True  # plain Python state, no model: it may act in a Ray actor beside the envs

    def __init__(self, difficulty: int = 2, family: str | None = None, seed: int | None = None) -> None:
        if not isinstance(difficulty, int) or difficulty < 1:
            raise ValueError(f"difficulty must be an integer >= 1; got {difficulty!r}")
        if family is not None and family not in FAMILIES:
            raise ValueError(f"family must be one of {sorted(FAMILIES)} or None; got {family!r}")
        self.difficulty, self.family = difficulty, family
        self.name = f"proposer({family or 'any'}, d={difficulty})"
        super().__init__(seed)

    @override
    def act(self, observations: Sequence[Observation]) -> list[Reply]:
        self.check_batch(observations, key="messages")
        return [Reply(self._propose(_mode_of(obs)), policy=self.name) for obs in observations]

    def _propose(self, mode: Mode) -> str:
        rng, d = self._rng, self.difficulty
        if mode is Mode.INTEGER:
            problem, program = story(rng, d)
            return f"PROBLEM: {problem}\n```python\n{program}\n```"
        template = FAMILIES[self.family or rng.choice(sorted(FAMILIES))](rng, d)
        if mode is not Mode.INDUCTION:
            return f"```python\n{template.program}\n```\nINPUT: {template.draw_input(rng)}"
        inputs: list[str] = []
        while len(inputs) < 6:
            drawn = template.draw_input(rng)
            if drawn not in inputs:
                inputs.append(drawn)
        lines = "".join(f"INPUT: {i}\n" for i in inputs)
        return f"```python\n{template.program}\n```\n{lines}MESSAGE: f {template.hint}"


class MixedProposer(ScriptedProposer):
    """A :class:`ScriptedProposer` that draws each task's difficulty uniformly from ``difficulties``.

    Its tasks span easy and hard ones, so a model fitted to them (the warm start of the proposer)
    starts by sampling every difficulty, and RL can then move it toward those the solvers find hard
    about half the time. Each reply's ``policy`` names the difficulty it was written at (``d=3)``).
    """

    def __init__(self, difficulties: Sequence[int] = tuple(range(1, MAX_DIFFICULTY + 1)), family: str | None = None,
                 seed: int | None = None) -> None:
        difficulties = tuple(difficulties)
        if not difficulties or any(not isinstance(d, int) or isinstance(d, bool) or d < 1 for d in difficulties):
            raise ValueError(f"difficulties must be a non-empty list of integers >= 1; got {difficulties!r}")
        super().__init__(difficulties[0], family, seed=seed)
        self.difficulties = difficulties
        self.name = f"proposer_mixed({family or 'any'}, d in {min(difficulties)}..{max(difficulties)})"

    @override
    def act(self, observations: Sequence[Observation]) -> list[Reply]:
        self.check_batch(observations, key="messages")
        replies = []
        for obs in observations:
            self.difficulty = d = self._rng.choice(self.difficulties)
            replies.append(Reply(self._propose(_mode_of(obs)), policy=f"proposer_mixed({self.family or 'any'}, d={d})"))
        return replies


class AdaptiveProposer(Policy):
    """A :class:`ScriptedProposer` whose difficulty follows the solvers' recent pass rate: a curriculum.

    The proposer never sees how its task went (its episode ends when the solvers have answered), so
    the caller reports each finished episode with :meth:`update` (or :meth:`observe` for
    :func:`~llm_zoo.trainers.rollout.collect`'s records). The controller keeps the pass rates of the
    last ``window`` episodes; once it holds ``window`` of them it raises the difficulty by one when
    their mean is above ``target`` and lowers it by one when below, within ``[1, max_difficulty]``.
    After a move the window starts empty, so every move is judged only on tasks of the difficulty
    in force. An invalid task counts as a pass rate of 0: a scripted task is invalid only when it is
    too big (above :data:`MAX_DIFFICULTY`, a story past the 1000 characters of a PROBLEM), which is too hard.

    With ``per_mode`` one controller runs per mode (the pass rate at one difficulty differs a lot
    between modes), each fed only its mode's episodes. Never updated, it is the fixed proposer at
    ``start``. Each reply's ``policy`` names the difficulty it was written at (``d=3``), so
    episode records show it.

    Args:
        start: The difficulty of the first tasks (of every mode, with ``per_mode``).
        window: How many recent episodes the controller averages (>= 1).
        target: The pass rate it steers to, in (0, 1); 0.5 maximises learnability 4·p·(1−p).
        max_difficulty: The highest difficulty it may reach (default :data:`MAX_DIFFICULTY`).
        per_mode: One difficulty per mode instead of one for all.
        family: The template family, as for :class:`ScriptedProposer` (None: any).
        seed: Seeds the task draws.
    """

    remote_ok = True  # plain Python state, no model: it may act in a Ray actor beside the envs

    ALL = "all"
    """The controller key when one difficulty serves every mode."""

    def __init__(self, start: int = 1, window: int = 4, target: float = 0.5, max_difficulty: int = MAX_DIFFICULTY,
                 per_mode: bool = False, family: str | None = None, seed: int | None = None) -> None:
        if not isinstance(max_difficulty, int) or max_difficulty < 1:
            raise ValueError(f"max_difficulty must be an integer >= 1; got {max_difficulty!r}")
        if not isinstance(start, int) or not 1 <= start <= max_difficulty:
            raise ValueError(f"start must be an integer in [1, max_difficulty={max_difficulty}]; got {start!r}")
        if not isinstance(window, int) or window < 1:
            raise ValueError(f"window must be an integer >= 1 (episodes); got {window!r}")
        if not isinstance(target, (int, float)) or not 0.0 < target < 1.0:
            raise ValueError(f"target must be a pass rate in (0, 1); got {target!r}")
        self.proposer = ScriptedProposer(start, family, seed=seed)
        self.start, self.window, self.target, self.max_difficulty = start, window, float(target), max_difficulty
        self.per_mode = per_mode
        self.difficulties: dict[str, int] = {}
        """Controller key (a mode, or :attr:`ALL`) -> its difficulty now; a key not yet seen is at ``start``."""
        self._recent: dict[str, deque[float]] = {}
        self._family = family or "any"
        self.name = f"proposer_adaptive({self._family}, start={start}{', per mode' if per_mode else ''})"

    def difficulty_of(self, mode: str | Mode | None = None) -> int:
        """Return the difficulty now in force for ``mode`` (ignored unless ``per_mode``)."""
        return self.difficulties.get(self._key(mode), self.start)

    def update(self, pass_rate: float | None, mode: str | Mode | None = None) -> int:
        """Record one finished episode's pass rate (None: an invalid task); return the difficulty now in force.

        Raises:
            ValueError: a pass rate outside [0, 1], or no ``mode`` for a ``per_mode`` controller.
        """
        if pass_rate is not None and not (isinstance(pass_rate, (int, float)) and 0.0 <= pass_rate <= 1.0):
            raise ValueError(f"pass_rate must be in [0, 1], or None for an invalid task; got {pass_rate!r}")
        if self.per_mode and mode is None:
            raise ValueError("a per_mode controller needs each episode's mode: update(pass_rate, mode=...)")
        key = self._key(mode)
        recent = self._recent.setdefault(key, deque(maxlen=self.window))
        recent.append(0.0 if pass_rate is None else float(pass_rate))
        d = self.difficulties.get(key, self.start)
        if len(recent) == self.window:
            mean = sum(recent) / self.window
            step = (mean > self.target) - (mean < self.target)  # +1 too easy, -1 too hard, 0 on target
            moved = min(max(d + step, 1), self.max_difficulty)
            if moved != d:
                self.difficulties[key] = d = moved
                recent.clear()
        return d

    def observe(self, episodes: Iterable[Episode]) -> None:
        """Update from :func:`~llm_zoo.trainers.rollout.collect`'s records, in order; failed episodes are skipped."""
        for episode in episodes:
            info = episode.infos.get("proposer", {})
            if not episode.failed and "valid" in info:
                self.update(info.get("pass_rate"), info.get("mode"))

    @override
    def seed(self, seed: int | None) -> None:
        self.proposer.seed(seed)

    @override
    def act(self, observations: Sequence[Observation]) -> list[Reply]:
        self.check_batch(observations, key="messages")
        replies: list[Reply] = []
        for obs in observations:
            mode = _mode_of(obs)
            self.proposer.difficulty = d = self.difficulty_of(mode)
            replies.append(Reply(self.proposer._propose(mode), policy=f"proposer_adaptive({self._family}, d={d})"))
        return replies

    def _key(self, mode: str | Mode | None) -> str:
        if not self.per_mode:
            return self.ALL
        if mode not in MODES:
            raise ValueError(f"mode must be one of {list(MODES)}; got {mode!r}")
        return Mode(mode).value


def _mode_of(obs: Observation) -> Mode:
    for message in reversed(obs["messages"]):
        match = re.search(r"^Mode: (\w+)", message["content"], re.MULTILINE)
        if match and match[1] in MODES:
            return Mode(match[1])
    raise ValueError("the observation names no mode ('Mode: <mode>'); is this a proposer-solver observation?")


# ---- the solver -------------------------------------------------------------------------------

# Runs in the sandbox: simulates under a budget of traced lines (sys.settrace) and prints
# {"result": ..., "used": steps}; result is None when the budget ran out or nothing was found.
# The budget in the job is always MAX_BUDGET: each solver compares the steps used with its own
# budget outside the sandbox, so the program it simulates cannot read that budget and treat
# solvers of different skill differently (it could tell them apart by nothing else either).
# {job!r} is replaced by the job, as JSON text.
_SIMULATOR = r'''
import ast, itertools, json, sys
job = json.loads({job!r})
budget, used = job["budget"], 0


class OutOfBudget(Exception):
    pass


def tracer(frame, event, arg):
    global used
    if event == "line":
        used += 1
        if used > budget:
            raise OutOfBudget
    return tracer


def call(fn, args):
    # the traced run counts the steps; the value is the untraced run's, at the depth and recursion
    # limit the harness calls f with (the tracer's own frames would leave f less depth)
    sys.settrace(tracer)
    try:
        fn(*args)
    except OutOfBudget:
        raise
    except Exception:
        return None
    finally:
        sys.settrace(None)
    try:
        value = fn(*args)
    except Exception:
        return None
    return canonical(value)


def canonical(value):
    try:
        return json.dumps(value, sort_keys=True, allow_nan=False)
    except Exception:
        return None


def load(source):
    # the program gets the capabilities it gets when graded (harness.capabilities, defined above)
    # and nothing else, so nothing it can reach tells the simulation from grading
    names = job["preload"].get(source, [])
    for name in names:
        try:
            __import__(name)
        except Exception:
            pass
    program_builtins = capabilities(sys.modules, names, job["allowed"], job["denied"], [])
    del program_builtins["__guarded__"]
    main = type(sys)("__main__")
    main.__builtins__ = program_builtins
    sys.modules["__main__"] = main
    exec(source, main.__dict__)
    return main.__dict__["f"]


def arguments(source):
    return ast.literal_eval("(" + source + ",)") if source else ()


def values(kind):
    if kind == "str":
        for length in itertools.count():
            for letters in itertools.product("abcdefghijklmnopqrstuvwxyz", repeat=length):
                yield "".join(letters)
    elif kind == "list":
        for length in itertools.count():
            for items in itertools.product(range(10), repeat=length):
                yield list(items)
    else:
        yield 0
        for k in itertools.count(1):
            yield k
            yield -k


def candidates(kinds):
    # every tuple of the first `size` values of each kind, each once: the newest value sits first at position j
    if not kinds:
        yield ()
        return
    pools = [(values(k), []) for k in kinds]
    for size in itertools.count(1):
        for source, pool in pools:
            pool.append(next(source))
        last = size - 1
        for j in range(len(kinds)):
            ranges = [range(last) if i < j else range(last, size) if i == j else range(size) for i in range(len(kinds))]
            for index in itertools.product(*ranges):
                yield tuple(pool[i] for (_, pool), i in zip(pools, index))


cap_memory(job["headroom_mb"])  # the headroom a program has when graded (harness.cap_memory)
result = None
try:
    if job["mode"] == "deduction":
        result = call(load(job["program"]), arguments(job["call"]))
    elif job["mode"] == "abduction":
        f = load(job["program"])
        for args in candidates(job["kinds"]):
            if call(f, args) == job["target"]:
                result = ", ".join(repr(a) for a in args)
                break
    else:
        pairs = [(arguments(a), out) for a, out in job["pairs"]]
        for i, source in enumerate(job["candidates"]):
            g = load(source)
            if all(call(g, args) == out for args, out in pairs):
                result = i
                break
except OutOfBudget:
    result = None
except Exception:
    result = None
print(json.dumps({"result": result, "used": used}))
'''
_CAPABILITIES = (resources.files(__package__) / "harness.py").read_text().partition('\nif __name__ == "__main__":')[0]
"""The harness's definitions (its ``capabilities()`` above all), which the simulator runs programs with."""
_KINDS = {"int": "int", "str": "str", "list": "list"}


class ScriptedSolver(SeededPolicy):
    """Solves within a budget of ``skill`` steps per answer (None: :data:`MAX_BUDGET`); see the module docstring.

    Each answer's budget is ``skill`` times a factor drawn uniformly from ``[1 - noise, 1 + noise]``.
    """

    remote_ok = True  # plain Python state, no model: it may act in a Ray actor beside the envs

    def __init__(self, skill: int | None = 300, noise: float = 0.3, seed: int | None = None) -> None:
        if skill is not None and (not isinstance(skill, int) or skill < 0):
            raise ValueError(f"skill must be an integer >= 0 (steps) or None (unlimited); got {skill!r}")
        if not 0.0 <= noise < 1.0:
            raise ValueError(f"noise must be in [0, 1); got {noise!r}")
        self.skill, self.noise = skill, noise
        self.name = f"solver(skill={'max' if skill is None else skill})"
        super().__init__(seed)

    @override
    def act(self, observations: Sequence[Observation]) -> list[Reply]:
        self.check_batch(observations, key="messages")
        views = [text.read_view(_problem_message(obs)) for obs in observations]
        budgets = [self._budget() for _ in views]
        jobs = {i: job for i, view in enumerate(views) if (job := _job(view))}
        found = dict(zip(jobs, _simulate(list(jobs.values()))))
        return [Reply(_reply(view, budget, jobs.get(i), *found.get(i, (None, 0))), policy=self.name)
                for i, (view, budget) in enumerate(zip(views, budgets))]

    def _budget(self) -> int:
        if self.skill is None:
            return MAX_BUDGET
        return min(MAX_BUDGET, int(self.skill * self._rng.uniform(1.0 - self.noise, 1.0 + self.noise)))


def _problem_message(obs: Observation) -> str:
    for message in obs["messages"]:
        if message["role"] == "user" and message["content"].startswith("Mode: "):
            return message["content"]
    raise ValueError("the observation holds no problem ('Mode: ...'); is this a proposer-solver solver's?")


def _kinds(program: str) -> list[str]:
    """Return the kind (int, str or list) of each of f's parameters, read from its annotations."""
    for node in ast.parse(program).body:
        if isinstance(node, ast.FunctionDef) and node.name == "f":
            params = node.args.posonlyargs + node.args.args
            return [_KINDS.get(ast.unparse(p.annotation).split("[")[0], "int") if p.annotation else "int"
                    for p in params]
    return []


def _job(view: dict, budget: int = MAX_BUDGET) -> dict | None:
    """Return the sandbox job that answers a view, or None when the solver needs no run (or has no idea)."""
    mode = view["mode"]
    job: dict | None = None
    if mode is Mode.DEDUCTION:
        job = {"mode": mode.value, "program": view["program"], "call": view["call"], "budget": budget}
    elif mode is Mode.ABDUCTION:
        try:
            kinds = _kinds(view["program"])
        except SyntaxError:
            return None
        job = {"mode": mode.value, "program": view["program"], "kinds": kinds, "budget": budget,
               "target": json.dumps(view["output"], sort_keys=True)}
    elif mode is Mode.INDUCTION:
        for pattern, family in _HINTS:
            match = pattern.search(view.get("hint", ""))
            if match:
                pairs = [[a, json.dumps(out, sort_keys=True)] for a, out in view.get("pairs", [])]
                job = {"mode": mode.value, "candidates": family(match), "pairs": pairs, "budget": budget}
                break
    if job is None:
        return None
    programs = [job["program"]] if "program" in job else job["candidates"]
    return {**job, "allowed": list(ALLOWED_IMPORTS), "denied": DENIED_ATTRIBUTES, "headroom_mb": REFERENCE.headroom_mb,
            "preload": {program: imported_modules(program) for program in programs if imported_modules(program)}}


_SIMULATED: dict[str, tuple[object, int]] = {}
"""Job (as JSON) -> (result, steps used): solvers seeing the same problem share one simulation."""


def _simulate(jobs: Sequence[dict]) -> list[tuple[object, int]]:
    """Run each job's simulation in the sandbox, all at once; return each (result, steps used)."""
    keys = [json.dumps(job, sort_keys=True) for job in jobs]
    todo = list(dict.fromkeys(k for k in keys if k not in _SIMULATED))
    if todo:
        if len(_SIMULATED) > 4096:
            _SIMULATED.clear()
        codes = [_CAPABILITIES + _SIMULATOR.replace("{job!r}", repr(key)) for key in todo]
        for key, run in zip(todo, run_many(codes, return_exceptions=True, **_SANDBOX)):
            try:
                record = json.loads(run.stdout.strip().splitlines()[-1])  # type: ignore[union-attr]
                _SIMULATED[key] = (record["result"], int(record["used"]))
            except (AttributeError, ValueError, IndexError, KeyError, TypeError):
                _SIMULATED[key] = (None, MAX_BUDGET + 1)
    return [_SIMULATED.get(key, (None, MAX_BUDGET + 1)) for key in keys]


def _reply(view: dict, budget: int, job: dict | None, result: object, used: int = 0) -> str:
    """Write the answer: the simulation's result when it found one within budget, else a guess."""
    mode = view["mode"]
    if used > budget:
        result = None  # past this solver's budget: it never got there
    if mode is Mode.DEDUCTION:
        return f"ANSWER: {json.loads(result)!r}" if isinstance(result, str) else "ANSWER: 0"
    if mode is Mode.ABDUCTION:
        return f"INPUT: {result}" if isinstance(result, str) else "INPUT: 0"
    if mode is Mode.INDUCTION:
        if job is not None and isinstance(result, int):
            return f"```python\n{job['candidates'][result]}\n```"
        return f"```python\n{_memoriser(view.get('pairs', []))}\n```"
    read = read_story(view.get("problem", ""))
    if read is not None and read[1] * SENTENCE_COST <= budget:
        return f"ANSWER: {read[0]}"
    return "ANSWER: 0"


def _memoriser(pairs: Sequence[tuple[str, object]]) -> str:
    """Return a program that gives the shown outputs on the shown inputs (and the first output elsewhere)."""
    table = {repr(ast.literal_eval(f"({a},)" if a else "()")): out for a, out in pairs}
    default = next(iter(table.values()), None)
    return f"def f(*args):\n    seen = {table!r}\n    return seen.get(repr(args), {default!r})"


@functools.cache
def corpus() -> tuple[str, ...]:
    """Return the text the proposer reads and writes, for a tiny model's BPE tokenizer: every mode's prompts,
    every topic's message, and scripted tasks of every mode and difficulty (three of each)."""
    texts: list[str] = []
    for mode in Mode:
        texts.append(text.proposer_prompt(mode, 4, "learnability", 1.0, 1.0))
        texts.append(text.solver_prompt(mode))
        texts += [text.topic_message(t, mode) for t in TOPICS]
        for d in range(1, MAX_DIFFICULTY + 1):
            for s in range(3):
                texts.append(ScriptedProposer(d, seed=1000 * d + s)._propose(mode))
    return tuple(texts)


PLAYERS: dict[str, Callable[..., Policy]] = {
    "proposer": lambda seed=None: ScriptedProposer(2, seed=seed),
    "proposer_easy": lambda seed=None: ScriptedProposer(1, seed=seed),
    "proposer_hard": lambda seed=None: ScriptedProposer(5, seed=seed),
    "proposer_adaptive": lambda seed=None: AdaptiveProposer(seed=seed),
    "proposer_mixed": lambda seed=None: MixedProposer(seed=seed),
    **{f"proposer_d{d}": functools.partial(lambda d, seed=None: ScriptedProposer(d, seed=seed), d)
       for d in range(1, MAX_DIFFICULTY + 1)},
    "solver": lambda seed=None: ScriptedSolver(300, seed=seed),
    "solver_weak": lambda seed=None: ScriptedSolver(40, seed=seed),
    "solver_strong": lambda seed=None: ScriptedSolver(5000, seed=seed),
    "solver_oracle": lambda seed=None: ScriptedSolver(None, noise=0.0, seed=seed),
}
"""Name -> factory(seed=...) of every scripted player, as the CLI and benchmarks name them."""
