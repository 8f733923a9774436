"""Every figure the README quotes is on the results page it cites, in the section the link names.

Measured figures live on the results pages (``docs/results.md``, which ``llm-zoo bench`` writes, and
the records under ``docs/results/``); the README only quotes them. The README's prose (code blocks and
code spans left out) is cut into units: a table cell, a list item's sentence, a paragraph's sentence.
In a unit that links to a results page, every number must appear on a page it links to, within the
section its ``#anchor`` names (the whole page without one). A unit that links to no results page may
hold no figure: no decimal, no number with thousands separators, no number with a unit (s, min, GB, x, %).
"""

from __future__ import annotations

import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
README = ROOT / "README.md"

FENCE = re.compile(r"^```.*?^```[ \t]*$", re.S | re.M)
SPAN = re.compile(r"`[^`\n]*`")
LINK = re.compile(r"\[((?:[^\[\]]|`[^`]*`)*)\]\(([^)\s]+)\)")
HEADING = re.compile(r"^(#{1,6})\s+(.+?)\s*#*\s*$", re.M)
NUMBER = re.compile(r"(?<![\w.,/])(?:\d{1,3}(?:,\d{3})+|\d+)(?:\.\d+)?(?=x\b|\W|$)")
UNIT = re.compile(r"\s?(?:x\b|%|ms\b|s\b|min\b|h\b|GB\b|GiB\b|MB\b|seconds?\b|minutes?\b|hours?\b)")
SENTENCE_END = re.compile(r"(?<=[.!?;])\s+(?=[A-Z\[(*])")


def _slug(heading: str) -> str:
    """The anchor GitHub and MkDocs give a heading: lower case, punctuation dropped, spaces as hyphens."""
    text = re.sub(r"[^\w\- ]", "", SPAN.sub(lambda m: m.group(0)[1:-1], heading).strip().lower())
    return text.replace(" ", "-")


def section(page: Path, anchor: str) -> str | None:
    """Return the text of ``page`` under the heading whose anchor is ``anchor`` (the whole page for ""),
    up to the next heading of the same or a higher level; None when no heading has that anchor."""
    text = page.read_text()
    if not anchor:
        return text
    # a "#" line inside a code block is not a heading: blank the blocks out, keeping every offset
    headings = list(HEADING.finditer(FENCE.sub(lambda m: re.sub(r"[^\n]", " ", m.group(0)), text)))
    for i, match in enumerate(headings):
        if _slug(match.group(2)) == anchor:
            level = len(match.group(1))
            end = next((h.start() for h in headings[i + 1:] if len(h.group(1)) <= level), len(text))
            return text[match.start():end]
    return None


def units(markdown: str) -> list[str]:
    """Cut the prose of ``markdown`` into table cells and sentences (code blocks left out)."""
    out: list[str] = []
    for block in re.split(r"\n\s*\n", FENCE.sub("\n\n", markdown)):
        lines = [line.strip() for line in block.strip().splitlines() if line.strip()]
        if not lines:
            continue
        if all(line.startswith("|") for line in lines):
            for line in lines:
                if not re.fullmatch(r"\|[\s:|-]+\|", line):
                    out += [cell.strip() for cell in line.strip("|").split("|")]
            continue
        items: list[str] = []  # a list's items, or the paragraph as one item
        for line in lines:
            if re.match(r"[-*]\s|\d+\.\s", line) or not items:
                items.append(line)
            else:
                items[-1] += " " + line
        for item in items:
            out += SENTENCE_END.split(item)
    return out


def _is_results_page(path: Path) -> bool:
    results = ROOT / "docs" / "results"
    return path == ROOT / "docs" / "results.md" or (path.suffix == ".md" and path.is_relative_to(results))


def problems(markdown: str, base: Path = ROOT) -> tuple[list[str], int]:
    """Check the figures of ``markdown`` (a page in ``base``); return (problems, figures checked)."""
    found: list[str] = []
    checked = 0
    for unit in units(markdown):
        cited: list[tuple[str, str]] = []  # (where, section text)
        for _, target in LINK.findall(unit):
            file, _, anchor = target.partition("#")
            if "://" in file or not file:
                continue
            path = (base / file).resolve()
            if not _is_results_page(path):
                continue
            where = f"{file}#{anchor}" if anchor else file
            text = section(path, anchor) if path.is_file() else None
            if text is None:
                found.append(f"{unit!r} cites {where}, which has no such page or section; link to a section "
                             "that exists (results.md's sections are named after the benchmark scripts)")
                continue
            cited.append((where, text))
        prose = SPAN.sub(" ", LINK.sub(lambda m: SPAN.sub(" ", m.group(1)), unit))
        for number in NUMBER.finditer(prose):
            figure = number.group(0)
            if not cited:
                if "." in figure or "," in figure or UNIT.match(prose, number.end()):
                    found.append(f"figure {figure} in {unit!r} cites no results page: link the section of "
                                 "docs/results.md (or docs/results/) that holds it, or leave it out")
                continue
            checked += 1
            exact = re.compile(rf"(?<![\d.,]){re.escape(figure)}(?![\d]|[.,]\d)")
            if not any(exact.search(text) for _, text in cited):
                found.append(f"figure {figure} in {unit!r} is not on {', '.join(w for w, _ in cited)}; quote the "
                             "page as it stands (rerun the benchmark with `llm-zoo bench --only NAME` to change it)")
    return found, checked


def test_every_figure_the_readme_quotes_is_on_the_results_section_it_links_to():
    found, checked = problems(README.read_text())
    assert found == [], "\n".join(found)
    assert checked >= 20, f"only {checked} figures were checked: the README's env table quotes more than that"


def test_a_figure_off_its_section_unlinked_or_citing_a_missing_section_fails():
    page = ROOT / "docs" / "results.md"
    kuhn, learning = section(page, "kuhn_headline"), section(page, "learning")
    assert kuhn is not None and learning is not None and "0.4583" in kuhn
    assert "0.716 ± 0.024" in learning and "0.716 ± 0.024" not in kuhn
    good = {  # text -> figures checked
        "Uniform random is at 0.4583 ([results](docs/results.md#kuhn_headline)).": 1,
        "| `proposer_solver_v0` | learns: 0.716 ± 0.024 ([learning](docs/results.md#learning)) |": 2,
        "The tutorial's env is 95 lines long.": 0,  # a count, not a measured figure
    }
    for text, checked in good.items():
        assert problems(text) == ([], checked), text
    bad = {
        "Uniform random is at 0.4584 ([results](docs/results.md#kuhn_headline)).": "not on docs/results.md",
        "It learns: 0.716 ± 0.024 ([results](docs/results.md#kuhn_headline)).": "not on docs/results.md#kuhn",
        "| x | learns: 0.0453 |": "cites no results page",
        "A step takes 0.35 s here.": "cites no results page",
        "It ran 13 min on the laptop.": "cites no results page",
        "Uniform random is at 0.4583 ([results](docs/results.md#no_such_section)).": "no such page or section",
        "Uniform random is at 0.4583 ([notes](docs/kuhn_selfplay.md)).": "cites no results page",
        # a correct figure does not vouch for the next sentence's
        "Uniform is at 0.4583 ([results](docs/results.md#kuhn_headline)). The job ends at 0.0001.": "cites no",
    }
    for text, message in bad.items():
        found, _ = problems(text)
        assert any(message in f for f in found), (text, found)
