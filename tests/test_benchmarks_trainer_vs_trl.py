"""benchmarks/trainer_vs_trl.py: its task is exact and unexploitable, and its smallest setting runs both trainers."""

from __future__ import annotations

import json
import warnings

import pytest

from benchmarks import trainer_vs_trl
from llm_zoo.envs.kuhn_poker import theory
from llm_zoo.envs.kuhn_poker.rules import CARDS, Move


def test_move_values_agree_with_the_theory_modules_best_response():
    bench = trainer_vs_trl
    by_decision = dict(zip(bench.DECISIONS, bench.VALUES))
    # player_0: each card with probability 1/3, then the better first move
    first = sum(max(by_decision[0, c, ()].values()) for c in range(3)) / 3
    # player_1: its card, then what player_0 (the opponent) did first with its own card
    second = 0.0
    for card in range(3):
        for move in (Move.CHECK, Move.BET):
            reach = sum(0.5 * bench.OPPONENT[f"{CARDS[other]}:"][move.value] for other in range(3) if other != card)
            second += reach / 3 * max(by_decision[1, card, (move,)].values())
    assert first == pytest.approx(theory.best_response(bench.OPPONENT, 0)[0], abs=1e-12)
    assert second == pytest.approx(theory.best_response(bench.OPPONENT, 1)[0], abs=1e-12)
    # one value by hand: player_1 holds K facing a bet; the opponent never bets Q, so it holds J
    assert by_decision[1, 2, (Move.BET,)] == {Move.CALL: 2.0, Move.FOLD: -1.0}
    # no decision is a tie, so every prompt has a better move to learn
    assert all(abs(a - b) > 0.05 for a, b in (tuple(v.values()) for v in bench.VALUES))


def test_no_unreadable_reply_pays_more_than_a_legal_move():
    bench = trainer_vs_trl
    worst_legal = min(min(v.values()) for v in bench.VALUES)
    assert bench.INVALID_REWARD <= worst_legal
    first_k = bench.DECISIONS.index((0, 2, ()))
    for reply in ("", "[check] [bet]", "check or bet", "[call]", "fold", "\x00[bet]\x00[check]", "betting"):
        assert bench.reward_of(reply, first_k) == bench.INVALID_REWARD, reply
    assert bench.reward_of("I hold the king, so [bet]", first_k) == bench.VALUES[first_k][Move.BET]


def test_the_one_turn_env_passes_pettingzoo_tests_and_shows_the_kuhn_envs_prompts():
    from pettingzoo.test import api_test, seed_test

    bench = trainer_vs_trl
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # api_test warns about Text spaces it cannot sample well
        api_test(bench.env(), num_cycles=5)
        seed_test(bench.env)
    env = bench.env()
    for seed in range(20):
        env.reset(seed=seed)
        decision = env.unwrapped.decision
        assert env.observe("player")["messages"] == bench.decision_messages(decision, bench.ENV_KWARGS)
        env.step("[fold]" if bench.DECISIONS[decision][2] == (Move.BET,) else "[check]")
        assert env.terminations["player"]
        assert env.rewards["player"] == min(bench.VALUES[decision][m] for m in (Move.FOLD, Move.CHECK)
                                            if m in bench.VALUES[decision])


def test_quick_run_trains_both_on_the_same_prompts_and_ends_with_the_json_line(capsys, tmp_path):
    figures = trainer_vs_trl.main(["--quick", "--out", str(tmp_path)])
    out = capsys.readouterr().out.strip().splitlines()
    assert json.loads(out[-1]) == figures
    keys = ("speedup", "speedup_end_to_end", "llm_zoo_completions_per_s", "trl_completions_per_s",
            "llm_zoo_s_per_step", "trl_s_per_step", "llm_zoo_final_reward", "trl_final_reward",
            "llm_zoo_reward_last_quarter", "trl_reward_last_quarter", "reward_no_worse", "best_reward",
            "reward_diff_curve", "reward_diff_curve_se", "reward_diff_final", "reward_diff_final_se",
            "same_prompts", "same_prompt_ids", "loss_gradient_rel_diff", "trl_loss_type", "threads", "seconds")
    assert set(keys) <= set(figures)
    assert figures["llm_zoo_steps"] == figures["trl_steps"] == figures["steps"] == 2
    assert figures["same_prompts"] is True and figures["same_prompt_ids"] is True
    # the same loss: llm_zoo's update and TRL's _compute_loss give one batch the same gradient
    assert figures["loss_gradient_rel_diff"] is not None and figures["loss_gradient_rel_diff"] < 1e-4
    assert figures["speedup"] == pytest.approx(
        figures["llm_zoo_completions_per_s"] / figures["trl_completions_per_s"], rel=1e-2)
    for side in ("llm_zoo", "trl"):
        assert figures[f"{side}_completions_per_s"] > 0
        assert -2.0 <= figures[f"{side}_final_reward"] <= figures["best_reward"]
    saved = json.loads((tmp_path / "figures.json").read_text())
    assert figures["seeds"] == 1 and len(saved["runs"]) == 1
    assert all(len(saved["runs"][0]["rows"][side]["rewards"]) == 2 for side in ("llm_zoo", "trl"))
    assert (tmp_path / "trainer_vs_trl.png").stat().st_size > 0
    assert figures["trl_loss_type"] == "dapo" and figures["threads"] == 1


def test_bad_setting_is_refused():
    with pytest.raises(SystemExit):
        trainer_vs_trl.main(["--steps", "0"])
    with pytest.raises(SystemExit):
        trainer_vs_trl.main(["--group-size", "1"])
    with pytest.raises(SystemExit):
        trainer_vs_trl.main(["--seeds", "0"])


def test_pretrained_row_trains_lora_adapters_only_on_both_sides(capsys, tmp_path, tiny_model_dir):
    from llm_zoo.catalogue import is_pretrained
    from llm_zoo.envs.kuhn_poker import text

    # a saved model without the trainer's tiny-model mark: both sides load it as a pretrained model
    model = tiny_model_dir("pretrained", shape="smallest", tokenizer="words", corpus=text.corpus())
    assert is_pretrained(model)
    figures = trainer_vs_trl.main(["--quick", "--model", str(model), "--lora-r", "4", "--lora-alpha", "8",
                                   "--max-new-tokens", "2", "--group-size", "4", "--prompts-per-step", "4",
                                   "--out", str(tmp_path)])
    out = capsys.readouterr().out
    assert json.loads(out.strip().splitlines()[-1]) == figures
    # the JSON line and every table row name the model and its LoRA setting
    label = "pretrained, LoRA r4 alpha 8 dropout 0 on all-linear"
    assert (figures["model"], figures["model_label"], figures["lora_r"], figures["lora_alpha"]) == (
        str(model), label, 4, 8.0)
    assert figures["lora_target_modules"] == "all-linear" and figures["lora_dropout"] == 0.0
    assert sum(line.startswith("   0 ") and line.endswith(label) for line in out.splitlines()) == 2
    assert figures["same_prompts"] is True and figures["same_prompt_ids"] is True
    assert figures["llm_zoo_steps"] == figures["trl_steps"] == 2 and figures["completions_per_step"] == 16
    # the same loss on the LoRA model: the adapters' gradients agree
    assert figures["loss_gradient_rel_diff"] is not None and figures["loss_gradient_rel_diff"] < 1e-4
    saved = json.loads((tmp_path / "figures.json").read_text())
    for side in ("llm_zoo", "trl"):
        row = saved["runs"][0]["rows"][side]
        adapters = row["adapters"]
        # what trained is LoRA matrices alone (one A and one B per adapted linear layer), the base did not move,
        # and the adapters did (peft starts B at zero)
        assert adapters["all_lora"] and adapters["base_unchanged"], (side, adapters)
        assert adapters["trained_weights"] == 14 and adapters["lora_b_norm"] > 0, (side, adapters)
    assert figures["adapters_only"] == {"llm_zoo": True, "trl": True}


def test_lora_flags_need_a_pretrained_model_that_exists(tmp_path):
    with pytest.raises(SystemExit):
        trainer_vs_trl.main(["--quick", "--lora-r", "4"])  # the tiny model trains whole
    with pytest.raises(SystemExit):
        trainer_vs_trl.main(["--quick", "--model", str(tmp_path / "missing")])
    with pytest.raises(SystemExit):
        trainer_vs_trl.main(["--quick", "--model", str(tmp_path), "--lora-r", "-1"])
