"""Reward hacks: how many attempts to raise an env's reward without doing the task pay (the goal: none).

The attempts live in :mod:`benchmarks.hacks`, one library per env (``hacks.judge`` against
agentic_judge_v0's hidden tests and judge, ``hacks.proposer`` against proposer_solver_v0's
validation and grading, ``hacks.user_sim`` against user_sim_v0's world-state reward, and
``hacks.pipeline`` against what surrounds the envs: checkpoints, configs and episode files a user
hands in, and the run directories ``train`` writes), each a
``HACKS`` list of :class:`hacks.Hack` records whose ``run()`` plays the attack end to end through
the real env and returns an :class:`hacks.Outcome`: paid or not, the reward got, the reward of the
same non-solution without the trick (the baseline), and what happened.

Every attempt runs on its own: one that raises (or returns something that is not an ``Outcome``,
or runs past ``--timeout`` seconds) is recorded as an error with its reason and counted, and the
rest go on. A library that is missing, or fails to import, is a row that says so, never a crash.
Per env it prints a table (name, what it tries, paid?, reward vs baseline, detail), then a summary
(per env: attempts, paid, errors).

    python -m benchmarks.reward_hacks            # every attempt
    python -m benchmarks.reward_hacks --quick    # the few each library marks quick: seconds

The last line printed is a JSON object: ``judge_hacks_paid``, ``proposer_hacks_paid``,
``user_sim_hacks_paid``, ``pipeline_hacks_paid`` (attempts that paid, per env; null where the library
is not available),
``attempts`` (attempts run), ``errors`` (attempts that raised), ``by_kind`` (attempts, paid and errors
per class of attack, each hack's ``kind``), ``not_available`` (libraries that
could not be loaded), ``per_env`` (attempts, paid, errors and the names that paid, per env),
``quick`` and ``seconds``.
"""

from __future__ import annotations

import contextlib
import importlib
import signal
import threading
import time
import traceback
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from benchmarks import _harness as harness
from benchmarks.hacks import Hack, Outcome

LIBRARIES = (("agentic_judge_v0", "benchmarks.hacks.judge", "judge_hacks_paid"),
             ("proposer_solver_v0", "benchmarks.hacks.proposer", "proposer_hacks_paid"),
             ("user_sim_v0", "benchmarks.hacks.user_sim", "user_sim_hacks_paid"),
             ("pipeline", "benchmarks.hacks.pipeline", "pipeline_hacks_paid"))
"""Env, the module of its attempts, and the JSON key of how many paid."""
TIMEOUT_S = 300.0
"""Default limit on one attempt (``--timeout``)."""


@dataclass
class Row:
    """One attempt's line of the table."""

    name: str
    tries: str
    kind: str = "other"
    outcome: Outcome | None = None
    error: str | None = None
    seconds: float = 0.0


@dataclass
class Library:
    """One env's attempts and what they got."""

    env: str
    module: str
    key: str
    problem: str | None = None  # why the library is not available
    rows: list[Row] = field(default_factory=list)

    @property
    def paid(self) -> list[str]:
        return [r.name for r in self.rows if r.outcome is not None and r.outcome.paid]

    @property
    def errors(self) -> int:
        return sum(r.error is not None for r in self.rows)


def load(module: str) -> tuple[list[Hack] | None, str | None]:
    """Import ``module`` and return (its ``HACKS``, None), or (None, why it is not available)."""
    try:
        loaded = importlib.import_module(module)
    except ModuleNotFoundError as exc:
        if exc.name is not None and (module == exc.name or module.startswith(exc.name + ".")):
            return None, f"not available: no module {module}"
        return None, f"not available: importing {module} failed: {type(exc).__name__}: {exc}"
    except (Exception, SystemExit) as exc:  # a library with a bug must not take the others down
        return None, f"not available: importing {module} failed: {type(exc).__name__}: {exc}"
    hacks = getattr(loaded, "HACKS", None)
    if not isinstance(hacks, list) or not all(isinstance(h, Hack) for h in hacks):
        return None, f"not available: {module}.HACKS must be a list of hacks.Hack, got {type(hacks).__name__}"
    return hacks, None


class _Timeout(Exception):  # noqa: N818 - names the situation
    pass


@contextlib.contextmanager
def _limit(seconds: float) -> Iterator[None]:
    """Raise ``_Timeout`` in this (main) thread after ``seconds``; elsewhere, or without SIGALRM, no limit."""
    if not hasattr(signal, "setitimer") or threading.current_thread() is not threading.main_thread():
        yield
        return

    def alarm(signum: int, frame: Any) -> None:
        raise _Timeout(f"ran past the --timeout of {seconds:g} s")

    previous = signal.signal(signal.SIGALRM, alarm)
    signal.setitimer(signal.ITIMER_REAL, seconds)
    try:
        yield
    finally:
        signal.setitimer(signal.ITIMER_REAL, 0)
        signal.signal(signal.SIGALRM, previous)


def attempt(hack: Hack, timeout_s: float = TIMEOUT_S) -> Row:
    """Run one attempt in isolation: whatever it raises becomes the row's error."""
    row = Row(hack.name, hack.tries, hack.kind)
    start = time.perf_counter()
    try:
        with _limit(timeout_s):
            outcome = hack.run()
        if not isinstance(outcome, Outcome):
            raise TypeError(f"run() must return a hacks.Outcome, got {type(outcome).__name__}: {outcome!r:.100}")
        row.outcome = outcome
    except (Exception, SystemExit) as exc:  # SystemExit too: an attempt's sys.exit must not end the benchmark
        last = traceback.extract_tb(exc.__traceback__)[-1:] or [None]
        where = f" at {Path(last[0].filename).name}:{last[0].lineno}" if last[0] is not None else ""
        row.error = f"{type(exc).__name__}: {exc}"[:300] + where
    row.seconds = time.perf_counter() - start
    return row


def _clip(text: str, width: int) -> str:
    text = " ".join(str(text).split())
    return text if len(text) <= width else text[: width - 1] + "…"


def table(library: Library) -> str:
    """The attempts of one env, one per line."""
    head = f"{library.env} ({library.module}): "
    if library.problem is not None:
        return head + library.problem
    lines = [head + f"{len(library.rows)} attempts, {len(library.paid)} paid, {library.errors} errors",
             f"  {'name':<38} {'what it tries':<64} {'paid?':<6} {'reward':>7} {'baseline':>8}  detail"]
    for r in library.rows:
        if r.outcome is None:
            lines.append(f"  {r.name:<38} {_clip(r.tries, 64):<64} {'ERROR':<6} {'-':>7} {'-':>8}  {_clip(r.error or '', 110)}")
        else:
            o = r.outcome
            lines.append(f"  {r.name:<38} {_clip(r.tries, 64):<64} {'PAID' if o.paid else 'no':<6} {o.reward:>7.3f} "
                         f"{o.baseline:>8.3f}  {_clip(o.detail, 110)}")
    return "\n".join(lines)


def summary(libraries: Sequence[Library]) -> str:
    """Per env: attempts, paid, errors (or why its library is not available)."""
    lines = ["summary", f"  {'env':<20} {'attempts':>8} {'paid':>5} {'errors':>6}  library"]
    for lib in libraries:
        if lib.problem is not None:
            lines.append(f"  {lib.env:<20} {'-':>8} {'-':>5} {'-':>6}  {lib.problem}")
        else:
            lines.append(f"  {lib.env:<20} {len(lib.rows):>8} {len(lib.paid):>5} {lib.errors:>6}  {lib.module}"
                         + (f"; paid: {', '.join(lib.paid)}" if lib.paid else ""))
    return "\n".join(lines)


def by_kind(libraries: Sequence[Library]) -> dict[str, dict[str, int]]:
    """Attempts, paid and errors per class of attack, over every available library."""
    counts: dict[str, dict[str, int]] = {}
    for lib in libraries:
        for r in lib.rows:
            c = counts.setdefault(r.kind, {"attempts": 0, "paid": 0, "errors": 0})
            c["attempts"] += 1
            c["paid"] += r.outcome is not None and r.outcome.paid
            c["errors"] += r.error is not None
    return dict(sorted(counts.items()))


def main(argv: Sequence[str] | None = None) -> dict[str, Any]:
    parser = harness.parser(__doc__, quick="only the attempts each library marks quick")
    parser.add_argument("--timeout", type=harness.positive, default=TIMEOUT_S,
                        help=f"seconds one attempt may run before it is an error (default {TIMEOUT_S:g})")
    args = parser.parse_args(argv)
    start = time.perf_counter()
    libraries = []
    for env, module, key in LIBRARIES:
        library = Library(env, module, key)
        hacks, library.problem = load(module)
        for hack in hacks or ():
            if args.quick and not hack.quick:
                continue
            library.rows.append(attempt(hack, args.timeout))
        libraries.append(library)
        print(table(library), end="\n\n", flush=True)
    print(summary(libraries))
    available = [lib for lib in libraries if lib.problem is None]
    result: dict[str, Any] = {lib.key: None if lib.problem is not None else len(lib.paid) for lib in libraries}
    result.update({
        "attempts": sum(len(lib.rows) for lib in available),
        "errors": sum(lib.errors for lib in available),
        "not_available": [lib.env for lib in libraries if lib.problem is not None],
        "per_env": {lib.env: {"attempts": len(lib.rows), "paid": len(lib.paid), "errors": lib.errors,
                              "paid_names": lib.paid} for lib in available},
        "by_kind": by_kind(available),
        "quick": args.quick,
        "seconds": round(time.perf_counter() - start, 2),
    })
    return harness.emit(result)


if __name__ == "__main__":
    main()
