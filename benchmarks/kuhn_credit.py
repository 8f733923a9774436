"""Credit assignment on Kuhn poker: RAE vs GRPO with a shared baseline vs no baseline vs per-seat policies.

Every method trains the built-in tiny model by self-play with the same budget (steps x episodes per
step) and the same seeds; the exact exploitability of each model's strategy is read from its
log-probs every ``eval_every`` steps. Prints a table of the final exploitability (mean ± spread over
seeds), draws exploitability against episodes, and ends with a JSON line.

    python -m benchmarks.kuhn_credit                 # the full comparison (3 seeds), runs side by side on every core
    python -m benchmarks.kuhn_credit --quick         # seconds: a smoke run of every method
    python -m benchmarks.kuhn_credit --workers 1     # one run at a time
    python -m benchmarks.kuhn_credit --runs-dir DIR  # keep the runs in DIR; a run already finished there is reused

Each run is its own subprocess (``--workers`` at once, default one per CPU core, each on the
trainer's one torch thread), so a run that crashes is reported as failed and the others go on. A
finished run leaves ``result.json`` in its folder with its resolved config; a later invocation with
the same ``--runs-dir`` folder reuses every run whose config is unchanged, so an interrupted benchmark
resumes, and ``kuhn_headline.py`` and this script can share their runs (``llm-zoo bench`` does so).
With several workers the runs share the machine, so each run's wall-clock is longer than alone.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from benchmarks import _harness as harness

ROOT = Path(__file__).resolve().parents[1]
"""The checkout: its docs/ folder, and where a run's subprocess starts."""
SHARED: dict[str, str] = {}
"""``policies`` for one model in both seats (every role gets the policy "main")."""
METHODS: dict[str, dict[str, object]] = {
    "rae": {"algorithm": "rae", "policies": SHARED},
    # one GRPO group per deal holds both seats' returns (keyed by role, which both seats share): a
    # baseline shared by the two seats
    "grpo_shared": {"algorithm": "grpo", "group_size": 4, "baseline_key": "role", "policies": SHARED},
    "no_baseline": {"algorithm": "none", "policies": SHARED},
    # the main job's own setting
    "per_seat": {"algorithm": "rae", "policies": {"player_0": "seat_0", "player_1": "seat_1"}},
}
"""Each method's overrides of the main job's config. The main job plays one model per seat; the
first three methods put one shared model in both seats, so that they differ from each other in the
baseline only."""


def run_config(method: str, seed: int, budget: dict[str, object], out: Path) -> Any:
    """Return the trainer config of one run: the main job's, the budget's overrides, the method's, the seed."""
    from llm_zoo.trainers.grpo import make_config

    return make_config("kuhn_poker_v0", {**budget, **METHODS[method], "seed": seed,
                                         "run_dir": str(out / f"{method}-seed{seed}"), "progress": False,
                                         "tensorboard": False, "checkpoint_every": 0})


def _fingerprint(config: Any) -> dict[str, object]:
    """The parts of a config that decide a run's result (not where it is written)."""
    from dataclasses import asdict

    return json.loads(json.dumps({k: v for k, v in asdict(config).items() if k != "run_dir"}, default=str))


def run(method: str, seed: int, budget: dict[str, object], out: Path) -> dict[str, object]:
    """Train one method with one seed in this process; return its exploitability curve, wall-clock and cost.

    The result is also written to ``OUT/METHOD-seedSEED/result.json``, with the run's config.
    """
    from llm_zoo.trainers.grpo import train
    from llm_zoo.trainers.logging import read_metrics

    config = run_config(method, seed, budget, out)
    run_dir = Path(config.run_dir)
    start = time.perf_counter()
    final = train(config, overwrite=True)  # a run whose fingerprint no longer matches is trained anew
    seconds = time.perf_counter() - start
    rows = read_metrics(run_dir)
    curve = [(r["charts/episodes"], r["eval/exploitability"]) for r in rows if "eval/exploitability" in r]
    tokens = sum(r.get("perf/prompt_tokens", 0) + r.get("perf/completion_tokens", 0) for r in rows)
    result = {"method": method, "seed": seed, "final": final["exploitability"], "curve": curve, "seconds": seconds,
              "episodes": rows[-1]["charts/episodes"], "tokens": tokens,
              "payoff_vs_nash": final["payoff_vs_nash"], "other_mass": final["other_mass_mean"]}
    (run_dir / "result.json").write_text(json.dumps({"config": _fingerprint(config), "result": result}))
    return result


def cached(method: str, seed: int, budget: dict[str, object], out: Path) -> dict[str, object] | None:
    """Return the result of a finished run in ``out`` with exactly this config, or None."""
    config = run_config(method, seed, budget, out)
    path = Path(config.run_dir) / "result.json"
    try:
        saved = json.loads(path.read_text())
    except (OSError, ValueError):
        return None
    return saved["result"] if saved.get("config") == _fingerprint(config) else None


def run_all(jobs: Sequence[tuple[str, int]], budget: dict[str, object], out: Path, workers: int = 1,
            on_done: Any = None) -> list[dict[str, object]]:
    """Run (method, seed) jobs, ``workers`` subprocesses at a time; return their results in the jobs' order.

    A run already finished in ``out`` with the same config is reused. A run whose subprocess fails
    gives a result with ``"error"`` (its last output lines) and ``final`` NaN; the others go on.
    ``on_done(result, done, total)`` is called as each run ends.
    """
    if workers < 1:
        raise ValueError(f"workers must be >= 1; got {workers!r}")
    out.mkdir(parents=True, exist_ok=True)
    results: dict[int, dict[str, object]] = {}
    pending = []
    for index, (method, seed) in enumerate(jobs):
        if (hit := cached(method, seed, budget, out)) is not None:
            results[index] = {**hit, "reused": True}
        else:
            pending.append(index)

    def finish(index: int, result: dict[str, object]) -> None:
        results[index] = result
        if on_done is not None:
            on_done(result, len(results), len(jobs))

    if on_done is not None:  # the reused runs first, counted as done
        for done, index in enumerate(sorted(results), start=1):
            on_done(results[index], done, len(jobs))
    running: dict[int, tuple[subprocess.Popen, Path]] = {}
    while pending or running:
        while pending and len(running) < workers:
            index = pending.pop(0)
            method, seed = jobs[index]
            log = out / f"{method}-seed{seed}.log"
            argv = [sys.executable, "-m", "benchmarks.kuhn_credit", "--one", method, str(seed), "--budget",
                    json.dumps(budget), "--runs-dir", str(out.resolve())]
            with log.open("w") as f:  # from the checkout's root, where the benchmarks package is
                running[index] = (subprocess.Popen(argv, cwd=ROOT, stdout=f, stderr=subprocess.STDOUT), log)
        time.sleep(0.5)
        for index, (proc, log) in list(running.items()):
            if proc.poll() is None:
                continue
            del running[index]
            method, seed = jobs[index]
            result = cached(method, seed, budget, out) if proc.returncode == 0 else None
            if result is None:
                tail = log.read_text(errors="replace").strip().splitlines()[-5:]
                result = {"method": method, "seed": seed, "final": math.nan, "curve": [], "seconds": math.nan,
                          "episodes": math.nan, "tokens": math.nan, "payoff_vs_nash": math.nan,
                          "other_mass": math.nan, "error": f"exit {proc.returncode}: " + " | ".join(tail)}
            finish(index, result)
    return [results[i] for i in range(len(jobs))]


def default_workers(n_jobs: int) -> int:
    """One run per CPU core (each trains on the trainer's single torch thread), at most one per job."""
    return max(1, min(n_jobs, os.cpu_count() or 1))


def plot(results: list[dict[str, object]], path: Path) -> None:
    """Draw exploitability against episodes, one line per run, one colour per method."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(7, 4))
    colours = dict(zip(METHODS, ("C0", "C1", "C2", "C3")))
    for r in results:
        xs, ys = zip(*r["curve"]) if r["curve"] else ((), ())
        ax.plot(xs, ys, color=colours[r["method"]], alpha=0.8,
                label=r["method"] if r["seed"] == min(x["seed"] for x in results) else None)
    ax.axhline(0.05, color="grey", ls="--", lw=0.8)
    ax.set_yscale("log")
    ax.set_xlabel("episodes")
    ax.set_ylabel("exploitability (exact)")
    ax.set_title("Kuhn poker self-play: credit assignment, same budget")
    ax.legend()
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)


def main(argv: list[str] | None = None) -> dict[str, object]:
    started = time.perf_counter()  # the JSON line's wall-clock "seconds"
    parser = harness.parser(__doc__, quick="a smoke run: tiny budget, one seed")
    harness.add_seeds(parser, default=3, help="seeds per method (default 3)")
    parser.add_argument("--steps", type=harness.count, default=None,
                        help="training steps per run (default: the main job's)")
    parser.add_argument("--methods", nargs="*", default=list(METHODS), choices=list(METHODS))
    harness.add_out(parser, "folder for the table's files and the plot (default: a temp folder; the plot also goes "
                    "to docs/kuhn_credit.png)")
    harness.add_runs_dir(parser, "folder of the runs (default: OUT); finished runs with the same config found there "
                         "are reused")
    harness.add_workers(parser, default=None, help="runs at once (default: one per CPU core)")
    parser.add_argument("--one", nargs=2, metavar=("METHOD", "SEED"), help=argparse.SUPPRESS)
    parser.add_argument("--budget", default=None, help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.one:  # a worker of run_all: one run, its result left in its folder
        method, seed = args.one
        run(method, int(seed), json.loads(args.budget or "{}"), Path(args.runs_dir))
        return {}
    budget: dict[str, object] = {}
    if args.quick:
        budget = {"steps": 2, "episodes_per_step": 8, "rollout_batch_size": 8, "eval_every": 1,
                  "model_hidden_size": 32}
        args.seeds = 1
    if args.steps:
        budget["steps"] = args.steps
        budget.setdefault("eval_every", max(1, args.steps // 10))
    out = Path(args.out) if args.out else Path(tempfile.mkdtemp(prefix="kuhn_credit_"))
    out.mkdir(parents=True, exist_ok=True)
    runs = Path(args.runs_dir) if args.runs_dir else out
    jobs = [(method, seed) for method in args.methods for seed in range(args.seeds)]
    workers = args.workers or default_workers(len(jobs))
    print(f"{len(jobs)} runs, {workers} at a time; runs in {runs}", file=sys.stderr, flush=True)

    def report(r: dict[str, object], done: int, total: int) -> None:
        how = "reused" if r.get("reused") else r.get("error") or f"in {r['seconds']:.0f}s"
        print(f"  [{done}/{total}] {r['method']:12s} seed {r['seed']}: exploitability {r['final']:.4f} ({how})",
              file=sys.stderr, flush=True)

    results = run_all(jobs, budget, runs, workers, on_done=report)
    finished = [r for r in results if "error" not in r]
    if not finished:
        raise SystemExit("every run failed; see the logs in " + str(runs))
    summary = {}
    print(f"\nKuhn poker, same budget per method ({finished[0]['episodes']} episodes, {args.seeds} seed(s), "
          f"{workers} run(s) at a time)\n")
    print(f"{'method':14s} {'final exploitability':>24s} {'payoff vs nash':>15s} {'off-legal mass':>15s} "
          f"{'s/run':>7s} {'failed':>7s}")
    for method in args.methods:
        rs = [r for r in finished if r["method"] == method]
        failed = sum(1 for r in results if r["method"] == method and "error" in r)
        if not rs:
            summary[method] = None
            print(f"{method:14s} {'every run failed':>24s} {'':>15s} {'':>15s} {'':>7s} {failed:>7d}")
            continue
        finals = [r["final"] for r in rs]
        mean = statistics.mean(finals)
        spread = (max(finals) - min(finals)) / 2
        summary[method] = mean
        print(f"{method:14s} {mean:>15.4f} ± {spread:<6.4f} {statistics.mean(r['payoff_vs_nash'] for r in rs):>15.4f} "
              f"{statistics.mean(r['other_mass'] for r in rs):>15.4f} {statistics.mean(r['seconds'] for r in rs):>7.0f} "
              f"{failed:>7d}")
    for r in results:
        if "error" in r:
            print(f"failed: {r['method']} seed {r['seed']}: {r['error']}")
    figure = out / "kuhn_credit.png"
    plot(finished, figure)
    if not args.quick:
        docs = ROOT / "docs"
        docs.mkdir(exist_ok=True)
        plot(finished, docs / "kuhn_credit.png")
    print(f"\nplot: {figure}")
    (out / "results.json").write_text(json.dumps(results))
    line = {**summary, "episodes": finished[0]["episodes"], "seeds": args.seeds, "workers": workers,
            "failed_runs": len(results) - len(finished)}
    line["seconds"] = round(time.perf_counter() - started, 2)
    return harness.emit(line)


if __name__ == "__main__":
    main()
