"""Learnability: proposers of fixed difficulty against one that adapts it, before the same scripted solvers.

The proposer of ``proposer_solver_v0`` earns its learnability 4·p·(1−p) for pass rate p: most for a
task that half of the solvers get right, nothing for one that all or none get right. This script
measures how much of it a proposer can earn by its choice of difficulty alone, without any training:

* ``fixed d=N``: the scripted proposer (``ScriptedProposer``) at difficulty N, for each N of
  ``--difficulties`` (default 1, 3, 6, 9);
* ``adaptive``: ``AdaptiveProposer`` (``proposer_adaptive``), which starts at difficulty 1 and goes
  up one when the solvers' mean pass rate over its last ``--window`` episodes (default 4) is above
  1/2, down one when below;
* ``adaptive per mode``: the same controller run separately for each mode, on that mode's episodes
  (the modes' pass rates at one difficulty differ a lot: deduction stays easy where abduction is hard).

Every proposer plays the same episodes (env seeds, so the same modes and topics) against a fresh
panel of the same scripted solvers with the same seeds (default: ``solver_weak``, two ``solver``,
``solver_strong``, whose step budgets are 40, 300 and 5000), through
:func:`llm_zoo.trainers.rollout.collect` in rounds of ``--batch-size`` envs. After each round an
adaptive proposer is told the round's pass rates, so its difficulty moves between rounds; the fixed
proposers play the same rounds. The proposers play side by side, one thread each (their time is
spent waiting on sandboxed runs), so the per-proposer seconds overlap; the episodes are the same as
when each plays alone. Per proposer the table gives the mean proposer reward (learnability; an
invalid task scores −1), over all episodes and over the second half (an adaptive proposer past its
warm-up), the mean pass rate, the histogram of pass rates (episodes with k of n solvers right), the
invalid-task rate and the episodes; a second table splits learnability by mode.

Reading it: with the default panel, 1/4 and 3/4 right both score 0.75 and 2/4 is rare (the two
``solver`` seats mostly agree), so what costs a proposer is 0/4 and 4/4. A mean pass rate of 1/2
over mixed modes can hide both (deduction all right, abduction none), so the single controller
steers the mean to 1/2 at a middling difficulty yet earns less than the best fixed difficulty, whose
pass rate is lower; one controller per mode pays a longer warm-up (four controllers to climb) and
then earns the most (its second-half column).

    python -m benchmarks.learnability                    # 160 episodes per proposer: 2-2.5 min on 2 busy cores
    python -m benchmarks.learnability --quick            # 8 episodes per proposer: about 10 s
    python -m benchmarks.learnability --out results/     # also learnability.png (histograms, difficulty)

The last line printed is a JSON object: ``fixed_mean_learnability`` (the best fixed difficulty's
mean, that difficulty in ``fixed_best_difficulty``, every one in ``fixed_mean_learnability_by_difficulty``),
``adaptive_mean_learnability``, ``adaptive_per_mode_mean_learnability``, the same over the second
half (``fixed_late_mean_learnability``, ``adaptive_late_mean_learnability``,
``adaptive_per_mode_late_mean_learnability``), ``invalid_rate`` and ``failed`` (all proposers), the pass rates
(``fixed_pass_rate_by_difficulty``, ``adaptive_pass_rate``), ``adaptive_difficulty_mean`` and
``adaptive_difficulty_final``, ``episodes`` (per proposer), ``solvers`` and ``seconds``.
"""

from __future__ import annotations

import argparse
import functools
import re
import sys
import time
from collections.abc import Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from benchmarks import _harness as harness

DIFFICULTIES = (1, 3, 6, 9)
"""Fixed difficulties compared by default: from easy for every solver to hard for all but the strongest."""
PANEL = ("solver_weak", "solver", "solver", "solver_strong")
"""The default solvers (names of ``proposer_solver_v0.SPEC.scripted``): a spread of skill, so pass rates vary."""
_DIFFICULTY_OF_REPLY = re.compile(r"d=(\d+)\)$")


@dataclass
class Result:
    """What one proposer earned over its episodes."""

    name: str
    num_solvers: int
    rewards: list[float] = field(default_factory=list)  # the proposer's return, per finished episode
    pass_rates: list[float | None] = field(default_factory=list)  # None: an invalid task
    modes: list[str] = field(default_factory=list)
    difficulties: list[int] = field(default_factory=list)  # the difficulty each task was written at
    failed: int = 0
    seconds: float = 0.0

    @property
    def episodes(self) -> int:
        return len(self.rewards) + self.failed

    @property
    def learnability(self) -> float:
        return sum(self.rewards) / max(1, len(self.rewards))

    @property
    def late_learnability(self) -> float:
        """Mean proposer reward over the second half of the episodes (an adaptive proposer warmed up)."""
        late = self.rewards[len(self.rewards) // 2:]
        return sum(late) / max(1, len(late))

    @property
    def pass_rate(self) -> float:
        valid = [p for p in self.pass_rates if p is not None]
        return sum(valid) / max(1, len(valid))

    @property
    def invalid_rate(self) -> float:
        return sum(p is None for p in self.pass_rates) / max(1, len(self.pass_rates))

    @property
    def histogram(self) -> list[int]:
        """Valid episodes with k of the n solvers right, for k = 0 .. n."""
        counts = [0] * (self.num_solvers + 1)
        for p in self.pass_rates:
            if p is not None:
                counts[round(p * self.num_solvers)] += 1
        return counts

    def by_mode(self) -> dict[str, float]:
        """Mode -> mean proposer reward over its episodes."""
        sums: dict[str, list[float]] = {}
        for mode, reward in zip(self.modes, self.rewards):
            sums.setdefault(mode, []).append(reward)
        return {mode: sum(r) / len(r) for mode, r in sums.items()}


def run(name: str, proposer: Any, panel: Sequence[str], seeds: Sequence[int], batch_size: int,
        seed: int) -> Result:
    """Play every seed with ``proposer`` against a fresh panel of solvers, in rounds of ``batch_size`` episodes."""
    from llm_zoo import proposer_solver_v0
    from llm_zoo.envs.proposer_solver.scripted import AdaptiveProposer
    from llm_zoo.trainers.rollout import collect

    solvers = {f"solver_{i}": proposer_solver_v0.SPEC.scripted[s](seed=seed + i) for i, s in enumerate(panel)}
    policies = {"proposer": proposer, **solvers}
    make_env = functools.partial(proposer_solver_v0.env, num_solvers=len(panel))
    result = Result(name, len(panel))
    start = time.perf_counter()
    for first in range(0, len(seeds), batch_size):
        # policies keep their RNG state from round to round (no reseeding): their seeds were set above
        episodes = collect(make_env, policies, seeds[first:first + batch_size], batch_size=batch_size)
        if isinstance(proposer, AdaptiveProposer):
            proposer.observe(episodes)
        for episode in episodes:
            info = episode.infos.get("proposer", {})
            if episode.failed or "valid" not in info:
                result.failed += 1
                continue
            result.rewards.append(episode.returns["proposer"])
            result.pass_rates.append(info["pass_rate"] if info["valid"] else None)
            result.modes.append(info["mode"])
            written = _DIFFICULTY_OF_REPLY.search(episode.turns[0].policy or "") if episode.turns else None
            result.difficulties.append(int(written[1]) if written else 0)
    result.seconds = time.perf_counter() - start
    return result


def print_tables(results: Sequence[Result], panel: Sequence[str], adaptive: Sequence[Any]) -> None:
    """Print the headline table, learnability by mode, and where the adaptive proposers ended."""
    from llm_zoo.envs.proposer_solver.rules import MODES

    n = len(panel)
    print(f"proposer_solver_v0: {results[0].episodes} episodes per proposer, solvers {', '.join(panel)}\n")
    bins = "".join(f" {f'{k}/{n}':>5}" for k in range(n + 1))
    print(f"{'proposer':<19} {'difficulty':>10} {'learnability':>12} {'2nd half':>8} {'pass rate':>9}{bins} "
          f"{'invalid':>8} {'episodes':>8} {'failed':>6} {'seconds':>7}")
    for r in results:
        ds = r.difficulties or [0]
        shown = str(ds[0]) if min(ds) == max(ds) else f"mean {sum(ds) / len(ds):.1f}"
        counts = "".join(f" {c:>5}" for c in r.histogram)
        print(f"{r.name:<19} {shown:>10} {r.learnability:>12.3f} {r.late_learnability:>8.3f} {r.pass_rate:>9.1%}"
              f"{counts} {r.invalid_rate:>8.1%} {r.episodes:>8} {r.failed:>6} {r.seconds:>7.1f}")
    modes = sorted({m for r in results for m in r.modes})
    print("\nlearnability by mode (mean proposer reward)")
    print(f"{'proposer':<19}" + "".join(f" {m:>10}" for m in modes))
    for r in results:
        by_mode = r.by_mode()
        print(f"{r.name:<19}" + "".join(f" {by_mode[m]:>10.3f}" if m in by_mode else f" {'-':>10}" for m in modes))
    for name, proposer in adaptive:
        keys = MODES if proposer.per_mode else [None]
        finals = {k or "all": proposer.difficulty_of(k) for k in keys}
        print(f"\n{name}: final difficulty " + ", ".join(f"{k} {d}" for k, d in sorted(finals.items())))


def plot(results: Sequence[Result], path: Path) -> None:
    """Draw the pass-rate histograms side by side, and each adaptive proposer's difficulty over its episodes."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, (bars, line) = plt.subplots(1, 2, figsize=(12, 4))
    n = results[0].num_solvers
    width = 0.8 / len(results)
    for i, r in enumerate(results):
        valid = max(1, sum(r.histogram))
        bars.bar([k + (i - (len(results) - 1) / 2) * width for k in range(n + 1)], [c / valid for c in r.histogram],
                 width, label=f"{r.name} ({r.learnability:.2f})")
    top = max(c / max(1, sum(r.histogram)) for r in results for c in r.histogram)
    bars.set_ylim(0, 1.4 * top)  # room for the legend above the bars
    bars.set_xticks(range(n + 1), [f"{k}/{n}" for k in range(n + 1)])
    bars.set_xlabel("solvers right")
    bars.set_ylabel("share of valid tasks")
    bars.set_title("pass rates (legend: mean learnability)", fontsize=10)
    bars.legend(fontsize=7, loc="upper center", ncol=2)
    for r in results:
        if not r.name.startswith("adaptive"):
            continue
        # a per-mode proposer's difficulty is one curve per mode, over that mode's episodes
        modes = sorted(set(r.modes)) if r.name.endswith("per mode") else [None]
        for mode in modes:
            points = [(i, d) for i, (m, d) in enumerate(zip(r.modes, r.difficulties), 1) if mode in (None, m)]
            line.plot([i for i, _ in points], [d for _, d in points], drawstyle="steps-post",
                      ls="-" if mode is None else "--", label=r.name if mode is None else f"{r.name}: {mode}")
    line.set_xlabel("episode")
    line.set_ylabel("difficulty of the task")
    line.set_title("adaptive proposers' difficulty (per mode: dashed)", fontsize=10)
    line.legend(fontsize=7)
    line.grid(alpha=0.3)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)


def _ints(text: str) -> list[int]:
    try:
        values = [int(v) for v in text.split(",") if v.strip()]
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected integers separated by commas (1,3,6,9); got {text!r}") from None
    if not values or min(values) < 1:
        raise argparse.ArgumentTypeError(f"expected integers >= 1 separated by commas, such as 1,3,6,9; got {text!r}")
    return values


def main(argv: Sequence[str] | None = None) -> dict[str, Any]:
    """Run the benchmark; print the tables and the JSON line; write the plot under ``--out``; return the figures."""
    started = time.perf_counter()  # the JSON line's wall-clock "seconds"
    parser = harness.parser(__doc__, quick="8 episodes per proposer: seconds")
    parser.add_argument("--episodes", type=harness.count, default=160, help="episodes per proposer (default 160)")
    parser.add_argument("--difficulties", type=_ints, default=list(DIFFICULTIES),
                        help="fixed difficulties to compare, comma-separated (default 1,3,6,9)")
    parser.add_argument("--solvers", default=",".join(PANEL), help="the solver panel, comma-separated names of "
                        f"proposer_solver_v0.SPEC.scripted (default {','.join(PANEL)})")
    parser.add_argument("--window", type=harness.count, default=4, help="episodes the adaptive controller averages "
                        "(of each mode, per mode; default 4)")
    parser.add_argument("--batch-size", type=harness.count, default=4, help="envs run side by side, and the episodes "
                        "between two updates of an adaptive proposer (default 4)")
    parser.add_argument("--seed", type=int, default=0, help="first env seed, and the seed of every policy (default 0)")
    harness.add_out(parser, "folder for learnability.png (default: no plot)")
    args = parser.parse_args(argv)
    episodes = 8 if args.quick else args.episodes
    window = args.window

    from llm_zoo import proposer_solver_v0
    from llm_zoo.envs.proposer_solver.scripted import MAX_DIFFICULTY, AdaptiveProposer, ScriptedProposer

    panel = [s.strip() for s in args.solvers.split(",") if s.strip()]
    known = [s for s in proposer_solver_v0.SPEC.scripted if s.startswith("solver")]
    unknown = [s for s in panel if s not in known]
    if not panel or unknown:
        parser.error(f"--solvers takes solver names of proposer_solver_v0.SPEC.scripted ({', '.join(known)}); "
                     f"got {unknown or args.solvers!r}")
    if max(args.difficulties) > MAX_DIFFICULTY:
        print(f"note: difficulties above {MAX_DIFFICULTY} give some invalid integer-mode tasks (stories too long)\n")

    seeds = list(range(args.seed, args.seed + episodes))
    adaptive = [("adaptive", AdaptiveProposer(window=window, seed=args.seed)),
                ("adaptive per mode", AdaptiveProposer(window=window, per_mode=True, seed=args.seed))]
    proposers = [(f"fixed d={d}", ScriptedProposer(d, seed=args.seed)) for d in args.difficulties] + adaptive
    # the proposers play side by side, one thread each: their time goes to waiting on sandboxed runs, and every
    # proposer has its own envs and policies, so its episodes are the same as when played alone
    with ThreadPoolExecutor(len(proposers)) as pool:
        results = list(pool.map(lambda p: run(*p, panel, seeds, args.batch_size, args.seed), proposers))
    print_tables(results, panel, adaptive)
    if args.out:
        out = Path(args.out)
        out.mkdir(parents=True, exist_ok=True)
        plot(results, out / "learnability.png")
        print(f"\nplot: {out / 'learnability.png'}")

    fixed = dict(zip(args.difficulties, results))
    best = max(fixed, key=lambda d: fixed[d].learnability)
    steady, per_mode = results[-2], results[-1]
    figures: dict[str, Any] = {
        "fixed_mean_learnability": round(fixed[best].learnability, 4),
        "fixed_best_difficulty": best,
        "fixed_mean_learnability_by_difficulty": {str(d): round(r.learnability, 4) for d, r in fixed.items()},
        "fixed_pass_rate_by_difficulty": {str(d): round(r.pass_rate, 4) for d, r in fixed.items()},
        "adaptive_mean_learnability": round(steady.learnability, 4),
        "adaptive_pass_rate": round(steady.pass_rate, 4),
        "adaptive_difficulty_mean": round(sum(steady.difficulties) / max(1, len(steady.difficulties)), 2),
        "adaptive_difficulty_final": adaptive[0][1].difficulty_of(),
        "adaptive_per_mode_mean_learnability": round(per_mode.learnability, 4),
        "adaptive_late_mean_learnability": round(steady.late_learnability, 4),
        "adaptive_per_mode_late_mean_learnability": round(per_mode.late_learnability, 4),
        "fixed_late_mean_learnability": round(fixed[best].late_learnability, 4),
        "invalid_rate": round(sum(r.invalid_rate * len(r.pass_rates) for r in results)
                              / max(1, sum(len(r.pass_rates) for r in results)), 4),
        "failed": sum(r.failed for r in results),
        "episodes": episodes,
        "solvers": panel,
        "window": window,
    }
    figures["seconds"] = round(time.perf_counter() - started, 2)
    return harness.emit(figures)


if __name__ == "__main__":
    main(sys.argv[1:])
