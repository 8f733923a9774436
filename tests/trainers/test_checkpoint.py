"""Checkpoints and --resume: the record round-trips (with or without a learner behind it, in the old layout too), the
newest run of an env is found, and nothing to resume is refused, never started afresh."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from llm_zoo.trainers.checkpoint import (
    Checkpoint,
    CheckpointError,
    PolicyCheckpoint,
    latest_run,
    load_checkpoint,
    resume_dir,
    save_checkpoint,
    write_atomic,
)

torch = pytest.importorskip("torch")
pytest.importorskip("transformers")

from llm_zoo.trainers.advantages import RAEState  # noqa: E402
from llm_zoo.trainers.curriculum import CurriculumState  # noqa: E402

ROOT = Path(__file__).resolve().parents[2]
TINY = {"steps": 2, "episodes_per_step": 8, "rollout_batch_size": 8, "model_hidden_size": 32, "eval_every": 0,
        "progress": False, "tensorboard": False, "threads": 1, "sample_every": 0, "policies": {},
        "checkpoint_every": 1, "unmask.steps": 0}


def _policy(seed: int, *, optimizer: bool = True, extras: bool = True) -> PolicyCheckpoint:
    """A policy record of real tiny models (hidden size 16, one layer) built with ``seed``, the optimiser one step in."""
    from llm_zoo.models import build_byte_tokenizer, build_tiny_model

    tokenizer = build_byte_tokenizer()
    model, learner, reference = (build_tiny_model(tokenizer, hidden_size=16, num_layers=1, seed=seed + i)
                                 for i in range(3))
    opt = None
    if optimizer:
        opt = torch.optim.AdamW(learner.parameters() if extras else model.parameters(), lr=1e-2)
        trained = learner if extras else model
        trained(input_ids=torch.tensor([[1, 2, 3]]), labels=torch.tensor([[1, 2, 3]])).loss.backward()
        opt.step()
    if not extras:
        return PolicyCheckpoint(model, tokenizer, opt)
    return PolicyCheckpoint(model, tokenizer, opt, learner=learner, reference=reference,
                            pool=[(seed, {"w": torch.full((2,), float(seed))})], met={(seed, 7): ("a", "b")})


def _same(a: torch.nn.Module, b: torch.nn.Module) -> bool:
    other = b.state_dict()
    return all(torch.equal(v, other[k]) for k, v in a.state_dict().items())


def test_a_checkpoint_record_round_trips_into_fresh_modules(tmp_path):
    saved = _policy(1)
    path = save_checkpoint(tmp_path, Checkpoint(5, {"main": saved}, RAEState({"k": 0.25}),
                                                CurriculumState({'{"scenario": "a"}': 0.125})), keep=2)
    assert path == tmp_path / "checkpoints" / "step_000005"
    for name in ("policies/main/model.safetensors", "policies/main/tokenizer.json", "main.trainer.pt",
                 "main.optimizer.pt", "state.json", "manifest.json"):
        assert (path / name).is_file(), name

    fresh = _policy(10)
    assert not _same(fresh.model, saved.model) and not _same(fresh.learner, saved.learner)
    loaded = load_checkpoint(path, {"main": fresh})
    assert loaded.step == 5 and loaded.rae.baselines == {"k": 0.25}
    assert loaded.curriculum.spread == {'{"scenario": "a"}': 0.125}
    part = loaded.policies["main"]
    assert part.model is fresh.model  # filled in place, as the run built it
    for module in ("model", "learner", "reference"):
        assert _same(getattr(part, module), getattr(saved, module)), module
    assert part.pool[0][0] == 1 and torch.equal(part.pool[0][1]["w"], saved.pool[0][1]["w"])
    assert part.met == saved.met
    restored, original = fresh.optimizer.state_dict(), saved.optimizer.state_dict()
    assert restored["param_groups"] == original["param_groups"]
    assert all(torch.equal(restored["state"][i]["exp_avg"], original["state"][i]["exp_avg"])
               for i in original["state"])


def test_a_record_without_a_learner_or_optimizer_saves_the_policy_alone(tmp_path):
    saved = _policy(1, optimizer=False, extras=False)
    path = save_checkpoint(tmp_path, Checkpoint(3, {"main": saved}), keep=1)
    assert not (path / "main.optimizer.pt").exists()
    trainer = torch.load(path / "main.trainer.pt", weights_only=True)
    assert trainer["learner"] is None and trainer["reference"] is None and trainer["pool"] == []
    loaded = load_checkpoint(path, {"main": _policy(2, optimizer=False, extras=False)})
    assert loaded.step == 3 and _same(loaded.policies["main"].model, saved.model)
    # a run that resumes with an optimiser needs its state, and is told where the newest one is
    with pytest.raises(CheckpointError, match=r"main\.optimizer\.pt: missing; only the newest checkpoint"):
        load_checkpoint(path, {"main": _policy(2, extras=False)})


def test_a_checkpoint_in_the_older_layout_still_loads(tmp_path):
    """Older checkpoints kept the optimiser's state in NAME.trainer.pt, had no manifest and no curriculum state."""
    saved = _policy(1)
    path = save_checkpoint(tmp_path, Checkpoint(2, {"main": saved}), keep=1)
    state = json.loads((path / "state.json").read_text())
    del state["curriculum"]
    (path / "state.json").write_text(json.dumps(state))
    trainer = torch.load(path / "main.trainer.pt", weights_only=True)
    trainer["optimizer"] = torch.load(path / "main.optimizer.pt", weights_only=True)
    torch.save(trainer, path / "main.trainer.pt")
    (path / "main.optimizer.pt").unlink()
    (path / "manifest.json").unlink()
    fresh = _policy(10)
    loaded = load_checkpoint(path, {"main": fresh})
    assert loaded.step == 2 and _same(fresh.learner, saved.learner) and loaded.curriculum.spread == {}
    assert fresh.optimizer.state_dict()["param_groups"] == saved.optimizer.state_dict()["param_groups"]


def test_a_checkpoint_of_other_policies_is_refused_naming_both(tmp_path):
    path = save_checkpoint(tmp_path, Checkpoint(1, {"main": _policy(1)}), keep=1)
    with pytest.raises(CheckpointError, match=r"holds policies \['main'\], the config trains \['seat_0'\]"):
        load_checkpoint(path, {"seat_0": _policy(2)})


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
