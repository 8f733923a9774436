"""Training wiring: ``llm-zoo train proposer_solver_v0 --set algorithm=hgrpo`` runs, and hgrpo gets the env's groups."""

from __future__ import annotations

import json
import math
import subprocess
import sys

import pytest

pytest.importorskip("torch")
pytest.importorskip("transformers")

from llm_zoo.envs.proposer_solver.scripted import ScriptedProposer  # noqa: E402
from llm_zoo.trainers import advantages, grpo  # noqa: E402
from llm_zoo.trainers.logging import read_metrics  # noqa: E402

pytestmark = pytest.mark.bwrap
TINY = {"steps": 1, "episodes_per_step": 2, "group_size": 2, "rollout_batch_size": 2, "max_new_tokens": 8, "model_hidden_size": 32,
        "progress": False, "tensorboard": False, "threads": 1}
SOLVERS = ("solver_0", "solver_1", "solver_2", "solver_3")


def test_cli_train_with_hgrpo_runs_end_to_end(tmp_path):
    sets = [arg for key, value in TINY.items() for arg in ("--set", f"{key}={str(value).lower()}")]
    # the preset's warm start, at its smallest: SFT on four of the mixed-difficulty scripted proposer's tasks
    warm = "sft={teachers: {proposer: proposer_mixed}, episodes: 4, epochs: 1, batch_size: 2}"
    command = [sys.executable, "-m", "llm_zoo.cli", "train", "proposer_solver_v0", "--set", "algorithm=hgrpo", *sets,
               "--set", warm, "--set", "eval_every=0", "--run-dir", str(tmp_path)]
    done = subprocess.run(command, capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr[-3000:]
    rows = read_metrics(tmp_path)
    assert len(rows) == 1 and math.isfinite(rows[0]["losses/loss/main"]) and rows[0]["losses/tokens/main"] > 0
    assert rows[0]["charts/failed_episodes"] == 0.0
    config = json.loads((tmp_path / "config.json").read_text())
    assert config["algorithm"] == "hgrpo" and config["env"] == "proposer_solver_v0"
    assert config["init"] == "sft" and (tmp_path / "sft" / "summary.json").exists()
    assert config["learn"] == ["proposer"] and config["policies"]["solver_3"] == "scripted:solver_strong"
    evaluation = json.loads((tmp_path / "eval.json").read_text())
    assert evaluation["headline"] == "learnability" and evaluation["episodes"] == 16


def test_hgrpo_compares_solvers_of_one_problem_and_proposers_of_one_topic(tmp_path, monkeypatch):
    """A scripted proposer poses valid tasks, so the tiny model's solvers answer and are grouped by problem."""
    seen = {}
    collect, hgrpo = grpo.collect, advantages.hgrpo

    def collect_with_a_scripted_proposer(env, assignments, seeds, **kwargs):
        proposer = ScriptedProposer(1, seed=0)
        seen["episodes"] = collect(env, [{**m, "proposer": proposer} for m in assignments], seeds, **kwargs)
        return seen["episodes"]

    def spy(rewards, groups):
        seen["rewards"], seen["groups"] = list(rewards), list(groups)
        return hgrpo(rewards, groups)

    monkeypatch.setattr(grpo, "collect", collect_with_a_scripted_proposer)
    monkeypatch.setattr(advantages, "hgrpo", spy)
    # both roles learn, from fresh weights (the preset trains the proposer alone, against scripted solvers)
    config = grpo.make_config("proposer_solver_v0", {**TINY, "run_dir": str(tmp_path), "init": "", "policies": {},
                                                     "learn": [], "eval_every": 0,
                                                     "env_kwargs": {"max_retries": 0, "modes": ["deduction"]}})
    assert config.algorithm == "hgrpo"  # the env's default
    grpo.train(config)

    episodes = seen["episodes"]
    assert len(episodes) == 2 and episodes[0].seed == episodes[1].seed
    expected = [f"{e.infos[a]['group']}/{e.roles[a]}" for e in episodes for a in sorted(e.roles)]
    assert seen["groups"] == expected
    assert seen["rewards"] == [e.returns[a] for e in episodes for a in sorted(e.roles)]
    for e in episodes:
        assert e.infos["proposer"]["valid"] and any(t.completion_ids for t in e.turns if t.role == "solver")
        assert {e.infos[s]["group"] for s in SOLVERS} == {e.infos["proposer"]["problem_id"]}
    assert episodes[0].infos["proposer"]["group"] == episodes[1].infos["proposer"]["group"] == episodes[0].infos["proposer"]["topic"]
    row = read_metrics(tmp_path)[0]
    assert math.isfinite(row["losses/loss/main"]) and row["losses/tokens/main"] > 0
