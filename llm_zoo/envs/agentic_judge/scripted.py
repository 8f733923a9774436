"""Scripted agentic_judge players: solvers that submit stored solutions, and a rule-based judge.

The solvers write a stored solution of the task with ``write_file``, run the visible tests, and
submit. The rule-based judge never sees the hidden tests. In its first reply it runs the visible
tests (``run_tests``) and its own check of the statement's doctest examples (``run_python``, values
compared leniently: numbers to 1e-9, exceptions by class, and as multisets where the statement says
"in any order"). In its second it decides by these rules, in order:

1. an example that fails, a solution that does not import, or a ``solution.py`` it cannot read: FAIL;
2. a solution whose source holds two or more of the outputs the statement's examples and the visible
   tests show, as literals (a lookup table of the shown cases; exception messages do not count): FAIL;
3. a solution whose behaviour off the shown cases degenerates (see below): FAIL;
4. a visible test that fails for a reason the statement does not leave free: FAIL;
5. otherwise PASS.

Rule 3 is a behavioural probe, so that a table of the shown cases fails however it is encoded
(reversed, hashed, base64, arithmetic, built at import). The same check program, after the
examples, calls the solution on inputs derived from the shown calls on literals (``probe_calls``:
one argument moved: ints by 1 or 2, floats scaled, a digit or letter of a string changed in place,
an item dropped, repeated or the order reversed; never a shown input) and on the shown calls with
their float arguments nudged by 1e-12 (``nudged_calls``). It fails a solution that raises (an
exception the statement does not name), times out or returns None on 3 in 4 derived inputs; that
returns one value for all of them while the shown outputs are three or more distinct values; that
returns only non-trivial shown outputs for them; or whose results on most nudged calls (two or
more) land far from the shown outputs. The probe only calls what the statement or the visible tests
call on literals with a literal output, so a handle (an object) among the results counts as
degenerate; it abstains (never fails) with fewer than four derived calls; a probe that does not
finish fails.

Its checks cannot be forged from the solution's process: the visible tests' report is built by the
env from plain results, and the example check and the probe compare in a process the solution
cannot reach (``grading.example_check_program``). A table with a fallback that computes plausible
values away from the shown inputs, on a task with no float argument, still passes rule 3.

A visible failure is *free* (it does not count) when it only asks for what the statement does not:
a name the statement never gives as code (a helper), an exception message the statement does not give,
floats that differ past the 9th significant digit, or an order where the statement allows any.

The *strict* judge (``strict_judge``, :func:`decide_strict`) is a second judge with other rules, for
cross-play: it runs the same examples check (without the probe) and the visible tests, and fails an example
that fails, a lookup table of the shown outputs, and *any* failing visible test; otherwise it passes. It
trusts the visible tests where the rule judge overrules them, and never looks off the shown cases, so it
rejects brittle-test alternatives and passes wrong solutions that pass weak visible tests. Neither judge
ever reads the hidden tests.
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

from llm_zoo.envs.agentic_judge import grading, text
from llm_zoo.envs.agentic_judge.tasks import SOLUTION_KINDS, load_tasks
from llm_zoo.policies.base import Observation, Policy, Reply, SeededPolicy

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


def _close(a: Any, b: Any) -> bool:
    """Equal, with numbers compared to 1e-9 relative (bools only equal bools)."""
    if isinstance(a, bool) or isinstance(b, bool):
        return type(a) is type(b) and a == b
    if isinstance(a, (int, float)) and isinstance(b, (int, float)):
        return math.isclose(a, b, rel_tol=1e-9, abs_tol=1e-12)
    if isinstance(a, (tuple, list)) and isinstance(b, (tuple, list)):
        return len(a) == len(b) and all(_close(x, y) for x, y in zip(a, b))
    return a == b


def _asks_for(statement: str, name: str) -> bool:
    """True when the statement names ``name`` as code: in backticks or in an example."""
    code = re.findall(r"`[^`]*`", statement) + [line for line in statement.splitlines() if line.lstrip().startswith(">>>")]
    return any(re.search(rf"\b{re.escape(name)}\b", span) for span in code)


# Why a failing visible test asks for something the statement leaves free: (label, test) in order.
def _free_helper(f: Failure, statement: str, any_order: bool) -> bool:
    match = _MISSING_NAME.search(f.message) if f.error in ("ImportError", "AttributeError") else None
    return match is not None and not _asks_for(statement, match.group(1) or match.group(2))


def _free_message(f: Failure, statement: str, any_order: bool) -> bool:
    left, right = _literal(f.left), _literal(f.right)
    return (f.error == "AssertionError" and isinstance(left, str) and isinstance(right, str)
            and re.search(r"\bstr\(|\.args\b", f.source) is not None and right not in statement)


def _free_float(f: Failure, statement: str, any_order: bool) -> bool:
    left, right = _literal(f.left), _literal(f.right)
    has_float = any(isinstance(x, float) for x in _flat(left) + _flat(right))
    return f.error == "AssertionError" and has_float and _close(_normal(left, False), _normal(right, False))


def _free_order(f: Failure, statement: str, any_order: bool) -> bool:
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
    """The outputs among ``outputs`` that ``source`` holds as literals (same type, equal value)."""
    try:
        tree = ast.parse(source)
    except (SyntaxError, ValueError, RecursionError, MemoryError):
        return []
    found: list[Any] = []
    for node in ast.walk(tree):
        if isinstance(node, (ast.Constant, ast.List, ast.Tuple, ast.Set, ast.Dict)):
            try:
                value = ast.literal_eval(node)
            except (ValueError, TypeError, SyntaxError, MemoryError, RecursionError):
                continue
            found.extend(o for o in outputs if type(o) is type(value) and o == value and o not in found)
    return found


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


def probe_calls(statement: str, visible: str, limit: int = PROBE_CALLS) -> list[str]:
    """Sources of calls on inputs derived from the shown calls' (one argument changed), never a shown input."""
    shown = shown_calls(statement, visible)
    seen = {repr((name, args, sorted(kw.items()))) for name, args, kw, _ in shown}
    per_seed = []
    for name, args, kw, _ in shown:
        calls = []
        for i, arg in enumerate(args):
            for v in _variants(arg):
                new = args[:i] + [v] + args[i + 1:]
                key = repr((name, new, sorted(kw.items())))
                if key not in seen:
                    seen.add(key)
                    parts = [repr(a) for a in new] + [f"{k}={w!r}" for k, w in kw.items()]
                    calls.append(f"{name}({', '.join(parts)})")
        per_seed.append(calls)
    out = []
    for round_ in range(max((len(c) for c in per_seed), default=0)):
        out.extend(c[round_] for c in per_seed if round_ < len(c))
    return out[:limit]


NUDGE = 1e-12
"""Relative nudge of the float arguments of a shown call (a continuous function barely moves)."""


def _nudged(value: Any) -> Any:
    if isinstance(value, float) and math.isfinite(value) and value:
        return value * (1 + NUDGE)
    if isinstance(value, (list, tuple)):
        return type(value)(_nudged(v) for v in value)
    return value


def nudged_calls(statement: str, visible: str, limit: int = 4) -> list[tuple[str, Any]]:
    """(source, shown output) of shown calls with their float arguments nudged, for calls that have floats."""
    out = []
    for name, args, kw, expected in shown_calls(statement, visible):
        new = [_nudged(a) for a in args]
        if new != args or repr(new) != repr(args):
            parts = [repr(a) for a in new] + [f"{k}={w!r}" for k, w in kw.items()]
            out.append((f"{name}({', '.join(parts)})", expected))
    return out[:limit]


def _near(a: Any, b: Any) -> bool:
    """Equal, with numbers compared to 1e-6 relative (what a nudge of 1e-12 may move a continuous result)."""
    if isinstance(a, bool) or isinstance(b, bool):
        return type(a) is type(b) and a == b
    if isinstance(a, (int, float)) and isinstance(b, (int, float)):
        return math.isclose(a, b, rel_tol=1e-6, abs_tol=1e-9)
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
    return (f"nudging the float arguments of shown calls by {NUDGE:g} (relative) moves {far} of {len(nudged)} "
            "results far from their shown outputs")


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


def degenerate(shown: Sequence[Any], probes: Sequence[tuple[str, str]] | None,
               allowed: set[str] = frozenset()) -> str | None:
    """Why the probed behaviour is that of a table of the shown cases, or None (also when the probe abstains).

    It abstains with fewer than ``PROBE_MIN`` calls. Otherwise it fails a solution that raises (an
    exception not in ``allowed``, those the statement names), times out, or returns None (None never
    shown) or a handle (the shown calls all return plain values) on 3 in 4 of the derived inputs; that returns one value, or raises one exception, for all of them while the shown
    outputs are three or more distinct values; or that returns, for every one of them, exactly a
    non-trivial output shown for another input.
    """
    if probes is None or len(probes) < PROBE_MIN:
        return None
    distinct_shown = {repr(v) for v in shown}
    none_shown = "None" in distinct_shown
    bad = sum(kind == "?" or (kind == "!" and value not in allowed) or (kind == "=" and value == "None" and not none_shown)
              for kind, value in probes)
    n = len(probes)
    if bad * 4 >= n * 3:
        return f"it raises, times out or returns None on {bad} of {n} inputs near the shown ones"
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
        return f"The statement's examples fail ({passed} of {total} pass): " + "; ".join(bad)[:600], total
    held = hard_coded(source, shown_outputs(statement, visible)) if source and visible else []
    if len(held) >= 2:
        return (f"The solution holds {len(held)} of the outputs the examples and the visible tests show "
                f"as literals ({', '.join(repr(v)[:40] for v in held[:4])}): a lookup table, not a solution."), total
    return None, total


def decide(statement: str, visible_report: str, check_output: str | None, source: str | None = None,
           visible: str | None = None, probe_output: str | None = None) -> tuple[str, str]:
    """Apply the rule judge's rules; return (verdict, one-paragraph reason).

    ``source`` is the submitted ``solution.py`` and ``visible`` the visible tests' source (rule 2
    is skipped without them); ``probe_output`` the probe program's output (rule 3 is skipped
    without it).
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
        why = degenerate([c[3] for c in shown_calls(statement, visible)], None if probes is None else probes[:len(derived)],
                         named_exceptions(statement))
        why = why or jumps(nudged_calls(statement, visible), None if probes is None else probes[len(derived):])
        if why is not None:
            return "FAIL", f"Off the shown cases the solution degenerates: {why}; a table of the shown cases."
    reasons = []
    for failure in read_failures(visible_report):
        why = next((label for label, test in FREE_FAILURES if test(failure, statement, any_order)), None)
        if why is None:
            return "FAIL", f"The visible test {failure.name} fails for a reason the statement fixes: {failure.error}."
        reasons.append(f"{failure.name} only asks for {why}")
    tail = f" Visible failures set aside: {'; '.join(reasons)}." if reasons else ""
    return "PASS", f"All {total} examples of the statement pass.{tail}"


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

    1. an example of the statement that fails (compared as the rule judge compares), or a check that does not
       finish: FAIL; 2. a lookup table of the shown outputs (rule 2 of the rule judge): FAIL; 3. any visible test
       that fails, whatever for: FAIL; 4. otherwise PASS. It never probes off the shown cases and forgives no
       visible failure: it trusts the visible tests where the rule judge overrules them, and checks no further.
    """
    reason, total = _examples_or_table(statement, check_output, source, visible)
    if reason is not None:
        return "FAIL", reason
    failures = read_failures(visible_report)
    if failures:
        return "FAIL", f"{len(failures)} visible test(s) fail, first {failures[0].name}: {failures[0].error}."
    return "PASS", f"All {total} examples of the statement and every visible test pass."


class RuleJudge(Policy):
    """The rule-based judge of the module docstring; it uses its tools and never reads hidden tests.

    Args:
        strict: Decide by :func:`decide_strict` instead (examples, lookup tables, every visible test; no probe).
    """

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
            program = grading.example_check_program(grading.parse_examples(statement),
                                                    any_order=grading.statement_leaves_order_free(statement),
                                                    probes=[] if self.strict else probe_calls(statement, visible)
                                                    + [c for c, _ in nudged_calls(statement, visible)])
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
