"""Scripted agentic_judge players: solvers that submit stored solutions, and a rule-based judge.

The solvers write a stored solution of the task with ``write_file``, run the visible tests, and
submit. The rule-based judge never sees the hidden tests. In its first reply it runs the visible
tests (``run_tests``) and its own check of the statement's doctest examples and of the judge's own
cases (the section of its first message the solver never sees) (``run_python``, values compared
leniently: numbers to 1e-9, exceptions by class, and as multisets where the statement says "in any
order"). In its second it decides by these rules, in order:

1. an example or own case that fails, a solution that does not import, or a ``solution.py`` it cannot
   read: FAIL;
2. a solution whose source holds two or more of the outputs the statement's examples and the visible
   tests show, as literals (a lookup table of the shown cases; exception messages do not count): FAIL.
   The check program reads every ``.py`` file of the submission whole (``HELD``), never a clipped view;
3. a solution whose behaviour off the shown cases degenerates (see below): FAIL;
4. a visible test that fails for a reason the statement does not leave free: FAIL;
5. otherwise PASS.

Rule 3 is a behavioural probe, so that a table of the shown cases fails however it is encoded
(reversed, hashed, base64, arithmetic, built at import). The same check program, after the
examples, calls the solution on inputs derived from the shown calls on literals (``probe_calls``:
one argument moved: ints by 1 or 2, floats scaled, a digit or letter of a string changed in place,
an item dropped, repeated or the order reversed; never a shown input) and on the shown calls with
their float arguments nudged by 1e-12 and by 1e-7 (``nudged_calls``; two scales, so that a table
matching float keys within a tolerance of its own must widen it past 1e-7). It fails a solution that
raises (an exception the statement does not name), times out, returns None, or returns a value of
another kind than the shown output of the call the input derives from (a test compares a string with a
string; NaN and inf are a kind of their own) on 3 in 4 derived inputs; that raises for all of them (a
named exception included); that returns one value for all of them while the shown outputs are three or
more distinct values; that returns only non-trivial shown outputs for them; or whose results on most
nudged calls of one scale (two or more) land far from the shown outputs. Every numeric comparison
holds for any value a solution returns (an int past any float, NaN, inf). The probe only calls what the statement or the visible tests
call on literals with a literal output, so a handle (an object) among the results counts as
degenerate; it abstains (never fails) with fewer than four derived calls; a probe that does not
finish fails.

Its checks cannot be forged from the solution's process: the visible tests' report is built by the
env from plain results, and the example check and the probe run in a sandbox of their own, beside the
solution's (``grading.example_check_program``), which can neither read them nor reach their output.
A table with a fallback that computes plausible values away from the shown inputs (read from the
visible tests at run time or carried in the submission, however encoded) passes rule 3 on a task with
no float argument, as does one whose float keys match within more than 1e-7: the shown cases are all
the solver knows, and such a table answers them. The judge's own cases are what it does not know: a
table fails them at rule 1, whatever its fallback (the tasks of a class with state, ``stack`` and
``lru_cache``, have none).

A visible failure is *free* (it does not count) when it only asks for what the statement does not:
a helper (the failing line of the visible tests uses only names the statement never gives as code, or
it is the import of the solution and the names it lacks, by the check's ``MISSING`` line, are such
names), an exception message the statement does not give (``str(e)`` or ``e.args`` of a name the tests
bind to a raised exception), floats that differ past the 9th significant digit, or an order where the
statement allows any. Each rests on the env's own text and on values the env compared; the name and
message of what the solution raised are the solver's, and never excuse a failure.

The *strict* judge (``strict_judge``, :func:`decide_strict`) is a second judge with other rules, for
cross-play: it runs the same examples check (the judge's own cases included, without the probe) and the
visible tests, and fails an example or own case that fails, a lookup table of the shown outputs, and *any*
failing visible test; otherwise it passes. It trusts the visible tests where the rule judge overrules them,
and never probes further, so it rejects brittle-test alternatives and passes wrong solutions that pass weak
visible tests and its cases. Neither judge ever reads the hidden tests.
"""

from __future__ import annotations

import ast
import functools
import json
import math
import re
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from llm_zoo.envs.agentic_judge import checks, grading, text
from llm_zoo.envs.agentic_judge.tasks import SOLUTION_KINDS, load_tasks
from llm_zoo.policy import Observation, Policy, Reply, SeededPolicy

__all__ = ["PLAYERS", "RuleJudge", "StoredSolver", "corpus", "decide", "decide_strict", "tool_call"]


def tool_call(name: str, arguments: dict[str, Any] | None = None) -> str:
    """Write one tool call in the env's format."""
    return "<tool_call>" + json.dumps({"name": name, "arguments": arguments or {}}) + "</tool_call>"


def _first_user_message(obs: Observation) -> str:
    return next((m["content"] for m in obs["messages"] if m["role"] == "user"), "")


class StoredSolver(SeededPolicy):
    """Submits a stored solution of the task: a named one, or one of a kind drawn by the policy's RNG.

    Args:
        which: A solution kind (``reference``, ``alternative``, ``wrong``) or a stored solution's
            name (``alt_loop``); a name the task lacks falls back to its reference.
        seed: Seed of the draw among the task's solutions of the kind.
    """

    remote_ok = True  # plain Python state, no model: it may act in a Ray actor beside the envs

    def __init__(self, which: str = "reference", seed: int | None = None) -> None:
        self.which = which
        self.name = f"stored:{which}"
        super().__init__(seed)

    def act(self, observations: Sequence[Observation]) -> list[Reply]:
        self.check_batch(observations, key="messages")
        return [Reply(self._reply(obs), policy=self.name) for obs in observations]

    def _reply(self, obs: Observation) -> str:
        if any(m["role"] == "assistant" for m in obs["messages"]):
            return text.SUBMIT
        task = load_tasks().get(text.task_id_of(_first_user_message(obs)) or "")
        if task is None:
            return text.SUBMIT
        if self.which in SOLUTION_KINDS:
            name = self._rng.choice(task.of_kind(self.which))
        else:
            name = self.which if self.which in task.solutions else "reference"
        return (tool_call("write_file", {"path": grading.SOLUTION_FILE, "content": task.solutions[name]})
                + "\n" + tool_call("run_tests"))


# ---- the rule-based judge ----------------------------------------------------------------


@dataclass(frozen=True)
class Failure:
    """One failing visible test, as the run_tests report shows it."""

    name: str
    source: str
    error: str
    message: str
    left: str | None
    right: str | None


_FAIL = re.compile(r"^FAIL (\S+)(?: \(line \d+\): (.*))?$")
_ERROR = re.compile(r"^  (\w+)(?:: (.*?))?(?: \(raised in [^)]*\))?$")
_MISSING_NAME = re.compile(r"cannot import name '(\w+)'|has no attribute '(\w+)'")


def read_failures(report: str) -> list[Failure]:
    """Read the failing tests of a ``run_tests`` report."""
    failures: list[Failure] = []
    current: dict[str, Any] | None = None
    for line in report.splitlines():
        match = _FAIL.match(line)
        if match:
            if current:
                failures.append(Failure(**current))
            current = {"name": match.group(1), "source": match.group(2) or "", "error": "", "message": "",
                       "left": None, "right": None}
        elif current is not None and line.startswith("  left: "):
            current["left"] = line[len("  left: "):]
        elif current is not None and line.startswith("  right: "):
            current["right"] = line[len("  right: "):]
        elif current is not None and not current["error"] and (err := _ERROR.match(line)):
            current["error"], current["message"] = err.group(1), _literal(err.group(2) or "''") or ""
        elif line.startswith("PASS ") and current:
            failures.append(Failure(**current))
            current = None
    if current:
        failures.append(Failure(**current))
    return failures


def _literal(source: str | None) -> Any:
    """Read a repr back (None when it is not a Python literal, or too long to read safely)."""
    if source is None or len(source) > 2000:
        return None
    try:
        return ast.literal_eval(source)
    except (ValueError, SyntaxError, TypeError, MemoryError, RecursionError):
        return None


def _normal(value: Any, any_order: bool) -> Any:
    if isinstance(value, (list, tuple)):
        items = [_normal(v, any_order) for v in value]
        return ("seq", sorted(items, key=repr) if any_order else items)
    if isinstance(value, (set, frozenset)):
        return ("seq", sorted((_normal(v, any_order) for v in value), key=repr))
    if isinstance(value, dict):
        return ("map", sorted(((repr(k), _normal(v, any_order)) for k, v in value.items()), key=repr))
    return value


def _isclose(a: float, b: float, rel: float, abs_: float) -> bool:
    """``math.isclose`` for any two numbers a solution can return: an int too large for a float (10**309)
    is only close to an equal int, NaN to nothing."""
    try:
        return math.isclose(a, b, rel_tol=rel, abs_tol=abs_)
    except OverflowError:
        return type(a) is int and type(b) is int and a == b


def _close(a: Any, b: Any) -> bool:
    """Equal, with numbers compared to 1e-9 relative (bools only equal bools)."""
    if isinstance(a, bool) or isinstance(b, bool):
        return type(a) is type(b) and a == b
    if isinstance(a, (int, float)) and isinstance(b, (int, float)):
        return _isclose(a, b, 1e-9, 1e-12)
    if isinstance(a, (tuple, list)) and isinstance(b, (tuple, list)):
        return len(a) == len(b) and all(_close(x, y) for x, y in zip(a, b))
    return a == b


def _asks_for(statement: str, name: str) -> bool:
    """True when the statement names ``name`` as code: in backticks or in an example."""
    code = re.findall(r"`[^`]*`", statement) + [line for line in statement.splitlines() if line.lstrip().startswith(">>>")]
    return any(re.search(rf"\b{re.escape(name)}\b", span) for span in code)


@dataclass(frozen=True)
class Evidence:
    """What the rule judge knows beside a failure, none of it from the solver's text: the visible tests'
    source (the env's) and the names the solution module lacks (``MISSING`` of the check program; None
    when it did not say)."""

    visible: str = ""
    missing: frozenset[str] | None = None


def solution_names(visible: str) -> list[str]:
    """The names the tests take from ``solution``: ``from solution import a, b`` and ``solution.x``, in order."""
    try:
        with grading._PARSE_LOCK:
            tree = ast.parse(visible)
    except (SyntaxError, ValueError, RecursionError, MemoryError):
        return []
    found: dict[str, None] = {}
    for node in ast.walk(tree):
        if isinstance(node, ast.ImportFrom) and node.module == "solution" and not node.level:
            found.update((a.name, None) for a in node.names if a.name != "*")
        elif isinstance(node, ast.Attribute) and isinstance(node.value, ast.Name) and node.value.id == "solution":
            found[node.attr] = None
    return list(found)


def _exception_names(visible: str) -> set[str]:
    """Names the tests bind to a raised exception: ``except E as name`` and ``with pytest.raises(E) as name``."""
    try:
        with grading._PARSE_LOCK:
            tree = ast.parse(visible)
    except (SyntaxError, ValueError, RecursionError, MemoryError):
        return set()
    names = {n.name for n in ast.walk(tree) if isinstance(n, ast.ExceptHandler) and n.name}
    for node in ast.walk(tree):
        if isinstance(node, ast.With):
            for item in node.items:
                call = item.context_expr
                if (isinstance(call, ast.Call) and isinstance(call.func, ast.Attribute) and call.func.attr == "raises"
                        and isinstance(item.optional_vars, ast.Name)):
                    names.add(item.optional_vars.id)
    return names


_IMPORT_LINE = re.compile(r"^\s*(?:from\s+solution\s+import\b|import\s+solution\b)")


# Why a failing visible test asks for something the statement leaves free: (label, test) in order. Each
# rests on the env's own text (the failing line of the visible tests, the statement) and on values the env
# compared, never on what the solution raised or wrote: an exception's name and message are the solver's.
def _free_helper(f: Failure, statement: str, any_order: bool, evidence: Evidence) -> bool:
    names = set(solution_names(evidence.visible))
    used = [n for n in dict.fromkeys(re.findall(r"[A-Za-z_]\w*", f.source)) if n in names]
    if not used:
        return False
    if _IMPORT_LINE.match(f.source):  # the import itself failed: free when what it lacks is only helpers
        lacking = [n for n in used if evidence.missing is not None and n in evidence.missing]
        return bool(lacking) and not any(_asks_for(statement, n) for n in lacking)
    return not any(_asks_for(statement, n) for n in used)  # a line about helpers alone


def _free_message(f: Failure, statement: str, any_order: bool, evidence: Evidence) -> bool:
    left, right = _literal(f.left), _literal(f.right)
    held = "|".join(re.escape(n) for n in sorted(_exception_names(evidence.visible)))
    about_exception = bool(held) and re.search(rf"\bstr\(\s*(?:{held})(?:\.value)?\s*\)|\b(?:{held})(?:\.value)?\.args\b",
                                               f.source) is not None
    return (f.error == "AssertionError" and isinstance(left, str) and isinstance(right, str)
            and about_exception and right not in statement)


def _free_float(f: Failure, statement: str, any_order: bool, evidence: Evidence) -> bool:
    left, right = _literal(f.left), _literal(f.right)
    has_float = any(isinstance(x, float) for x in _flat(left) + _flat(right))
    return f.error == "AssertionError" and has_float and _close(_normal(left, False), _normal(right, False))


def _free_order(f: Failure, statement: str, any_order: bool, evidence: Evidence) -> bool:
    left, right = _literal(f.left), _literal(f.right)
    return (any_order and f.error == "AssertionError" and isinstance(left, (list, tuple))
            and _close(_normal(left, True), _normal(right, True)))


def _flat(value: Any) -> list[Any]:
    if isinstance(value, (list, tuple, set, frozenset)):
        return [x for v in value for x in _flat(v)]
    if isinstance(value, dict):
        return [x for v in value.values() for x in _flat(v)]
    return [value]


FREE_FAILURES = (("a helper the statement does not ask for", _free_helper),
                 ("an error message the statement does not give", _free_message),
                 ("float digits past what the statement asks", _free_float),
                 ("an order the statement leaves free", _free_order))


def _trivial(value: Any) -> bool:
    """Outputs any solution may hold as a literal: None, bools, small numbers, short strings, tiny containers."""
    if value is None or isinstance(value, bool):
        return True
    if isinstance(value, float):
        return math.isfinite(value) and value == int(value) and abs(value) < 100
    if isinstance(value, int):
        return abs(value) < 100
    if isinstance(value, (str, bytes)):
        return len(value) < 3
    if isinstance(value, (list, tuple, set, frozenset, dict)):
        return len(value) < 2
    return True


def shown_outputs(statement: str, visible: str) -> list[Any]:
    """The non-trivial outputs the statement's examples and the visible tests' ``assert x == literal`` show.

    Exception messages (``assert str(exc) == ...``) are left out: a solution must hold those.
    """
    values = [_literal(e.expected) for e in grading.parse_examples(statement) if e.expected]
    try:
        tree = ast.parse(visible)
    except (SyntaxError, ValueError, RecursionError, MemoryError):
        tree = ast.Module([], [])
    for node in ast.walk(tree):
        if (isinstance(node, ast.Compare) and len(node.ops) == 1 and isinstance(node.ops[0], ast.Eq)
                and not (isinstance(node.left, ast.Call) and getattr(node.left.func, "id", None) == "str")):
            values.append(_literal(ast.unparse(node.comparators[0])))
    return [v for v in values if v is not None and not _trivial(v)]


def hard_coded(source: str, outputs: Sequence[Any]) -> list[Any]:
    """The outputs among ``outputs`` that ``source`` holds as literals (same type, equal value), read whole."""
    return [outputs[i] for i in checks.literals_held([source], list(outputs))]


# ---- the behavioural probe: the solution on inputs derived from the shown ones ----------------

PROBE_CALLS = 12
"""How many derived calls the probe makes at most."""
PROBE_MIN = 4
"""Fewer derived calls than this and the probe abstains."""


def _plain_call(node: ast.AST) -> tuple[str, list[Any], dict[str, Any]] | None:
    """(function name, args, keywords) of a call of a bare name on literals; None for anything else."""
    if not (isinstance(node, ast.Call) and isinstance(node.func, ast.Name) and node.args
            and not any(isinstance(a, ast.Starred) for a in node.args) and all(k.arg for k in node.keywords)):
        return None
    try:
        args = [ast.literal_eval(a) for a in node.args]
        keywords = {k.arg: ast.literal_eval(k.value) for k in node.keywords}
    except (ValueError, TypeError, SyntaxError, MemoryError, RecursionError):
        return None
    return node.func.id, args, keywords


def shown_calls(statement: str, visible: str) -> list[tuple[str, list[Any], dict[str, Any], Any]]:
    """The calls on literals, with their literal outputs, that the statement's examples and the visible tests show."""
    found = []
    for e in grading.parse_examples(statement):
        if e.expected is None:
            continue
        try:
            node = ast.parse(e.source, mode="eval").body
        except (SyntaxError, ValueError, RecursionError, MemoryError):
            continue
        call, expected = _plain_call(node), _literal(e.expected)
        if call is not None and (expected is not None or e.expected.strip() == "None"):
            found.append((*call, expected))
    try:
        tree = ast.parse(visible)
    except (SyntaxError, ValueError, RecursionError, MemoryError):
        tree = ast.Module([], [])
    for node in ast.walk(tree):
        if isinstance(node, ast.Compare) and len(node.ops) == 1 and isinstance(node.ops[0], ast.Eq):
            call = _plain_call(node.left)
            try:
                expected = ast.literal_eval(node.comparators[0])
            except (ValueError, TypeError, SyntaxError, MemoryError, RecursionError):
                continue
            if call is not None:
                found.append((*call, expected))
    return found


def _changed(value: str, alphabet: str) -> str | None:
    """``value`` with its last character of ``alphabet`` moved by one in it (digits down, so dates stay dates)."""
    i = max((j for j, ch in enumerate(value) if ch in alphabet), default=None)
    if i is None:
        return None
    k = alphabet.index(value[i])
    new = alphabet[k - 1] if alphabet[0] == "0" and k > 0 else alphabet[(k + 1) % len(alphabet)]
    return value[:i] + new + value[i + 1:]


def _variants(value: Any) -> list[Any]:
    """Inputs of the same type near ``value``: ints and floats moved, one character changed, an item added or dropped."""
    if isinstance(value, bool) or value is None:
        return []
    if isinstance(value, int):
        return [value + 1, value - 1] if value > 0 else [value + 1, value + 2] if value == 0 else [value - 1, value - 2]
    if isinstance(value, float):
        return [value * 1.5, value + 1.0] if value else [0.5, 1.0]
    if isinstance(value, str):
        own = "".join(sorted({ch for ch in value if ch.isalpha()}))  # its own letters: roman numerals stay roman
        out = [_changed(value, "0123456789"), _changed(value, own) if len(own) >= 2 else None,
               _changed(value, "abcdefghijklmnopqrstuvwxyz"), _changed(value, "ABCDEFGHIJKLMNOPQRSTUVWXYZ")]
        return [v for v in out if v is not None][:2] or ([value + value[-1]] if value else [])
    if isinstance(value, (list, tuple)):
        out = [value[:-1]] if value else []
        if value:
            out.append(value + value[:1])
        if len(value) >= 2 and value[::-1] != value:
            out.append(value[::-1])
        return out
    if isinstance(value, dict) and value:
        return [dict(list(value.items())[:-1])]
    return []


def probe_plan(statement: str, visible: str, limit: int = PROBE_CALLS) -> list[tuple[str, Any]]:
    """(source, the shown output of the call it derives from) of calls on inputs derived from the shown calls'
    (one argument changed), never a shown input."""
    shown = shown_calls(statement, visible)
    seen = {repr((name, args, sorted(kw.items()))) for name, args, kw, _ in shown}
    per_seed = []
    for name, args, kw, expected in shown:
        calls = []
        for i, arg in enumerate(args):
            for v in _variants(arg):
                new = args[:i] + [v] + args[i + 1:]
                key = repr((name, new, sorted(kw.items())))
                if key not in seen:
                    seen.add(key)
                    parts = [repr(a) for a in new] + [f"{k}={w!r}" for k, w in kw.items()]
                    calls.append((f"{name}({', '.join(parts)})", expected))
        per_seed.append(calls)
    out = []
    for round_ in range(max((len(c) for c in per_seed), default=0)):
        out.extend(c[round_] for c in per_seed if round_ < len(c))
    return out[:limit]


def probe_calls(statement: str, visible: str, limit: int = PROBE_CALLS) -> list[str]:
    """Sources of calls on inputs derived from the shown calls' (one argument changed), never a shown input."""
    return [source for source, _ in probe_plan(statement, visible, limit)]


NUDGES = (1e-12, 1e-7)
"""Relative nudges of the float arguments of a shown call (a continuous function barely moves). Two scales,
so that a table whose float keys match within a tolerance of its own must widen it past 1e-7, where its
hits no longer pass for the shown outputs of the unnudged inputs' neighbours."""
NUDGE = NUDGES[0]


def _nudged(value: Any, by: float = NUDGE) -> Any:
    if isinstance(value, float) and math.isfinite(value) and value:
        return value * (1 + by)
    if isinstance(value, (list, tuple)):
        return type(value)(_nudged(v, by) for v in value)
    return value


def nudged_calls(statement: str, visible: str, limit: int = 4,
                 scales: Sequence[float] = NUDGES) -> list[tuple[str, Any]]:
    """(source, shown output) of shown calls with their float arguments nudged, at each of ``scales`` in turn."""
    out = []
    for by in scales:
        scale = []
        for name, args, kw, expected in shown_calls(statement, visible):
            new = [_nudged(a, by) for a in args]
            if new != args or repr(new) != repr(args):
                parts = [repr(a) for a in new] + [f"{k}={w!r}" for k, w in kw.items()]
                source = f"{name}({', '.join(parts)})"
                if all(source != known for known, _ in scale):  # a call the examples and tests both show counts once
                    scale.append((source, expected))
        out.extend(scale[:limit])
    return out


def _near(a: Any, b: Any) -> bool:
    """Equal, with numbers compared to 1e-6 relative (what a nudge of 1e-12 may move a continuous result)."""
    if isinstance(a, bool) or isinstance(b, bool):
        return type(a) is type(b) and a == b
    if isinstance(a, (int, float)) and isinstance(b, (int, float)):
        return _isclose(a, b, 1e-6, 1e-9)
    if isinstance(a, (tuple, list)) and isinstance(b, (tuple, list)):
        return len(a) == len(b) and all(_near(x, y) for x, y in zip(a, b))
    return a == b


def jumps(nudged: Sequence[tuple[str, Any]], probes: Sequence[tuple[str, str]] | None) -> str | None:
    """Why the results on the nudged shown calls show a table, or None.

    A table: two or more of them, most far from their shown outputs (a continuous function barely
    moves; a table misses its key and falls back). A handle is far from any shown output.
    """
    if probes is None or len(nudged) < 2 or len(probes) != len(nudged):
        return None
    far = sum(not (kind == "=" and _near(_literal(value), expected)) for (_, expected), (kind, value) in zip(nudged, probes))
    if far < 2 or far * 2 <= len(nudged):
        return None
    return (f"nudging the float arguments of shown calls a little (relative {NUDGES[0]:g} to {NUDGES[-1]:g}) moves "
            f"{far} of {len(nudged)} results far from their shown outputs")


def read_probes(output: str) -> list[tuple[str, str]] | None:
    """Read a probe's output: ``(kind, text)`` per call, kind ``=`` (a value), ``!`` (raised) or ``?`` (a handle).

    None when it has no summary line.
    """
    if not re.search(r"^PROBES \d+$", output, re.MULTILINE):
        return None
    return [(m.group(1), m.group(2)) for m in re.finditer(r"^PROBE \d+ ([=!?]) (.*)$", output, re.MULTILINE)]


def named_exceptions(statement: str) -> set[str]:
    """The exception classes a statement names (in its text or its examples' tracebacks)."""
    return set(re.findall(r"\b[A-Z]\w*(?:Error|Exception)\b", statement)) | {
        e.raises for e in grading.parse_examples(statement) if e.raises}


def _kind(value: Any) -> str:
    """The kind of value a test compares: numbers are one kind (a finite int or float), NaN and inf their own."""
    if isinstance(value, bool):
        return "bool"
    if isinstance(value, int):
        return "number"
    if isinstance(value, float):
        return "number" if math.isfinite(value) else "non-finite"
    return type(value).__name__


_REPR_KINDS = (("'", "str"), ('"', "str"), ("b'", "bytes"), ('b"', "bytes"), ("[", "list"), ("(", "tuple"),
               ("True", "bool"), ("False", "bool"), ("None", "NoneType"), ("nan", "non-finite"),
               ("inf", "non-finite"), ("-inf", "non-finite"), ("frozenset(", "frozenset"), ("set()", "set"))


def _kind_of_repr(text: str) -> str | None:
    """The kind of a probe's result from its repr (clipped ones too); None when it cannot be told."""
    value = _literal(text)
    if value is not None or text == "None":
        return _kind(value)
    if re.match(r"^-?\d", text):
        return "number"
    return next((kind for prefix, kind in sorted(_REPR_KINDS, key=lambda p: -len(p[0])) if text.startswith(prefix)),
                None)


def degenerate(shown: Sequence[Any], probes: Sequence[tuple[str, str]] | None,
               allowed: set[str] = frozenset(), seeds: Sequence[Any] | None = None) -> str | None:
    """Why the probed behaviour is that of a table of the shown cases, or None (also when the probe abstains).

    It abstains with fewer than ``PROBE_MIN`` calls. Otherwise it fails a solution that raises (an
    exception not in ``allowed``, those the statement names), times out, or returns None (None never
    shown), a handle (the shown calls all return plain values) or, with ``seeds`` (the shown output of the
    call each probe derives from), a value of another kind than its seed's (a test would compare a string
    with a string; NaN and inf are a kind of their own) on 3 in 4 of the derived inputs; that raises
    exceptions the statement names for all of them; that returns one value, or raises one exception, for all
    of them while the shown outputs are three or more distinct values; or that returns, for every one of
    them, exactly a non-trivial output shown for another input.
    """
    if probes is None or len(probes) < PROBE_MIN:
        return None
    distinct_shown = {repr(v) for v in shown}
    none_shown = "None" in distinct_shown
    seeds = list(seeds) if seeds is not None and len(seeds) == len(probes) else [None] * len(probes)

    def off_kind(value: str, seed: Any) -> bool:
        if seed is None:
            return False
        kind = _kind_of_repr(value)
        return kind is not None and kind != _kind(seed)

    bad = sum(kind == "?" or (kind == "!" and value not in allowed)
              or (kind == "=" and ((value == "None" and not none_shown) or off_kind(value, seed)))
              for (kind, value), seed in zip(probes, seeds))
    n = len(probes)
    if bad * 4 >= n * 3:
        return f"it raises, times out or returns None or a value of another kind on {bad} of {n} inputs near the shown ones"
    if all(kind == "!" for kind, _ in probes):
        return f"it raises an exception for all {n} inputs near the shown ones"
    if len(set(probes)) == 1 and len(distinct_shown) >= 3:
        kind, value = probes[0]
        what = f"raises {value}" if kind == "!" else f"returns {value[:40]}"
        return f"it {what} for all {n} inputs near the shown ones, while the shown outputs differ"
    non_trivial = [v for v in shown if not _trivial(v)]
    if non_trivial and all(kind == "=" and any(_near(_literal(value), v) for v in non_trivial) for kind, value in probes):
        return f"it returns, for all {n} inputs near the shown ones, an output shown for another input"
    return None


def _examples_or_table(statement: str, check_output: str | None, source: str | None,
                       visible: str | None) -> tuple[str | None, int]:
    """Rules 1 and 2, shared by both judges: (the FAIL's reason, or None, and the number of examples). A FAIL
    when an example fails (or its check did not finish) or the solution is a lookup table of the shown outputs."""
    checked = grading.read_example_check(check_output or "")
    if checked is None:
        return "The check of the statement's examples did not finish.", 0
    passed, total, bad = checked
    if bad:
        return (f"The statement's examples or my own cases fail ({passed} of {total} pass): "
                + "; ".join(bad)[:600]), total
    outputs = table_outputs(statement, visible or "")
    reported = _line_after(check_output or "", "HELD ")
    if reported is not None:  # the check program read every source file whole
        held = [outputs[int(i)] for i in reported.split(",") if i.isdigit() and int(i) < len(outputs)]
    else:
        held = hard_coded(source, outputs) if source and visible else []
    if len(held) >= 2:
        return (f"The solution holds {len(held)} of the outputs the examples and the visible tests show "
                f"as literals ({', '.join(_show(v) for v in held[:4])}): a lookup table, not a solution."), total
    return None, total


def table_outputs(statement: str, visible: str) -> list[Any]:
    """The shown outputs a lookup table would hold (:func:`shown_outputs`), each once."""
    unique: dict[tuple[str, str], Any] = {}
    for value in shown_outputs(statement, visible):
        unique.setdefault((type(value).__name__, _show(value, 10_000)), value)
    return list(unique.values())


def _show(value: Any, limit: int = 40) -> str:
    """``repr(value)`` cut to ``limit`` characters; never raises (an int past the digit limit has no repr)."""
    try:
        return repr(value)[:limit]
    except ValueError:
        return f"<int of {value.bit_length()} bits>" if isinstance(value, int) else "<no repr>"


def _line_after(output: str, prefix: str) -> str | None:
    """The rest of the last line of ``output`` that starts with ``prefix``, or None."""
    found = [line[len(prefix):] for line in output.splitlines() if line.startswith(prefix)]
    return found[-1] if found else None


def _missing(check_output: str | None) -> frozenset[str] | None:
    missing = _line_after(check_output or "", "MISSING ")
    return None if missing is None else frozenset(n for n in missing.split(",") if n)


def decide(statement: str, visible_report: str, check_output: str | None, source: str | None = None,
           visible: str | None = None, probe_output: str | None = None) -> tuple[str, str]:
    """Apply the rule judge's rules; return (verdict, one-paragraph reason).

    ``visible`` is the visible tests' source. Rule 2 reads the ``HELD`` line of ``check_output`` (the
    check program read every source whole), else ``source`` (the submitted ``solution.py``), and is
    skipped without either. ``probe_output`` is the probe program's output (rule 3 is skipped
    without it). A missing helper is set aside only on the ``MISSING`` line of ``check_output``.
    """
    any_order = grading.statement_leaves_order_free(statement)
    reason, total = _examples_or_table(statement, check_output, source, visible)
    if reason is not None:
        return "FAIL", reason
    if probe_output is not None:
        visible = visible or ""
        derived, probes = probe_calls(statement, visible), read_probes(probe_output)
        if probes is None and (derived or nudged_calls(statement, visible)):
            return "FAIL", ("The probe of inputs near the shown ones did not finish: "
                            + (probe_output.strip().splitlines() or ["no output"])[-1][:200])
        seeds = [seed for _, seed in probe_plan(statement, visible)]
        why = degenerate([c[3] for c in shown_calls(statement, visible)], None if probes is None else probes[:len(derived)],
                         named_exceptions(statement), seeds)
        at = len(derived)
        for by in NUDGES:  # each scale on its own: a table within a tolerance of 1e-9 misses only at 1e-7
            nudged = nudged_calls(statement, visible, scales=(by,))
            why = why or jumps(nudged, None if probes is None else probes[at:at + len(nudged)])
            at += len(nudged)
        if why is not None:
            return "FAIL", f"Off the shown cases the solution degenerates: {why}; a table of the shown cases."
    reasons = []
    evidence = Evidence(visible or "", _missing(check_output))
    for failure in read_failures(visible_report):
        why = next((label for label, test in FREE_FAILURES if test(failure, statement, any_order, evidence)), None)
        if why is None:
            return "FAIL", f"The visible test {failure.name} fails for a reason the statement fixes: {failure.error}."
        reasons.append(f"{failure.name} only asks for {why}")
    tail = f" Visible failures set aside: {'; '.join(reasons)}." if reasons else ""
    return "PASS", f"All {total} examples (the statement's and my own cases) pass.{tail}"


def _python_stdout(result: str) -> str | None:
    """The stdout block of a run_python tool result, unquoted."""
    match = re.search(r"^stdout:\n(.*?)(?=^stderr:)", result, re.MULTILINE | re.DOTALL)
    return text.unquote(match.group(1).rstrip("\n")) if match else None


def _visible_source(first_message: str) -> str | None:
    """The visible tests' source from the judge's first message (the env's own, in a python fence)."""
    body = text.section(first_message, f"Visible tests ({grading.VISIBLE_FILE})")
    match = re.search(r"```python\n(.*?)\n```", body or "", re.DOTALL)
    return match.group(1) if match else None


def decide_strict(statement: str, visible_report: str, check_output: str | None, source: str | None = None,
                  visible: str | None = None) -> tuple[str, str]:
    """The strict judge's rules (a second judge with other rules, for cross-play); return (verdict, reason).

    1. an example of the statement or an own case that fails (compared as the rule judge compares), or a check
       that does not finish: FAIL; 2. a lookup table of the shown outputs (rule 2 of the rule judge): FAIL; 3. any visible test
       that fails, whatever for: FAIL; 4. otherwise PASS. It never probes off the shown cases and forgives no
       visible failure: it trusts the visible tests where the rule judge overrules them, and checks no further.
    """
    reason, total = _examples_or_table(statement, check_output, source, visible)
    if reason is not None:
        return "FAIL", reason
    failures = read_failures(visible_report)
    if failures:
        return "FAIL", f"{len(failures)} visible test(s) fail, first {failures[0].name}: {failures[0].error}."
    return "PASS", f"All {total} examples (the statement's and my own cases) and every visible test pass."


class RuleJudge(Policy):
    """The rule-based judge of the module docstring; it uses its tools and never reads hidden tests.

    Args:
        strict: Decide by :func:`decide_strict` instead (examples, lookup tables, every visible test; no probe).
    """

    remote_ok = True  # plain Python state, no model: it may act in a Ray actor beside the envs

    name = "rule_judge"

    def __init__(self, strict: bool = False) -> None:
        self.strict = strict
        self.name = "strict_judge" if strict else "rule_judge"

    def act(self, observations: Sequence[Observation]) -> list[Reply]:
        self.check_batch(observations, key="messages")
        return [Reply(self._reply(obs), policy=self.name) for obs in observations]

    def _reply(self, obs: Observation) -> str:
        messages = obs["messages"]
        statement = text.section(_first_user_message(obs), "Statement") or ""
        last_assistant = max((i for i, m in enumerate(messages) if m["role"] == "assistant"), default=None)
        if last_assistant is None:
            visible = _visible_source(_first_user_message(obs)) or ""
            own = grading.parse_examples(text.section(_first_user_message(obs), text.JUDGE_CASES) or "")
            program = grading.example_check_program(grading.parse_examples(statement) + own,
                                                    any_order=grading.statement_leaves_order_free(statement),
                                                    probes=[] if self.strict else probe_calls(statement, visible)
                                                    + [c for c, _ in nudged_calls(statement, visible)],
                                                    outputs=[_show(v, 100_000) for v in table_outputs(statement, visible)],
                                                    names=solution_names(visible))
            return (tool_call("run_tests") + "\n" + tool_call("run_python", {"code": program}) + "\n"
                    + tool_call("read_file", {"path": grading.SOLUTION_FILE}))
        results = [m["content"] for m in messages[last_assistant + 1:] if m["role"] == "tool"]
        if len(results) < 2:
            return "My checks did not run.\nVERDICT: ABSTAIN"
        if len(results) > 2 and results[2].startswith("error:"):
            return f"The solution cannot be read ({results[2][:200]!r}).\nVERDICT: FAIL"
        source = text.unquote(results[2]) if len(results) > 2 else None
        visible = _visible_source(_first_user_message(obs))
        check_output = _python_stdout(results[1])
        if self.strict:
            verdict, reason = decide_strict(statement, results[0], check_output, source, visible)
        else:
            verdict, reason = decide(statement, results[0], check_output, source, visible, check_output or "")
        return f"{reason}\nVERDICT: {verdict}"


def stored_solver(which: str) -> Any:
    """Return a factory(seed=None) of a solver that submits stored solutions of kind or name ``which``."""
    def factory(seed: int | None = None) -> StoredSolver:
        return StoredSolver(which, seed=seed)

    return factory


def rule_judge(seed: int | None = None) -> RuleJudge:
    """Return the rule-based judge (deterministic: the seed is ignored)."""
    return RuleJudge()


@functools.lru_cache(maxsize=1)
def corpus() -> tuple[str, ...]:
    """Return the text a solver reads and writes, for a tiny model's BPE tokenizer: both system prompts with
    their tools, every task's message, and every stored solution as the scripted solver writes it."""
    from llm_zoo.envs.agentic_judge.env import raw_env

    texts = [text.SUBMIT]
    for prompt in ("full", "compact"):
        game = raw_env(prompt=prompt, allow_unsandboxed=True)  # only the prompt is read: no code runs
        game.reset(seed=0)
        texts.append(game.observe("solver")["messages"][0]["content"])
        game.close()
    for task in load_tasks().values():
        texts.append(text.task_message(task.id, task.statement, grading.VISIBLE_FILE, task.visible, grading.SOLUTION_FILE))
        texts += [tool_call("write_file", {"path": grading.SOLUTION_FILE, "content": code}) + "\n" + tool_call("run_tests")
                  for code in task.solutions.values()]
    return tuple(texts)


def strict_judge(seed: int | None = None) -> RuleJudge:
    """Return the strict judge (:func:`decide_strict`; deterministic: the seed is ignored)."""
    return RuleJudge(strict=True)


PLAYERS = {"reference": stored_solver("reference"), "alternative": stored_solver("alternative"),
           "wrong": stored_solver("wrong"), "rule_judge": rule_judge, "strict_judge": strict_judge}
"""Name -> factory(seed=...) of every scripted player, as the CLI and benchmarks name them."""
