"""The unconstrained reading of a model's Kuhn strategy: replies with no decoding mask, the rest forfeits."""

from __future__ import annotations

import math
import random

import pytest

from llm_zoo.envs.kuhn_poker import evaluate, theory


def _random_policy(rng: random.Random) -> dict[str, dict[str, float]]:
    policy = {}
    for info_set in theory.INFO_SETS:
        p = rng.random()
        policy[info_set] = dict(zip(theory.legal_moves(info_set), (p, 1 - p)))
    return policy


def test_with_no_forfeits_it_is_the_exact_exploitability():
    rng = random.Random(0)
    none = dict.fromkeys(theory.INFO_SETS, 0.0)
    for policy in [theory.uniform_policy(), theory.nash_policy(0.25)] + [_random_policy(rng) for _ in range(20)]:
        assert evaluate.forfeit_exploitability(policy, none) == pytest.approx(theory.exploitability(policy), abs=1e-12)


def test_a_forfeit_facing_a_bet_is_a_fold_and_one_at_the_first_move_loses_the_ante():
    rng = random.Random(1)
    policy = _random_policy(rng)
    moves, forfeit = {i: dict(r) for i, r in policy.items()}, dict.fromkeys(theory.INFO_SETS, 0.0)
    for info_set in ("J:bet", "K:check,bet"):  # forfeiting part of the fold mass changes nothing (penalty 1 = the ante)
        forfeit[info_set] = moves[info_set]["fold"] / 2
        moves[info_set]["fold"] -= forfeit[info_set]
    assert evaluate.forfeit_exploitability(moves, forfeit) == pytest.approx(theory.exploitability(policy), abs=1e-12)
    # forfeiting at every info set: each best response wins the ante at once
    nothing = {i: dict.fromkeys(theory.legal_moves(i), 0.0) for i in theory.INFO_SETS}
    assert evaluate.forfeit_exploitability(nothing, dict.fromkeys(theory.INFO_SETS, 1.0)) == pytest.approx(1.0)
    assert evaluate.forfeit_exploitability(nothing, dict.fromkeys(theory.INFO_SETS, 1.0), penalty=3.0) == pytest.approx(3.0)
    # forfeiting a first move that should be a check costs: exploitability rises above the masked reading's
    moves = {i: dict(r) for i, r in theory.nash_policy(0.0).items()}
    forfeit = dict.fromkeys(theory.INFO_SETS, 0.0)
    moves["K:"]["check"], forfeit["K:"] = 0.5, 0.5
    assert evaluate.forfeit_exploitability(moves, forfeit) > 0.05


def test_unconstrained_strategy_reads_reply_then_end_of_turn_with_no_mask():
    pytest.importorskip("torch")
    from llm_zoo.envs.kuhn_poker import text
    from llm_zoo.envs.kuhn_poker.rules import Move
    from llm_zoo.policies.transformers import TransformersPolicy
    from llm_zoo.trainers.grpo import build_tokenizer_and_model, make_config

    config = make_config("kuhn_poker_v0", {"model_hidden_size": 32, "model_zero_head": False, "model_init_std": 0.1})
    tokenizer, model = build_tokenizer_and_model(config, seed=0)
    policy = TransformersPolicy(model, tokenizer, max_new_tokens=1, constrain=True)  # the mask is ignored here
    moves, left = evaluate.unconstrained_strategy(policy, config.env_kwargs)
    info_set = "Q:bet"
    prompt = policy.encode_prompts([evaluate.info_set_observation(info_set, **config.env_kwargs)])[0]
    ids = list(tokenizer.encode(text.reply_for(Move.CALL), add_special_tokens=False)) + [policy.eos_token_ids[0]]
    assert moves[info_set]["call"] == pytest.approx(math.exp(sum(policy.logprobs_of([prompt], [ids])[0])), rel=1e-6)
    assert left[info_set] == pytest.approx(1 - sum(moves[info_set].values()))
    figures = evaluate.unconstrained_figures({"player_0": policy, "player_1": policy}, config.env_kwargs)
    assert figures["valid_mass_min"] == pytest.approx(min(1 - v for v in left.values()))
    assert 0 <= figures["unconstrained_exploitability"] <= 1


def test_a_constrained_models_two_readings_score_each_reply_once():
    """The masked reading of a constrained model with room for end of turn scores the canonical replies the unmasked
    reading scores: ``evaluate_policies`` asks the model for each row once, and its figures are those of the two
    readings made apart."""
    pytest.importorskip("torch")
    from llm_zoo.policies.transformers import TransformersPolicy
    from llm_zoo.trainers.grpo import build_tokenizer_and_model, make_config

    config = make_config("kuhn_poker_v0", {"model_hidden_size": 32, "model_zero_head": False, "model_init_std": 0.1})
    tokenizer, model = build_tokenizer_and_model(config, seed=0)
    policy = TransformersPolicy(model, tokenizer, max_new_tokens=4, constrain=True)
    table, other = evaluate.exact_strategy(policy, config.env_kwargs)  # apart: each a pass of its own
    apart = evaluate.unconstrained_figures({"player_0": policy, "player_1": policy}, config.env_kwargs)
    rows: list[int] = []
    scored = policy.logprobs_of
    policy.logprobs_of = lambda prompts, completions: rows.append(len(prompts)) or scored(prompts, completions)
    figures = evaluate.evaluate_policies({"player_0": policy, "player_1": policy}, env_kwargs=config.env_kwargs)
    assert rows == [24]  # one pass: 12 info sets x 2 legal moves, for both readings
    for info_set, row in table.items():
        assert figures["strategy"][info_set] == pytest.approx(row, abs=1e-6), info_set
    assert figures["other_mass_mean"] == pytest.approx(sum(other.values()) / 12, abs=1e-6)
    for key in ("unconstrained_exploitability", "valid_mass_min", "valid_mass_mean"):
        assert figures[key] == pytest.approx(apart[key], abs=1e-6), key
