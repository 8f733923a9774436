"""The headline evaluation of leduc_poker_v0: a model's exact strategy at all 288 info sets, scored exactly."""

from __future__ import annotations

import json
import math

import pytest

from llm_zoo import leduc_poker_v0, models
from llm_zoo.envs.leduc_poker import evaluate, text, theory
from llm_zoo.envs.leduc_poker.rules import Move
from llm_zoo.policies import TransformersPolicy


def tiny_policy(constrain: bool = False, seed: int = 0) -> TransformersPolicy:
    tokenizer = models.build_word_tokenizer(leduc_poker_v0.SPEC.corpus())
    model = models.build_tiny_model(tokenizer, hidden_size=32, seed=seed)
    return TransformersPolicy(model, tokenizer, max_new_tokens=1, seed=0, device="cpu", constrain=constrain)


def test_observations_are_the_envs_at_each_info_set():
    observations = evaluate.info_set_observations({"rules_in_prompt": False})
    assert [o["info_set"] for o in observations] == list(theory.INFO_SETS)
    assert all(o["legal_actions"] == text.legal_replies([Move(m) for m in theory.legal_moves(o["info_set"])])
               for o in observations)
    assert "Public card: Q" in observations[theory.INFO_SETS.index("KQ:bet,call/")]["messages"][-1]["content"]


def test_enumerated_strategy_holds_every_reply_that_parses_as_the_move():
    policy = tiny_policy()
    table, other = evaluate.exact_strategy(policy, {"rules_in_prompt": False})
    assert set(table) == set(theory.INFO_SETS)
    theory.validate_policy(table)  # rows over the legal moves, summing to 1
    # against the canonical reading: enumeration counts "[raise]" and every other reply read as a raise
    observations = evaluate.info_set_observations({"rules_in_prompt": False})
    canonical, canonical_other = evaluate._canonical_strategy(policy, observations)
    for info_set in theory.INFO_SETS:
        assert 0.0 <= other[info_set] <= canonical_other[info_set] + 1e-9
    # one info set by hand: the model's next-token probabilities of the replies read as each legal move
    info_set = "QK:check,check/bet"
    obs = observations[theory.INFO_SETS.index(info_set)]
    probs = policy.next_token_logprobs(policy.encode_prompts([obs]))[0].exp()
    words = policy.tokenizer.convert_ids_to_tokens(list(range(len(probs))))
    mass = {m: sum(float(p) for w, p in zip(words, probs)
                   if text.parse_move(w, tuple(Move(x) for x in theory.legal_moves(info_set))) is Move(m))
            for m in theory.legal_moves(info_set)}
    total = sum(mass.values())
    assert table[info_set] == pytest.approx({m: v / total for m, v in mass.items()}, abs=1e-6)


def test_constrained_policy_is_read_as_the_legal_replies_it_samples():
    policy = tiny_policy(constrain=True, seed=1)
    result = leduc_poker_v0.SPEC.evaluate({"player_0": policy, "player_1": policy}, env_kwargs={})
    assert result["exploitability"] == pytest.approx(theory.exploitability(result["strategy"]), abs=1e-12)
    assert 0 < result["exploitability"] < 13
    assert 0 <= result["other_mass_mean"] <= 1


def test_each_seat_is_read_from_its_own_policy():
    a, b = tiny_policy(seed=1), tiny_policy(seed=2)
    mixed = evaluate.evaluate_policies({"player_0": a, "player_1": b})["strategy"]
    only_a = evaluate.evaluate_policies({"player_0": a, "player_1": a})["strategy"]
    only_b = evaluate.evaluate_policies({"player_0": b, "player_1": b})["strategy"]
    for info_set in theory.INFO_SETS:
        expected = only_a if theory.player_of(info_set) == 0 else only_b
        assert mixed[info_set] == expected[info_set]


def test_training_one_step_reports_the_exact_exploitability_of_both_iterates(tmp_path):
    from llm_zoo.trainers.grpo import make_config, train

    config = make_config("leduc_poker_v0", {"steps": 2, "episodes_per_step": 8, "rollout_batch_size": 8,
                                            "model_hidden_size": 32, "eval_every": 1, "progress": False,
                                            "tensorboard": False, "run_dir": str(tmp_path), "lr": 1e-2})
    result = train(config)
    assert result["exploitability"] == pytest.approx(theory.exploitability(result["strategy"]), abs=1e-12)
    rows = [json.loads(r) for r in (tmp_path / "metrics.jsonl").read_text().splitlines()]
    assert all(math.isfinite(r["eval/learner/exploitability"]) for r in rows)
    assert rows[-1]["eval/exploitability"] == pytest.approx(result["exploitability"], abs=1e-12)
    assert rows[-1]["charts/invalid_reply_rate"] == 0.0  # masking: every sampled reply is legal


def test_a_sampled_reading_is_refused_rather_than_silently_exact():
    with pytest.raises(ValueError, match="method must be 'exact'"):
        evaluate.evaluate_policies({"player_0": None, "player_1": None}, method="sampled")


def test_a_policy_that_cannot_score_tokens_is_refused_naming_the_protocol():
    from llm_zoo.policy import RandomPolicy

    with pytest.raises(TypeError, match=r"leduc_poker_v0's exact evaluation .*llm_zoo.policy.ScoresTokens.*got RandomPolicy"):
        leduc_poker_v0.SPEC.evaluate({"player_0": RandomPolicy(seed=0), "player_1": RandomPolicy(seed=1)}, env_kwargs={})
