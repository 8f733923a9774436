"""Kuhn poker headline: every system on the same machine in one run, scored by one exact exploitability.

One row per system, all on two-player Kuhn poker (``kuhn_poker_v0``), every strategy read into
llm_zoo's tabular form and scored by :func:`llm_zoo.envs.kuhn_poker.theory.exploitability`:

* uniform random (the floor);
* CFR and CFR+ through OpenSpiel (:mod:`llm_zoo.trainers.baselines.cfr`) after 10, 100 and 1000
  iterations, with the wall-clock of those iterations; deterministic, so one run each;
* sb3-contrib MaskablePPO in self-play on the discrete view (:mod:`llm_zoo.trainers.baselines.ppo`),
  given as many learner decisions as the LLM runs get episodes; two rows: the final network, and
  the reach-weighted average of its strategies after each round (what CFR reports);
* the LLM trainer (:mod:`llm_zoo.trainers.grpo`, the built-in tiny model, self-play) with RAE, with
  GRPO and a baseline shared by both seats, and without a baseline (one model in both seats), and
  with one policy per seat (the main job's own setting): each
  run is :func:`kuhn_credit.run`, the credit-assignment benchmark's own runner, on the main job's
  config (``llm_zoo.trainers.presets.KUHN_POKER_V0`` over the trainer's defaults, read at run time).

Columns: final exploitability (mean ± half the range over seeds), episodes played (hands; CFR
counts full-tree iterations, ``it``, instead), wall-clock of the whole run, exact payoff against the
Nash equilibrium (both seats averaged), the cost to reach exploitability 0.1 and 0.05 (episodes or
iterations, and seconds, to the first evaluation at or below the threshold; "not reached" when no
seed got there; "k/n seeds" when only some did, averaged over those), and tokens (prompt +
generated). Cost seconds count training only: the trainer's ``perf/step_s``, PPO's ``learn`` calls,
CFR's iterations (iterations x seconds per iteration of its 1000-iteration run); evaluation is left
out. The LLM trainer evaluates every ``eval_every`` steps, so its costs are resolved to that grid.

It prints the table (Markdown), writes it with its notes to ``OUT/kuhn_headline.md`` and draws
exploitability against training seconds for every system into ``OUT/kuhn_headline.png``; the last
line is a JSON object: ``rows`` (per system: ``exploitability``, ``spread``, ``episodes``,
``iterations``, ``seconds``, ``payoff_vs_nash``, ``to_0.1`` and ``to_0.05`` as ``{"episodes",
"seconds", "seeds"}`` or null, ``prompt_tokens``, ``generated_tokens``), ``seeds``, ``systems`` (the
rows run: ``--systems``, all by default), ``budget`` and ``seconds``.

    python -m benchmarks.kuhn_headline            # the main job's budget, 3 seeds: hours on 2 CPU cores (below)
    python -m benchmarks.kuhn_headline --quick    # tiny budgets, 1 seed: about 15 s
    python -m benchmarks.kuhn_headline --systems random cfr per_seat   # the main job's row and the exact ones

The full run's time is almost all training: 4 LLM methods x 3 seeds x the main job's budget, two
runs at a time (one per core; ``--workers``), after MaskablePPO's 3 seeds, each given as many
decisions as an LLM run gets episodes. With the main job's budget of 2026-11-29 (1500 steps x 256
episodes, 8-9 min a run) it took 64 min in all on this project's 2-core CPU; the budget is now 2000 x
1024 (about 12 min a run), so the LLM runs alone take over an hour, and the whole run was not timed
since (``--systems random cfr per_seat``: 24.5 min). CFR (about 3 s) and random add well under a
minute. After each LLM run the script prints an estimate of the rest.
"""

from __future__ import annotations

import statistics
import sys
import tempfile
import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from benchmarks import _harness as harness

THRESHOLDS = (0.1, 0.05)
"""Exploitability levels whose cost (episodes and seconds to reach) the table reports."""
CFR_ITERATIONS = (10, 100, 1000)
"""Iteration counts of the CFR and CFR+ rows."""
CFR_GRID = (*range(1, 21), *range(25, 101, 5), *range(110, 1001, 10))
"""Iteration counts at which a second CFR run is scored, to find when it first reaches each threshold."""
LLM_METHODS = {
    "rae": "LLM trainer, RAE (one shared model)",
    "grpo_shared": "LLM trainer, GRPO (shared baseline)",
    "no_baseline": "LLM trainer, no baseline",
    "per_seat": "LLM trainer, per-seat policies (RAE; the main job)",
}
"""kuhn_credit's method -> row label."""
SYSTEMS = ("random", "cfr", "ppo", *LLM_METHODS)
"""What ``--systems`` can name: uniform random, the CFR and CFR+ rows, the MaskablePPO rows, each LLM method."""
QUICK_BUDGET: dict[str, Any] = {"steps": 2, "episodes_per_step": 8, "rollout_batch_size": 8, "eval_every": 1,
                                "model_hidden_size": 32}
"""Trainer overrides of ``--quick`` (a smoke run; PPO then gets its smallest round, 512 decisions)."""


@dataclass
class Run:
    """One training run of one system: its final score and its curve of (episodes, seconds, exploitability)."""

    exploitability: float
    payoff_vs_nash: float
    episodes: float
    seconds: float
    curve: list[tuple[float, float, float]] | None
    """None when the system's progress was not tracked; episodes here are iterations for CFR."""
    prompt_tokens: float | None = None
    generated_tokens: float | None = None


@dataclass
class Row:
    """A row of the table: one system, its runs over seeds."""

    key: str
    label: str
    runs: list[Run] = field(default_factory=list)
    unit: str = "episodes"
    """episodes, or iterations for CFR."""
    cap: float | None = None
    """Only count a threshold reached within this many iterations (the CFR rows share one run)."""
    failed: list[str] = field(default_factory=list)
    """Seeds whose run failed and is left out of the row, each with its error."""


def first_reach(curve: list[tuple[float, float, float]], threshold: float,
                cap: float | None = None) -> tuple[float, float] | None:
    """Return (episodes, seconds) at the first point at or below ``threshold`` (within ``cap``), or None."""
    for episodes, seconds, exploitability in curve:
        if cap is not None and episodes > cap:
            break
        if exploitability <= threshold:
            return episodes, seconds
    return None


# ---------------------------------------------------------------------------------------------------
# The systems
# ---------------------------------------------------------------------------------------------------


def random_row() -> Row:
    """Uniform random: half and half at every info set; no training."""
    from llm_zoo.envs.kuhn_poker import theory
    from llm_zoo.envs.kuhn_poker.evaluate import score_strategy

    score = score_strategy(theory.uniform_policy())
    run = Run(score["exploitability"], score["payoff_vs_nash"], 0, 0.0, [(0, 0.0, score["exploitability"])])
    return Row("random", "uniform random", [run])


def cfr_rows() -> list[Row]:
    """CFR and CFR+ after each of CFR_ITERATIONS; threshold costs from a second run scored on CFR_GRID.

    The seconds to a threshold are its iterations times the seconds per iteration of the
    1000-iteration run (each iteration walks the whole tree: a fixed cost).
    """
    from llm_zoo.envs.kuhn_poker.evaluate import score_strategy
    from llm_zoo.trainers.baselines import cfr

    rows = []
    for solver, name in (("cfr", "CFR"), ("cfr+", "CFR+")):
        results = cfr.solve(solver, list(CFR_ITERATIONS))
        # Scoring at every grid point costs more than the iterations themselves, so the grid run's clock
        # is not used: a CFR iteration is one full tree walk, a fixed cost, read from the longest clean run.
        per_iteration = results[-1].seconds / results[-1].iterations
        curve = [(r.iterations, r.iterations * per_iteration, r.exploitability)
                 for r in cfr.solve(solver, list(CFR_GRID))]
        for result in results:
            run = Run(result.exploitability, score_strategy(result.policy)["payoff_vs_nash"], result.iterations,
                      result.seconds, curve)
            rows.append(Row(f"{solver}_{result.iterations}", f"{name}, {result.iterations} iterations", [run],
                            unit="iterations", cap=result.iterations))
    return rows


def ppo_rows(timesteps: int, seeds: int) -> list[Row]:
    """MaskablePPO self-play, ``timesteps`` learner decisions per seed: the final network and the average."""
    from llm_zoo.envs.kuhn_poker.evaluate import score_strategy
    from llm_zoo.trainers.baselines import ppo

    final = Row("maskable_ppo", "MaskablePPO self-play, final network")
    average = Row("maskable_ppo_average", "MaskablePPO self-play, average of rounds")
    for seed in range(seeds):
        start = time.perf_counter()
        result = ppo.train_maskable_ppo(timesteps, seed=seed)
        seconds = time.perf_counter() - start
        curve = [(h["episodes"], h["seconds"], h["exploitability"]) for h in result.history]
        final.runs.append(Run(result.exploitability, score_strategy(result.policy)["payoff_vs_nash"],
                              result.episodes, seconds, curve))
        average.runs.append(Run(result.average_exploitability,
                                score_strategy(result.average_policy)["payoff_vs_nash"], result.episodes, seconds,
                                None))
        print(f"  maskable_ppo seed {seed}: exploitability {result.exploitability:.4f} "
              f"(average {result.average_exploitability:.4f}) in {seconds:.0f}s", file=sys.stderr, flush=True)
    return [final, average]


def llm_rows(budget: dict[str, Any], seeds: int, runs: Path, workers: int | None = None,
             methods: Sequence[str] = tuple(LLM_METHODS)) -> list[Row]:
    """The LLM trainer with each of LLM_METHODS, through kuhn_credit.run_all; costs read from each run's metrics.

    Runs go side by side, ``workers`` at a time (default one per CPU core), each in its own
    subprocess; finished runs with the same config already in ``runs`` are reused. A failed run is
    reported and left out of its row's runs; the row names it in ``failed`` (a row may have no runs left).
    """
    from benchmarks import kuhn_credit as credit  # its run_all trains one LLM method with one seed per run
    from llm_zoo.trainers.logging import read_metrics
    jobs = [(method, seed) for method in methods for seed in range(seeds)]
    if not jobs:
        return []
    workers = workers or credit.default_workers(len(jobs))
    started = time.perf_counter()
    print(f"  {len(jobs)} LLM runs, {workers} at a time, in {runs}", file=sys.stderr, flush=True)

    def report(result: dict[str, Any], done: int, total: int) -> None:
        how = "reused" if result.get("reused") else result.get("error") or f"in {result['seconds']:.0f}s"
        left = (time.perf_counter() - started) / done * (total - done)
        print(f"  [{done}/{total}] {result['method']} seed {result['seed']}: exploitability {result['final']:.4f}"
              f" ({how}; about {left / 60:.0f} min left)", file=sys.stderr, flush=True)

    results = credit.run_all(jobs, budget, runs, workers, on_done=report)
    rows = {method: Row(f"llm_{method}", LLM_METHODS[method]) for method in methods}
    for result in results:
        if "error" in result:
            print(f"  {result['method']} seed {result['seed']} failed and is left out: {result['error']}",
                  file=sys.stderr, flush=True)
            rows[result["method"]].failed.append(f"seed {result['seed']}: {str(result['error'])[:200]}")
            continue
        metrics = read_metrics(runs / f"{result['method']}-seed{result['seed']}")
        curve, elapsed = [], 0.0
        for m in metrics:
            elapsed += m.get("perf/step_s", 0.0)
            if "eval/exploitability" in m:
                curve.append((m["charts/episodes"], elapsed, m["eval/exploitability"]))
        rows[result["method"]].runs.append(Run(
            result["final"], result["payoff_vs_nash"], result["episodes"], result["seconds"], curve,
            sum(m.get("perf/prompt_tokens", 0.0) for m in metrics),
            sum(m.get("perf/completion_tokens", 0.0) for m in metrics)))
    return list(rows.values())  # a row whose every seed failed still says so


# ---------------------------------------------------------------------------------------------------
# The table, the plot, the JSON
# ---------------------------------------------------------------------------------------------------


def _seconds(x: float) -> str:
    return f"{x:.2g} s" if x < 1 else f"{x:.3g} s" if x < 100 else f"{x:,.0f} s"


def _count(x: float, unit: str) -> str:
    return f"{x:,.0f} it" if unit == "iterations" else f"{x:,.0f}"


def _tokens(x: float) -> str:
    return f"{x / 1e6:.2f}M" if x >= 1e6 else f"{x / 1e3:.1f}k" if x >= 1e3 else f"{x:.0f}"


def reach(row: Row, threshold: float) -> dict[str, float] | None:
    """Mean (episodes, seconds) to the threshold over the seeds that reached it, and how many did; None if none."""
    hits = [first_reach(r.curve, threshold, row.cap) for r in row.runs if r.curve is not None]
    hits = [h for h in hits if h is not None]
    if not hits:
        return None
    return {"episodes": statistics.mean(h[0] for h in hits), "seconds": statistics.mean(h[1] for h in hits),
            "seeds": len(hits)}


def figures(row: Row) -> dict[str, Any]:
    """The row's numbers, as the JSON line holds them."""
    finals = [r.exploitability for r in row.runs]
    mean = statistics.mean
    out: dict[str, Any] = {
        "label": row.label, "seeds": len(row.runs), "exploitability": mean(finals),
        "spread": (max(finals) - min(finals)) / 2,
        "episodes": None if row.unit == "iterations" else mean(r.episodes for r in row.runs),
        "iterations": mean(r.episodes for r in row.runs) if row.unit == "iterations" else None,
        "seconds": mean(r.seconds for r in row.runs), "payoff_vs_nash": mean(r.payoff_vs_nash for r in row.runs),
        "tracked": all(r.curve is not None for r in row.runs),
        "prompt_tokens": None, "generated_tokens": None,
    }
    for t in THRESHOLDS:
        out[f"to_{t:g}"] = reach(row, t)
    if row.runs[0].prompt_tokens is not None:
        out["prompt_tokens"] = mean(r.prompt_tokens or 0.0 for r in row.runs)
        out["generated_tokens"] = mean(r.generated_tokens or 0.0 for r in row.runs)
    return out


def _reach_cell(f: dict[str, Any], threshold: float, unit: str) -> str:
    hit = f[f"to_{threshold:g}"]
    if not f["tracked"]:
        return "not tracked"
    if hit is None:
        return "not reached"
    seeds = "" if hit["seeds"] == f["seeds"] else f" ({hit['seeds']}/{f['seeds']} seeds)"
    return f"{_count(hit['episodes'], unit)}, {_seconds(hit['seconds'])}{seeds}"


def markdown(rows: list[Row], table: dict[str, dict[str, Any]]) -> str:
    """Return the table as aligned Markdown (readable as printed text too)."""
    header = ["system", "exploitability (final)", "episodes", "wall-clock", "payoff vs nash",
              *(f"to {t:g}: episodes, seconds" for t in THRESHOLDS), "tokens (prompt + generated)"]
    lines = []
    for row in rows:
        f = table[row.key]
        spread = f" ± {f['spread']:.4f}" if f["seeds"] > 1 else ""
        if row.failed:  # say how many seeds the figure stands on
            spread += f" ({f['seeds']} of {f['seeds'] + len(row.failed)} seeds)"
        work = f["iterations"] if row.unit == "iterations" else f["episodes"]
        tokens = ("—" if f["prompt_tokens"] is None
                  else f"{_tokens(f['prompt_tokens'])} + {_tokens(f['generated_tokens'])}")
        lines.append([row.label, f"{f['exploitability']:.4f}{spread}", _count(work, row.unit),
                      _seconds(f["seconds"]), f"{f['payoff_vs_nash']:+.4f}",
                      *(_reach_cell(f, t, row.unit) for t in THRESHOLDS), tokens])
    return harness.table(header, lines)


def notes(seeds: int, budget: dict[str, Any], ppo_timesteps: int, quick: bool,
          systems: Sequence[str] = SYSTEMS) -> str:
    """The lines under the table: the budget and how to read the columns (of the ``systems`` that ran)."""
    ppo = (f"; MaskablePPO gets {ppo_timesteps:,} learner decisions per seed (rounded up to whole rounds of 512)"
           if "ppo" in systems else "")
    left_out = [s for s in SYSTEMS if s not in systems]
    return "\n".join([
        f"- Budget{' (--quick: a smoke run, not a result)' if quick else ''}: the LLM trainer runs "
        f"{budget['steps']} steps x {budget['episodes_per_step']} episodes ({budget['steps'] * budget['episodes_per_step']:,}"
        f" episodes) per seed, evaluated every {budget['eval_every'] or budget['steps']} steps{ppo}; {seeds} seed(s)"
        + ("; CFR is deterministic (one run)." if "cfr" in systems else "."),
        *([f"- Rows left out of this run (`--systems`): {', '.join(left_out)}."] if left_out else []),
        "- Exploitability is exact (0 at a Nash equilibrium; uniform random is 0.4583); ± is half the range over "
        "seeds. Payoff vs nash is the exact expected chips per hand against the Nash equilibrium, both seats "
        "averaged (at best 0).",
        "- An LLM episode is one hand between the two seats' policies (one shared model, or one model per seat "
        "in the per-seat row, which is the main job's setting)"
        + ("; a PPO episode is one hand in which the learner plays one seat against a snapshot of itself"
           if "ppo" in systems else "")
        + (". CFR counts iterations (`it`): each walks the whole game tree for both players." if "cfr" in systems
           else "."),
        "- Cost columns: episodes (or iterations) and training seconds to the first evaluation at or below the "
        "threshold, averaged over the seeds that got there; evaluation time is not counted"
        + (" (CFR: iterations x its seconds per iteration)." if "cfr" in systems else "."),
    ])


def plot(rows: list[Row], path: Path) -> None:
    """Draw exploitability against training seconds, every system on one log-log chart."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(8, 4.5))
    colour = 0
    for row in rows:
        if row.key == "random":
            ax.axhline(row.runs[0].exploitability, color="black", lw=0.8, label=row.label)
            continue
        if row.unit == "iterations" and row.cap != max(CFR_ITERATIONS):
            continue  # the CFR rows share one curve
        runs = [r for r in row.runs if r.curve]
        for i, r in enumerate(runs):
            xs = [max(s, 1e-4) for _, s, _ in r.curve]
            ax.plot(xs, [e for _, _, e in r.curve], color=f"C{colour}", alpha=0.8,
                    marker="." if len(xs) < 30 else None,  # a run evaluated once is one point
                    label=row.label.split(",")[0] if row.unit == "iterations" else row.label if i == 0 else None)
        colour += bool(runs)
    for t in THRESHOLDS:
        ax.axhline(t, color="grey", ls="--", lw=0.8)
    ax.set_xscale("log")
    ax.set_yscale("log")
    ax.set_xlabel("training seconds (evaluation excluded)")
    ax.set_ylabel("exploitability (exact)")
    ax.set_title("Kuhn poker: every system, same machine, same run")
    ax.legend(fontsize=7, loc="lower left")
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)


def main(argv: list[str] | None = None) -> dict[str, Any]:
    """Run every system, print the table and the JSON line, write the Markdown and the plot; return the figures."""
    started = time.perf_counter()
    parser = harness.parser(__doc__, quick="tiny budgets, one seed (about 15 s)")
    harness.add_seeds(parser, default=None, help="seeds per trained system (default 3; --quick: 1)")
    parser.add_argument("--steps", type=harness.count, default=None,
                        help="LLM training steps (default: the main job's)")
    harness.add_out(parser, "folder for the runs, kuhn_headline.md and kuhn_headline.png (default: a temporary "
                    "folder)")
    harness.add_runs_dir(parser, "folder of the LLM runs (default: OUT); finished runs with the same config found "
                         "there are reused, e.g. kuhn_credit's with the same --runs-dir")
    harness.add_workers(parser, default=None, help="LLM runs at once (default: one per CPU core)")
    parser.add_argument("--systems", nargs="+", default=list(SYSTEMS), choices=SYSTEMS, metavar="SYSTEM",
                        help=f"the rows to run (default: all): {', '.join(SYSTEMS)}; e.g. `--systems random cfr "
                        "per_seat` re-measures the main job's row beside the exact baselines without PPO's and the "
                        "other LLM methods' runs")
    args = parser.parse_args(argv)
    seeds = args.seeds if args.seeds is not None else 1 if args.quick else 3
    from llm_zoo.trainers.grpo import make_config

    overrides = dict(QUICK_BUDGET) if args.quick else {}
    if args.steps:
        overrides["steps"] = args.steps
        overrides.setdefault("eval_every", max(1, args.steps // 10))
    config = make_config("kuhn_poker_v0", overrides)
    budget = {"steps": config.steps, "episodes_per_step": config.episodes_per_step, "eval_every": config.eval_every}
    out = Path(args.out) if args.out else Path(tempfile.mkdtemp(prefix="kuhn_headline_"))
    out.mkdir(parents=True, exist_ok=True)
    ppo_timesteps = config.steps * config.episodes_per_step

    runs = Path(args.runs_dir) if args.runs_dir else out
    systems = [s for s in SYSTEMS if s in args.systems]  # in the table's order, each once
    rows = [*([random_row()] if "random" in systems else []), *(cfr_rows() if "cfr" in systems else []),
            *(ppo_rows(ppo_timesteps, seeds) if "ppo" in systems else []),
            *llm_rows(overrides, seeds, runs, args.workers, [m for m in LLM_METHODS if m in systems])]
    failed = [f"{row.label}, {why}" for row in rows for why in row.failed]
    rows = [row for row in rows if row.runs]
    table = {row.key: figures(row) for row in rows}
    text = markdown(rows, table)
    caption = (f"Kuhn poker, every system on the same machine in one run "
               f"({'--quick' if args.quick else 'full'} setting, {seeds} seed(s))")
    print(f"\n{caption}\n\n{text}\n")
    below = notes(seeds, budget, ppo_timesteps, args.quick, systems)
    if failed:
        below += "\n- Runs that failed and are left out of their row: " + "; ".join(failed) + "."
    print(below)
    (out / "kuhn_headline.md").write_text(f"{caption}.\n\n{text}\n\n{below}\n")
    plot(rows, out / "kuhn_headline.png")
    print(f"\ntable: {out / 'kuhn_headline.md'}\nplot: {out / 'kuhn_headline.png'}")
    line = {"rows": table, "failed": failed, "seeds": seeds, "systems": systems, "budget": {**budget, "ppo_timesteps": ppo_timesteps},
            "quick": args.quick, "seconds": round(time.perf_counter() - started, 2)}
    return harness.emit(line)


if __name__ == "__main__":
    main()
