"""A Kuhn checkpoint of the main job's settings plays without a decoding mask, served by ``llm-zoo serve``.

The trainer samples Kuhn's moves under a mask (``constrain_to_legal``); after the last step the main job
fits the delivered weights without the mask to their own masked strategy (``unmask.steps``), so the model
puts its own, unconstrained mass on the legal replies. This test trains a small run of those settings,
checks the exact unconstrained figures of ``llm-zoo eval``, then serves each seat's checkpoint with the
real ``llm-zoo serve`` command on 127.0.0.1 and plays it through
:class:`~llm_zoo.policies.openai.OpenAIPolicy` (which cannot mask decoding), checking that no hand is
forfeited.
"""

from __future__ import annotations

import json
import os
import queue
import signal
import subprocess
import sys
import threading
from pathlib import Path

import pytest

pytest.importorskip("torch")
pytest.importorskip("transformers")
pytest.importorskip("openai")

from llm_zoo.policies.openai import OpenAIPolicy  # noqa: E402
from llm_zoo.trainers.grpo import make_config, train  # noqa: E402
from llm_zoo.trainers.rollout import collect  # noqa: E402

REPO = Path(__file__).resolve().parents[1]
READY_TIMEOUT_S = 120
HANDS = 48
RUN = {"steps": 20, "episodes_per_step": 32, "rollout_batch_size": 32, "model_hidden_size": 32, "eval_every": 0,
       "checkpoint_every": 0, "sample_every": 0, "progress": False, "tensorboard": False, "threads": 1}
"""A small run of the main job's settings (one model per seat, the mask, the step-weighted weights' average, the fit
without the mask after the last step: ``unmask.steps`` of the preset)."""


@pytest.fixture(scope="module")
def run(tmp_path_factory: pytest.TempPathFactory) -> tuple[dict, Path, dict]:
    run_dir = tmp_path_factory.mktemp("kuhn_unmasked")
    config = make_config("kuhn_poker_v0", {**RUN, "run_dir": str(run_dir)})
    result = train(config)
    return result, run_dir / "checkpoints" / f"step_{config.steps:06d}", config.env_kwargs


def _serve(model_dir: Path) -> tuple[subprocess.Popen[str], str]:
    cmd = [sys.executable, "-m", "llm_zoo.cli", "serve", "--model", str(model_dir), "--port", "0", "--threads", "1"]
    env = {**os.environ, "OMP_NUM_THREADS": "1", "TOKENIZERS_PARALLELISM": "false",
           "PYTHONPATH": str(REPO) + os.pathsep + os.environ.get("PYTHONPATH", "")}
    proc = subprocess.Popen(cmd, cwd=REPO, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    lines: queue.Queue[str] = queue.Queue()
    threading.Thread(target=lambda: lines.put(proc.stdout.readline()), daemon=True).start()
    try:
        line = lines.get(timeout=READY_TIMEOUT_S)
    except queue.Empty:
        line = ""
    if not line.startswith("serving "):
        proc.kill()
        raise AssertionError(f"no ready line from {cmd}; stdout {line!r}, stderr:\n{proc.stderr.read()[-2000:]}")
    return proc, line.split(" at ", 1)[1].strip()


def _stop(proc: subprocess.Popen[str]) -> None:
    proc.send_signal(signal.SIGTERM)
    try:
        proc.communicate(timeout=30)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.communicate()


def test_eval_reports_the_unconstrained_strategy_beside_the_masked_one(run):
    result, ckpt, _ = run
    out = subprocess.run([sys.executable, "-m", "llm_zoo.cli", "eval", "kuhn_poker_v0", "--checkpoint", str(ckpt),
                          "--episodes", "20"], cwd=REPO, capture_output=True, text=True, timeout=300,
                         env={**os.environ, "PYTHONPATH": str(REPO)}, check=True).stdout
    report = json.loads(out)
    # the same weights, read back from the checkpoint (float32 forward passes batched another way: 1e-6)
    assert report["exploitability"] == pytest.approx(result["exploitability"], abs=1e-6)
    assert report["unconstrained_exploitability"] == pytest.approx(result["unconstrained_exploitability"], abs=1e-6)
    assert report["valid_mass_min"] >= 0.99 and set(report["valid_mass"]) == set(report["strategy"])
    # no mask, the same strategy: the fit moved the legal mass, not the ratios between the legal replies
    assert report["unconstrained_exploitability"] == pytest.approx(report["exploitability"], abs=0.01)
    assert "average" in report["weights"]  # the main job's checkpoint exports the weights' average


def _forfeits(episodes) -> int:
    return sum(info["forfeit"] or info["invalid_replies"] > 0 for e in episodes for info in e.infos.values())


def test_a_served_checkpoint_played_without_a_mask_forfeits_no_hand(run):
    """Greedy, a valid-mass of at least 0.95 at every info set means a legal reply then end of turn is
    the most likely token at each position: no hand may be forfeited. Sampled, the forfeits are the
    0.1% or so of mass left over (about 0.1 expected in these hands), against the untrained model's
    near 100%."""
    result, ckpt, env_kwargs = run
    assert result["valid_mass_min"] >= 0.95
    procs, urls = [], {}
    try:
        for agent, name in (("player_0", "seat_0"), ("player_1", "seat_1")):
            proc, urls[agent] = _serve(ckpt / "policies" / name)
            procs.append(proc)
        plays = {}
        for mode, temperature in (("greedy", 0.0), ("sampled", 1.0)):
            seats = {agent: OpenAIPolicy(url, name, temperature=temperature, max_tokens=8, seed=0)
                     for (agent, url), name in zip(urls.items(), ("seat_0", "seat_1"))}
            plays[mode] = collect("kuhn_poker_v0", seats, list(range(HANDS)), batch_size=8, env_kwargs=env_kwargs,
                                  seed=0)
    finally:
        for proc in procs:
            _stop(proc)
    greedy, sampled = plays["greedy"], plays["sampled"]
    assert len(greedy) == HANDS and not any(e.failed for e in greedy + sampled)
    for episode in greedy:
        for agent, info in episode.infos.items():
            assert not info["forfeit"] and info["invalid_replies"] == 0, (episode.seed, agent, info)
            assert len(info["payoffs"]) == 1  # the hand was played out: a showdown or a fold
    assert {turn.reply for e in greedy for turn in e.turns} <= {"[check]", "[bet]", "[call]", "[fold]"}
    sampled_replies = {turn.reply for e in sampled for turn in e.turns}
    assert {"[check]", "[bet]"} <= sampled_replies  # sampling, not one reply everywhere
    assert _forfeits(sampled) <= 1, [t.reply for e in sampled for t in e.turns]
