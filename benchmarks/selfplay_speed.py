"""Self-play speed: episodes/s of the trainer's step (rollout plus update) on Kuhn and Leduc, before and after.

``llm-zoo train kuhn_poker_v0`` and ``llm-zoo train leduc_poker_v0`` at their presets, each run for a
few steps by the trainer's own ``train()``, once with the package as it is and once with the package
as it was at ``--baseline`` (a commit of this repository, read with ``git archive``: the trainer
before the rollout memo and the update over distinct rows, docs/kuhn_selfplay.md section 14). The
two run in fresh processes, alternating in rounds, so that a busy neighbour slows both alike. A
step's seconds are the trainer's own ``perf/step_s`` (rollout, rewards, advantages, update, logging;
no evaluation, checkpoint or transcript: ``eval_every``, ``checkpoint_every`` and ``sample_every``
are 0, and ``unmask.steps`` 0 since its fit runs once after the last step); the first
``--warmup`` steps of each run are left out, and a side's figure is the median over its rounds'
steps. Episodes/s is the side's own preset's ``episodes_per_step`` over that median: where a preset's
batch changed (Leduc's: 256 hands a step at the baseline, 2048 now), each side runs its own, and the
table shows both.

    python -m benchmarks.selfplay_speed                   # 3 rounds: 40 Kuhn steps, 10 Leduc steps a run
    python -m benchmarks.selfplay_speed --quick           # 1 round of 4 steps of each: about a minute
    python -m benchmarks.selfplay_speed --games kuhn_poker_v0 --rounds 5

The last line printed is a JSON object: per game its ``episodes_per_s`` and ``episodes_per_step``
before and after, the ``ratio`` (after / before), the median ``step_s``, ``rollout_s`` and
``update_s`` of each side, and the ``baseline`` commit. The goal stated for the trainer: a ratio of at least 3 on both games.
"""

from __future__ import annotations

import io
import json
import os
import shutil
import statistics
import subprocess
import sys
import tarfile
import tempfile
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from benchmarks import _harness as harness

ROOT = Path(__file__).resolve().parents[1]
BASELINE = "e63d48f"
"""The trainer before the rollout memo (``rollout.MemoEnvs``) and the update over distinct rows."""
GAMES = ("kuhn_poker_v0", "leduc_poker_v0")
STEPS = {"kuhn_poker_v0": 40, "leduc_poker_v0": 10}
"""Steps a run, by game (Leduc's step is several times Kuhn's)."""
GOAL_RATIO = 3.0

# What each measured process runs: the preset's training for a few steps, its per-step seconds printed as JSON.
RUNNER = """
import json, sys
from pathlib import Path
from llm_zoo.trainers.grpo import make_config, train
env, steps, run_dir = sys.argv[1], int(sys.argv[2]), sys.argv[3]
config = make_config(env, {"steps": steps, "seed": 0, "run_dir": run_dir, "progress": False, "eval_every": 0,
                           "checkpoint_every": 0, "sample_every": 0, "unmask.steps": 0, "tensorboard": False})
train(config, overwrite=True)
rows = [json.loads(line) for line in (Path(run_dir) / "metrics.jsonl").read_text().splitlines()]
print(json.dumps({"episodes_per_step": config.episodes_per_step,
                  "step_s": [r["perf/step_s"] for r in rows], "rollout_s": [r["perf/rollout_s"] for r in rows],
                  "update_s": [r["perf/update_s"] for r in rows]}))
"""


def baseline_tree(commit: str, into: Path) -> Path:
    """Write the package as it was at ``commit`` under ``into`` (``git archive``); return the folder to import it from."""
    try:
        made = subprocess.run(["git", "-C", str(ROOT), "archive", "--format=tar", commit, "llm_zoo"],
                              capture_output=True, check=False)
    except FileNotFoundError:
        raise SystemExit("selfplay_speed: the baseline is read from the project's git history, and git is not "
                         "installed; install git, or run from a clone of the repository") from None
    if made.returncode != 0:
        raise SystemExit(f"selfplay_speed: git could not read commit {commit!r} of {ROOT} "
                         f"({made.stderr.decode(errors='replace').strip()[:300]}); run from a full clone "
                         "(not a shallow one), or name another commit with --baseline")
    with tarfile.open(fileobj=io.BytesIO(made.stdout)) as tar:
        tar.extractall(into, filter="data")
    return into


def measure(package_root: Path, game: str, steps: int, run_dir: Path) -> dict[str, Any]:
    """Train ``game`` for ``steps`` steps in a fresh process importing ``llm_zoo`` from ``package_root``."""
    env = {**os.environ, "PYTHONPATH": str(package_root)}
    done = subprocess.run([sys.executable, "-c", RUNNER, game, str(steps), str(run_dir)], env=env,
                          capture_output=True, text=True, check=False, cwd=run_dir.parent)
    if done.returncode != 0:
        raise RuntimeError(f"selfplay_speed: training {game} from {package_root} failed "
                           f"(exit {done.returncode}):\n{done.stderr[-2000:]}")
    figures = json.loads(done.stdout.strip().splitlines()[-1])
    shutil.rmtree(run_dir, ignore_errors=True)
    return figures


def summary(runs: Sequence[dict[str, Any]], warmup: int) -> dict[str, float]:
    """One side's figures over its runs: the median seconds of the steps after each run's first ``warmup``."""
    out = {key: statistics.median(v for run in runs for v in run[key][warmup:])
           for key in ("step_s", "rollout_s", "update_s")}
    out["episodes_per_s"] = runs[0]["episodes_per_step"] / out["step_s"]
    return out


def main(argv: Sequence[str] | None = None) -> dict[str, Any]:
    """Run the benchmark, print the table and the JSON line, and return the JSON's figures."""
    started = time.perf_counter()
    parser = harness.parser(__doc__, quick="1 round of 4 steps of each game (the test's setting)")
    parser.add_argument("--games", nargs="+", choices=GAMES, default=list(GAMES), help="the games to measure")
    parser.add_argument("--rounds", type=harness.count, default=3, help="alternating rounds of before and after")
    parser.add_argument("--steps", type=harness.count, default=None,
                        help="steps a run for every game (default: 40 for Kuhn, 10 for Leduc)")
    parser.add_argument("--warmup", type=int, default=2, help="steps at the start of each run left out")
    parser.add_argument("--baseline", default=BASELINE, help="the commit whose package is the 'before' side")
    harness.add_out(parser, "folder for selfplay_speed.md")
    args = parser.parse_args(argv)
    if args.quick:
        args.rounds, args.steps = 1, 4
    if args.warmup < 0:
        parser.error(f"--warmup must be >= 0, got {args.warmup}")
    if args.steps is not None and args.steps <= args.warmup:
        parser.error(f"--steps ({args.steps}) must be more than --warmup ({args.warmup})")

    work = Path(tempfile.mkdtemp(prefix="selfplay_speed_"))
    try:
        sides = {"before": baseline_tree(args.baseline, work / "before"), "after": ROOT}
        runs: dict[tuple[str, str], list[dict[str, Any]]] = {}
        for r in range(args.rounds):
            for game in args.games:
                for side, root in sides.items():  # side by side: before, then after, in every round
                    steps = args.steps or STEPS[game]
                    runs.setdefault((game, side), []).append(measure(root, game, steps, work / f"run_{side}_{r}"))
    finally:
        shutil.rmtree(work, ignore_errors=True)

    figures: dict[str, Any] = {"baseline": args.baseline, "rounds": args.rounds}
    rows = []
    for game in args.games:
        before, after = summary(runs[game, "before"], args.warmup), summary(runs[game, "after"], args.warmup)
        ratio = after["episodes_per_s"] / before["episodes_per_s"]
        hands = [runs[game, side][0]["episodes_per_step"] for side in ("before", "after")]  # each side's preset
        figures[game] = {"episodes_per_s": [round(before["episodes_per_s"], 1), round(after["episodes_per_s"], 1)],
                         "episodes_per_step": hands,
                         "ratio": round(ratio, 2),
                         **{key: [round(before[key], 4), round(after[key], 4)]
                            for key in ("step_s", "rollout_s", "update_s")}}
        rows.append([game, " / ".join(map(str, hands)) if hands[0] != hands[1] else hands[0],
                     *(f"{side['step_s'] * 1000:.0f} ({side['rollout_s'] * 1000:.0f} + {side['update_s'] * 1000:.0f})"
                       for side in (before, after)),
                     f"{before['episodes_per_s']:.0f}", f"{after['episodes_per_s']:.0f}", f"{ratio:.2f}x"])
    text = harness.table(["game", "episodes/step (before / after)", f"before ({args.baseline}): ms a step (rollout + update)",
                          "after: ms a step (rollout + update)", "before: episodes/s", "after: episodes/s",
                          "ratio"], rows)
    print(text)
    print(f"(median over {args.rounds} round(s) of each side, steps after the first {args.warmup} of each run; "
          f"goal: a ratio of at least {GOAL_RATIO:g} on every game)")
    if args.out:
        Path(args.out).mkdir(parents=True, exist_ok=True)
        (Path(args.out) / "selfplay_speed.md").write_text(text + "\n")
    figures["seconds"] = round(time.perf_counter() - started, 1)
    return harness.emit(figures)


if __name__ == "__main__":
    main()
