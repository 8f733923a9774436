"""The pure rules of proposer-solver: task modes, what makes a task valid, how answers are judged.

A task is a short Python program defining ``f`` plus inputs (or, in ``integer`` mode, a story in the
grammar of :mod:`llm_zoo.envs.proposer_solver.story`, whose text determines its integer answer, plus a
program ``f()`` that must compute the same answer). Nothing here runs untrusted code: this module checks a
program's text (:func:`check_program`), reads argument lists (:func:`read_arguments`), builds the
job for the sandboxed harness (:func:`harness_job`, harness.py) and reads its report
(:func:`read_report`). :mod:`llm_zoo.envs.proposer_solver.verify` does the sandbox runs.

Values crossing the sandbox are *canonical JSON*: ``json.dumps(value, sort_keys=True,
allow_nan=False)`` of a value that survives the round trip unchanged (None, bool, int, float, str,
lists and dicts with str keys; no tuples, sets, NaN or int-keyed dicts). Two outputs are equal when
their canonical texts are.
"""

from __future__ import annotations

import ast
import enum
import hashlib
import json
import marshal
import re
import string
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

# ---- static facts ---------------------------------------------------------------------------


class Mode(str, enum.Enum):
    """What the solvers are asked, as in program-reasoning self-play (Absolute Zero, Zhao et al., 2025)."""

    DEDUCTION = "deduction"  # see f and an input, give the output
    ABDUCTION = "abduction"  # see f and an output, give an input that produces it
    INDUCTION = "induction"  # see input-output pairs, write f
    INTEGER = "integer"  # see a word problem, give its integer answer


MODES: tuple[str, ...] = tuple(m.value for m in Mode)

ALLOWED_IMPORTS: tuple[str, ...] = (
    "bisect", "calendar", "collections", "dataclasses", "datetime", "decimal", "fractions", "functools",
    "heapq", "itertools", "math", "operator", "re", "statistics", "string", "typing",
)
"""Top-level modules a program may import: pure computation, nothing that reaches the system."""

FORBIDDEN_NAMES: frozenset[str] = frozenset({
    "eval", "exec", "compile", "open", "input", "breakpoint", "exit", "quit", "help", "globals", "locals",
    "vars", "dir", "getattr", "setattr", "delattr", "hasattr",
})
"""Builtins a program may not name (its run has none of them), besides any ``__dunder__`` name."""
DENIED_ATTRIBUTES = r"_\w*|(?:gi|cr|ag|tb|f|co)_\w+|mro|format|format_map"
"""Attribute names a program may not read, write or have read for it (a regular expression, matched
whole): private and dunder names, the frame, code and traceback attributes of generators,
coroutines, frames and tracebacks, a type's ``mro``, and ``format``/``format_map``, whose fields
read attributes (``"{0.x}".format``); a plain literal template is the one exception
(``"{} and {name}".format(...)``). The sandboxed harness refuses the same names at run time
(``operator.attrgetter``, ``operator.methodcaller``)."""
_DENIED = re.compile(DENIED_ATTRIBUTES)

MAX_PROGRAM_CHARS = 2000
MAX_ARGUMENTS_CHARS = 200
MAX_OUTPUT_CHARS = 200
MAX_MESSAGE_CHARS = 300
MAX_PROBLEM_CHARS = 1000
INDUCTION_INPUTS = (4, 8)
"""An induction task gives between 4 and 8 inputs; half of them (rounded down) are held out."""
MAX_INTEGER = 10**15
"""Largest magnitude of an integer-mode answer."""

INVALID_REASONS: dict[str, str] = {
    "format": "the reply does not follow the task format",
    "too_long": "the program or an input is longer than allowed",
    "syntax": "the program is not valid Python",
    "no_f": "the program does not define a top-level function f",
    "import": "the program imports a module outside the allowlist (in its source or when it runs)",
    "forbidden": "the program names a forbidden builtin or a dunder name, or tried a forbidden operation when it ran",
    "error": "the program or f raised an exception",
    "timeout": "the program ran past the time limit",
    "memory": "the program ran past the memory limit",
    "output": "the program printed more than allowed",
    "processes": "the program started too many processes or threads",
    "file_size": "the program wrote too large a file",
    "disk_full": "the program filled its disk",
    "crashed": "the interpreter crashed",
    "killed": "the program was killed by a signal",
    "not_json": "f returned a value that is not JSON data",
    "output_too_long": f"an output is longer than {MAX_OUTPUT_CHARS} characters as JSON",
    "not_integer": "in integer mode f() must return an int",
    "nondeterministic": "two runs gave different outputs",
    "duplicate_inputs": "the inputs are not all different",
    "undetermined": "in integer mode the PROBLEM is not a story the env can read (story.py's sentence forms), so its "
                    "words need not determine the answer",
    "disagrees": "in integer mode f() does not return the answer the env reads from the PROBLEM",
    "unseen": "the solvers would not see the task as it is graded (a character outside what observations show, "
              "or a view longer than an observation)",
}
"""Reason code -> what it means; ``infos["proposer"]["invalid_reason"]`` holds one of the codes."""


def learnability(pass_rate: float) -> float:
    """Return ``4 p (1 - p)``: 1 when half the solvers succeed, 0 when none or all do."""
    return 4.0 * pass_rate * (1.0 - pass_rate)


def azr_reward(pass_rate: float) -> float:
    """Return Absolute Zero's proposer reward: ``1 - p`` for 0 < p < 1, else 0."""
    return 1.0 - pass_rate if 0.0 < pass_rate < 1.0 else 0.0


REWARD_FORMULAS: dict[str, Callable[[float], float]] = {"learnability": learnability, "azr": azr_reward}
"""Name -> proposer reward as a function of the solvers' pass rate (``proposer_reward=`` option)."""


class TaskInvalid(Exception):  # noqa: N818 - names the situation, as core's InvalidReply does
    """A task (or a solver's program) broke a rule; ``code`` is a key of :data:`INVALID_REASONS`."""

    def __init__(self, code: str, detail: str) -> None:
        assert code in INVALID_REASONS, code
        super().__init__(f"{code}: {detail}")
        self.code = code
        self.detail = detail


# ---- tasks ----------------------------------------------------------------------------------


@dataclass(frozen=True)
class Proposal:
    """A proposer's reply as parsed: the program and its inputs (canonical argument sources)."""

    mode: Mode
    program: str
    inputs: tuple[str, ...] = ()
    message: str = ""  # induction: an optional hint shown to the solvers
    problem: str = ""  # integer: the word problem


@dataclass(frozen=True)
class Task:
    """A validated task: a proposal, the output of ``f`` on each input, and the held-out inputs."""

    proposal: Proposal
    outputs: tuple[str, ...]  # canonical JSON, one per input (integer mode: one, the story's answer, which f() gives)
    held_out: tuple[int, ...] = ()  # induction: indices of inputs the solvers do not see
    conditions: Conditions | None = None  # the hash seed and clock of the run that recorded the outputs;
    # answers are checked under the same ones, so a check never differs from the record by the clock

    @property
    def mode(self) -> Mode:
        return self.proposal.mode

    @property
    def shown(self) -> tuple[int, ...]:
        """Indices of the inputs whose pairs the solvers see."""
        return tuple(i for i in range(len(self.proposal.inputs)) if i not in self.held_out)

    def problem_id(self, seed: int | None) -> str:
        """Return ``"<seed>/<hash>"``: the key that groups the solvers of one problem."""
        data = json.dumps([self.mode.value, self.proposal.program, self.proposal.inputs, self.proposal.message,
                           self.proposal.problem, self.outputs, self.held_out])
        return f"{seed}/{hashlib.sha256(data.encode()).hexdigest()[:12]}"

    def to_info(self) -> dict[str, Any]:
        """Return the task as JSON-friendly data, for ``infos``."""
        p = self.proposal
        return {"mode": p.mode.value, "program": p.program, "inputs": list(p.inputs), "outputs": list(self.outputs),
                "held_out": list(self.held_out), "message": p.message, "problem": p.problem}


def held_out_count(num_inputs: int) -> int:
    """Return how many of an induction task's inputs are held out: half, rounded down."""
    return num_inputs // 2


# ---- reading programs and values ------------------------------------------------------------


def check_program(source: str, allowed_imports: Sequence[str] = ALLOWED_IMPORTS) -> None:
    """Check a program's text: size, syntax, a top-level ``f``, imports and names.

    Raises:
        TaskInvalid: with code ``too_long``, ``syntax``, ``no_f``, ``import`` or ``forbidden``.
    """
    if len(source) > MAX_PROGRAM_CHARS:
        raise TaskInvalid("too_long", f"the program has {len(source)} characters; at most {MAX_PROGRAM_CHARS}")
    try:
        tree = ast.parse(source)
    except (SyntaxError, ValueError, RecursionError, MemoryError) as exc:
        where = f" (line {exc.lineno})" if isinstance(exc, SyntaxError) and exc.lineno else ""
        raise TaskInvalid("syntax", f"{type(exc).__name__}: {getattr(exc, 'msg', exc)}{where}") from None
    if not any(isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)) and node.name == "f" for node in tree.body):
        raise TaskInvalid("no_f", "define f at the top level: def f(...):")
    allowed = set(allowed_imports)
    bound = _bound_names(tree)
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            modules = [alias.name for alias in node.names]
        elif isinstance(node, ast.ImportFrom):
            modules = ["." if node.level else (node.module or "")]
        else:
            modules = []
        for module in modules:
            if module.split(".")[0] not in allowed:
                raise TaskInvalid("import", f"import of {module!r}; allowed modules: {', '.join(sorted(allowed))}")
        # builtins are barred by name (re.compile and os.open are attributes, not the builtins);
        # dunder names are barred where they are read (__builtins__), not where they are defined
        # (def __init__); attributes by DENIED_ATTRIBUTES, read or written (x.__class__, g.gi_frame)
        if isinstance(node, ast.Name) and (node.id in FORBIDDEN_NAMES or _is_dunder(node.id)):
            raise TaskInvalid("forbidden", f"the name {node.id!r} is not allowed")
        if isinstance(node, ast.MatchClass) and node.patterns and not (
                isinstance(node.cls, ast.Name) and node.cls.id in MATCH_SELF_TYPES and node.cls.id not in bound):
            raise TaskInvalid("forbidden", f"the class pattern {ast.unparse(node)[:60]!r} matches by position, which "
                                           "reads the attributes __match_args__ names; match by keyword (Point(x=a)) "
                                           f"or by one of {', '.join(sorted(MATCH_SELF_TYPES))} (int(n))")
        attributes = node.kwd_attrs if isinstance(node, ast.MatchClass) else [node.attr] \
            if isinstance(node, ast.Attribute) and not _plain_template(node) else []
        for attribute in attributes:
            if _DENIED.fullmatch(attribute):
                raise TaskInvalid("forbidden", f"the attribute {attribute!r} is not allowed (no attribute that starts "
                                               "with _, reads frames or code, mro, or format on anything but a plain "
                                               "string literal)")


MATCH_SELF_TYPES = frozenset({"bool", "bytearray", "bytes", "dict", "float", "frozenset", "int", "list", "set", "str",
                              "tuple"})
"""Builtin types a class pattern may match by position (``case int(n)``): they match the subject itself.
Any other class pattern reads by position the attributes its ``__match_args__`` names, which a program
can set to any name (``type('A', (), {'__match_args__': ('__globals__',)})``)."""


def _bound_names(tree: ast.AST) -> set[str]:
    """Return every name the program binds (assigns, defines, imports, takes as a parameter or captures)."""
    names: set[str] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Name) and not isinstance(node.ctx, ast.Load):
            names.add(node.id)
        elif isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
            names.add(node.name)
        elif isinstance(node, ast.arg):
            names.add(node.arg)
        elif isinstance(node, ast.alias):
            names.add(node.asname or node.name.partition(".")[0])
        elif isinstance(node, (ast.Global, ast.Nonlocal)):
            names.update(node.names)
        elif isinstance(node, (ast.MatchAs, ast.MatchStar)) and node.name:
            names.add(node.name)
        elif isinstance(node, ast.MatchMapping) and node.rest:
            names.add(node.rest)
    return names


def _plain_template(node: ast.Attribute) -> bool:
    """Return whether ``node`` is ``format``/``format_map`` of a string literal whose fields name no attribute or item."""
    if node.attr not in ("format", "format_map") or not isinstance(node.value, ast.Constant) \
            or not isinstance(node.value.value, str):
        return False
    todo = [node.value.value]
    while todo:
        try:
            fields = list(string.Formatter().parse(todo.pop()))
        except ValueError:
            return False
        for _, field, spec, _ in fields:
            if field is not None and not re.fullmatch(r"\d*|[A-Za-z]\w*", field):
                return False
            todo += [spec] if spec else []
    return True


def _is_dunder(name: str) -> bool:
    return len(name) > 4 and name.startswith("__") and name.endswith("__")


def read_arguments(text: str) -> str:
    """Read ``f``'s arguments written as in a call (``[3, 1], 2``) and return their canonical source.

    Every argument must be a Python literal; no keywords or ``*``. Raises ``ValueError`` saying what
    is wrong.
    """
    text = text.strip()
    if len(text) > MAX_ARGUMENTS_CHARS:
        raise ValueError(f"the arguments have {len(text)} characters; at most {MAX_ARGUMENTS_CHARS}")
    try:
        call = ast.parse(f"f({text})", mode="eval").body
    except (SyntaxError, ValueError, RecursionError, MemoryError):
        raise ValueError(f"cannot read {text[:80]!r} as arguments of a call f(...)") from None
    if not isinstance(call, ast.Call) or call.keywords or any(isinstance(a, ast.Starred) for a in call.args):
        raise ValueError(f"write the arguments as plain literals without names or *, e.g. [3, 1], 2; got {text[:80]!r}")
    for arg in call.args:
        try:
            ast.literal_eval(arg)
        except (ValueError, TypeError, SyntaxError, RecursionError, MemoryError):
            raise ValueError(f"{ast.unparse(arg)[:80]!r} is not a Python literal (numbers, strings, lists, "
                             "tuples, dicts, sets, True/False/None)") from None
    # ASCII with escapes ('\\u65e5'): the source the solvers see is the one that runs, whatever an
    # observation can show (a literal holds non-ASCII characters only inside its strings)
    return ", ".join(ast.unparse(arg) for arg in call.args).encode("ascii", "backslashreplace").decode("ascii")


def read_value(text: str) -> Any:
    """Read one value written as a Python literal or as JSON (``true``, ``null``); ``ValueError`` if neither."""
    text = text.strip().strip("`").strip()
    try:
        return ast.literal_eval(text)
    except (ValueError, TypeError, SyntaxError, RecursionError, MemoryError):
        pass
    try:
        return json.loads(text)
    except (ValueError, RecursionError):
        raise ValueError(f"cannot read {text[:80]!r} as a Python literal or JSON value") from None


def canonical(value: Any) -> str | None:
    """Return the canonical JSON text of ``value``, or None if it is not exactly JSON data.

    Exactly as ``f``'s outputs are held to it in the sandbox: None, bool, int, finite float, str,
    lists and dicts with str keys, nothing else (a tuple, set or ``{1: 1}`` is not ``[...]`` or
    ``{'1': 1}``).
    """
    if not _exact_json(value, 0):
        return None
    try:
        return json.dumps(value, sort_keys=True, allow_nan=False)
    except (TypeError, ValueError, RecursionError):
        return None


def _exact_json(value: Any, depth: int) -> bool:
    kind = type(value)
    if depth > 100:
        return False
    if value is None or kind in (bool, int, str):
        return True
    if kind is float:
        return value - value == 0
    if kind is list:
        return all(_exact_json(v, depth + 1) for v in value)
    if kind is dict:
        return all(type(k) is str for k in value) and all(_exact_json(v, depth + 1) for v in value.values())
    return False


def show(canonical_json: str) -> str:
    """Return a canonical JSON value written as a Python literal, as solvers are shown it: ASCII,
    other characters escaped (``'\\u65e5'``), so the view reads back as exactly the value."""
    return ascii(json.loads(canonical_json))


# ---- the sandbox harness ----------------------------------------------------------------------
#
# harness.py runs in the sandbox: a supervisor process starts one runner process per run, each a
# fresh interpreter that runs the program under an audit hook and sends its results to the
# supervisor on a channel of its own, keyed with a secret the program cannot read. The supervisor
# writes one JSON report. These functions build its job and read its report; both are plain data.

MAX_VALUE_BYTES = 4096
"""Largest marshalled value a runner sends back per call; more is reported as too long."""
STARTUP_S = 5.0
"""Seconds a runner may take to start before its program's time (``timeout_s``) begins."""


@dataclass(frozen=True)
class Conditions:
    """What a run of a program may observe of its process, none of which may change its results."""

    hash_seed: int
    clock: float  # seconds since the epoch: every clock the program can read shows this instant
    pad: int = 0  # objects allocated before the program runs, so object ids differ between runs
    recursion_limit: int = 1000  # sys.setrecursionlimit: how deep f may recurse, and how much depth is left
    tz: str = "UTC0"  # the TZ environment variable (a POSIX rule): what local time is
    entropy: int = 0  # what random.Random() and random.seed() take when given no seed
    headroom_mb: int = 64  # address space the program may map beyond the interpreter's (RLIMIT_AS)


REFERENCE = Conditions(hash_seed=0, clock=1_000_000_000.0)
"""The conditions every output is recorded and every answer graded under (2001-09-09 01:46:40 UTC,
hash randomisation off, the default recursion limit, UTC, 64 MiB of headroom): grading is a function
of the task, never of the host or of ``sandbox_memory_mb`` (which bounds the headroom only from above)."""
MIN_RECURSION_LIMIT = 1000
"""The lowest recursion limit a run gets; f that recurses less deep than this runs the same in every run."""


@dataclass(frozen=True)
class Run:
    """One runner's outcome: ``reason`` None when it finished, else a key of :data:`INVALID_REASONS`."""

    reason: str | None
    detail: str
    calls: tuple[tuple[str, str], ...] = ()  # (status, text) per call: "ok" with canonical JSON, else why not
    refused: tuple[str, ...] = ()  # what the program tried that the runner refused, in order


def call_values(arguments: str) -> tuple[Any, ...]:
    """Return the argument tuple of a canonical argument source from :func:`read_arguments`."""
    return ast.literal_eval(f"({arguments},)") if arguments else ()


def imported_modules(source: str) -> list[str]:
    """Return the modules a program's source imports (``from a import b`` names ``a`` and ``a.b``)."""
    try:
        tree = ast.parse(source)
    except (SyntaxError, ValueError, RecursionError, MemoryError):
        return []
    names: list[str] = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            names += [alias.name for alias in node.names]
        elif isinstance(node, ast.ImportFrom) and node.module and not node.level:
            names += [node.module] + [f"{node.module}.{alias.name}" for alias in node.names]
    return list(dict.fromkeys(names))


def harness_job(runs: Sequence[tuple[str, Sequence[str], Conditions]], *, nonce: str, timeout_s: float,
                allowed_imports: Sequence[str], max_output: int, capabilities: bool = True) -> dict[str, Any]:
    """Return the job for harness.py: per run, the program, its calls (argument sources) and its conditions.

    ``capabilities=False`` gives the program the real builtins and modules, to test the run-time
    refusals beneath them; tasks always run with capabilities.
    """
    return {
        "nonce": nonce, "timeout_s": timeout_s, "startup_s": STARTUP_S, "max_output": max_output,
        "max_value": MAX_VALUE_BYTES, "max_text": 5 * MAX_OUTPUT_CHARS,
        "max_result": 4 * MAX_VALUE_BYTES * max((len(calls) for _, calls, _ in runs), default=1) + (1 << 16),
        "allowed": sorted(allowed_imports), "capabilities": capabilities, "denied_attributes": DENIED_ATTRIBUTES,
        "runs": [{"program": program, "calls": marshal.dumps([call_values(a) for a in calls]).hex(),
                  "preload": imported_modules(program), "hash_seed": c.hash_seed, "clock": c.clock, "pad": c.pad,
                  "recursion_limit": c.recursion_limit, "tz": c.tz, "entropy": c.entropy, "headroom_mb": c.headroom_mb}
                 for program, calls, c in runs],
    }


def read_report(stdout: str, nonce: str, runs: int) -> list[Run]:
    """Read harness.py's report (its whole stdout); ``ValueError`` if it is not one well-formed report.

    The report holds ``runs`` runs, or only the first when that one failed (the harness then stops).
    """
    try:
        report = json.loads(stdout)
    except (ValueError, RecursionError):
        raise ValueError("the harness's report is not one JSON object") from None
    if not isinstance(report, dict) or report.get("nonce") != nonce or not isinstance(report.get("runs"), list) \
            or not 1 <= len(report["runs"]) <= runs:
        raise ValueError("the harness's report is damaged")
    out = []
    for run in report["runs"]:
        reason, detail = run.get("reason"), run.get("detail")
        calls, refused = run.get("calls", []), run.get("refused", [])
        if (reason is not None and reason not in INVALID_REASONS) or not isinstance(detail, str) \
                or not all(isinstance(c, list) and len(c) == 2 and all(isinstance(x, str) for x in c) for c in calls) \
                or not all(isinstance(r, str) for r in refused):
            raise ValueError("the harness's report is damaged")
        out.append(Run(reason, detail, tuple((s, t) for s, t in calls), tuple(refused)))
    if len(out) < runs and not (out[0].reason or out[0].refused or any(s != "ok" for s, _ in out[0].calls)):
        raise ValueError("the harness's report is damaged")  # only a failed first run stops the others
    return out


def check_run(run: Run, expected: int) -> tuple[tuple[str, str], ...]:
    """Return a finished run's calls, or raise :class:`TaskInvalid` for why it gave none or what it tried."""
    if run.reason is not None:
        raise TaskInvalid(run.reason, run.detail)
    if run.refused:
        first = run.refused[0]
        code = "import" if first.startswith("import of") else "forbidden"
        raise TaskInvalid(code, f"when it ran, the program tried {first}"
                                + (f" (and {len(run.refused) - 1} more)" if len(run.refused) > 1 else ""))
    assert len(run.calls) == expected, (len(run.calls), expected)
    return run.calls


def check_outputs(results: Sequence[tuple[str, str]], mode: Mode) -> tuple[str, ...]:
    """Return the canonical outputs of a proposal's calls, or raise :class:`TaskInvalid` naming the first problem."""
    outputs = []
    for i, (status, text) in enumerate(results):
        where = "f()" if mode is Mode.INTEGER else f"input {i + 1}"
        if status == "error":
            raise TaskInvalid("memory" if text.startswith("MemoryError") else "error", f"{where}: f raised {text}")
        if status == "too_long":
            raise TaskInvalid("output_too_long", f"{where}: the output has {text}; at most {MAX_OUTPUT_CHARS} "
                                                 "characters as JSON")
        if status == "not_json":
            raise TaskInvalid("not_json", f"{where}: f returned {text}; return None, bool, int, float, str, "
                                          "or lists and dicts (str keys) of them")
        if len(text) > MAX_OUTPUT_CHARS:
            raise TaskInvalid("output_too_long", f"{where}: the output has {len(text)} characters as JSON; "
                                                 f"at most {MAX_OUTPUT_CHARS}")
        if mode is Mode.INTEGER:
            value = json.loads(text)
            if not isinstance(value, int) or isinstance(value, bool) or abs(value) > MAX_INTEGER:
                raise TaskInvalid("not_integer", f"f() returned {text[:40]}; return an int of at most "
                                                 f"{MAX_INTEGER:.0e} in magnitude")
        outputs.append(text)
    return tuple(outputs)
