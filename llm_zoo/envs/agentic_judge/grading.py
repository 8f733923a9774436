"""Running tests and checks on a solver's code in the sandbox, and validating the task set.

Tests are plain modules of ``test_*`` functions with ``assert`` statements (pytest can run them
too). They are run by :data:`RUNNER`, a small stdlib-only program executed in the sandbox, rather
than by pytest: it starts in ~0.04 s instead of ~0.2 s, counts passes exactly, gives each test its
own time limit, and reports a failing ``assert a == b`` with both sides. Its report comes back as
one JSON line behind a per-run nonce read from stdin before any test code is imported, so text the
solution prints cannot pass for the report. (Code that inspects the runner's own frames could still
forge one: the run is as trustworthy as in-process Python isolation allows.)

The statement's doctest-style examples are parsed by :func:`parse_examples` and checked by the
program :func:`example_check_program` builds; the rule-based judge uses it through ``run_python``,
and :func:`validate_tasks` checks that every correct stored solution meets them.
"""

from __future__ import annotations

import ast
import json
import re
import secrets
import threading
from collections.abc import Iterable, Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from typing import Any

from llm_zoo.envs.agentic_judge.tasks import Task, kind_of
from llm_zoo.sandbox import Limits, Workspace, run_python

_PARSE_LOCK = threading.Lock()
"""``ast.parse`` one thread at a time: CPython 3.11 before 3.11.8 can fail concurrent parses with
"SystemError: AST constructor recursion depth mismatch" (seen here with the thread pool of
:func:`validate_tasks`)."""


__all__ = ["RUNNER", "Example", "TestReport", "TestResult", "example_check_program", "parse_examples",
           "run_tests", "test_names", "validate_tasks"]

SOLUTION_FILE = "solution.py"
"""Where the solver writes its solution; the tests import from ``solution``."""
VISIBLE_FILE = "test_solution.py"
"""The visible tests' file in the workspace."""
HIDDEN_FILE = "test_hidden.py"
"""The hidden tests' file, only ever in a separate workspace that no agent sees."""
LIMITS = Limits(processes=16, file_mb=4, output_bytes=256 * 1024, tmp_mb=16)
"""Limits of every run of solver code (beside its timeout and memory)."""
MEMORY_MB = 512

# Runs in the sandbox under the base interpreter with -S: the standard library only.
RUNNER = r'''
import ast, contextlib, io, json, operator, os, signal, sys, traceback, types

class _Timeout(BaseException):
    pass

def _alarm(signum, frame):
    raise _Timeout()

def _clip(text, limit=300):
    return text if len(text) <= limit else text[:limit] + "..."

def _repr(value):
    try:
        return _clip(repr(value))
    except BaseException as exc:
        return "<repr failed: %s>" % type(exc).__name__

_OPS = {"Eq": operator.eq, "NotEq": operator.ne, "Lt": operator.lt, "LtE": operator.le, "Gt": operator.gt,
        "GtE": operator.ge, "Is": operator.is_, "IsNot": operator.is_not,
        "In": lambda a, b: a in b, "NotIn": lambda a, b: a not in b}
_SIDES = []

def _compare(left, right, op):
    """The test of a rewritten `assert left <op> right`: records both sides when it fails."""
    ok = _OPS[op](left, right)
    if not ok:
        _SIDES[:] = [_repr(left), _repr(right)]
    return ok

class _Rewrite(ast.NodeTransformer):
    """Turn `assert a <op> b` into `assert _aj_compare(a, b, "<op>")`: each side evaluated once, as before."""

    def visit_Assert(self, node):
        test = node.test
        if isinstance(test, ast.Compare) and len(test.ops) == 1 and type(test.ops[0]).__name__ in _OPS:
            call = ast.Call(ast.Name("_aj_compare", ast.Load()),
                            [test.left, test.comparators[0], ast.Constant(type(test.ops[0]).__name__)], [])
            node.test = ast.copy_location(call, test)
        return node

def _failure(exc, path, lines):
    frames = traceback.extract_tb(exc.__traceback__)
    line = max([f.lineno for f in frames if f.filename == path] or [0])
    inner = frames[-1] if frames else None
    where = None
    if inner is not None and inner.filename != path:
        where = "%s line %s" % (os.path.basename(inner.filename), inner.lineno)
    message = _clip(str(exc)) if not isinstance(exc, _Timeout) else "the test ran past its time limit"
    record = {"ok": False, "line": line, "source": _clip(lines[line - 1].strip()) if 0 < line <= len(lines) else "",
              "error": "Timeout" if isinstance(exc, _Timeout) else type(exc).__name__, "message": message,
              "where": where}
    if isinstance(exc, AssertionError) and _SIDES:
        record["left"], record["right"] = _SIDES
    return record

def _run_file(name, limit):
    path = os.path.join(os.getcwd(), name)
    with open(path, encoding="utf-8") as f:
        text = f.read()
    tree = ast.parse(text)
    lines = text.splitlines()
    names = [n.name for n in tree.body if isinstance(n, ast.FunctionDef) and n.name.startswith("test")]
    report = {"file": name, "tests": {}, "import_error": None}
    out = io.StringIO()
    module = types.ModuleType(os.path.splitext(os.path.basename(name))[0])
    module.__file__, module._aj_compare = path, _compare
    signal.setitimer(signal.ITIMER_REAL, limit * 2)
    try:
        code = compile(ast.fix_missing_locations(_Rewrite().visit(tree)), path, "exec")
        sys.modules[module.__name__] = module
        with contextlib.redirect_stdout(out):
            exec(code, module.__dict__)
    except BaseException as exc:
        signal.setitimer(signal.ITIMER_REAL, 0)
        report["import_error"] = _failure(exc, path, lines)
        return report
    signal.setitimer(signal.ITIMER_REAL, 0)
    for test in names:
        out = io.StringIO()
        _SIDES.clear()
        signal.setitimer(signal.ITIMER_REAL, limit)
        try:
            with contextlib.redirect_stdout(out):
                getattr(module, test)()
            record = {"ok": True}
        except BaseException as exc:
            signal.setitimer(signal.ITIMER_REAL, 0)
            record = _failure(exc, path, lines)
        finally:
            signal.setitimer(signal.ITIMER_REAL, 0)
        if out.getvalue():
            record["stdout"] = _repr(out.getvalue())
        report["tests"][test] = record
    return report

def _main():
    config = json.loads(sys.stdin.readline())
    nonce, real_stdout = config["nonce"], sys.stdout
    signal.signal(signal.SIGALRM, _alarm)
    sys.setrecursionlimit(3000)
    reports = []
    for name in config["files"]:
        try:
            reports.append(_run_file(name, config["per_test_s"]))
        except BaseException as exc:
            reports.append({"file": name, "tests": {}, "import_error": {"ok": False, "error": type(exc).__name__,
                            "message": _clip(str(exc)), "line": 0, "source": "", "where": None}})
    real_stdout.write("\n" + nonce + json.dumps(reports) + "\n")
    real_stdout.flush()

_main()
'''


@dataclass(frozen=True)
class TestResult:
    """The outcome of one test function."""

    __test__ = False  # not a pytest test class

    name: str
    ok: bool
    error: str = ""
    """Exception name of a failure (``AssertionError``, ``ImportError``, ``Timeout``, ...)."""
    message: str = ""
    line: int = 0
    source: str = ""
    """The failing line of the test file."""
    where: str | None = None
    """Where the exception was raised, when outside the test file (``solution.py line 4``)."""
    left: str | None = None
    """repr of the left side of a failing ``assert a == b``."""
    right: str | None = None
    stdout: str | None = None


@dataclass(frozen=True)
class TestReport:
    """What a test file's run gave: one result per test function of the file."""

    __test__ = False

    file: str
    results: tuple[TestResult, ...]
    problem: str | None = None
    """Why the file's tests did not run (an import error, a timeout, no report), or None."""

    @property
    def total(self) -> int:
        """Test functions in the file."""
        return len(self.results)

    @property
    def passed(self) -> int:
        """Test functions that passed."""
        return sum(r.ok for r in self.results)

    @property
    def pass_rate(self) -> float:
        """Share of the file's tests that passed (0 for a file without tests)."""
        return self.passed / self.total if self.total else 0.0

    @property
    def all_passed(self) -> bool:
        """True when the file has tests and every one passed."""
        return self.total > 0 and self.passed == self.total

    def format(self) -> str:
        """Write the report as agents read it: a summary line, then one line per test.

        Every string a program under test controls (messages, values, captured output) is shown as
        a Python ``repr`` on a line of its own kind, so it cannot pass for a line of the report.
        """
        lines = [f"{self.file}: {self.passed} of {self.total} tests passed"]
        if self.problem:
            lines.append(f"  problem: {self.problem}")
        for r in self.results:
            if r.ok:
                lines.append(f"PASS {r.name}")
                continue
            lines.append(f"FAIL {r.name}" + (f" (line {r.line}): {r.source}" if r.line else ""))
            lines.append(f"  {r.error}" + (f": {r.message!r}" if r.message else "")
                         + (f" (raised in {r.where})" if r.where else ""))
            if r.left is not None:
                lines.append(f"  left: {r.left}")
                lines.append(f"  right: {r.right}")
            if r.stdout:
                lines.append(f"  stdout: {r.stdout}")
        return "\n".join(lines)


def test_names(source: str) -> list[str]:
    """Return the names of a test module's ``test*`` functions, in order ([] if it does not parse)."""
    try:
        with _PARSE_LOCK:
            tree = ast.parse(source)
    except (SyntaxError, ValueError, RecursionError, MemoryError):
        return []
    return [n.name for n in tree.body if isinstance(n, ast.FunctionDef) and n.name.startswith("test")]


def run_tests(
    workspace: Workspace,
    files: Mapping[str, str],
    *,
    per_test_s: float = 2.0,
    timeout_s: float = 20.0,
    allow_unsandboxed: bool = False,
) -> list[TestReport]:
    """Run test files that lie in ``workspace`` in one sandboxed process; return one report per file.

    Args:
        workspace: Holds the code under test and the test files.
        files: Test file path in the workspace -> its source (read here for the list of tests, so
            a run that dies early still reports every test as failed).
        per_test_s: Time limit of each test function.
        timeout_s: Wall-clock limit of the whole run.
        allow_unsandboxed: Passed to :func:`llm_zoo.sandbox.run_python`.
    """
    return _run_tests(workspace, files, per_test_s=per_test_s, timeout_s=timeout_s,
                      allow_unsandboxed=allow_unsandboxed)[0]


def _run_tests(workspace: Workspace, files: Mapping[str, str], *, per_test_s: float = 2.0,
               timeout_s: float = 20.0, allow_unsandboxed: bool = False,
               prelude: str = "") -> tuple[list[TestReport], str]:
    """Run the tests as :func:`run_tests` does, after ``prelude`` in the same process; also return stdout."""
    nonce = secrets.token_hex(12)
    config = json.dumps({"nonce": nonce, "files": list(files), "per_test_s": per_test_s})
    result = run_python(prelude + RUNNER, workspace=workspace, stdin=config + "\n", timeout_s=timeout_s,
                        memory_mb=MEMORY_MB, limits=LIMITS, allow_unsandboxed=allow_unsandboxed)
    raw: list[dict[str, Any]] | None = None
    for line in reversed(result.stdout.splitlines()):
        if line.startswith(nonce):
            try:
                raw = json.loads(line[len(nonce):])
            except json.JSONDecodeError:
                raw = None
            break
    if raw is None:
        why = f"the test run stopped before it reported ({result.reason or f'exit status {result.returncode}'})"
        tail = result.stderr.strip().splitlines()[-1:] if result.stderr.strip() else []
        if tail:
            why += f": {tail[0][:200]!r}"
        return [TestReport(f, tuple(TestResult(n, False, "NoReport") for n in test_names(src)), why)
                for f, src in files.items()], result.stdout
    by_file = {r.get("file"): r for r in raw if isinstance(r, dict)}
    return [_read_report(name, test_names(src), by_file.get(name)) for name, src in files.items()], result.stdout


def _read_report(name: str, expected: Sequence[str], raw: Mapping[str, Any] | None) -> TestReport:
    """Build a report from the runner's JSON, trusting only the tests the host itself found in the file."""
    if raw is None:
        return TestReport(name, tuple(TestResult(n, False, "NoReport") for n in expected), "no report for this file")
    failed = raw.get("import_error")
    if isinstance(failed, dict):
        problem = f"importing {name} failed: {failed.get('error')}: {str(failed.get('message', ''))[:200]!r}"
        return TestReport(name, tuple(_result(n, failed) for n in expected), problem)
    tests = raw.get("tests") if isinstance(raw.get("tests"), dict) else {}
    return TestReport(name, tuple(_result(n, tests.get(n, {"ok": False, "error": "NotRun", "message": ""}))
                                  for n in expected))


def _result(name: str, raw: Mapping[str, Any]) -> TestResult:
    def text(key: str) -> str | None:
        value = raw.get(key)
        return None if value is None else str(value)[:400]

    if raw.get("ok") is True:
        return TestResult(name, True, stdout=text("stdout"))
    line = raw.get("line")
    return TestResult(name, False, error=text("error") or "Error", message=text("message") or "",
                      line=line if isinstance(line, int) else 0, source=text("source") or "", where=text("where"),
                      left=text("left"), right=text("right"), stdout=text("stdout"))


# ---------------------------------------------------------------------------------------------
# Examples of a statement
# ---------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Example:
    """One doctest-style example of a statement: source, then the expected value or exception."""

    source: str
    expected: str | None
    """Source of the expected value, or None for a statement with no output (run for its effect)."""
    raises: str | None = None
    """Name of the expected exception, when the example shows a traceback."""


_EXCEPTION_NAME = re.compile(r"^([A-Za-z_][\w.]*)(:|$)")


def parse_examples(statement: str) -> list[Example]:
    """Read the ``>>>`` examples of a statement, in order.

    A ``>>>`` line (with ``...`` continuation lines) is the source; the lines after it up to a
    blank line or the next ``>>>`` are the expected value, or a traceback whose last line names
    the exception. Nothing after ``>>>`` lines means the source is run for its effect.
    """
    examples: list[Example] = []
    lines = [line.strip() for line in statement.splitlines()]
    i = 0
    while i < len(lines):
        if not lines[i].startswith(">>>"):
            i += 1
            continue
        source = [lines[i][3:].strip()]
        i += 1
        while i < len(lines) and lines[i].startswith("..."):
            source.append(lines[i][3:].strip() if lines[i] != "..." else "")
            i += 1
        output = []
        while i < len(lines) and lines[i] and not lines[i].startswith(">>>"):
            output.append(lines[i])
            i += 1
        code = "\n".join(source)
        if output and output[0].startswith("Traceback"):
            match = _EXCEPTION_NAME.match(output[-1])
            examples.append(Example(code, None, match.group(1).rsplit(".", 1)[-1] if match else "Exception"))
        else:
            examples.append(Example(code, "\n".join(output) if output else None))
    return examples


# Runs in the sandbox: each example in one namespace seeded from `solution`, compared leniently.
_CHECKER = r'''
import json, math, signal, sys

class _Timeout(BaseException):
    pass

def _alarm(signum, frame):
    raise _Timeout()

ANY_ORDER = %(any_order)s
EXAMPLES = json.loads(%(examples)r)

def _norm(value):
    if isinstance(value, (list, tuple)):
        items = [_norm(v) for v in value]
        return ("seq", sorted(items, key=repr)) if ANY_ORDER else ("seq", items)
    if isinstance(value, (set, frozenset)):
        return ("seq", sorted((_norm(v) for v in value), key=repr))
    if isinstance(value, dict):
        return ("map", sorted(((repr(k), _norm(v)) for k, v in value.items()), key=repr))
    return value

def _same(a, b):
    if isinstance(a, bool) or isinstance(b, bool):
        return type(a) is type(b) and a == b
    if isinstance(a, (int, float)) and isinstance(b, (int, float)):
        return math.isclose(a, b, rel_tol=1e-9, abs_tol=1e-12) or a == b
    if isinstance(a, tuple) and isinstance(b, tuple) and len(a) == 2 and a[0] in ("seq", "map") and b[0] == a[0]:
        return len(a[1]) == len(b[1]) and all(_same(x, y) for x, y in zip(a[1], b[1]))
    if isinstance(a, tuple) and isinstance(b, tuple):
        return len(a) == len(b) and all(_same(x, y) for x, y in zip(a, b))
    return a == b

def _show(value):
    try:
        text = repr(value)
    except BaseException as exc:
        text = "<repr failed: %%s>" %% type(exc).__name__
    return text if len(text) <= 200 else text[:200] + "..."

def _main():
    signal.signal(signal.SIGALRM, _alarm)
    try:
        import solution
    except BaseException as exc:
        print("IMPORT-ERROR %%s: %%s" %% (type(exc).__name__, _show(str(exc))))
        return
    scope = dict(vars(solution))
    passed = 0
    for i, (source, expected, raises) in enumerate(EXAMPLES, 1):
        signal.setitimer(signal.ITIMER_REAL, %(per_example_s)r)
        try:
            if expected is None and raises is None:
                exec(compile(source, "<example %%d>" %% i, "exec"), scope)
                got, error = None, None
            else:
                got, error = eval(compile(source, "<example %%d>" %% i, "eval"), scope), None
        except _Timeout:
            got, error = None, "Timeout"
        except BaseException as exc:
            got, error = None, exc
        finally:
            signal.setitimer(signal.ITIMER_REAL, 0)
        if raises is not None:
            ok = error is not None and error != "Timeout" and any(c.__name__ == raises for c in type(error).__mro__)
            note = "expected %%s, got %%s" %% (raises, "no exception" if error is None else
                                              (error if error == "Timeout" else type(error).__name__))
        elif error is not None:
            ok, note = False, "raised %%s" %% (error if error == "Timeout" else type(error).__name__ + ": " + _show(str(error)))
        elif expected is None:
            ok, note = True, ""
        else:
            want = eval(expected, dict(scope))
            ok = _same(_norm(got), _norm(want))
            note = "got %%s, expected %%s" %% (_show(got), _show(want))
        passed += ok
        print(("OK %%d" if ok else "BAD %%d: %%s") %% ((i,) if ok else (i, note)))
    print("EXAMPLES %%d/%%d" %% (passed, len(EXAMPLES)))

_main()
'''

_ANY_ORDER = re.compile(r"\bin\s+any\s+order\b|\border\s+(?:does\s+not|doesn't)\s+matter\b", re.IGNORECASE)


def statement_leaves_order_free(statement: str) -> bool:
    """Return True when the statement says that the order of the result is free."""
    return bool(_ANY_ORDER.search(statement))


def example_check_program(examples: Sequence[Example], *, any_order: bool, per_example_s: float = 1.0) -> str:
    """Build a Python program that imports ``solution``, runs each example and prints a line per example.

    Output lines: ``OK <i>``, ``BAD <i>: <what differed>``, and a last ``EXAMPLES <passed>/<n>``
    (or one ``IMPORT-ERROR ...`` line). Values compare leniently: numbers within 1e-9 relative,
    exceptions by class (never by message), and with ``any_order`` lists and tuples as multisets.
    """
    payload = json.dumps([[e.source, e.expected, e.raises] for e in examples])
    return _CHECKER % {"any_order": bool(any_order), "examples": payload, "per_example_s": float(per_example_s)}


def read_example_check(output: str) -> tuple[int, int, list[str]] | None:
    """Read a checker's output: (passed, total, the BAD / IMPORT-ERROR lines), or None if it has no summary."""
    bad = [line for line in output.splitlines() if line.startswith(("BAD ", "IMPORT-ERROR "))]
    match = re.search(r"^EXAMPLES (\d+)/(\d+)$", output, re.MULTILINE)
    if match is None:
        return (0, 0, bad) if any(b.startswith("IMPORT-ERROR") for b in bad) else None
    return int(match.group(1)), int(match.group(2)), bad


# ---------------------------------------------------------------------------------------------
# Validating the task set
# ---------------------------------------------------------------------------------------------


@dataclass
class SolutionCheck:
    """How one stored solution fares: visible and hidden tests, and the statement's examples."""

    task: str
    name: str
    visible: TestReport
    hidden: TestReport
    examples_ok: bool
    example_notes: list[str] = field(default_factory=list)


def check_solution(task: Task, name: str, *, allow_unsandboxed: bool = False) -> SolutionCheck:
    """Run one stored solution against its task's visible and hidden tests and its statement's examples."""
    with Workspace() as ws:
        ws.write_file(SOLUTION_FILE, task.solutions[name])
        ws.write_file(VISIBLE_FILE, task.visible)
        ws.write_file(HIDDEN_FILE, task.hidden)
        # one process: the examples' check, then both test files (halves the sandbox starts)
        checker = example_check_program(parse_examples(task.statement),
                                        any_order=statement_leaves_order_free(task.statement))
        (visible, hidden), stdout = _run_tests(ws, {VISIBLE_FILE: task.visible, HIDDEN_FILE: task.hidden},
                                               allow_unsandboxed=allow_unsandboxed, prelude=checker + "\n")
    read = read_example_check(stdout)
    ok = read is not None and read[1] > 0 and read[0] == read[1]
    return SolutionCheck(task.id, name, visible, hidden, ok, read[2] if read else [stdout[-200:]])


def validate_tasks(tasks: Iterable[Task], *, max_workers: int = 4,
                   allow_unsandboxed: bool = False) -> tuple[list[str], list[SolutionCheck]]:
    """Check the task set: return (problems, every solution's check); no problems means it is sound.

    Every correct solution must pass the hidden tests and every wrong one fail them; a correct one
    fails the visible tests exactly when the task lists it as brittle, and a wrong one passes them
    exactly when it is listed as weak; the reference passes the visible tests; every statement has
    examples, which every correct solution meets.
    """
    tasks = list(tasks)
    jobs = [(t, n) for t in tasks for n in t.solutions]
    with ThreadPoolExecutor(max_workers) as pool:
        checks = list(pool.map(lambda job: check_solution(*job, allow_unsandboxed=allow_unsandboxed), jobs))
    problems = []
    by_task = {t.id: t for t in tasks}
    for c in checks:
        task, kind = by_task[c.task], kind_of(c.name)
        where = f"{c.task}/{c.name}"
        if kind == "wrong":
            if c.hidden.all_passed:
                problems.append(f"{where}: a wrong solution passes the hidden tests")
            if c.visible.all_passed != (c.name in task.weak):
                problems.append(f"{where}: passes the visible tests: {c.visible.all_passed}, listed as weak: "
                                f"{c.name in task.weak}")
        else:
            if not c.hidden.all_passed:
                problems.append(f"{where}: a correct solution fails the hidden tests:\n{c.hidden.format()}")
            if (not c.visible.all_passed) != (c.name in task.brittle):
                problems.append(f"{where}: fails the visible tests: {not c.visible.all_passed}, listed as brittle: "
                                f"{c.name in task.brittle}\n{c.visible.format()}")
            if not c.examples_ok:
                problems.append(f"{where}: a correct solution misses the statement's examples: {c.example_notes}")
    for task in tasks:
        if not parse_examples(task.statement):
            problems.append(f"{task.id}: the statement has no >>> examples")
    return problems, checks
