"""Credit assignment on Kuhn poker: RAE vs GRPO with a shared baseline vs no baseline vs per-seat policies.

Every method trains the built-in tiny model by self-play with the same budget (steps x episodes per
step) and the same seeds; the exact exploitability of each model's strategy is read from its
log-probs every ``eval_every`` steps. Prints a table of the final exploitability (mean ± spread over
seeds), draws exploitability against episodes, and ends with a JSON line.

    python benchmarks/kuhn_credit.py            # the full comparison (3 seeds)
    python benchmarks/kuhn_credit.py --quick    # seconds: a smoke run of every method
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import tempfile
import time
from pathlib import Path

METHODS: dict[str, dict[str, object]] = {
    "rae": {"algorithm": "rae"},
    # one GRPO group per deal holds both seats' returns: a baseline shared by the two seats
    "grpo_shared": {"algorithm": "grpo", "group_size": 4},
    "no_baseline": {"algorithm": "none"},
    "per_seat": {"algorithm": "rae", "policies": {"player_0": "seat_0", "player_1": "seat_1"}},
}


def run(method: str, seed: int, budget: dict[str, object], out: Path) -> dict[str, object]:
    """Train one method with one seed; return its exploitability curve, wall-clock and cost."""
    from llm_zoo.trainers.grpo import make_config, train
    from llm_zoo.trainers.logging import read_metrics

    run_dir = out / f"{method}-seed{seed}"
    config = make_config("kuhn_poker_v0", {**budget, **METHODS[method], "seed": seed, "run_dir": str(run_dir),
                                            "progress": False, "tensorboard": False, "checkpoint_every": 0})
    start = time.perf_counter()
    final = train(config)
    seconds = time.perf_counter() - start
    rows = read_metrics(run_dir)
    curve = [(r["charts/episodes"], r["eval/exploitability"]) for r in rows if "eval/exploitability" in r]
    tokens = sum(r.get("perf/prompt_tokens", 0) + r.get("perf/completion_tokens", 0) for r in rows)
    return {"method": method, "seed": seed, "final": final["exploitability"], "curve": curve, "seconds": seconds,
            "episodes": rows[-1]["charts/episodes"], "tokens": tokens,
            "payoff_vs_nash": final["payoff_vs_nash"], "other_mass": final["other_mass_mean"]}


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
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="a smoke run: tiny budget, one seed")
    parser.add_argument("--seeds", type=int, default=3, help="seeds per method (default 3)")
    parser.add_argument("--steps", type=int, default=None, help="training steps per run (default: the main job's)")
    parser.add_argument("--methods", nargs="*", default=list(METHODS), choices=list(METHODS))
    parser.add_argument("--out", default=None, help="folder for runs and the plot (default: a temp folder; "
                        "the plot also goes to docs/kuhn_credit.png)")
    args = parser.parse_args(argv)
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
    results = []
    for method in args.methods:
        for seed in range(args.seeds):
            r = run(method, seed, budget, out)
            results.append(r)
            print(f"  {method:12s} seed {seed}: exploitability {r['final']:.4f} in {r['seconds']:.0f}s",
                  file=sys.stderr, flush=True)
    summary = {}
    print(f"\nKuhn poker, same budget per method ({results[0]['episodes']} episodes, {args.seeds} seed(s))\n")
    print(f"{'method':14s} {'final exploitability':>24s} {'payoff vs nash':>15s} {'off-legal mass':>15s} {'s/run':>7s}")
    for method in args.methods:
        rs = [r for r in results if r["method"] == method]
        finals = [r["final"] for r in rs]
        mean = statistics.mean(finals)
        spread = (max(finals) - min(finals)) / 2
        summary[method] = mean
        print(f"{method:14s} {mean:>15.4f} ± {spread:<6.4f} {statistics.mean(r['payoff_vs_nash'] for r in rs):>15.4f} "
              f"{statistics.mean(r['other_mass'] for r in rs):>15.4f} {statistics.mean(r['seconds'] for r in rs):>7.0f}")
    figure = out / "kuhn_credit.png"
    plot(results, figure)
    if not args.quick:
        docs = Path(__file__).resolve().parents[1] / "docs"
        docs.mkdir(exist_ok=True)
        plot(results, docs / "kuhn_credit.png")
    print(f"\nplot: {figure}")
    (out / "results.json").write_text(json.dumps(results))
    line = {**summary, "episodes": results[0]["episodes"], "seeds": args.seeds}
    line["seconds"] = round(time.perf_counter() - started, 2)
    print(json.dumps(line))
    return line


if __name__ == "__main__":
    main()
