"""What every benchmark shares: its command line's common options, its Markdown table and its JSON line.

The contract :mod:`llm_zoo.bench` reads, kept by each module of :mod:`benchmarks`:

- ``--quick`` is its smallest setting (seconds to a minute on 2 CPU cores): the tests and ``llm-zoo bench --quick``
  run it.
- It prints readable tables; a table it writes to its ``--out`` folder is Markdown (:func:`table`), and the
  results page shows it.
- Its last printed line is one JSON object of its headline figures, ``seconds`` (its wall-clock) among them
  (:func:`emit`); a script that cannot run here (no GPU) prints ``{"skipped": reason}`` instead.

``llm-zoo bench`` passes ``--out`` and ``--runs-dir`` only to the scripts that declare them, and it reads that off
the script's text: a call of :func:`add_out` or :func:`add_runs_dir` (or a plain ``add_argument("--out", ...)``).
"""

from __future__ import annotations

import argparse
import json
from collections.abc import Mapping, Sequence
from typing import Any

__all__ = ["add_out", "add_runs_dir", "add_seeds", "add_workers", "count", "emit", "parser", "positive", "skipped",
           "table"]


def parser(doc: str | None, *, quick: str) -> argparse.ArgumentParser:
    """Return a benchmark's parser: the first paragraph of its docstring as the description, and ``--quick``.

    Args:
        doc: The module's docstring (``__doc__``).
        quick: What ``--quick``, the smallest setting, runs (its help line).
    """
    description = " ".join((doc or "").strip().split("\n\n")[0].split())
    made = argparse.ArgumentParser(description=description)
    made.add_argument("--quick", action="store_true", help=quick)
    return made


def count(text: str) -> int:
    """Parse a whole number >= 1 (an argparse ``type``: episodes, seeds, workers, steps)."""
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a whole number >= 1, got {text!r}") from None
    if value < 1:
        raise argparse.ArgumentTypeError(f"expected a whole number >= 1, got {text!r}")
    return value


def positive(text: str) -> float:
    """Parse a number > 0 (an argparse ``type``: seconds, rates)."""
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a number > 0, got {text!r}") from None
    if not value > 0:  # NaN too
        raise argparse.ArgumentTypeError(f"expected a number > 0, got {text!r}")
    return value


def add_out(made: argparse.ArgumentParser, help: str) -> None:
    """Add ``--out DIR``: the folder for the script's Markdown tables, plots and runs (``llm-zoo bench`` passes a
    temporary one, whose ``*.md`` and ``*.png`` it copies onto the results page)."""
    made.add_argument("--out", default=None, metavar="DIR", help=help)


def add_runs_dir(made: argparse.ArgumentParser, help: str) -> None:
    """Add ``--runs-dir DIR``: training runs shared between scripts (``llm-zoo bench`` passes one folder to all)."""
    made.add_argument("--runs-dir", default=None, metavar="DIR", help=help)


def add_seeds(made: argparse.ArgumentParser, *, default: int | None, help: str) -> None:
    """Add ``--seeds N``: how many seeds (0..N-1) each measured system runs, N >= 1."""
    made.add_argument("--seeds", type=count, default=default, metavar="N", help=help)


def add_workers(made: argparse.ArgumentParser, *, default: int | None, help: str) -> None:
    """Add ``--workers N``: how many runs (processes or threads) go side by side, N >= 1."""
    made.add_argument("--workers", type=count, default=default, metavar="N", help=help)


def table(header: Sequence[str], rows: Sequence[Sequence[Any]]) -> str:
    """Return ``rows`` under ``header`` as a Markdown table whose columns are padded to one width, so that it
    reads as well printed as rendered."""
    cells = [[str(c) for c in header], *([str(c) for c in row] for row in rows)]
    if any(len(row) != len(header) for row in cells):
        raise ValueError(f"every row needs {len(header)} cells, one per header; got rows of "
                         f"{sorted({len(row) for row in cells})} cells")
    widths = [max(len(c) for c in column) for column in zip(*cells)]

    def line(row: list[str]) -> str:
        return "| " + " | ".join(c.ljust(w) for c, w in zip(row, widths)) + " |"

    rule = "|" + "|".join("-" * (w + 2) for w in widths) + "|"
    return "\n".join([line(cells[0]), rule, *map(line, cells[1:])])


def emit(figures: Mapping[str, Any]) -> dict[str, Any]:
    """Print ``figures`` as the script's last line, one JSON object, and return them (``main``'s return value)."""
    line = dict(figures)
    print(json.dumps(line))
    return line


def skipped(name: str, missing: str) -> dict[str, Any]:
    """Say in one line that benchmark ``name`` cannot run here for want of ``missing`` (a GPU, vLLM), end with
    ``{"skipped": missing}``, and return it: exit status 0, which ``llm-zoo bench`` reports as skipped."""
    print(f"{name}: skipped, {missing}.")
    return emit({"skipped": missing})
