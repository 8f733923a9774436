"""CFR and CFR+ on Kuhn poker through OpenSpiel, with the average strategy in llm_zoo's tabular form.

Counterfactual regret minimisation (Zinkevich et al. 2007) and CFR+ (Tammelin 2014) run on
OpenSpiel's own `kuhn_poker` (`open_spiel.python.algorithms.cfr`). Their average policy, an
OpenSpiel `TabularPolicy`, is mapped to our tabular form with `theory.from_openspiel` (cards 0, 1,
2 = J, Q, K; action 0 = check or fold, 1 = bet or call), so `theory.exploitability` scores it like
every other Kuhn player, and `TabularPolicy(result.policy)` plays it in the text env.

    >>> from llm_zoo.trainers.baselines import cfr
    >>> result = cfr.solve("cfr+", 100)
    >>> round(result.exploitability, 4)     # measured: 0.0012 (OpenSpiel's own exploitability agrees)
    0.0012

`solve(name, [10, 100, 1000])` runs one solver once and snapshots it at each count, with the
wall-clock of the iterations up to that count (mapping and scoring are not timed), as the
benchmark's table needs. Nothing here prints.

References: M. Zinkevich et al., "Regret Minimization in Games with Incomplete Information",
NeurIPS 2007; O. Tammelin, "Solving Large Imperfect Information Games Using CFR+", 2014;
Lanctot et al., "OpenSpiel", 2019.
"""

from __future__ import annotations

import time
from collections.abc import Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING

from llm_zoo.envs.kuhn_poker import theory
from llm_zoo.policy import TabularPolicy

if TYPE_CHECKING:
    from open_spiel.python.policy import TabularPolicy as OpenSpielTabularPolicy

__all__ = ["SOLVERS", "SolverResult", "player", "solve", "to_tabular"]

GAME = "kuhn_poker"
"""The OpenSpiel game the solvers run on: two-player Kuhn poker, the game of `kuhn_poker_v0`."""

SOLVERS: dict[str, str] = {
    "cfr": "CFRSolver",
    "cfr+": "CFRPlusSolver",
}
"""Solver name (as crossplay specs write it, `cfr:1000`) -> class in `open_spiel.python.algorithms.cfr`."""


@dataclass(frozen=True)
class SolverResult:
    """A solver's average strategy after some iterations.

    Attributes:
        solver: `"cfr"` or `"cfr+"`.
        iterations: Iterations run (each updates both players once).
        seconds: Wall-clock of those iterations, from the solver's creation; mapping and scoring excluded.
        policy: The average strategy in our tabular form (all 12 info sets).
        exploitability: `theory.exploitability(policy)`, exact.
    """

    solver: str
    iterations: int
    seconds: float
    policy: dict[str, dict[str, float]]
    exploitability: float


def to_tabular(openspiel_policy: OpenSpielTabularPolicy) -> dict[str, dict[str, float]]:
    """Map an OpenSpiel `TabularPolicy` on two-player `kuhn_poker` to our tabular form (`theory.from_openspiel`)."""
    return theory.from_openspiel(openspiel_policy)


def solve(solver: str, iterations: int | Sequence[int]) -> SolverResult | list[SolverResult]:
    """Run CFR or CFR+ on Kuhn poker; return the average strategy after `iterations`.

    Args:
        solver: `"cfr"` or `"cfr+"`.
        iterations: A count (returns one result), or increasing counts (returns one result per
            count, from a single run: the 1000-iteration result continues the 100-iteration one).

    Raises:
        ValueError: An unknown solver, or counts that are not increasing positive integers.
        ImportError: OpenSpiel is missing (it comes with the `baselines` extra).
    """
    if solver not in SOLVERS:
        raise ValueError(f"unknown solver {solver!r}; expected one of {sorted(SOLVERS)}")
    counts = [iterations] if isinstance(iterations, int) else list(iterations)
    if not counts or any(not isinstance(n, int) or isinstance(n, bool) or n < 1 for n in counts) or any(
        a >= b for a, b in zip(counts, counts[1:])
    ):
        raise ValueError(f"iterations must be a positive int or increasing positive ints; got {iterations!r}")
    try:
        import pyspiel
        from open_spiel.python.algorithms import cfr
    except ImportError as exc:
        raise ImportError("CFR baselines need OpenSpiel: pip install 'llm_zoo[baselines]'") from exc

    start = time.perf_counter()
    engine = getattr(cfr, SOLVERS[solver])(pyspiel.load_game(GAME))  # builds the tree: timed too
    done, elapsed, results = 0, time.perf_counter() - start, []
    for count in counts:
        start = time.perf_counter()
        for _ in range(count - done):
            engine.evaluate_and_update_policy()
        average = engine.average_policy()  # reach-weighted average, part of the solver's work
        elapsed += time.perf_counter() - start
        done = count
        table = to_tabular(average)
        results.append(SolverResult(solver, count, elapsed, table, theory.exploitability(table)))
    return results[0] if isinstance(iterations, int) else results


def player(solver: str, iterations: int, *, seed: int | None = None) -> TabularPolicy:
    """Return a Kuhn poker player of the solver's average strategy after `iterations` (see `solve`)."""
    result = solve(solver, iterations)
    assert isinstance(result, SolverResult)
    return TabularPolicy(result.policy, seed=seed, name=f"{solver}:{iterations}")
