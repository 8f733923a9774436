"""An episode's sandboxed workspace: the tools the agents use in it, and freezing a submission.

A :class:`Workbench` owns one :class:`llm_zoo.sandbox.Workspace` from reset to close. Its tools
turn every refusal (a bad path, a missing file, the read-only visible tests) into a
:class:`llm_zoo.envs.core.ToolError`, which the agent reads as the tool's result. For the judge,
whatever the solver controls (file contents, program output) comes back quoted.

Once the solver submits, its code never runs in the workspace again: the workspace then holds
exactly the submission and the visible tests, and only the env and the judge's own programs write
there. Every run of the solution's code from then on (the visible tests, a test file of the judge's,
whatever the judge's ``run_python`` imports) is a server started on a fresh copy of the submission
laid out as every grading run's copy is (the submitted files alone), in a sandbox of its own: the
solution cannot tell review from grading by its surroundings, cannot write to what the judge reads,
and never shares a process or a file with the judge's programs. No copy holds the visible tests: a
solution that read them where it runs could answer the shown cases without holding anything of the task
(a task-agnostic table), so the tests exist only in the env's process and in the judge's workspace.
"""

from __future__ import annotations

import contextlib
from dataclasses import dataclass
from pathlib import PurePosixPath
from typing import Any

from llm_zoo.envs.agentic_judge import grading, text
from llm_zoo.envs.agentic_judge.grading import HIDDEN_FILE, VISIBLE_FILE, TestReport
from llm_zoo.envs.agentic_judge.tasks import Task
from llm_zoo.envs.core import Tool, ToolError
from llm_zoo.sandbox import Workspace, run_python, run_python_beside

__all__ = ["TOOLS_OF", "Submission", "Workbench"]

TOOL_OUTPUT_CHARS = 6_000  # of each tool result
MAX_SUBMISSION_FILES = 64  # files of a submission copied for the tests and shown to the judge
MAX_FILE_BYTES = 1 << 20
_PATH = {"type": "string", "maxLength": 200, "description": "a path relative to the workspace, e.g. 'solution.py'"}
_TOOLS: dict[str, tuple[str, dict[str, Any], list[str]]] = {  # name -> (description, properties, required)
    "write_file": ("Write a text file in the workspace, replacing it if it exists. test_solution.py is read-only.",
                   {"path": _PATH, "content": {"type": "string", "maxLength": 65536}}, ["path", "content"]),
    "read_file": ("Read a text file of the workspace.", {"path": _PATH}, ["path"]),
    "list_files": ("List the files of the workspace.", {}, []),
    "run_tests": ("Run the test* functions of a test module in the workspace and report each. The default, "
                  "test_solution.py, always runs the original visible tests.", {"file": _PATH}, []),
    "run_python": ("Run Python code with the workspace as the current directory (Python 3 standard library, "
                   "no network); returns the exit status, stdout and stderr.",
                   {"code": {"type": "string", "maxLength": 65536}}, ["code"]),
}
JUDGE_RUN_PYTHON = ("Run Python code with the workspace (the submission, frozen) as the current directory (Python 3 "
                    "standard library, no network); returns the exit status, stdout and stderr. `import solution` "
                    "gives the submission running in a sandbox of its own: calls return plain values (None, bool, "
                    "int, float, str, bytes, list, tuple, dict, set; arguments go as copies), other objects stay "
                    "there as handles you can call but not compare.")
"""The judge's ``run_python`` description: its code runs beside the solution (``Workbench.run_python``)."""
TOOLS_OF = {"solver": ("write_file", "read_file", "list_files", "run_tests", "run_python"),
            "judge": ("read_file", "list_files", "run_tests", "run_python")}
"""Role -> the names of its tools, in the order the system prompt declares them."""


@dataclass(frozen=True)
class Submission:
    """The solver's files when it submitted, and the visible and hidden tests' reports on them."""

    files: dict[str, bytes]
    skipped: list[str]
    """Files left out: over the count or size caps, unreadable."""
    visible: TestReport
    hidden: TestReport

    def text_files(self) -> tuple[dict[str, str], list[str]]:
        """Return (the text files as str, every file not shown: skipped ones and binaries)."""
        shown = {p: d.decode("utf-8") for p, d in self.files.items() if _is_text(d)}
        return shown, self.skipped + [p for p in self.files if p not in shown]


class Workbench:
    """One episode's workspace for ``task``, with the visible tests in it, and the tools that act there.

    Args:
        task: The episode's task.
        python_timeout_s: Wall-clock limit of each ``run_python`` call.
        tests_timeout_s: Wall-clock limit of each test run.
        allow_unsandboxed: Passed to every sandbox call.
    """

    def __init__(self, task: Task, *, python_timeout_s: float, tests_timeout_s: float,
                 allow_unsandboxed: bool) -> None:
        self.task = task
        self.python_timeout_s = python_timeout_s
        self.tests_timeout_s = tests_timeout_s
        self.allow_unsandboxed = allow_unsandboxed
        self.workspace = Workspace()
        self.workspace.write_file(VISIBLE_FILE, task.visible)
        self.submitted: dict[str, bytes] | None = None
        """The submission's files once the solver submitted (None before): what every later run copies."""

    def close(self) -> None:
        """Remove the workspace."""
        self.workspace.close()

    def tools(self, role: str) -> tuple[Tool, ...]:
        """Build the tools of ``role`` (``solver`` or ``judge``)."""
        quoted = role == "judge"
        functions = {"write_file": self.write_file, "read_file": lambda path: self.read_file(path, quoted),
                     "list_files": lambda: self.list_files(quoted),
                     "run_tests": lambda file=VISIBLE_FILE: self.run_tests(file),
                     "run_python": lambda code: self.run_python(code, quoted)}
        described = {**{n: d for n, (d, _, _) in _TOOLS.items()}, **({"run_python": JUDGE_RUN_PYTHON} if quoted else {})}
        return tuple(Tool(name, described[name], {"type": "object", "properties": _TOOLS[name][1],
                                                  "required": _TOOLS[name][2], "additionalProperties": False},
                          functions[name])
                     for name in TOOLS_OF[role])

    # ---- the tools ------------------------------------------------------------------------

    def write_file(self, path: str, content: str) -> str:
        """Write a file; the visible tests' file is read-only."""
        if _names(path, VISIBLE_FILE):
            raise ToolError(f"{VISIBLE_FILE} holds the visible tests and is read-only; write your own tests "
                            "to another file")
        try:
            self.workspace.write_file(path, content)
        except (OSError, ValueError) as exc:
            raise ToolError(_short(exc)) from None
        return f"wrote {len(content)} characters to {path}"

    def read_file(self, path: str, quoted: bool = False) -> str:
        """Read a text file (quoted for the judge)."""
        content = _clip(self._read(path))
        return text.quote(content) if quoted else content

    def list_files(self, quoted: bool = False) -> str:
        """List the workspace's files, one per line (quoted for the judge: the solver chose the names).

        A name that is not plain printable text (a line break, a control or format character) is
        shown as a Python string literal, its characters escaped, so no name can add a line.
        """
        files = self.workspace.list_files()
        if not files:
            return "(no files)"
        listing = _clip("\n".join(name if name.isprintable() else repr(name) for name in files))
        return text.quote(listing) if quoted else listing

    def run_tests(self, file: str = VISIBLE_FILE) -> str:
        """Run a test module; the visible tests' name always runs the env's own copy of them, from here."""
        if _names(file, VISIBLE_FILE):
            if self.submitted is None:
                return _clip(self._visible_report(self.workspace).format())
            with self._copy(self.submitted) as copy:
                return _clip(self._visible_report(copy).format())
        source = self._read(file)
        if not file.endswith(".py") or not grading.test_names(source):
            raise ToolError(f"{file!r} is not a Python module with test* functions")
        with self._server_workspace() as server:
            report = grading.run_untrusted_tests(self.workspace, {file: source}, server_workspace=server,
                                                 timeout_s=self.tests_timeout_s,
                                                 allow_unsandboxed=self.allow_unsandboxed)[0]
        return _clip(report.format() + "\n(this test file is from the workspace; it ran in a sandbox of its own, "
                     "the solution in another, answering with plain data)")

    def run_python(self, code: str, quoted: bool = False) -> str:
        """Run code in the workspace; its output is quoted for the judge.

        Before the submission the code runs as it is, solution and all (the solver's own runs). After
        it, the code runs beside the solution (``run_python_beside``): ``import solution`` gives a
        handle on it in a server on a fresh copy of the submission, so the code stays out of its reach.
        """
        if self.submitted is None:
            result = run_python(code, workspace=self.workspace, timeout_s=self.python_timeout_s,
                                memory_mb=grading.MEMORY_MB, limits=grading.LIMITS,
                                allow_unsandboxed=self.allow_unsandboxed)
        else:
            with self._copy(self.submitted) as server:
                result = run_python_beside(code, workspace=self.workspace, server_workspace=server,
                                           timeout_s=self.python_timeout_s, server_timeout_s=self.tests_timeout_s,
                                           memory_mb=grading.MEMORY_MB, limits=grading.LIMITS,
                                           allow_unsandboxed=self.allow_unsandboxed)
        half = TOOL_OUTPUT_CHARS // 2
        return _clip(text.python_result(result.returncode, _clip(result.stdout, half), _clip(result.stderr, half),
                                        result.reason, quoted))

    # ---- submitting -----------------------------------------------------------------------

    def submit(self) -> Submission:
        """Freeze the workspace's files and run the visible and the hidden tests, each on a fresh copy.

        Each copy holds the submission alone, as every later run's copy does (`_copy`).
        Neither run sees what the other wrote, and afterwards the workspace holds exactly the
        submission (and the visible tests), for the judge. The tests themselves run in this process (see
        ``grading``): the hidden tests are never on disk nor in any process that runs the solver's
        code. The env's own test file names are not part of a submission. Whatever the solver's code
        left in the workspace (deep trees, links, fifos, huge or unreadable files) is skipped, never raised.
        """
        files: dict[str, bytes] = {}
        skipped: list[str] = []
        try:
            listed = self.workspace.list_files()
        except (OSError, ValueError, RecursionError):
            listed = []
            skipped.append("(the workspace could not be listed)")
        for path in listed:
            if PurePosixPath(path).parts[:1] in ((VISIBLE_FILE,), (HIDDEN_FILE,)):
                continue  # the env's names (a directory named so included): never part of a submission
            if len(files) >= MAX_SUBMISSION_FILES:
                skipped.append(path)
                continue
            try:
                files[path] = self.workspace.read_bytes(path, max_bytes=MAX_FILE_BYTES)
            except (OSError, ValueError):
                skipped.append(path)
        with self._copy(files) as copy:
            visible = self._visible_report(copy)
        with self._copy(files) as copy:
            hidden = grading.run_tests(copy, {HIDDEN_FILE: self.task.hidden}, timeout_s=self.tests_timeout_s,
                                       allow_unsandboxed=self.allow_unsandboxed)[0]
        self._reset_to(files)
        self.submitted = files
        return Submission(files, skipped, visible, hidden)

    def _reset_to(self, files: dict[str, bytes]) -> None:
        """Make the workspace hold exactly the submission (and the visible tests): what the judge reviews
        is what the tests graded, never a file left out of it (too large, a link, a fifo) nor a process' leftovers."""
        fresh = self._copy(files, with_tests=True)
        self.workspace.close()
        self.workspace = fresh

    def _copy(self, files: dict[str, bytes], with_tests: bool = False) -> Workspace:
        """A fresh workspace holding ``files``: the one layout every run of a submission sees. ``with_tests``
        adds the visible tests, for the judge's workspace only: no solution process ever runs beside them."""
        copy = Workspace()
        for path, data in files.items():
            try:
                copy.write_file(path, data)
            except (OSError, ValueError):
                continue  # a path the copy cannot hold (a file where a directory was): left out
        if with_tests:
            copy.write_file(VISIBLE_FILE, self.task.visible)
        return copy

    def _server_workspace(self) -> contextlib.AbstractContextManager[Workspace]:
        """Where the solution runs for a test file of the workspace: a fresh copy after the submission."""
        if self.submitted is not None:
            return self._copy(self.submitted)
        return contextlib.nullcontext(self.workspace)  # the solver's own runs share its workspace

    def _visible_report(self, workspace: Workspace) -> TestReport:
        return grading.run_tests(workspace, {VISIBLE_FILE: self.task.visible}, timeout_s=self.tests_timeout_s,
                                 allow_unsandboxed=self.allow_unsandboxed)[0]

    def _read(self, path: str) -> str:
        try:
            return self.workspace.read_file(path, max_bytes=MAX_FILE_BYTES)
        except FileNotFoundError:
            raise ToolError(f"no file {path!r} in the workspace; list_files shows what there is") from None
        except (OSError, ValueError) as exc:
            raise ToolError(_short(exc)) from None


def _names(path: str, name: str) -> bool:
    """True when a workspace path names the top-level file ``name`` (``./name`` included)."""
    return [p for p in PurePosixPath(path).parts if p != "."] == [name]


def _is_text(data: bytes) -> bool:
    try:
        data.decode("utf-8")
    except UnicodeDecodeError:
        return False
    return b"\0" not in data


def _clip(content: str, limit: int = TOOL_OUTPUT_CHARS) -> str:
    return content if len(content) <= limit else content[:limit] + f"\n…[clipped {len(content) - limit} characters]"


def _short(exc: BaseException) -> str:
    return str(exc)[:300] or type(exc).__name__
