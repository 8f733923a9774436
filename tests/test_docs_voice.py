"""The README and the pages of docs/ speak of the project, not of the sittings in which it was worked on.

A page says what the code does and what a benchmark measured (with the benchmark's own date and machine
on the results pages), never "this session", "last session" or "an earlier session". Code is left out
of the check: a client ``Session`` class or ``sandbox/session.py`` is a name, not a narrative.
"""

from __future__ import annotations

import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
PAGES = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]

FENCE = re.compile(r"^```.*?^```[ \t]*$", re.S | re.M)
SPAN = re.compile(r"`[^`\n]*`")
NARRATIVE = re.compile(r"\bsessions?\b", re.I)


def narrative_lines(text: str) -> list[str]:
    """Return the lines of ``text`` whose prose (code blocks and spans left out) speaks of a session."""
    prose = FENCE.sub(lambda m: "\n" * m.group(0).count("\n"), text)  # keep the line numbers
    return [f"{number}: {line.strip()}" for number, line in enumerate(prose.splitlines(), 1)
            if NARRATIVE.search(SPAN.sub(" ", line))]


def test_no_page_speaks_of_sessions():
    assert len(PAGES) > 5  # README.md and docs/*.md were found
    found = {page.relative_to(ROOT).as_posix(): narrative_lines(page.read_text()) for page in PAGES}
    found = {page: lines for page, lines in found.items() if lines}
    assert found == {}, ("say what the project does or what a benchmark measured, not which session did it "
                         f"(dated records belong under docs/results/): {found}")


def test_the_check_finds_a_narrative_and_leaves_code_alone():
    assert narrative_lines("Seed 1 ends where it did last session.\n") != []
    assert narrative_lines("On this Session's machine a step took 0.35 s.\n") != []
    assert narrative_lines("A client `Session` gets plain data from `sandbox/session.py`.\n") == []
    assert narrative_lines("```python\nsession = open_session()\n```\nThe server runs apart.\n") == []
