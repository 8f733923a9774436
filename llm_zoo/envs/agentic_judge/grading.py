"""Running tests and checks on a solver's code, with the truth computed where that code cannot reach.

The env's own tests (the visible and the hidden tests of a task) are plain modules of ``test_*``
functions with ``assert`` statements (pytest can run them too). :func:`run_tests` runs them *in
the env's process*: the test code, its expected values and every comparison stay here, and only
the solution runs in the sandbox, in a server process (``llm_zoo.sandbox.plain``) that imports it
in an isolated interpreter and answers calls with plain data. ``from solution import f`` in a test
binds ``f`` to a handle; ``f(3)`` sends ``3`` and gets back a value of an exact built-in type (an
object of the solution's own comes back as a handle that cannot be compared or hashed, so an
``__eq__`` that is always true passes nothing), which the test then checks here. Each test has its
own time limit, measured here; a test that runs past it, or a solution process that dies, fails
that test, and the next one gets a fresh process. A test that bounds how much work the solution does
calls ``solution_cpu_seconds()`` (a name every test module sees) before and after: the CPU time of the
solution's sandbox, every process in it, read here from ``/proc``, which a solution cannot pad by
sleeping, move off its books by handing work to a helper process, or blame on a busy machine. Arguments
reach the solution as copies, so nothing it does to them reaches the test's data; a test that asks that
the inputs stay untouched calls ``solution_changed_arguments()`` after the call (the solution process's own
report of the call, which that process can forge) and calls the solution again with the same argument, whose
copy the solution's process keeps while it reports it unchanged, so that a change it hides shows in a result. A report lists each test with its failing line
and both sides of a failing ``assert a <op> b``; strings that came from the solution are quoted.

Test files that come from the workspace (a judge's own, written with ``run_python``) are not the
env's code and never run in its process: :func:`run_untrusted_tests` runs them with :data:`RUNNER`
in a sandbox, with the solution in another (``llm_zoo.sandbox.run_python_beside``): the test file,
its expected values and its report never enter the solution's process, which answers with plain data.

The statement's doctest-style examples are parsed by :func:`parse_examples` and checked by
``checks.run_examples``: from the env's process in :func:`check_examples`, and inside the sandbox
by the program :func:`example_check_program` builds, which the rule-based judge runs through
``run_python``, whose programs run beside the solution after the submission: the program (with the
examples' expected values and the probe calls) runs in one sandbox, and the solution in its own, in
the server every grading run uses, reached over a pipe; neither shares a file or a process with the other.
:func:`validate_tasks` checks that every correct stored solution meets the examples.
"""

from __future__ import annotations

import ast
import builtins
import dataclasses
import json
import operator
import re
import secrets
import threading
import time
import traceback
from collections.abc import Iterable, Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from llm_zoo.envs.agentic_judge import checks
from llm_zoo.envs.agentic_judge.tasks import Task, kind_of
from llm_zoo.sandbox import Limits, Workspace, open_session, plain, run_python_beside

_PARSE_LOCK = threading.Lock()
"""``ast.parse`` one thread at a time: CPython 3.11 before 3.11.8 can fail concurrent parses with
"SystemError: AST constructor recursion depth mismatch" (seen here with the thread pool of
:func:`validate_tasks`)."""


__all__ = ["RUNNER", "Example", "TestReport", "TestResult", "check_examples", "example_check_program",
           "parse_examples", "probe", "run_tests", "run_untrusted_tests", "test_names",
           "validate_tasks"]

SOLUTION_FILE = "solution.py"
"""Where the solver writes its solution; the tests import from ``solution``."""
VISIBLE_FILE = "test_solution.py"
"""The visible tests' file in the workspace."""
HIDDEN_FILE = "test_hidden.py"
"""The hidden tests' file, only ever in a separate workspace that no agent sees."""
LIMITS = Limits(processes=16, file_mb=4, output_bytes=256 * 1024, tmp_mb=16)
"""Limits of every run of solver code (beside its timeout and memory)."""
MEMORY_MB = 512
_WHERE = re.compile(r"^[\w./-]{1,120} line \d{1,7}$")
"""What a "raised in" location may look like in a report; anything else is shown as a repr."""
PER_TEST_S = 4.0
"""Time limit of each of the env's own tests (it covers the values' trips to the solution's process and back)."""
START_S = 10.0
"""Time limit of starting a fresh solution process and importing the test module (with the solution), when
longer than the per-test limit: a process that starts slowly on a busy machine, after a test that timed out,
is never charged to the next test (every test body still has only the per-test limit)."""

# Runs test files from the workspace (never the env's own) in a sandbox, the solution in another (run_python_beside).
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
    config = json.loads(_CONFIG)
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
            lines.append(f"  problem: {_one_line(self.problem)}")
        for r in self.results:
            if r.ok:
                lines.append(f"PASS {_one_line(r.name)}")
                continue
            lines.append(f"FAIL {_one_line(r.name)}" + (f" (line {r.line}): {_one_line(r.source)}" if r.line else ""))
            error = r.error if re.fullmatch(r"\w{1,80}", r.error) else repr(r.error[:80])
            where = r.where if r.where is None or _WHERE.match(r.where) else repr(r.where[:120])
            lines.append(f"  {error}" + (f": {r.message!r}" if r.message else "") + (f" (raised in {where})" if where else ""))
            if r.left is not None:
                lines.append(f"  left: {_one_line(r.left)}")
                lines.append(f"  right: {_one_line(r.right or '')}")
            if r.stdout:
                lines.append(f"  stdout: {_one_line(r.stdout)}")
        return "\n".join(lines)


def _one_line(text: str) -> str:
    """``text`` as it is when it is one printable line, else its repr (so it can never start a line of its own)."""
    return text if text.isprintable() else repr(text)


def test_names(source: str) -> list[str]:
    """Return the names of a test module's ``test*`` functions, in order ([] if it does not parse)."""
    try:
        with _PARSE_LOCK:
            tree = ast.parse(source)
    except (SyntaxError, ValueError, RecursionError, MemoryError):
        return []
    return [n.name for n in tree.body if isinstance(n, ast.FunctionDef) and n.name.startswith("test")]


def run_untrusted_tests(
    workspace: Workspace,
    files: Mapping[str, str],
    *,
    server_workspace: Workspace | None = None,
    per_test_s: float = 2.0,
    timeout_s: float = 20.0,
    allow_unsandboxed: bool = False,
) -> list[TestReport]:
    """Run test files from the workspace with :data:`RUNNER` in a sandbox, the solution in another.

    For test code that is not the env's own (an agent wrote it), which must never run in the env's
    process. ``from solution import f`` in a test gives a handle on the solution in its own sandboxed
    server (:func:`llm_zoo.sandbox.run_python_beside`), so the solution can neither read the tests nor
    shape this report; the test code itself is only as trustworthy as whoever wrote it.

    Args:
        workspace: Holds the test files (the runner's cwd).
        files: Test file path in the workspace -> its source (read here for the list of tests, so
            a run that dies early still reports every test as failed).
        server_workspace: Where the solution is imported from (default: ``workspace``).
        per_test_s: Time limit of each test function.
        timeout_s: Wall-clock limit of the whole run.
        allow_unsandboxed: Passed to :func:`llm_zoo.sandbox.run_python_beside`.
    """
    nonce = secrets.token_hex(12)
    config = json.dumps({"nonce": nonce, "files": list(files), "per_test_s": per_test_s})
    program = f"_CONFIG = {config!r}\n" + RUNNER
    result = run_python_beside(program, workspace=workspace, server_workspace=server_workspace or workspace,
                               timeout_s=timeout_s, memory_mb=MEMORY_MB, limits=LIMITS,
                               allow_unsandboxed=allow_unsandboxed)
    raw: list[dict[str, Any]] | None = None
    for line in reversed(result.stdout.splitlines()):
        if line.startswith(nonce):
            try:
                raw = json.loads(line[len(nonce):])
            except json.JSONDecodeError:
                raw = None
            break
    if raw is None or not isinstance(raw, list):
        why = f"the test run stopped before it reported ({result.reason or f'exit status {result.returncode}'})"
        tail = result.stderr.strip().splitlines()[-1:] if result.stderr.strip() else []
        if tail:
            why += f": {tail[0][:200]!r}"
        return [TestReport(f, tuple(TestResult(n, False, "NoReport") for n in test_names(src)), why)
                for f, src in files.items()]
    by_file = {r.get("file"): r for r in raw if isinstance(r, dict)}
    return [_read_report(name, test_names(src), by_file.get(name)) for name, src in files.items()]


# ---------------------------------------------------------------------------------------------
# The env's own tests, run in the env's process against the solution's server
# ---------------------------------------------------------------------------------------------

_OPS = {"Eq": operator.eq, "NotEq": operator.ne, "Lt": operator.lt, "LtE": operator.le, "Gt": operator.gt,
        "GtE": operator.ge, "Is": operator.is_, "IsNot": operator.is_not,
        "In": lambda a, b: a in b, "NotIn": lambda a, b: a not in b}
_TEST_PREFIX = "<env test>/"
"""Filename prefix of the env's compiled test modules (found again in tracebacks)."""


class _Rewrite(ast.NodeTransformer):
    """Turn ``assert a <op> b`` into ``assert _aj_compare(a, b, "<op>")``: each side evaluated once, as before."""

    def visit_Assert(self, node: ast.Assert) -> ast.Assert:
        test = node.test
        if isinstance(test, ast.Compare) and len(test.ops) == 1 and type(test.ops[0]).__name__ in _OPS:
            call = ast.Call(ast.Name("_aj_compare", ast.Load()),
                            [test.left, test.comparators[0], ast.Constant(type(test.ops[0]).__name__)], [])
            node.test = ast.copy_location(call, test)
        return node


class _Sides:
    """The comparison of one file's rewritten asserts: records both sides (as reprs) of a failing one."""

    def __init__(self) -> None:
        self.sides: list[str] = []

    def __call__(self, left: Any, right: Any, op: str) -> bool:
        ok = bool(_OPS[op](left, right))
        if not ok:
            self.sides = [plain.clip(checks._repr(left)), plain.clip(checks._repr(right))]
        return ok


class _Solution:
    """One solution process for the tests of one file: started on demand, again after it died."""

    def __init__(self, workspace: Workspace, deadline: float, allow_unsandboxed: bool) -> None:
        self.workspace, self.deadline, self.allow_unsandboxed = workspace, deadline, allow_unsandboxed
        self.session: plain.Session | None = None
        self.process: Any = None
        self.module: plain.RemoteObject | None = None

    def start(self) -> plain.Session:
        self.stop()
        left = self.deadline - time.monotonic()
        if left <= 0:
            raise plain.SessionDead("the test run ran past its time limit", "timeout")
        self.session, self.process = open_session(self.workspace, timeout_s=left, memory_mb=MEMORY_MB,
                                                  limits=LIMITS, allow_unsandboxed=self.allow_unsandboxed)
        self.module = None
        return self.session

    def import_solution(self) -> plain.RemoteObject:
        assert self.session is not None
        if self.module is None:
            self.module = self.session.import_module(SOLUTION_FILE[:-3], ".")
        return self.module

    def stop(self) -> None:
        if self.process is not None:
            self.process.close()
        self.session = self.process = self.module = None


def _namespace(name: str, solution: _Solution, sides: _Sides, printed: list[str]) -> dict[str, Any]:
    real_import = builtins.__import__

    def import_hook(module: str, globals: Any = None, locals: Any = None, fromlist: Any = (), level: int = 0) -> Any:
        if level == 0 and module == SOLUTION_FILE[:-3]:
            return solution.import_solution()
        if level == 0 and module.startswith(SOLUTION_FILE[:-3] + "."):
            raise ImportError(f"the tests may import only the module {SOLUTION_FILE[:-3]!r} of the solution")
        return real_import(module, globals, locals, fromlist, level)

    def print_hook(*args: Any, sep: str | None = " ", end: str | None = "\n", **_: Any) -> None:
        printed.append((" " if sep is None else sep).join(map(str, args)) + ("\n" if end is None else end))

    def solution_cpu_seconds() -> float:
        """The CPU seconds the solution's sandbox has used so far, read here (see ``SandboxProcess.cpu_seconds``)."""
        if solution.process is None:
            raise RuntimeError("solution_cpu_seconds() needs the solution's process: import from solution first")
        return solution.process.cpu_seconds()

    def solution_changed_arguments() -> int:
        """How many container arguments the last call to the solution changed. The solution gets copies, so
        nothing it does reaches the test's data; this is its process's own report of what it did to them."""
        return solution.session.changed_arguments if solution.session is not None else 0

    safe = dict(vars(builtins), __import__=import_hook, print=print_hook)
    return {"__name__": Path(name).stem, "__file__": _TEST_PREFIX + name, "__builtins__": safe,
            "_aj_compare": sides, "solution_cpu_seconds": solution_cpu_seconds,
            "solution_changed_arguments": solution_changed_arguments}


def run_tests(
    workspace: Workspace,
    files: Mapping[str, str],
    *,
    per_test_s: float = PER_TEST_S,
    timeout_s: float = 20.0,
    allow_unsandboxed: bool = False,
) -> list[TestReport]:
    """Run the env's own test modules here against the solution in ``workspace``; one report per file.

    The test sources are the env's (never read from the workspace, which need not hold them), run
    in this process; the solution runs in a sandboxed server and answers with plain data only.

    Args:
        workspace: Holds the code under test (``solution.py`` and whatever it imports).
        files: Test file name -> its source.
        per_test_s: Time limit of each test function (and of the module's own import), measured
            here, so it covers sending values to the solution's process and back.
        timeout_s: Wall-clock limit of all the files' runs together.
        allow_unsandboxed: Passed to :func:`llm_zoo.sandbox.open_session`.
    """
    deadline = time.monotonic() + timeout_s
    return [_run_file(workspace, name, source, per_test_s, deadline, allow_unsandboxed)
            for name, source in files.items()]


def _run_file(workspace: Workspace, name: str, source: str, per_test_s: float, deadline: float,
              allow_unsandboxed: bool) -> TestReport:
    expected = test_names(source)
    try:
        with _PARSE_LOCK:
            tree = ast.parse(source)
    except (SyntaxError, ValueError, RecursionError, MemoryError) as exc:
        return TestReport(name, (), f"{name} does not parse: {type(exc).__name__}")
    code = compile(ast.fix_missing_locations(_Rewrite().visit(tree)), _TEST_PREFIX + name, "exec")
    lines = source.splitlines()
    solution = _Solution(workspace, deadline, allow_unsandboxed)
    results: list[TestResult] = []
    namespace: dict[str, Any] | None = None
    printed: list[str] = []  # what the test code itself prints (it runs here: never to this process's stdout)
    try:
        for test in expected:
            sides = _Sides()
            try:
                if namespace is None or solution.session is None or solution.session.dead is not None:
                    solution.start().deadline = min(deadline, time.monotonic() + max(per_test_s, START_S))
                    namespace = _namespace(name, solution, sides, printed)
                    try:
                        exec(code, namespace)
                    except (Exception, plain.SessionDead) as exc:  # it does not import: every test left fails
                        if isinstance(exc, plain.SessionDead):
                            record = TestResult(test, False, "Timeout" if exc.reason == "timeout" else
                                                "SolutionProcessEnded", str(exc))
                        else:
                            record = _failure(test, exc, name, lines, sides, [])
                        problem = f"importing {name} failed: {record.error}: {record.message[:200]!r}"
                        results.append(record)
                        results.extend(dataclasses.replace(record, name=n) for n in expected[len(results):])
                        return TestReport(name, tuple(results), problem)
                session = solution.session
                assert session is not None
                namespace["_aj_compare"] = sides
                session.deadline = min(deadline, time.monotonic() + per_test_s)
                session.stdout.clear()
                printed.clear()
                namespace[test]()
                out = "".join(printed) + "".join(session.stdout)
                results.append(TestResult(test, True, stdout=plain.clip(repr(out)) if out else None))
            except plain.SessionDead as exc:
                results.append(TestResult(test, False, "Timeout" if exc.reason == "timeout" else "SolutionProcessEnded",
                                          "the test ran past its time limit" if exc.reason == "timeout" else str(exc)))
                solution.stop()
            except Exception as exc:  # the test's own failure: an assert, or what the solution raised
                out = printed + (solution.session.stdout if solution.session is not None else [])
                results.append(_failure(test, exc, name, lines, sides, out))
    finally:
        solution.stop()
    return TestReport(name, tuple(results))


def _failure(test: str, exc: BaseException, name: str, lines: Sequence[str], sides: _Sides,
             stdout: Sequence[str]) -> TestResult:
    frames = traceback.extract_tb(exc.__traceback__)
    line = max([f.lineno or 0 for f in frames if f.filename == _TEST_PREFIX + name] or [0])
    where = getattr(exc, "solution_where", None)
    where = where if isinstance(where, str) and _WHERE.match(where) else None if where is None else repr(where)[:130]
    left = right = None
    if isinstance(exc, AssertionError) and sides.sides:
        left, right = sides.sides
    out = "".join(stdout)
    error = exc.builtin if isinstance(exc, plain.SolutionExit) else type(exc).__name__
    return TestResult(test, False, error=error, message=plain.clip(str(exc)), line=line,
                      source=plain.clip(lines[line - 1].strip()) if 0 < line <= len(lines) else "", where=where,
                      left=left, right=right, stdout=plain.clip(repr(out)) if out else None)


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


# The check program's main part: it runs beside the solution (``run_python_beside``), whose module it
# reaches through the linked session that the program's header set up as ``plain.LINKED``.
_CHECKER_MAIN = r'''
def _checker_main():
    import ast, json, os, sys, time
    session = sys.modules["plain"].LINKED

    def start():
        if session is None:
            raise ImportError("this check program must run beside the solution (llm_zoo.sandbox.run_python_beside)")
        if session.dead is not None:
            raise session.dead
        session.deadline = time.monotonic() + %(per_example_s)r * 4
        return session, session.import_module("solution", "."), lambda: None

    def sources():
        found = {}
        for folder, dirs, files in os.walk("."):
            dirs[:] = sorted(d for d in dirs if not d.startswith("."))
            for name in sorted(files):
                path = os.path.normpath(os.path.join(folder, name))
                if name.endswith(".py") and path != %(visible)r:
                    try:
                        with open(path, encoding="utf-8") as f:
                            found[path] = f.read()
                    except (OSError, UnicodeDecodeError):
                        continue
        return found

    for run in %(runs)s:
        for line in run():
            print(line, flush=True)

_checker_main()
'''


def _source_of(module: Any) -> str:
    return Path(module.__file__).read_text(encoding="utf-8")


_ANY_ORDER = re.compile(r"\bin\s+any\s+order\b|\border\s+(?:does\s+not|doesn't)\s+matter\b", re.IGNORECASE)


def statement_leaves_order_free(statement: str) -> bool:
    """Return True when the statement says that the order of the result is free."""
    return bool(_ANY_ORDER.search(statement))


def example_check_program(examples: Sequence[Example], *, any_order: bool, per_example_s: float = 1.0,
                          probes: Sequence[str] = (), per_probe_s: float = 0.25, probe_budget_s: float = 1.0,
                          outputs: Sequence[str] = (), names: Sequence[str] = ()) -> str:
    """Build a Python program that checks the examples against ``solution`` and prints a line per example.

    Run it with ``llm_zoo.sandbox.run_python_beside`` (the judge's ``run_python`` does, once the
    solver has submitted): the program, with every expected value and probe call, runs in a sandbox
    of its own, and ``solution`` in another, answering with plain data that is compared here. Output
    lines: ``OK <i>``, ``BAD <i>: <what differed>``, and a last ``EXAMPLES <passed>/<n>`` (or one
    ``IMPORT-ERROR ...`` line). Values compare leniently: numbers within 1e-9 relative, exceptions by
    class (never by message), and with ``any_order`` lists and tuples as multisets.

    With ``probes`` (sources of calls), the program then evaluates them and prints the lines of
    ``checks.run_probes``: ``PROBE <i> = <repr>``, ``PROBE <i> ! <exception>``, ``PROBE <i> ? object``,
    and a last ``PROBES <n>`` (or one ``PROBES-FAILED ...`` line); each call has ``per_probe_s`` and
    all of them ``probe_budget_s``.

    With ``outputs`` (reprs of literal values), it reads every ``.py`` file of its workspace whole
    (the visible tests' file aside) and prints ``HELD <i>,<j>,...`` (``checks.held_outputs``): the
    indices of the outputs some file holds as a literal, and ``SOURCES <n>``, how many files it read.
    With ``names`` (identifiers), it prints ``MISSING <name>,...``: those the solution module lacks.
    """
    payload = json.dumps([[e.source, e.expected, e.raises] for e in examples])
    runs = [f"lambda: run_examples(start, json.loads({payload!r}), {bool(any_order)!r}, {float(per_example_s)!r})"]
    if probes:
        runs.append(f"lambda: run_probes(start, json.loads({json.dumps(list(probes))!r}), {float(per_probe_s)!r}, "
                    f"{float(probe_budget_s)!r})")
    if outputs:
        runs.append(f"lambda: held_outputs(sources(), json.loads({json.dumps(list(outputs))!r}))")
    if names:
        if not all(isinstance(n, str) and n.isidentifier() for n in names):
            raise ValueError(f"names must be Python identifiers; got {list(names)!r}")
        runs.append(f"lambda: missing_names(start, {list(names)!r})")
    return _source_of(checks) + "\n" + _CHECKER_MAIN % {
        "runs": "(" + ", ".join(runs) + ",)", "per_example_s": float(per_example_s), "visible": VISIBLE_FILE}


def check_examples(workspace: Workspace, examples: Sequence[Example], *, any_order: bool,
                   per_example_s: float = 1.0, allow_unsandboxed: bool = False) -> list[str]:
    """Check the examples from this process against the solution in ``workspace``; return the lines.

    The lines are those of :func:`example_check_program`'s program.
    """
    def start() -> tuple[plain.Session, plain.RemoteObject, Any]:
        session, process = open_session(workspace, timeout_s=60.0, memory_mb=MEMORY_MB, limits=LIMITS,
                                        allow_unsandboxed=allow_unsandboxed)
        session.deadline = time.monotonic() + per_example_s * 4
        try:
            return session, session.import_module(SOLUTION_FILE[:-3], "."), process.close
        except BaseException:
            process.close()
            raise

    return checks.run_examples(start, [[e.source, e.expected, e.raises] for e in examples], bool(any_order),
                               per_example_s)


def probe(workspace: Workspace, calls: Sequence[str], *, per_call_s: float = 0.25, budget_s: float = 1.0,
          allow_unsandboxed: bool = False) -> list[str]:
    """Evaluate ``calls`` from this process against the solution in ``workspace``; return the lines.

    The lines are those of ``checks.run_probes``, as :func:`example_check_program`'s program prints them.
    """
    def start() -> tuple[plain.Session, plain.RemoteObject, Any]:
        session, process = open_session(workspace, timeout_s=60.0, memory_mb=MEMORY_MB, limits=LIMITS,
                                        allow_unsandboxed=allow_unsandboxed)
        session.deadline = time.monotonic() + 4.0
        try:
            return session, session.import_module(SOLUTION_FILE[:-3], "."), process.close
        except BaseException:
            process.close()
            raise

    return checks.run_probes(start, list(calls), per_call_s, budget_s)


def read_example_check(output: str) -> tuple[int, int, list[str]] | None:
    """Read a checker's output: (passed, total, the BAD / IMPORT-ERROR lines), or None if it has no summary."""
    bad = [line for line in output.splitlines() if line.startswith(("BAD ", "IMPORT-ERROR "))]
    found = list(re.finditer(r"^EXAMPLES (\d+)/(\d+)$", output, re.MULTILINE))
    match = found[-1] if found else None
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
    """Run one stored solution against its task's visible and hidden tests, its statement's examples and the
    judge's own cases (``Task.judge``)."""
    with Workspace() as ws:
        ws.write_file(SOLUTION_FILE, task.solutions[name])
        visible, hidden = run_tests(ws, {VISIBLE_FILE: task.visible, HIDDEN_FILE: task.hidden},
                                    allow_unsandboxed=allow_unsandboxed)
        lines = check_examples(ws, parse_examples(task.statement) + parse_examples(task.judge),
                               any_order=statement_leaves_order_free(task.statement),
                               allow_unsandboxed=allow_unsandboxed)
    read = read_example_check("\n".join(lines))
    ok = read is not None and read[1] > 0 and read[0] == read[1]
    return SolutionCheck(task.id, name, visible, hidden, ok, read[2] if read else lines[-3:])


def validate_tasks(tasks: Iterable[Task], *, max_workers: int = 4,
                   allow_unsandboxed: bool = False) -> tuple[list[str], list[SolutionCheck]]:
    """Check the task set: return (problems, every solution's check); no problems means it is sound.

    Every correct solution must pass the hidden tests and every wrong one fail them; a correct one
    fails the visible tests exactly when the task lists it as brittle, and a wrong one passes them
    exactly when it is listed as weak; the reference passes the visible tests; every statement has
    examples, which every correct solution meets, as it meets the judge's own cases.
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
                problems.append(f"{where}: a correct solution misses the statement's examples or the judge's own "
                                f"cases: {c.example_notes}")
    for task in tasks:
        if not parse_examples(task.statement):
            problems.append(f"{task.id}: the statement has no >>> examples")
    return problems, checks
