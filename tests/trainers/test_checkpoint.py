"""Checkpoints and --resume: the newest run of an env is found, and nothing to resume is refused, never started afresh."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from llm_zoo.trainers.checkpoint import latest_run, resume_dir, write_atomic

ROOT = Path(__file__).resolve().parents[2]
TINY = {"steps": 2, "episodes_per_step": 8, "rollout_batch_size": 8, "model_hidden_size": 32, "eval_every": 0,
        "progress": False, "tensorboard": False, "threads": 1, "sample_every": 0, "policies": {},
        "checkpoint_every": 1, "unmask.steps": 0}


def _fake_run(root: Path, name: str, step: int | None) -> Path:
    run = root / name
    (run / "checkpoints").mkdir(parents=True)
    if step is not None:
        (run / "checkpoints" / f"step_{step:06d}").mkdir()
        (run / "checkpoints" / f"step_{step:06d}" / "state.json").write_text("{}")
        write_atomic(run / "checkpoints" / "latest", f"step_{step:06d}")
    return run


def test_latest_run_is_the_newest_run_of_the_env_with_a_checkpoint(tmp_path):
    _fake_run(tmp_path, "kuhn_poker_v0-20260101-000000", 4)
    newest = _fake_run(tmp_path, "kuhn_poker_v0-20260102-000000", 2)
    _fake_run(tmp_path, "kuhn_poker_v0-20260103-000000", None)  # killed before its first checkpoint
    _fake_run(tmp_path, "user_sim_v0-20260104-000000", 1)  # another env
    assert latest_run("kuhn_poker_v0", tmp_path) == newest
    assert resume_dir("kuhn_poker_v0", "", tmp_path) == newest
    assert latest_run("proposer_solver_v0", tmp_path) is None
    assert latest_run("kuhn_poker_v0", tmp_path / "missing") is None


def test_nothing_to_resume_is_refused_with_how_to_name_a_run(tmp_path):
    with pytest.raises(FileNotFoundError, match=r"no run of kuhn_poker_v0 with a checkpoint under .*--run-dir"):
        resume_dir("kuhn_poker_v0", "", tmp_path)
    empty = _fake_run(tmp_path, "mine", None)
    with pytest.raises(FileNotFoundError, match="holds no complete checkpoint.*drop --resume"):
        resume_dir("kuhn_poker_v0", str(empty), tmp_path)


def _train(cwd: Path, *extra: str) -> subprocess.CompletedProcess:
    args = [sys.executable, "-m", "llm_zoo", "train", "kuhn_poker_v0"]
    for key, value in TINY.items():
        args += ["--set", f"{key}={json.dumps(value)}"]
    env = {**os.environ, "PYTHONPATH": str(ROOT), "OMP_NUM_THREADS": "1"}
    return subprocess.run([*args, *extra], cwd=cwd, env=env, capture_output=True, text=True, timeout=300)


def test_cli_resume_without_a_run_dir_continues_the_newest_run_or_refuses(tmp_path):
    refused = _train(tmp_path, "--resume")
    assert refused.returncode == 2, refused.stderr[-2000:]
    assert "no run of kuhn_poker_v0" in refused.stderr and "--run-dir" in refused.stderr
    assert not (tmp_path / "runs").exists()  # nothing was started

    fresh = _train(tmp_path)
    assert fresh.returncode == 0, fresh.stderr[-2000:]
    (run,) = (tmp_path / "runs").iterdir()
    assert (run / "checkpoints" / "step_000002").is_dir()
    resumed = _train(tmp_path, "--resume", "--set", "steps=3")
    assert resumed.returncode == 0, resumed.stderr[-2000:]
    assert [p.name for p in (tmp_path / "runs").iterdir()] == [run.name]  # the same run went on
    steps = [json.loads(line)["step"] for line in (run / "metrics.jsonl").read_text().splitlines()]
    assert steps == [1, 2, 3]
