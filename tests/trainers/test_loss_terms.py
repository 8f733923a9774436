"""The trainer's per-prompt baselines, validity term, magnet schedule and weight averages (llm_zoo.trainers.loss_terms)."""

from __future__ import annotations

import dataclasses
import json
import math

import pytest

torch = pytest.importorskip("torch")
pytest.importorskip("transformers")

from llm_zoo.trainers import grpo, loss_terms, plugins  # noqa: E402
from llm_zoo.trainers.evaluation import scored_weights  # noqa: E402
from llm_zoo.trainers.grpo import make_config  # noqa: E402

TINY = {"steps": 2, "episodes_per_step": 8, "rollout_batch_size": 8, "model_hidden_size": 32, "eval_every": 1,
        "progress": False, "tensorboard": False, "threads": 1, "lr": 1e-2, "sample_every": 0, "checkpoint_every": 0,
        "warmup_steps": 0, "unmask.steps": 0, "optimizer": "adamw", "beta": 1.0, "magnet.beta_final": 0.0}
"""The exported weights are compared with the learner's below: no fit without the mask after the last step (its own
tests set ``unmask.steps``). AdamW and a constant magnet weight of 1, which these two-step tests of each term are
sized for (the main job's SGD and its rising weight have tests of their own at the end)."""


def test_centre_by_prompt_subtracts_each_prompt_s_mean_and_scales_by_its_std():
    adv = [1.0, 3.0, -2.0, 5.0, 7.0]
    prompts = [[1, 2], [1, 2], [9], [1, 2, 3], [1, 2, 3]]
    assert loss_terms.centre_by_prompt(adv, prompts, "none") == adv
    assert loss_terms.centre_by_prompt(adv, prompts, "prompt") == [-1.0, 1.0, 0.0, -1.0, 1.0]  # [9] alone: 0
    scaled = loss_terms.centre_by_prompt(adv, prompts, "prompt_std")
    assert scaled[0] == pytest.approx(-1 / (1 + loss_terms.STD_EPS)) and scaled[2] == 0.0
    with pytest.raises(ValueError, match="turn_baseline.mode must be one of"):
        loss_terms.centre_by_prompt(adv, prompts, "info_set")


def test_validity_loss_is_minus_the_log_of_the_legal_replies_mass():
    from llm_zoo.envs.kuhn_poker import text
    from llm_zoo.envs.kuhn_poker.rules import Move

    config = make_config("kuhn_poker_v0", {**TINY, "model_zero_head": False, "model_init_std": 0.1})
    tokenizer, model = grpo.build_tokenizer_and_model(config, seed=0)
    eos = tokenizer.eos_token_id
    paths = loss_terms.validity_paths(tokenizer, [text.reply_for(Move.CHECK), text.reply_for(Move.BET)], eos)
    assert all(p[-1] == eos and len(p) >= 2 for p in paths)
    prompt = tokenizer.encode("Your card: K.", add_special_tokens=False)
    loss, mass = loss_terms.validity_loss(model, [(prompt, paths)], pad_token_id=tokenizer.pad_token_id or 0)
    with torch.no_grad():  # the same mass, token by token from the model's own next-token distributions
        expected = 0.0
        for path in paths:
            p, ids = 1.0, list(prompt)
            for token in path:
                p *= torch.softmax(model(torch.tensor([ids])).logits[0, -1], -1)[token].item()
                ids.append(token)
            expected += p
    assert mass == pytest.approx(expected, rel=1e-4) and loss.item() == pytest.approx(-math.log(expected), rel=1e-4)
    loss.backward()
    assert any(p.grad is not None and p.grad.abs().sum() > 0 for p in model.parameters())


def test_magnet_decay_moves_the_horizon_linearly_from_start_to_final():
    assert loss_terms.magnet_decay(7, 100, 0.95, 0.0) == 0.95
    assert loss_terms.magnet_decay(0, 101, 0.95, 0.995) == pytest.approx(0.95)
    assert loss_terms.magnet_decay(100, 101, 0.95, 0.995) == pytest.approx(0.995)
    middle = loss_terms.magnet_decay(50, 101, 0.95, 0.995)
    assert 1 / (1 - middle) == pytest.approx((20 + 200) / 2)


@pytest.mark.parametrize("power", [1.0, 2.0, 0.5])
def test_average_keep_gives_the_running_mean_weighted_by_step_to_the_power(power):
    values = [3.0, -1.0, 4.0, 1.0, -5.0, 9.0]
    average = 0.0
    for t, value in enumerate(values, start=1):
        average += (1.0 - loss_terms.average_keep(t, power)) * (value - average)  # what lerp_ does
        weights = [i ** power for i in range(1, t + 1)]
        assert average == pytest.approx(sum(w * v for w, v in zip(weights, values)) / sum(weights))


def test_validity_coef_raises_the_unconstrained_mass_of_the_legal_replies(tmp_path):
    base = {**TINY, "steps": 6, "eval_every": 0, "policies": {}, "average.ema": 0.0}  # score the learner itself
    without = grpo.train(make_config("kuhn_poker_v0", {**base, "run_dir": str(tmp_path / "off")}))
    with_term = grpo.train(make_config("kuhn_poker_v0", {**base, "run_dir": str(tmp_path / "on"), "validity.coef": 1.0}))
    # the masked figures are read as before; the unconstrained ones sit beside them
    assert {"exploitability", "unconstrained_exploitability", "valid_mass_min"} <= set(with_term)
    assert with_term["valid_mass_mean"] > 10 * without["valid_mass_mean"]


def test_average_debias_makes_the_average_the_learner_after_one_step(tmp_path):
    from safetensors.torch import load_file

    config = make_config("kuhn_poker_v0", {**TINY, "steps": 1, "run_dir": str(tmp_path), "average.ema": 0.99,
                                           "average.debias": True, "average.power": 0.0, "policies": {}})
    grpo.train(config)
    ckpt = tmp_path / "checkpoints" / "step_000001"
    exported = load_file(str(ckpt / "policies" / "main" / "model.safetensors"))
    learner = torch.load(ckpt / "main.trainer.pt", weights_only=False)["learner"]
    assert all(torch.allclose(exported[k], learner[k]) for k in exported)  # plain EMA: 99% the initial weights


def _kuhn_unmask_items(policy, env_kwargs):
    from llm_zoo.envs.kuhn_poker import evaluate, theory

    prompts = {}
    for info_set in theory.INFO_SETS:
        observation = evaluate.info_set_observation(info_set, **env_kwargs)
        prompts[tuple(policy.encode_prompts([observation])[0])] = observation["legal_actions"]
    return loss_terms.unmask_items(policy.tokenizer, prompts, policy.eos_token_ids[0], policy.max_new_tokens)


def test_unmask_fit_puts_the_mass_on_the_legal_replies_without_moving_the_masked_strategy():
    from llm_zoo.envs.kuhn_poker import evaluate
    from llm_zoo.policies.transformers import TransformersPolicy

    config = make_config("kuhn_poker_v0", {**TINY, "model_zero_head": False, "model_init_std": 0.1})
    tokenizer, model = grpo.build_tokenizer_and_model(config, seed=0)
    policy = TransformersPolicy(model.requires_grad_(False), tokenizer, max_new_tokens=1, constrain=True)  # frozen,
    items = _kuhn_unmask_items(policy, config.env_kwargs)  # as the trainer keeps its weights' average
    assert len(items) == 12 and all(len(i.reply_paths) == 2 and i.reply_paths[0][-1] == policy.eos_token_ids[0]
                                    for i in items)
    masked_before, _ = evaluate.exact_strategy(policy, config.env_kwargs)
    stats = loss_terms.unmask_fit(model, items, steps=400, lr=3e-3, pad_token_id=policy.pad_token_id,
                                  prompts_per_pass=5)  # three passes a step: 5 + 5 + 2 prompts
    masked_after, _ = evaluate.exact_strategy(policy, config.env_kwargs)
    moves, left = evaluate.unconstrained_strategy(policy, config.env_kwargs)
    assert stats["valid_mass_min_before"] < 0.05 and stats["valid_mass_min"] > 0.99 and stats["prompts"] == 12
    # the eval's own reading of the unconstrained mass is the fit's
    assert min(1 - v for v in left.values()) == pytest.approx(stats["valid_mass_min"], abs=1e-4)
    for info_set, row in masked_before.items():
        for move, p in row.items():
            assert masked_after[info_set][move] == pytest.approx(p, abs=0.01)
            assert moves[info_set][move] == pytest.approx(p, abs=0.015)  # no mask: the same strategy
    assert stats["tv_max"] <= 0.01
    assert not any(p.requires_grad or p.grad is not None for p in model.parameters())  # frozen again
    with pytest.raises(ValueError, match="unmask_fit needs"):
        loss_terms.unmask_fit(model, items, steps=1, lr=0.0, pad_token_id=policy.pad_token_id)


def test_unmask_steps_fits_the_delivered_policy_after_the_last_step(tmp_path):
    base = {**TINY, "steps": 3, "eval_every": 0}
    off = grpo.train(make_config("kuhn_poker_v0", {**base, "run_dir": str(tmp_path / "off"), "unmask.steps": 0}))
    on = grpo.train(make_config("kuhn_poker_v0", {**base, "run_dir": str(tmp_path / "on"), "unmask.steps": 120}))
    assert off["valid_mass_min"] < 0.01 and on["valid_mass_min"] > 0.95
    # the same RL steps (the fit comes after them), and the fit keeps the masked strategy
    assert on["exploitability"] == pytest.approx(off["exploitability"], abs=0.01)
    assert on["unconstrained_exploitability"] == pytest.approx(on["exploitability"], abs=0.02)
    last = json.loads((tmp_path / "on" / "metrics.jsonl").read_text().splitlines()[-1])
    for seat in ("seat_0", "seat_1"):
        assert last[f"unmask/prompts/{seat}"] == 6 and last[f"unmask/valid_mass_min/{seat}"] > 0.95
    assert not any(k.startswith("unmask/") for k in json.loads((tmp_path / "off" / "metrics.jsonl").read_text()
                                                                 .splitlines()[-1]))


def test_new_fields_are_checked():
    for bad in ({"unmask.steps": -1}, {"unmask.prompts": 0}, {"unmask.lr": 0.0}, {"unmask.lr": float("nan")}):
        with pytest.raises(ValueError, match="config.unmask."):
            make_config("kuhn_poker_v0", bad)
    with pytest.raises(ValueError, match="config.turn_baseline.mode"):
        make_config("kuhn_poker_v0", {"turn_baseline.mode": "card"})
    with pytest.raises(ValueError, match="config.validity.coef"):
        make_config("kuhn_poker_v0", {"validity.coef": -1})
    with pytest.raises(ValueError, match="config.magnet.ema_final"):
        make_config("kuhn_poker_v0", {"magnet.ema_final": 1.0})
    with pytest.raises(ValueError, match="config.magnet.ema_final"):
        make_config("kuhn_poker_v0", {"magnet.ema": 1.0, "magnet.ema_final": 0.99})
    with pytest.raises(ValueError, match="config.average.power"):
        make_config("kuhn_poker_v0", {"average.power": -1.0})


def test_average_power_makes_the_exported_average_the_step_weighted_mean_of_the_learner(tmp_path):
    from safetensors.torch import load_file

    config = make_config("kuhn_poker_v0", {**TINY, "steps": 2, "run_dir": str(tmp_path), "checkpoint_every": 1,
                                           "average.ema": 0.99, "average.power": 1.0, "policies": {}})
    grpo.train(config)
    learner = [torch.load(tmp_path / "checkpoints" / f"step_{s:06d}" / "main.trainer.pt", weights_only=False)["learner"]
               for s in (1, 2)]
    exported = load_file(str(tmp_path / "checkpoints" / "step_000002" / "policies" / "main" / "model.safetensors"))
    moved = 0
    for k in exported:
        expected = (1 * learner[0][k] + 2 * learner[1][k]) / 3  # weights step ** 1 over steps 1 and 2
        assert torch.allclose(exported[k], expected, atol=1e-6), k
        moved += not torch.equal(learner[0][k], learner[1][k])
    assert moved  # the learner changed between the steps, so the weighting is seen
    assert scored_weights(json.loads((tmp_path / "config.json").read_text())) == \
        "average (average.ema=0.99, average.power=1)"


def test_the_magnet_follows_the_learner_at_the_scheduled_decay(tmp_path):
    config = make_config("kuhn_poker_v0", {**TINY, "steps": 1, "run_dir": str(tmp_path), "policies": {},
                                           "beta": 1.0, "magnet.ema": 0.5, "magnet.ema_final": 0.9})
    learners = {}
    original = grpo.update

    def spy(learner, batch, cfg, **kwargs):
        before = {k: v.clone() for k, v in learner.reference.state_dict().items()}
        stats = original(learner, batch, cfg, **kwargs)
        learners["ref_before"], learners["ref"] = before, learner.reference.state_dict()
        learners["model"] = learner.model.state_dict()
        return stats

    grpo.update = spy
    try:
        grpo.train(config)
    finally:
        grpo.update = original
    # one step of one: the decay at step 0 is magnet.ema's 0.5, so the magnet lands halfway to the learner
    for k, ref in learners["ref"].items():
        assert torch.allclose(ref, 0.5 * learners["ref_before"][k] + 0.5 * learners["model"][k], atol=1e-6), k


def test_magnet_average_from_makes_the_magnet_the_average_from_its_step_on(tmp_path):
    from safetensors.torch import load_file

    config = make_config("kuhn_poker_v0", {**TINY, "steps": 4, "run_dir": str(tmp_path), "checkpoint_every": 1,
                                           "keep_checkpoints": 4, "policies": {}, "beta": 1.0, "magnet.ema": 0.5, "average.ema": 0.9,
                                           "average.power": 1.0, "magnet.average_from": 0.5})
    assert plugins.Magnet(config).average_start() == 2  # steps 0, 1: the magnet's own EMA; from step 2 (the third) on
    grpo.train(config)

    def read(step):
        ckpt = tmp_path / "checkpoints" / f"step_{step:06d}"
        state = torch.load(ckpt / "main.trainer.pt", weights_only=False)
        return state["reference"], state["learner"], load_file(str(ckpt / "policies" / "main" / "model.safetensors"))

    reference, learner, average = read(2)  # after steps 0 and 1: an EMA of the learner, neither it nor the average
    assert any(not torch.equal(reference[k], average[k]) for k in average)
    assert any(not torch.equal(reference[k], learner[k]) for k in average)
    for step in (3, 4):
        reference, learner, average = read(step)
        assert all(torch.equal(reference[k], average[k]) for k in average), step
        assert any(not torch.equal(reference[k], learner[k]) for k in average)  # the learner leads it
    for bad in ({"magnet.average_from": 1.0}, {"magnet.average_from": -0.1}, {"magnet.average_from": float("nan")}):
        with pytest.raises(ValueError, match="config.magnet.average_from"):
            make_config("kuhn_poker_v0", bad)


def test_body_lr_scale_moves_the_body_at_its_share_of_the_step(tmp_path):
    config = make_config("kuhn_poker_v0", {**TINY, "steps": 2, "run_dir": str(tmp_path), "checkpoint_every": 2,
                                           "policies": {}, "body_lr.scale": 0.0, "average.ema": 0.0,
                                           "model_zero_head": False})
    _, initial = grpo.build_tokenizer_and_model(config, seed=config.seed)  # the learner's own starting weights
    grpo.train(config)
    from safetensors.torch import load_file

    trained = load_file(str(tmp_path / "checkpoints" / "step_000002" / "policies" / "main" / "model.safetensors"))
    start = initial.state_dict()
    moved = {k for k in trained if not torch.equal(trained[k], start[k])}
    assert moved == {"lm_head.weight"}  # a body at rate 0 stays where it started; the output layer learns
    groups = grpo.param_groups(initial, dataclasses.replace(config, body_lr=plugins.BodyLRConfig(0.25)))
    assert [g["lr_scale"] for g in groups] == [1.0, 0.25]
    assert [p for g in groups for p in g["params"]] != [] and len(groups[0]["params"]) == 1
    assert sum(len(g["params"]) for g in groups) == len(list(initial.parameters()))
    assert len(grpo.param_groups(initial, dataclasses.replace(config, body_lr=plugins.BodyLRConfig(1.0)))) == 1
    for bad in (-0.1, 1.5, float("nan")):
        with pytest.raises(ValueError, match="config.body_lr.scale"):
            make_config("kuhn_poker_v0", {"body_lr.scale": bad})


@pytest.mark.parametrize("optimizer", ["sgd", "adamw"])
def test_sgd_steps_by_the_clipped_gradient_where_adamw_steps_by_lr_on_every_weight(tmp_path, optimizer):
    from safetensors.torch import load_file

    lr = 1e-2
    config = make_config("kuhn_poker_v0", {**TINY, "steps": 1, "run_dir": str(tmp_path), "checkpoint_every": 1,
                                           "policies": {}, "average.ema": 0.0, "model_zero_head": False,
                                           "optimizer": optimizer, "lr": lr, "lr_schedule": "constant"})
    _, initial = grpo.build_tokenizer_and_model(config, seed=config.seed)
    grpo.train(config)
    trained = load_file(str(tmp_path / "checkpoints" / "step_000001" / "policies" / "main" / "model.safetensors"))
    start = initial.state_dict()
    step = math.sqrt(sum(float(((trained[k] - start[k]) ** 2).sum()) for k in trained))
    assert step > 0.0
    if optimizer == "sgd":  # -lr * the gradient, whose norm is clipped to MAX_GRAD_NORM
        assert step <= lr * grpo.MAX_GRAD_NORM * (1 + 1e-5)
    else:  # AdamW's first step is about lr on every weight with a gradient, whatever the gradient's size
        assert step > 10 * lr * grpo.MAX_GRAD_NORM
    with pytest.raises(ValueError, match="config.optimizer must be one of"):
        make_config("kuhn_poker_v0", {"optimizer": "adam"})


def test_kl_weight_holds_beta_until_its_start_then_moves_linearly_to_beta_final():
    assert loss_terms.kl_weight(7, 10, 0.2, 0.0, start=0) == 0.2  # final 0: off
    assert [loss_terms.kl_weight(s, 11, 0.2, 1.0, start=6) for s in (0, 6)] == [0.2, 0.2]
    assert loss_terms.kl_weight(8, 11, 0.2, 1.0, start=6) == pytest.approx(0.2 + 0.8 * 2 / 4)
    assert loss_terms.kl_weight(10, 11, 0.2, 1.0, start=6) == pytest.approx(1.0)  # the last step
    assert loss_terms.kl_weight(10, 11, 0.2, 1.0) == pytest.approx(1.0)
    assert loss_terms.kl_weight(5, 11, 0.2, 1.0) == pytest.approx(0.6)  # from the start: half way at step 5
    for bad in ({"magnet.beta_final": -1.0}, {"magnet.beta_final": float("nan")}, {"beta": 0.0, "magnet.beta_final": 1.0}):
        with pytest.raises(ValueError, match="config.magnet.beta_final"):
            make_config("kuhn_poker_v0", bad)
