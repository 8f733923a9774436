"""The shipped task set of agentic_judge: one text file per task, read by :func:`load_tasks`.

A task file ``<id>.txt`` is a sequence of sections, each opened by a line ``@@ <section>``:

``@@ meta``
    A JSON object: ``entry`` (the names ``solution.py`` must define), ``tags`` (topics),
    ``brittle`` and ``weak`` (solution name -> why; see below).
``@@ statement``
    The task as the solver and the judge read it, Markdown. Its examples are doctest-style
    (``>>> call`` then the expected value, or ``Traceback ...`` and the exception's name); a phrase
    such as "in any order" says which details it leaves free.
``@@ visible``
    The visible tests: a test module that imports from ``solution``; shown to both agents.
``@@ hidden``
    The hidden tests, which define the truth; never shown to any agent.
``@@ judge`` (optional)
    The judge's own cases, doctest-style like the statement's examples: shown to the judge, never to the
    solver, so that a table of the cases the solver saw fails them (written by ``scripts/judge_cases.py``
    from the correct stored solutions, on inputs derived from the shown ones).
``@@ solution <name>``
    A stored solution: ``reference``, correct alternatives ``alt_<label>`` and wrong solutions
    ``wrong_<label>``; at least one of each.

``brittle`` names correct alternatives that the visible tests reject (an exact error message, a
helper's name, a float's last digits, an order the statement leaves free); ``weak`` names wrong
solutions that the visible tests accept. The metadata is exact: :func:`llm_zoo.envs.agentic_judge.grading.validate_tasks`
checks that every correct solution that fails the visible tests is listed as brittle and every
wrong one that passes them as weak, and nothing else.
"""

from __future__ import annotations

import functools
import json
import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from types import MappingProxyType

__all__ = ["SOLUTION_KINDS", "Task", "kind_of", "load_tasks", "parse_task"]

TASK_DIR = Path(__file__).resolve().parent
SOLUTION_KINDS = ("reference", "alternative", "wrong")
"""What a stored solution is: the reference, another correct solution, or a wrong one."""
_SECTION = re.compile(r"^@@ (meta|statement|visible|hidden|judge|solution [A-Za-z0-9_]+)[ \t]*$", re.MULTILINE)
_META_KEYS = {"entry", "tags", "brittle", "weak"}
_NAME = re.compile(r"^(reference|alt_[A-Za-z0-9_]+|wrong_[A-Za-z0-9_]+)$")


def kind_of(name: str) -> str:
    """Return the kind of a stored solution from its name: reference, alternative or wrong."""
    if name == "reference":
        return "reference"
    if name.startswith("alt_"):
        return "alternative"
    if name.startswith("wrong_"):
        return "wrong"
    raise ValueError(f"a stored solution is named 'reference', 'alt_<label>' or 'wrong_<label>'; got {name!r}")


@dataclass(frozen=True)
class Task:
    """One coding task: statement, visible and hidden tests, stored solutions and what they show."""

    id: str
    statement: str
    visible: str
    hidden: str
    solutions: Mapping[str, str]
    """Name -> source of ``solution.py``, the reference first."""
    entry: tuple[str, ...]
    """Names that ``solution.py`` must define."""
    tags: tuple[str, ...] = ()
    brittle: Mapping[str, str] = field(default_factory=dict)
    """Correct alternative -> why the visible tests reject it."""
    weak: Mapping[str, str] = field(default_factory=dict)
    """Wrong solution -> why the visible tests accept it."""
    judge: str = ""
    """The judge's own cases (doctest-style ``>>>`` examples), which the solver never sees; may be empty."""

    @property
    def correct(self) -> tuple[str, ...]:
        """Names of the correct solutions (reference and alternatives)."""
        return tuple(n for n in self.solutions if kind_of(n) != "wrong")

    @property
    def wrong(self) -> tuple[str, ...]:
        """Names of the wrong solutions."""
        return tuple(n for n in self.solutions if kind_of(n) == "wrong")

    def of_kind(self, kind: str) -> tuple[str, ...]:
        """Names of the stored solutions of one kind."""
        if kind not in SOLUTION_KINDS:
            raise ValueError(f"kind must be one of {SOLUTION_KINDS}; got {kind!r}")
        return tuple(n for n in self.solutions if kind_of(n) == kind)


def parse_task(task_id: str, text: str) -> Task:
    """Read one task file's text; ``ValueError`` names the file's problem."""
    where = f"task {task_id!r}"
    marks = list(_SECTION.finditer(text))
    if not marks or text[: marks[0].start()].strip():
        raise ValueError(f"{where}: expected the file to start with a '@@ meta' line")
    sections: dict[str, str] = {}
    solutions: dict[str, str] = {}
    for mark, nxt in zip(marks, marks[1:] + [None]):
        body = text[mark.end(): nxt.start() if nxt else len(text)].strip("\n") + "\n"
        name = mark.group(1)
        if name.startswith("solution "):
            label = name.split(" ", 1)[1]
            if not _NAME.match(label) or label in solutions:
                raise ValueError(f"{where}: bad or repeated solution name {label!r}; expected reference, "
                                 "alt_<label> or wrong_<label>, each once")
            solutions[label] = body
        elif name in sections:
            raise ValueError(f"{where}: the section {name!r} appears twice")
        else:
            sections[name] = body
    missing = {"meta", "statement", "visible", "hidden"} - set(sections)
    if missing:
        raise ValueError(f"{where}: missing sections {sorted(missing)}")
    try:
        meta = json.loads(sections["meta"])
    except json.JSONDecodeError as exc:
        raise ValueError(f"{where}: the meta section is not JSON ({exc})") from None
    if not isinstance(meta, dict) or not set(meta) <= _META_KEYS or "entry" not in meta:
        raise ValueError(f"{where}: meta must be an object with 'entry' and optionally {sorted(_META_KEYS - {'entry'})}; "
                         f"got keys {sorted(meta) if isinstance(meta, dict) else meta!r}")
    entry = (meta["entry"],) if isinstance(meta["entry"], str) else tuple(meta["entry"])
    brittle, weak = dict(meta.get("brittle", {})), dict(meta.get("weak", {}))
    kinds = {n: kind_of(n) for n in solutions}
    if sorted(set(kinds.values())) != sorted(SOLUTION_KINDS):
        raise ValueError(f"{where}: needs a reference, at least one alt_ and one wrong_ solution; has {sorted(solutions)}")
    if any(kinds.get(n) != "alternative" for n in brittle):
        raise ValueError(f"{where}: 'brittle' must name alt_ solutions of this task; got {sorted(brittle)}")
    if any(kinds.get(n) != "wrong" for n in weak):
        raise ValueError(f"{where}: 'weak' must name wrong_ solutions of this task; got {sorted(weak)}")
    ordered = {"reference": solutions.pop("reference"), **solutions}
    return Task(id=task_id, statement=sections["statement"].strip() + "\n", visible=sections["visible"],
                hidden=sections["hidden"], solutions=MappingProxyType(ordered), entry=entry,
                judge=sections.get("judge", "").strip() + "\n" if sections.get("judge", "").strip() else "",
                tags=tuple(meta.get("tags", ())), brittle=MappingProxyType(brittle), weak=MappingProxyType(weak))


@functools.lru_cache(maxsize=4)
def load_tasks(directory: str | None = None) -> Mapping[str, Task]:
    """Load every ``*.txt`` task of ``directory`` (default: the shipped set), id -> task, sorted by id."""
    folder = Path(directory) if directory is not None else TASK_DIR
    files = sorted(folder.glob("*.txt"))
    if not files:
        raise ValueError(f"no task files (*.txt) in {str(folder)!r}")
    return MappingProxyType({f.stem: parse_task(f.stem, f.read_text(encoding="utf-8")) for f in files})
