"""Metrics of a run: JSONL (always) and TensorBoard (when installed), one row per step; the run's progress bar."""

from __future__ import annotations

import json
import sys
import warnings
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

from llm_zoo.episode import atomic_writer


class MetricsLogger:
    """Append one JSON object per step to ``run_dir/metrics.jsonl`` and mirror it to TensorBoard.

    On resume (``resume_from`` > 0) rows of steps after ``resume_from`` are dropped first, so the
    file always reads as one uninterrupted run.
    """

    def __init__(self, run_dir: Path, *, resume_from: int = 0, tensorboard: bool = True) -> None:
        self.path = Path(run_dir) / "metrics.jsonl"
        if self.path.exists():
            rows = _lines(self.path)
            kept = [r for r in rows if _step(r) is not None and _step(r) <= resume_from] if resume_from else []
            with atomic_writer(self.path) as f:  # a crash here must not lose the rows being kept
                f.write("".join(r + "\n" for r in kept))
        self._file = self.path.open("a")
        self._writer = None
        if tensorboard:
            try:
                from torch.utils.tensorboard import SummaryWriter

                self._writer = SummaryWriter(str(Path(run_dir) / "tensorboard"), purge_step=resume_from or None)
            except ImportError:
                warnings.warn("tensorboard is not installed; metrics go to metrics.jsonl only "
                              "(pip install tensorboard, or set tensorboard=false)", stacklevel=2)

    def log(self, step: int, metrics: Mapping[str, float]) -> None:
        """Write the metrics of ``step``."""
        row = {"step": step, **{k: float(v) for k, v in metrics.items()}}
        self._file.write(json.dumps(row) + "\n")
        self._file.flush()
        if self._writer is not None:
            for key, value in metrics.items():
                self._writer.add_scalar(key, float(value), step)

    def close(self) -> None:
        """Flush and close the files."""
        self._file.close()
        if self._writer is not None:
            self._writer.close()


class MetricsFormatError(ValueError):
    """A ``metrics.jsonl`` that is not one JSON object per line; the message names the file and line."""


def _lines(path: Path) -> list[str]:
    """The file's non-blank lines, decoded as UTF-8 (strictly: a damaged file is refused, naming it)."""
    try:
        text = path.read_bytes().decode("utf-8")
    except UnicodeDecodeError as exc:
        raise MetricsFormatError(f"{path}: not UTF-8 at byte {exc.start}; expected the JSON lines a run writes "
                                 "(start a fresh run with --overwrite, or mend the file)") from None
    return [line for line in text.splitlines() if line.strip()]


def _step(line: str) -> int | None:
    """The row's step: an int, never a text, a float or a bool converted to one; None when it is not a row."""
    try:
        row = json.loads(line)
    except (ValueError, RecursionError):
        return None
    step = row.get("step") if isinstance(row, dict) else None
    return step if type(step) is int else None


def _parses(line: str) -> bool:
    try:
        json.loads(line)
    except (ValueError, RecursionError):
        return False
    return True


def _numbers(line: str) -> bool:
    """Whether every value of a row is a number (what ``MetricsLogger.log`` writes; NaN included)."""
    return all(type(v) in (int, float) for v in json.loads(line).values())


def read_metrics(run_dir: str | Path) -> list[dict[str, float]]:
    """Return the rows of a run's ``metrics.jsonl``.

    Raises:
        FileNotFoundError: the run has no metrics file.
        MetricsFormatError: a line (other than a last one torn by a crash) is not a JSON object with a
            ``step``, or the file is not UTF-8; the message names file and line.
    """
    path = Path(run_dir) / "metrics.jsonl"
    lines = _lines(path)
    if lines and not _parses(lines[-1]):  # a row torn by a crash mid-append; every earlier row is whole
        lines.pop()
    rows = []
    for number, line in enumerate(lines, 1):
        if _step(line) is None or not _numbers(line):
            raise MetricsFormatError(f"{path}:{number}: expected a JSON object with an integer 'step' and numbers "
                                     f"(one row a step), got {line[:80]!r}")
        rows.append(json.loads(line))
    return rows


def progress_bar(*, total: int, initial: int, desc: str) -> Any:
    """Return the run's tqdm bar (on stderr), or None without tqdm.

    While it is open, transformers' and huggingface_hub's own bars are turned off: theirs (such as
    "Writing model shards" at every checkpoint) would otherwise each break the run's bar onto a new
    line. Closing the bar turns them back on if they were on.
    """
    try:
        from tqdm.auto import tqdm
    except ImportError:
        return None
    restore = _quiet_library_bars()

    class _RunBar(tqdm):
        def close(self) -> None:
            super().close()
            restore()

    return _RunBar(total=total, initial=initial, desc=desc, unit="step", file=sys.stderr)


def _quiet_library_bars() -> Callable[[], None]:
    """Turn the bars of transformers and huggingface_hub off; return what turns them back on."""
    undo = []
    try:
        from transformers.utils import logging as hf_logging
    except ImportError:
        hf_logging = None
    if hf_logging is not None and hf_logging.is_progress_bar_enabled():
        hf_logging.disable_progress_bar()  # also huggingface_hub's
        undo.append(hf_logging.enable_progress_bar)
    else:
        try:
            import huggingface_hub.utils as hub
        except ImportError:
            hub = None
        if hub is not None and not hub.are_progress_bars_disabled():
            hub.disable_progress_bars()
            undo.append(hub.enable_progress_bars)

    def restore() -> None:
        for turn_on in undo:
            turn_on()

    return restore
