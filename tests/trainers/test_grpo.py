"""The token-level GRPO / RAE trainer: loss, masking, aggregation, schedules, pool, checkpoints, resume."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

torch = pytest.importorskip("torch")
pytest.importorskip("transformers")

from llm_zoo.trainers import grpo  # noqa: E402
from llm_zoo.trainers.grpo import (  # noqa: E402
    Sample,
    TrainConfig,
    aggregate,
    distinct_rows,
    learning_rate_factor,
    make_config,
    per_token_policy_loss,
    train,
)

TINY = {"steps": 2, "episodes_per_step": 8, "rollout_batch_size": 8, "model_hidden_size": 32, "eval_every": 1,
        "progress": False, "tensorboard": False, "threads": 1, "lr": 1e-2, "sample_every": 1, "policies": {},
        "unmask.steps": 0, "optimizer": "adamw"}
"""A tiny budget, one model ("main") in both Kuhn seats; the main job's own one model per seat is tested apart, and its
fit without the mask in test_loss_terms.py (here only a resume, below, runs a short one). AdamW, not the main job's
SGD: two SGD steps at 1e-2 move the norm weights by less than float32 resolves around 1, and the smoke test below
checks that every weight moves (SGD's own step is tested in test_loss_terms.py)."""


def _loss(logps, old, adv, mask, **kw):
    per_token, stats = per_token_policy_loss(logps, old, adv, mask, epsilon_low=0.2, epsilon_high=0.2, **kw)
    return aggregate(per_token, mask, "token", mask.sum().item()), stats


def test_masked_tokens_carry_no_loss_and_no_gradient():
    torch.manual_seed(0)
    mask = torch.tensor([[1, 1, 0, 0], [1, 0, 0, 0], [0, 0, 0, 0]])  # row 3: another agent's turn
    old = torch.randn(3, 4) * 0.1
    adv = torch.tensor([1.0, -0.5, 2.0])
    base = (old + 0.05 * torch.randn(3, 4)).requires_grad_()
    loss, _ = _loss(base, old, adv, mask)
    loss.backward()
    grad = base.grad.clone()
    perturbed = base.detach().clone()
    perturbed[mask == 0] += torch.randn(int((mask == 0).sum())) * 5  # change every masked token's logit
    perturbed.requires_grad_()
    loss2, _ = _loss(perturbed, old, adv, mask)
    loss2.backward()
    assert loss2.item() == pytest.approx(loss.item(), abs=1e-7)
    assert torch.equal(perturbed.grad, grad)
    assert torch.all(grad[mask == 0] == 0)
    assert torch.all(grad[mask == 1] != 0)


def test_on_policy_gradient_is_minus_advantage_over_tokens():
    # ratio 1 everywhere: d loss / d logp_t = -A / n_tokens on active tokens
    mask = torch.tensor([[1, 1], [1, 0]])
    logps = torch.zeros(2, 2, requires_grad=True)
    loss, stats = _loss(logps, torch.zeros(2, 2), torch.tensor([3.0, -1.0]), mask)
    loss.backward()
    assert loss.item() == pytest.approx(-(3 + 3 - 1) / 3)
    assert logps.grad.flatten().tolist() == pytest.approx([-1.0, -1.0, 1 / 3, 0.0])
    assert stats["clip_fraction"].item() == 0.0


def test_clipping_stops_the_gradient_past_the_trust_region():
    mask = torch.ones(1, 2)
    old = torch.zeros(1, 2)
    logps = torch.tensor([[0.5, 0.0]], requires_grad=True)  # ratio e^0.5 = 1.65 > 1.2 on token 0
    loss, stats = _loss(logps, old, torch.tensor([1.0]), mask)
    loss.backward()
    assert logps.grad[0, 0].item() == 0.0 and logps.grad[0, 1].item() != 0.0
    assert stats["clip_fraction"].item() == pytest.approx(0.5)


def test_kl_and_entropy_terms():
    mask = torch.ones(1, 3)
    logps = torch.log(torch.tensor([[0.5, 0.2, 0.9]]))
    ref = torch.log(torch.tensor([[0.25, 0.2, 0.3]]))
    per_token, stats = per_token_policy_loss(logps, logps, torch.zeros(1), mask, epsilon_low=0.2, epsilon_high=0.2,
                                             ref_per_token_logps=ref, beta=0.5)
    # k3: r - log r - 1 with r = ref/p
    expected = [(q / p) - torch.log(torch.tensor(q / p)).item() - 1 for p, q in ((0.5, 0.25), (0.2, 0.2), (0.9, 0.3))]
    assert per_token[0].tolist() == pytest.approx([0.5 * e for e in expected], rel=1e-5)
    assert stats["kl"].item() == pytest.approx(sum(expected) / 3, rel=1e-5)
    entropy = torch.tensor([[1.0, 2.0, 0.0]])
    per_token, stats = per_token_policy_loss(logps, logps, torch.zeros(1), mask, epsilon_low=0.2, epsilon_high=0.2,
                                             per_token_entropy=entropy, entropy_coef=0.1)
    assert per_token[0].tolist() == pytest.approx([-0.1, -0.2, 0.0])
    assert stats["entropy"].item() == pytest.approx(1.0)


def test_aggregations():
    per_token = torch.tensor([[1.0, 3.0, 0.0], [2.0, 0.0, 0.0]])
    mask = torch.tensor([[1, 1, 0], [1, 0, 0]])
    assert aggregate(per_token, mask, "token", 3).item() == pytest.approx(6 / 3)
    assert aggregate(per_token, mask, "sequence", 2).item() == pytest.approx((4 / 2 + 2 / 1) / 2)
    assert aggregate(per_token, mask, "constant", 2 * 8).item() == pytest.approx(6 / 16)


def test_learning_rate_schedules():
    config = TrainConfig(steps=10, lr_schedule="linear", lr_min_ratio=0.0, warmup_steps=2)
    assert [round(learning_rate_factor(s, config), 3) for s in (0, 1, 2, 6, 10)] == [0.5, 1.0, 1.0, 0.5, 0.0]
    config = TrainConfig(steps=10, lr_schedule="cosine", lr_min_ratio=0.1)
    assert learning_rate_factor(0, config) == pytest.approx(1.0)
    assert learning_rate_factor(10, config) == pytest.approx(0.1)
    for bad in (-0.1, 1.5):  # a floor below 0 would turn the rate negative; above 1 would make the decay a climb
        with pytest.raises(ValueError, match=r"config.lr_min_ratio must be in \[0, 1\]"):
            TrainConfig(lr_min_ratio=bad)
    with pytest.raises(ValueError, match=r"config.lr_schedule must be one of \('constant', 'linear', 'cosine'\)"):
        TrainConfig(lr_schedule="step")


def test_config_errors_name_the_field():
    with pytest.raises(ValueError, match="unknown config field 'stepz'"):
        make_config("kuhn_poker_v0", {"stepz": 3})
    with pytest.raises(ValueError, match="config.algorithm must be one of"):
        make_config("kuhn_poker_v0", {"algorithm": "ppo"})
    with pytest.raises(ValueError, match="config.steps expects int"):
        make_config("kuhn_poker_v0", {"steps": "many"})
    with pytest.raises(ValueError, match="multiple of"):
        make_config("kuhn_poker_v0", {"episodes_per_step": 10, "group_size": 4})
    config = make_config("kuhn_poker_v0", {"steps": "7", "learn": "player", "progress": "false"})
    assert (config.steps, config.learn, config.progress) == (7, ["player"], False)
    assert config.max_new_tokens == 1  # the env's preset applies under the user's overrides


def test_distinct_rows_compare_values_whether_samples_share_their_lists_or_not():
    rows = [([1, 2, 3], [4], [[4, 5]]), ([1, 2], [4], None), ([1, 2, 3], [5], [[4, 5]]), ([1, 2, 3], [4], [[4, 6]])]
    shared = [Sample(p, c, [-0.5], 1.0, a) for p, c, a in rows for _ in range(2)]  # as the trainer's samples share
    copies = [Sample(list(p), list(c), [-0.5], 1.0, None if a is None else [list(x) for x in a]) for p, c, a in rows
              for _ in range(2)]
    for batch in (shared, copies, shared[:3] + copies[3:], copies[:5] + shared[5:]):
        distinct, row = distinct_rows(batch, torch.device("cpu"))
        assert row.tolist() == [0, 0, 1, 1, 2, 2, 3, 3]
        assert [(b.prompt_ids, b.completion_ids, b.allowed) for b in distinct] == rows


def test_dedupe_rows_keeps_the_rows_it_has_seen_alive_so_no_id_is_reused():
    from llm_zoo.scoring import dedupe_rows

    # fresh lists, each dropped by the generator once read: their ids would be free for the next ones
    distinct, positions = dedupe_rows([([v] for v in (1, 2, 3, 1, 2))], lambda r: tuple(r[0]))
    assert distinct == [(1,), (2,), (3,)] and positions == [0, 1, 2, 0, 1]


def test_freeze_rotate_schedule_alternates_roles():
    from llm_zoo.trainers.selfplay import active_learners

    roles = {"a_0": "a", "b_0": "b"}
    policy_of = {"a_0": "pa", "b_0": "pb"}
    active = [active_learners(s, "freeze_rotate", 2, {"a", "b"}, roles, policy_of) for s in range(6)]
    assert active == [{"pa"}, {"pa"}, {"pb"}, {"pb"}, {"pa"}, {"pa"}]
    assert active_learners(0, "together", 2, {"a", "b"}, roles, policy_of) == {"pa", "pb"}


def _weights(run_dir: Path, name: str, step: int):
    from safetensors.torch import load_file

    return load_file(str(run_dir / "checkpoints" / f"step_{step:06d}" / "policies" / name / "model.safetensors"))


def test_smoke_train_changes_every_trainable_parameter(tmp_path):
    config = make_config("kuhn_poker_v0", {**TINY, "run_dir": str(tmp_path), "checkpoint_every": 1, "keep_checkpoints": 5})
    result = train(config)
    rows = [json.loads(r) for r in (tmp_path / "metrics.jsonl").read_text().splitlines()]
    assert [r["step"] for r in rows] == [1, 2]
    for row in rows:
        assert all(v == v and abs(v) != float("inf") for v in row.values())  # finite
        assert "losses/loss/main" in row and "eval/exploitability" in row
    assert 0.0 <= result["exploitability"] <= 1.0
    before = grpo.build_tokenizer_and_model(config, seed=config.seed)[1].state_dict()
    after = _weights(tmp_path, "main", 2)
    unchanged = [k for k in before if torch.equal(before[k], after[k])]
    assert not unchanged, f"parameters that did not change: {unchanged}"
    assert (tmp_path / "config.yaml").exists() and (tmp_path / "eval.json").exists()
    assert list((tmp_path / "samples").glob("step_*.jsonl"))


def test_main_job_trains_one_model_per_seat(tmp_path):
    tiny = {k: v for k, v in TINY.items() if k != "policies"}
    config = make_config("kuhn_poker_v0", {**tiny, "run_dir": str(tmp_path), "checkpoint_every": 2})
    assert config.policies == {"player_0": "seat_0", "player_1": "seat_1"}
    result = train(config)
    rows = [json.loads(r) for r in (tmp_path / "metrics.jsonl").read_text().splitlines()]
    for name in ("seat_0", "seat_1"):
        assert all(row[f"losses/tokens/{name}"] > 0 for row in rows)  # each seat's turns train its own model
    assert not any(key.endswith("/main") for row in rows for key in row)
    for row in rows:  # both seats have the role "player": its mean is 0 in this zero-sum game, each seat's is not
        seats = row["charts/reward/player/player_0"], row["charts/reward/player/player_1"]
        assert abs(sum(seats)) < 1e-9 and abs(row["charts/reward/player"]) < 1e-9
        assert grpo._postfix(row, {"player_0": "player", "player_1": "player"}).keys() >= {"player_0", "player_1"}
    assert 0.0 <= result["exploitability"] <= 1.0
    for offset, name in enumerate(("seat_0", "seat_1")):
        before = grpo.build_tokenizer_and_model(config, seed=config.seed + offset)[1].state_dict()
        after = _weights(tmp_path, name, 2)
        assert not before["lm_head.weight"].any() and after["lm_head.weight"].any(), name  # the zero head learned
        assert sum(not torch.equal(before[k], after[k]) for k in before) > len(before) // 2, name


def test_frozen_seat_does_not_learn(tmp_path):
    config = make_config("kuhn_poker_v0", {**TINY, "run_dir": str(tmp_path),
                                           "policies": {"player_0": "p0", "player_1": "p1"}, "learn": ["player_0"]})
    train(config)
    p1_before = grpo.build_tokenizer_and_model(config, seed=config.seed + 1)[1].state_dict()
    p1_after = _weights(tmp_path, "p1", 2)
    assert all(torch.equal(p1_before[k], p1_after[k]) for k in p1_before)
    p0_before = grpo.build_tokenizer_and_model(config, seed=config.seed)[1].state_dict()
    assert not all(torch.equal(p0_before[k], v) for k, v in _weights(tmp_path, "p0", 2).items())


def test_self_play_pool_is_bounded_and_used(tmp_path):
    config = make_config("kuhn_poker_v0", {**TINY, "steps": 4, "run_dir": str(tmp_path), "pool_every": 1,
                                           "pool_size": 2, "p_latest": 0.0})
    train(config)
    state = torch.load(tmp_path / "checkpoints" / "step_000004" / "main.trainer.pt", weights_only=False)
    assert [s for s, _ in state["pool"]] == [3, 4]
    samples = [json.loads(line) for line in (tmp_path / "samples" / "step_000004.jsonl").read_text().splitlines()]
    assert any(any(p.startswith("main@") for p in s["policies"].values()) for s in samples)


def _run_cli(run_dir: Path, steps: int, extra=()):
    # the magnet (an EMA reference with an exact KL), the weights' average (what evaluations score) and
    # constrained sampling are state a resume must restore
    sets = {**TINY, "steps": steps, "checkpoint_every": 1, "keep_checkpoints": 10, "eval_every": 2, "beta": 0.5,
            "magnet.ema": 0.9, "kl_estimator": "exact", "constrain_to_legal": True, "pool_every": 2,
            "average.ema": 0.8, "unmask.steps": 25,  # the fit's prompts, met before the kill, come from the checkpoint
            # the curriculum's estimates, which decide the next step's deals, too
            "group_size": 2, "curriculum.options": [{"deal": [[a, b]]} for a, b in ("KQ", "QJ", "JK", "QK")]}
    args = [sys.executable, "-m", "llm_zoo.cli", "train", "kuhn_poker_v0", "--run-dir", str(run_dir)]
    for k, v in sets.items():
        args += ["--set", f"{k}={json.dumps(v) if not isinstance(v, str) else v}"]
    return args + list(extra)


def _comparable(run_dir: Path):
    rows = [json.loads(r) for r in (run_dir / "metrics.jsonl").read_text().splitlines()]
    return [{k: v for k, v in r.items() if not k.startswith("perf/")} for r in rows]


def test_sigkill_and_resume_reproduce_the_uninterrupted_run(tmp_path):
    env = {**os.environ, "OMP_NUM_THREADS": "1"}
    straight = tmp_path / "straight"
    subprocess.run(_run_cli(straight, 6), check=True, env=env, capture_output=True, timeout=300)
    killed = tmp_path / "killed"
    proc = subprocess.Popen(_run_cli(killed, 6), env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    deadline = time.time() + 240
    while time.time() < deadline and not (killed / "checkpoints" / "step_000003").exists():
        time.sleep(0.05)
    proc.send_signal(signal.SIGKILL)
    proc.wait()
    assert (killed / "checkpoints" / "step_000003").exists(), "the run never reached its third checkpoint"
    assert not (killed / "checkpoints" / "step_000006").exists(), "the run finished before it was killed"
    subprocess.run(_run_cli(killed, 6, ["--resume"]), check=True, env=env, capture_output=True, timeout=300)
    assert _comparable(killed) == _comparable(straight)


def test_cli_train_eval_plot(tmp_path):
    run = tmp_path / "run"
    out = subprocess.run(_run_cli(run, 2), check=True, capture_output=True, text=True, timeout=300).stdout
    assert "exploitability" in json.loads(out)
    ckpt = run / "checkpoints" / "step_000002"
    out = subprocess.run([sys.executable, "-m", "llm_zoo.cli", "eval", "kuhn_poker_v0", "--checkpoint", str(ckpt),
                          "--episodes", "20"], check=True, capture_output=True, text=True, timeout=300).stdout
    result = json.loads(out)
    assert set(result["versus"]) == {"nash", "random", "card"}
    assert 0 <= result["invalid_reply_rate"] <= 1 and 0 <= result["exploitability"] <= 1
    out = subprocess.run([sys.executable, "-m", "llm_zoo.cli", "plot", str(run)], check=True, capture_output=True,
                         text=True, timeout=120).stdout
    png = Path(out.strip())
    assert png.exists() and png.read_bytes()[:4] == b"\x89PNG"


def test_scripted_players_hold_frozen_seats(tmp_path):
    # user_sim_v0 seats its scripted user by default: only the assistant is a model, and it learns
    tiny = {k: v for k, v in TINY.items() if k != "policies"}  # user_sim_v0's own policies apply
    # fresh weights and groups of one: the preset's warm start and groups of four are tested in tests/envs/user_sim
    config = make_config("user_sim_v0", {**tiny, "model": "tiny", "steps": 1, "episodes_per_step": 2, "rollout_batch_size": 2,
                                         "max_new_tokens": 8, "run_dir": str(tmp_path), "eval_every": 0,
                                         "env_kwargs": {"max_turns": 6}, "group_size": 1, "init": ""})
    assert config.policies == {"user": "scripted:scripted"}
    train(config)
    assert sorted(p.name for p in (tmp_path / "checkpoints" / "step_000001" / "policies").iterdir()) == ["main"]
    sample = json.loads((tmp_path / "samples" / "step_000001.jsonl").read_text().splitlines()[0])
    assert sample["policies"] == {"user": "scripted", "assistant": "main"}
    with pytest.raises(ValueError, match="no such scripted player"):
        train(make_config("user_sim_v0", {**TINY, "model": "tiny", "policies": {"user": "scripted:nobody"},
                                          "run_dir": str(tmp_path / "another")}))


@pytest.mark.parametrize("key, expected", [("role", {"kuhn_poker_v0/player"}),
                                           ("agent", {"kuhn_poker_v0/player_0", "kuhn_poker_v0/player_1"})])
def test_rae_baselines_are_keyed_by_role_or_agent(tmp_path, key, expected):
    train(make_config("kuhn_poker_v0", {**TINY, "steps": 1, "run_dir": str(tmp_path), "baseline_key": key}))
    state = json.loads((tmp_path / "checkpoints" / "step_000001" / "state.json").read_text())
    assert set(state["rae"]) == expected


def test_rae_baselines_keyed_by_prompt_follow_the_opening_state(tmp_path):
    """baseline_key=prompt: one baseline per (role, first prompt); in Kuhn poker a first prompt shows the card
    (and, for the second player, the first move), so there are at most 3 + 6 keys and more than one."""
    config = make_config("kuhn_poker_v0", {**TINY, "steps": 1, "episodes_per_step": 32, "rollout_batch_size": 32,
                                           "run_dir": str(tmp_path), "baseline_key": "prompt"})
    train(config)
    state = json.loads((tmp_path / "checkpoints" / "step_000001" / "state.json").read_text())
    assert 2 < len(state["rae"]) <= 9 and all(k.startswith("kuhn_poker_v0/player/") for k in state["rae"])
    from llm_zoo.policies import RandomPolicy
    from llm_zoo.trainers.rollout import collect

    episodes = collect("kuhn_poker_v0", {"player": RandomPolicy(seed=0)}, 24, seed=0, env_kwargs=config.env_kwargs)
    for e1 in episodes:
        for e2 in episodes:
            same_card = e1.infos["player_0"]["card"] == e2.infos["player_0"]["card"]
            assert (grpo._opening(e1, "player_0") == grpo._opening(e2, "player_0")) == same_card
    assert grpo._opening(episodes[0], "nobody") == "none"


def test_average_ema_exports_and_scores_the_average_of_the_weights(tmp_path):
    from safetensors.torch import load_file

    from llm_zoo.envs.kuhn_poker.evaluate import evaluate_policies
    from llm_zoo.trainers.evaluation import load_run_policies

    config = make_config("kuhn_poker_v0", {**TINY, "steps": 3, "run_dir": str(tmp_path), "average.ema": 0.5})
    result = train(config)
    ckpt = tmp_path / "checkpoints" / "step_000003"
    exported = load_file(str(ckpt / "policies" / "main" / "model.safetensors"))
    learner = torch.load(ckpt / "main.trainer.pt", weights_only=False)["learner"]
    initial = grpo.build_tokenizer_and_model(config, seed=config.seed)[1].state_dict()
    name = next(k for k in exported if k.endswith("q_proj.weight"))
    # after 3 steps the average lies strictly between the initial weights and the learner's
    assert not torch.equal(exported[name], learner[name]) and not torch.equal(exported[name], initial[name])
    _, policies = load_run_policies(ckpt)
    scored = evaluate_policies({"player_0": policies["main"], "player_1": policies["main"]},
                               env_kwargs=config.env_kwargs)
    assert scored["exploitability"] == pytest.approx(result["exploitability"], abs=1e-9)
    last = [json.loads(r) for r in (tmp_path / "metrics.jsonl").read_text().splitlines()][-1]
    assert last["eval/exploitability"] == pytest.approx(result["exploitability"], abs=1e-9)
    assert 0 <= last["eval/learner/exploitability"] <= 1  # the last iterate, scored beside the average
    assert last["eval/learner/exploitability"] != last["eval/exploitability"]


def test_failures_score_as_the_worst_finished_return_of_their_key():
    o = grpo.Outcome
    finished = [o(0, "player_0", 1.0, "k/a", "g/a"), o(1, "player_0", -2.0, "k/a", "g/a"), o(2, "player_1", 2.0, "k/b", "g/b")]
    failed = [o(3, "player_0", 50.0, "k/a", "g/a"), o(3, "player_1", 50.0, "k/b", "g/b"), o(4, "x", 9.0, "k/c", "g/c")]
    assert grpo.score_failures(finished, failed) == [o(3, "player_0", -2.0, "k/a", "g/a"), o(3, "player_1", 2.0, "k/b", "g/b")]
    assert grpo.score_failures([], failed) == []  # a whole batch that failed says nothing about the policy


def test_an_episode_whose_env_raised_is_trained_on_as_the_worst_return_not_dropped(tmp_path, monkeypatch):
    from llm_zoo.trainers import advantages

    real_collect, seen = grpo.collect, []

    def collect_with_a_failure(*args, **kwargs):
        episodes = real_collect(*args, **kwargs)
        episodes[0].failed, episodes[0].error = True, "env raised (test)"
        episodes[0].returns = dict.fromkeys(episodes[0].returns, 100.0)  # what an escape would keep
        return episodes

    algorithm = make_config("kuhn_poker_v0", TINY).algorithm
    real_estimator = advantages.ESTIMATORS[algorithm]

    def recording(rewards, *rest):
        seen.append(list(rewards))
        return real_estimator(rewards, *rest)

    monkeypatch.setattr(grpo, "collect", collect_with_a_failure)
    monkeypatch.setitem(advantages.ESTIMATORS, algorithm, recording)
    train(make_config("kuhn_poker_v0", {**TINY, "run_dir": str(tmp_path)}))
    assert len(seen) == TINY["steps"]
    for rewards in seen:
        # 8 episodes x 2 seats, the failed one included, and nothing at the forged 100
        assert len(rewards) == 2 * TINY["episodes_per_step"] and max(rewards) <= 2.0
    rows = [json.loads(r) for r in (tmp_path / "metrics.jsonl").read_text().splitlines()]
    assert all(r["charts/failed_episodes"] == 1.0 for r in rows)


# ---- LoRA, and the update's skip of zero advantages -----------------------------------------


def _tiny_llama(path):
    from llm_zoo.models import make_tiny_model

    return make_tiny_model(path, hidden_size=32, num_layers=2, seed=1)  # byte-level: [check] is 7 tokens


def test_lora_trains_the_adapters_only_against_the_disabled_adapters_and_checkpoints_them(tmp_path):
    from safetensors.torch import load_file

    from llm_zoo.policies.transformers import TransformersPolicy
    from llm_zoo.scoring import completion_logprobs

    base = _tiny_llama(tmp_path / "base")
    run = tmp_path / "run"
    settings = {"model": str(base), "lora_r": 4, "lora_alpha": 8.0, "beta": 0.5, "magnet.ema": 1.0, "steps": 2,
                "episodes_per_step": 8,
                "rollout_batch_size": 8, "micro_batch_size": 8, "lr": 5e-2, "eval_every": 0, "progress": False,
                "tensorboard": False, "threads": 1, "checkpoint_every": 1, "keep_checkpoints": 2, "run_dir": str(run),
                "max_prompt_tokens": 2048, "max_forward_tokens": 16384}  # the byte tokenizer spells the rules long
    config = make_config("kuhn_poker_v0", settings)
    train(config)
    ckpt = run / "checkpoints" / "step_000002"
    saved = ckpt / "policies" / "main"
    # the checkpoint holds the adapters, naming the base; no second model (the reference is the base itself)
    assert (saved / "adapter_config.json").is_file() and not (saved / "model.safetensors").exists()
    assert json.loads((saved / "adapter_config.json").read_text())["base_model_name_or_path"] == str(base.resolve())
    adapters = load_file(saved / "adapter_model.safetensors")
    assert adapters and all("lora_" in k for k in adapters)
    assert sum(v.numel() for v in adapters.values()) < 0.2 * sum(
        v.numel() for v in load_file(base / "model.safetensors").values())
    assert any(k.endswith("lora_B.weight") and v.abs().max() > 0 for k, v in adapters.items())  # B starts at 0
    assert torch.load(ckpt / "main.trainer.pt", weights_only=True)["reference"] is None
    # the optimiser's state is in the newest checkpoint only
    assert (ckpt / "main.optimizer.pt").is_file() and not (run / "checkpoints" / "step_000001" / "main.optimizer.pt").exists()
    # the KL term compared the policy with the disabled adapters, and they differ after the first step
    rows = [json.loads(r) for r in (run / "metrics.jsonl").read_text().splitlines()]
    assert all(row["charts/failed_episodes"] == 0 for row in rows) and rows[-1]["losses/kl/main"] > 0.0

    # eval, play, serve and crossplay load it through from_pretrained: the base with the adapters merged in
    policy = TransformersPolicy.from_pretrained(saved, device="cpu")
    reference = TransformersPolicy.from_pretrained(base, device="cpu")
    trained, untouched = policy.model.state_dict(), reference.model.state_dict()
    moved = {k for k in untouched if not torch.equal(trained[k], untouched[k])}
    assert moved and all(k.endswith("proj.weight") for k in moved)  # the base's embeddings and norms never trained
    prompt = [reference.tokenizer.encode("You hold K. Say [check] or [bet].")]
    reply = [reference.tokenizer.encode("[bet]")]
    with torch.no_grad():
        ours = completion_logprobs(policy.model, prompt, reply, pad_token_id=policy.pad_token_id)[0]
        theirs = completion_logprobs(reference.model, prompt, reply, pad_token_id=policy.pad_token_id)[0]
    assert not torch.allclose(ours, theirs, atol=1e-4)

    # --resume reads the adapters and the optimiser back and goes on
    train(make_config("kuhn_poker_v0", {**settings, "steps": 3}), resume=True)
    later = load_file(run / "checkpoints" / "step_000003" / "policies" / "main" / "adapter_model.safetensors")
    assert later.keys() == adapters.keys() and any(not torch.equal(later[k], adapters[k]) for k in adapters)


def test_a_magnet_with_lora_moves_a_copy_of_the_adapters_over_the_learners_own_base(tmp_path):
    """With LoRA the KL reference is the disabled adapters unless it moves; a magnet then gets adapters of its own,
    an EMA of the learner's, over the very base tensors the learner holds (no second model), saved and resumed."""
    from llm_zoo.trainers.grpo import adapter_copy, make_learner

    base = _tiny_llama(tmp_path / "base")
    run = tmp_path / "run"
    settings = {"model": str(base), "lora_r": 4, "lora_alpha": 8.0, "beta": 0.5, "magnet.ema": 0.5, "steps": 2,
                "episodes_per_step": 8, "rollout_batch_size": 8, "micro_batch_size": 8, "lr": 5e-2, "eval_every": 0,
                "progress": False, "tensorboard": False, "threads": 1, "checkpoint_every": 1, "run_dir": str(run),
                "max_prompt_tokens": 2048, "max_forward_tokens": 16384}
    config = make_config("kuhn_poker_v0", settings)
    learner = make_learner("main", config, torch.device("cpu"), 0)
    ref = learner.reference
    assert ref is not None and not any(p.requires_grad for p in ref.parameters())
    mine = dict(learner.model.named_parameters())
    for name, p in ref.named_parameters():  # the base is shared storage, the adapters are copies
        assert (p.data_ptr() == mine[name].data_ptr()) == (not mine[name].requires_grad), name
    assert all(mine[n].numel() > 0 for n in mine)  # the learner's weights were put back after the copy
    again = adapter_copy(learner.model)
    assert sum(p.data_ptr() != q.data_ptr() for p, q in zip(again.parameters(), ref.parameters())) == sum(
        p.requires_grad for p in learner.model.parameters())

    train(config)
    state = torch.load(run / "checkpoints" / "step_000002" / "main.trainer.pt", weights_only=True)["reference"]
    assert state and all("lora_" in k for k in state)  # the magnet's adapters, not a second model
    adapters = {k: v for k, v in torch.load(run / "checkpoints" / "step_000001" / "main.trainer.pt",
                                            weights_only=True)["reference"].items()}
    assert any(not torch.equal(adapters[k], state[k]) for k in state)  # it moved with the learner
    assert any("lora_B" in k and v.abs().max() > 0 for k, v in state.items())  # B started at 0
    rows = [json.loads(r) for r in (run / "metrics.jsonl").read_text().splitlines()]
    assert rows[-1]["losses/kl/main"] > 0.0
    # --resume puts the magnet's adapters back: one more step from them
    train(make_config("kuhn_poker_v0", {**settings, "steps": 3}), resume=True)
    later = torch.load(run / "checkpoints" / "step_000003" / "main.trainer.pt", weights_only=True)["reference"]
    assert later.keys() == state.keys() and any(not torch.equal(later[k], state[k]) for k in state)


def test_lora_per_seat_trains_one_adapter_per_policy(tmp_path):
    from safetensors.torch import load_file

    base = _tiny_llama(tmp_path / "base")
    run = tmp_path / "run"
    train(make_config("kuhn_poker_v0", {"model": str(base), "lora_r": 4, "policies": {"player_0": "p0", "player_1": "p1"},
                                        "steps": 1, "episodes_per_step": 8, "rollout_batch_size": 8, "lr": 5e-2,
                                        "eval_every": 0, "progress": False, "tensorboard": False, "threads": 1,
                                        "run_dir": str(run), "max_prompt_tokens": 2048, "max_forward_tokens": 16384}))
    saved = run / "checkpoints" / "step_000001" / "policies"
    adapters = {name: load_file(saved / name / "adapter_model.safetensors") for name in ("p0", "p1")}
    assert adapters["p0"].keys() == adapters["p1"].keys()
    assert any(not torch.equal(adapters["p0"][k], adapters["p1"][k]) for k in adapters["p0"])  # each seat its own


@pytest.mark.parametrize("checkpointing", [False, True])
def test_lora_in_the_top_blocks_keeps_no_graph_in_the_frozen_blocks_below(tmp_path, checkpointing):
    from llm_zoo.models import build_tokenizer_and_model, make_tiny_model

    base = str(make_tiny_model(tmp_path / "base", hidden_size=32, num_layers=3, seed=1))

    def build(layers):
        config = make_config("kuhn_poker_v0", {"model": base, "lora_r": 4, "lora_layers": layers,
                                               "gradient_checkpointing": checkpointing})
        _, model = build_tokenizer_and_model(config, seed=0)
        blocks = model.get_base_model().model.layers
        needs_grad = {}
        for k, block in enumerate(blocks):
            block.register_forward_hook(lambda _m, _i, out, k=k: needs_grad.__setitem__(
                k, (out[0] if isinstance(out, tuple) else out).requires_grad))
        model.train()
        ids = torch.arange(3, 40).unsqueeze(0)
        model(input_ids=ids, labels=ids).loss.backward()
        trained = {n: p for n, p in model.named_parameters() if p.requires_grad}
        adapted = sorted({int(n.split(".layers.")[1].split(".")[0]) for n in trained})
        assert trained and all(p.grad is not None for p in trained.values())
        return adapted, [needs_grad[k] for k in range(len(blocks))]

    # adapters in the top block only: the two frozen blocks below it build no graph, so keep no activations
    assert build(1) == ([2], [False, False, True])
    assert build(0) == ([0, 1, 2], [True, True, True])
    with pytest.raises(ValueError, match="lora_layers=4 is more than the model's 3 decoder blocks"):
        build(4)


def test_lora_settings_that_cannot_work_are_refused_naming_the_field(tmp_path):
    with pytest.raises(ValueError, match="lora_r=8 needs a model directory"):
        make_config("kuhn_poker_v0", {"lora_r": 8})
    base = str(_tiny_llama(tmp_path / "base"))
    with pytest.raises(ValueError, match="config.dtype must be one of"):
        make_config("kuhn_poker_v0", {"model": base, "dtype": "float16"})
    with pytest.raises(ValueError, match=r"lora_layers must be >= 0 .* needs lora_r > 0"):
        make_config("kuhn_poker_v0", {"model": base, "lora_r": 0, "lora_layers": 2})
    with pytest.raises(ValueError, match=r"lora_layers must be >= 0"):
        make_config("kuhn_poker_v0", {"model": base, "lora_r": 4, "lora_layers": -1})


def _update_setup(tmp_path, **overrides):
    from llm_zoo.trainers.grpo import Sample, make_learner

    config = make_config("kuhn_poker_v0", {**TINY, "run_dir": str(tmp_path), "optimizer": "sgd", "lr": 0.5,
                                           "beta": 0.0, "magnet.beta_final": 0.0, "magnet.average_from": 0.0,
                                           "entropy_coef": 0.0, "turn_baseline.mode": "none", **overrides})
    learner = make_learner("main", config, torch.device("cpu"), 0)
    g = torch.Generator().manual_seed(0)
    vocab = len(learner.policy.tokenizer)

    def sample(advantage):
        ids = torch.randint(4, vocab, (12,), generator=g).tolist()
        return Sample(ids[:9], ids[9:], [-1.0, -1.0, -1.0], advantage)

    rows = []
    learner.model.register_forward_hook(lambda module, args, kwargs, out: rows.append(kwargs["input_ids"].shape[0]),
                                        with_kwargs=True)
    return config, learner, sample, rows


def test_a_group_whose_rewards_are_all_equal_costs_no_forward_or_backward(tmp_path):
    config, learner, sample, rows = _update_setup(tmp_path)
    before = {k: v.clone() for k, v in learner.model.state_dict().items()}
    stats = grpo.update(learner, [sample(0.0) for _ in range(6)], config)
    assert rows == [] and stats["skipped_samples"] == 6.0 and stats["grad_norm"] == 0.0
    assert all(torch.equal(before[k], v) for k, v in learner.model.state_dict().items())
    # mixed: only the samples with an advantage run, and the step is the one over the whole batch
    from llm_zoo.scoring import completion_logprobs

    batch = [sample(0.0), sample(1.0), sample(0.0), sample(-0.5)]
    expected = grpo.make_learner("main", config, torch.device("cpu"), 0).model  # the same initial weights
    logps, mask = completion_logprobs(expected, [b.prompt_ids for b in batch], [b.completion_ids for b in batch],
                                      pad_token_id=learner.policy.pad_token_id)[:2]
    loss, _ = per_token_policy_loss(logps, torch.full_like(logps, -1.0), torch.tensor([b.advantage for b in batch]),
                                    mask, epsilon_low=0.2, epsilon_high=0.2)
    (loss.sum() / mask.sum()).backward()
    torch.nn.utils.clip_grad_norm_(expected.parameters(), grpo.MAX_GRAD_NORM)
    stats = grpo.update(learner, batch, config)
    assert rows == [2] and stats["skipped_samples"] == 2.0
    for (name, p), q in zip(expected.named_parameters(), learner.model.parameters()):
        assert torch.allclose(q.detach(), p.detach() - config.lr * p.grad, atol=1e-6), name


def test_zero_advantages_still_run_where_the_kl_or_entropy_term_acts_on_them(tmp_path):
    # the Kuhn main job's KL to its magnet has a gradient with zero advantages: nothing is skipped there
    assert make_config("kuhn_poker_v0").beta > 0
    for overrides in ({"beta": 0.2}, {"entropy_coef": 0.01}):
        config, learner, sample, rows = _update_setup(tmp_path, **overrides)
        stats = grpo.update(learner, [sample(0.0) for _ in range(3)], config)
        assert rows and sum(rows) >= 3 and stats["skipped_samples"] == 0.0
