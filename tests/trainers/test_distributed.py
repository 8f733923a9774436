"""Data-parallel training on the CPU with 2 ranks (gloo on 127.0.0.1): the update, the split, and a killed run's resume."""

from __future__ import annotations

import json
import os
import random
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

import pytest

torch = pytest.importorskip("torch")
pytest.importorskip("transformers")
import torch.distributed as dist  # noqa: E402
import torch.multiprocessing as mp  # noqa: E402

from llm_zoo.trainers import distributed  # noqa: E402
from llm_zoo.trainers.grpo import Sample, make_config, make_learner, update  # noqa: E402

ROOT = Path(__file__).resolve().parents[2]
UPDATE = {"model_hidden_size": 32, "micro_batch_size": 3, "max_new_tokens": 4, "beta": 0.2, "lr": 1e-2,
          "entropy_coef": 0.01, "validity.coef": 0.5, "threads": 1, "progress": False, "tensorboard": False,
          "unmask.steps": 0}
"""One tiny Kuhn learner, a KL term, the validity term (over 5 distinct prompts, 2 and 3 a rank) and
micro-batches of 3 that the ranks' shares (3 and 4 of 7) cut differently."""


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _batch(aggregation: str) -> tuple[object, object, list[Sample]]:
    config = make_config("kuhn_poker_v0", {**UPDATE, "aggregation": aggregation})
    learner = make_learner("main", config, torch.device("cpu"), 0)
    rng = random.Random(7)
    vocab = learner.model.config.vocab_size
    batch = [Sample([rng.randrange(3, vocab) for _ in range(rng.randint(2, 6))],
                    completion := [rng.randrange(3, vocab) for _ in range(rng.randint(1, 4))],
                    [-rng.uniform(0.5, 3.0) for _ in completion], rng.uniform(-1.5, 1.5),
                    valid_paths=tuple(tuple(rng.randrange(3, vocab) for _ in range(2)) for _ in range(2)) if i < 5
                    else None)
             for i in range(7)]
    return config, learner, batch


AGGREGATIONS = ("token", "sequence")


def _rank(rank: int, port: int, out: str) -> None:
    """One of 2 ranks: an update per aggregation on its share of the batch, then the split helpers."""
    torch.set_num_threads(1)
    dist.init_process_group("gloo", init_method=f"tcp://127.0.0.1:{port}", rank=rank, world_size=2)
    try:
        for aggregation in AGGREGATIONS:
            config, learner, batch = _batch(aggregation)
            stats = update(learner, batch, config)  # each rank is handed the same batch and scores its share
            torch.save({"params": learner.model.state_dict(), "stats": stats}, f"{out}/{aggregation}{rank}.pt")
        got = {"slice": distributed.episode_slice(30, 3), "shard": list(distributed.shard(list(range(7)))),
               "gather": distributed.gather([f"r{rank}a", f"r{rank}b"][:rank + 1]),
               "seed": distributed.rollout_seed(12345), "broadcast": distributed.broadcast(f"from {rank}")}
        Path(out, f"split{rank}.json").write_text(json.dumps({k: [v.start, v.stop] if isinstance(v, slice) else v
                                                              for k, v in got.items()}))
    finally:
        dist.destroy_process_group()


@pytest.fixture(scope="module")
def two_ranks(tmp_path_factory) -> Path:
    """What 2 ranks spawned on 127.0.0.1 (gloo) wrote: one start for every test of the split."""
    out = tmp_path_factory.mktemp("ranks")
    mp.start_processes(_rank, args=(_free_port(), str(out)), nprocs=2, start_method="spawn")
    return out


@pytest.mark.parametrize("aggregation", AGGREGATIONS)
def test_two_ranks_on_half_the_batch_each_take_the_one_rank_step(two_ranks, aggregation):
    config, learner, batch = _batch(aggregation)
    before = {k: v.clone() for k, v in learner.model.state_dict().items()}
    stats = update(learner, batch, config)
    one = learner.model.state_dict()
    assert max((one[k] - before[k]).abs().max().item() for k in one) > 1e-4  # the step moved the weights
    for rank in (0, 1):
        got = torch.load(two_ranks / f"{aggregation}{rank}.pt", weights_only=False)
        worst = max((got["params"][k] - one[k]).abs().max().item() for k in one)
        assert worst <= 1e-6, f"rank {rank}'s weights differ from one process's by {worst}"
        for key in ("loss", "grad_norm", "tokens", "clip_fraction", "kl", "entropy", "valid_mass"):
            assert got["stats"][key] == pytest.approx(stats[key], rel=1e-5, abs=1e-7), key


def test_ranks_split_whole_groups_and_gather_in_rank_order(two_ranks):
    assert distributed.episode_slice(30, 3) == slice(0, 30) and distributed.rollout_seed(5) == 5  # one process
    r0, r1 = (json.loads((two_ranks / f"split{r}.json").read_text()) for r in (0, 1))
    assert (r0["slice"], r1["slice"]) == ([0, 15], [15, 30])  # 10 groups of 3: 5 each, none cut
    assert r0["shard"] + r1["shard"] == list(range(7))
    assert r0["gather"] == r1["gather"] == ["r0a", "r1a", "r1b"]
    assert r0["seed"] == 12345 and r1["seed"] != 12345  # rank 0 keeps one process's sampling seed
    assert r0["broadcast"] == r1["broadcast"] == "from 0"


RUN = {"steps": 8, "episodes_per_step": 24, "group_size": 2, "rollout_batch_size": 12, "micro_batch_size": 16,
       "model_hidden_size": 32, "checkpoint_every": 2, "keep_checkpoints": 10, "eval_every": 4, "sample_every": 4,
       "beta": 0.1, "pool_every": 2, "threads": 1, "tensorboard": False, "progress": False, "lr": 1e-2,
       "unmask.steps": 25}
"""A small 2-rank Kuhn run: groups of 2, a KL term, a self-play pool and evaluations, all state a resume restores."""


def _torchrun(run_dir: Path, *extra: str) -> list[str]:
    sets = [a for k, v in RUN.items() for a in ("--set", f"{k}={json.dumps(v)}")]
    return [sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc-per-node", "2",
            "-m", "llm_zoo", "train", "kuhn_poker_v0", "--run-dir", str(run_dir), *sets, *extra]


def _env() -> dict[str, str]:
    return {**os.environ, "OMP_NUM_THREADS": "1", "PYTHONPATH": str(ROOT)}


def _rows(run_dir: Path) -> list[dict]:
    rows = [json.loads(r) for r in (run_dir / "metrics.jsonl").read_text().splitlines()]
    return [{k: v for k, v in r.items() if not k.startswith("perf/")} for r in rows]


def test_a_killed_two_rank_run_resumes_to_the_uninterrupted_metrics(tmp_path):
    straight = tmp_path / "straight"
    done = subprocess.run(_torchrun(straight), env=_env(), capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr[-3000:]
    rows = _rows(straight)
    assert [r["step"] for r in rows] == list(range(1, 9))
    assert all(r["charts/episodes"] == 24 * r["step"] for r in rows)  # both ranks' episodes counted, once
    assert not list(straight.rglob("*rank1*"))  # rank 0 alone writes the run

    killed = tmp_path / "killed"
    proc = subprocess.Popen(_torchrun(killed), env=_env(), stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                            start_new_session=True)  # its own process group: torchrun and both ranks
    deadline = time.time() + 240
    while time.time() < deadline and not (killed / "checkpoints" / "step_000004").exists():
        time.sleep(0.02)
    os.killpg(proc.pid, signal.SIGKILL)
    proc.wait()
    assert (killed / "checkpoints" / "step_000004").exists(), "the run never reached its checkpoint of step 4"
    assert not (killed / "eval.json").exists(), "the run finished before it was killed"
    resumed = subprocess.run(_torchrun(killed, "--resume"), env=_env(), capture_output=True, text=True, timeout=300)
    assert resumed.returncode == 0, resumed.stderr[-3000:]
    assert _rows(killed) == rows
    assert json.loads((killed / "eval.json").read_text()) == json.loads((straight / "eval.json").read_text())


def test_a_warm_started_two_rank_run_fits_once_on_rank_0(tmp_path):
    # init: sft under torchrun: rank 0 alone runs the SFT stage (one fit, one writer of run_dir/sft);
    # rank 1 waits for its checkpoint. Each rank's output goes to its own file (torchrun --redirects).
    run_dir, logs = tmp_path / "run", tmp_path / "logs"
    sets = {**RUN, "steps": 2, "checkpoint_every": 0, "eval_every": 0, "sample_every": 0, "pool_every": 0,
            "init": "sft", "sft": {"episodes": 16, "epochs": 1, "batch_size": 8, "progress": True}}
    args = [a for k, v in sets.items() for a in ("--set", f"{k}={v if isinstance(v, str) else json.dumps(v)}")]
    command = [sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc-per-node", "2",
               "--log-dir", str(logs), "--redirects", "3",
               "-m", "llm_zoo", "train", "kuhn_poker_v0", "--run-dir", str(run_dir), *args]
    done = subprocess.run(command, env=_env(), capture_output=True, text=True, timeout=300)
    errors = {p.parent.name: p.read_text() for p in logs.rglob("stderr.log")}
    assert done.returncode == 0, done.stderr[-3000:] + "".join(e[-2000:] for e in errors.values())
    assert sorted(errors) == ["0", "1"]
    assert "sft kuhn_poker_v0" in errors["0"]  # rank 0's progress bar of the fit
    assert "sft kuhn_poker_v0" not in errors["1"]  # rank 1 never fitted
    assert errors["0"].count("sft kuhn_poker_v0") >= 2  # one fit per seat's policy (the main job's two models)
    for name in ("seat_0", "seat_1"):
        fit = run_dir / "sft" / name
        steps = json.loads((fit / "summary.json").read_text())["steps"]
        assert steps >= 1 and len((fit / "metrics.jsonl").read_text().splitlines()) == steps + 1  # written once
    assert [r["step"] for r in _rows(run_dir)] == [1, 2]
