"""Write the ``@@ judge`` section of every agentic_judge task: the judge's own cases, which the solver never sees.

A judge that knows only the cases the solver was shown (the statement's examples and the visible tests) cannot
tell a solution from a table of those cases with a plausible fallback, however the table is hidden. So each
task carries a few cases of the judge's own: calls on inputs derived from the shown ones
(``scripted.probe_plan``: one argument moved), with the outputs every correct stored solution agrees on
(values compared as the examples are: numbers to 1e-9, exceptions by class and only one the statement names).
A call on which the correct solutions disagree, or whose output is no literal, is left out.

    python scripts/judge_cases.py            # rewrite the sections in place
    python scripts/judge_cases.py --check    # exit 1 when a task file's section differs from what this writes
"""

from __future__ import annotations

import argparse
import ast
import re
import signal
import sys
import types
from pathlib import Path
from typing import Any

from llm_zoo.envs.agentic_judge import checks, grading, scripted
from llm_zoo.envs.agentic_judge.tasks import TASK_DIR, load_tasks

CASES = 6
"""Judge's cases per task at most."""


def _alarm(signum: int, frame: Any) -> None:
    raise TimeoutError


def _outcome(source: str, code: str, task_name: str) -> tuple[str, Any]:
    """("=", value) or ("!", exception name) of one call against one stored solution (the project's own code)."""
    module = types.ModuleType("solution")
    exec(compile(code, f"<{task_name}>", "exec"), module.__dict__)  # noqa: S102 - the project's stored solutions
    signal.signal(signal.SIGALRM, _alarm)
    signal.alarm(2)
    try:
        return "=", eval(compile(source, "<case>", "eval"), {"__builtins__": __builtins__}, vars(module))  # noqa: S307
    except TimeoutError:
        return "!", "Timeout"
    except Exception as exc:  # noqa: BLE001 - the exception's class is the outcome
        return "!", type(exc).__name__
    finally:
        signal.alarm(0)


def cases_of(task: Any) -> list[str]:
    """The judge's cases of one task, as doctest-style text blocks."""
    any_order = grading.statement_leaves_order_free(task.statement)
    named = scripted.named_exceptions(task.statement)
    shown = {e.source for e in grading.parse_examples(task.statement)}
    out = []
    for source, _ in scripted.probe_plan(task.statement, task.visible, limit=4 * CASES):
        if source in shown or source in task.visible:
            continue  # a call the solver was shown (an example that raises, say) is no case of the judge's own
        results = [_outcome(source, task.solutions[name], f"{task.id}:{name}") for name in task.correct]
        kind, value = results[0]
        if kind == "!":
            if value not in named or any(r != results[0] for r in results):
                continue
            out.append(f">>> {source}\nTraceback (most recent call last):\n{value}")
        else:
            text = repr(value)
            try:
                if not checks._same(checks._norm(ast.literal_eval(text), any_order), checks._norm(value, any_order)):
                    continue
            except (ValueError, SyntaxError, TypeError, MemoryError, RecursionError):
                continue  # no literal (an object, a generator): the example check could not compare it
            if "\n" in text or any(k != "=" or not checks._same(checks._norm(v, any_order), checks._norm(value, any_order))
                                   for k, v in results[1:]):
                continue
            out.append(f">>> {source}\n{text}")
        if len(out) == CASES:
            break
    return out


_SECTION = re.compile(r"^@@ judge[ \t]*\n.*?(?=^@@ |\Z)", re.MULTILINE | re.DOTALL)


def rewrite(path: Path, blocks: list[str]) -> str:
    """The task file's text with its judge section replaced (or put after the hidden tests)."""
    text = path.read_text(encoding="utf-8")
    section = "@@ judge\n" + "\n\n".join(blocks) + "\n" if blocks else ""
    if _SECTION.search(text):
        return _SECTION.sub(lambda _: section, text, count=1)
    at = re.search(r"^@@ solution ", text, re.MULTILINE)
    return text[:at.start()] + section + text[at.start():] if at else text + section


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--check", action="store_true", help="report task files whose section is out of date")
    args = parser.parse_args(argv)
    stale = []
    for task in load_tasks().values():
        path = TASK_DIR / f"{task.id}.txt"
        new = rewrite(path, cases_of(task))
        if new != path.read_text(encoding="utf-8"):
            stale.append(task.id)
            if not args.check:
                path.write_text(new, encoding="utf-8")
    print(f"{len(stale)} task files {'differ' if args.check else 'rewritten'}: {', '.join(sorted(stale)) or '-'}")
    return 1 if args.check and stale else 0


if __name__ == "__main__":
    sys.exit(main())
