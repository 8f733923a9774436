"""Sampled evaluation figures carry their 95% interval, and eval's output says which figures are sampled."""

from __future__ import annotations

import math

from llm_zoo.envs.kuhn_poker.scripted import PLAYERS
from llm_zoo.trainers.evaluation import play_against

KUHN = "kuhn_poker_v0"


def _nash_vs(opponent: str, episodes: int) -> dict[str, float]:
    me = PLAYERS["nash"](seed=1)
    return play_against(KUHN, {"player_0": me, "player_1": me}, PLAYERS[opponent](seed=2), episodes=episodes, seed=0)


def test_sampled_payoff_has_an_interval_that_holds_the_known_value_and_shrinks():
    # nash against nash, each seat half the time: the expected payoff is (-1/18 + 1/18) / 2 = 0 exactly
    small, large = _nash_vs("nash", 200), _nash_vs("nash", 1800)
    for result in (small, large):
        assert result["mean_payoff_ci95"] > 0
        assert abs(result["mean_payoff"]) < result["mean_payoff_ci95"], result
    # the half-width goes as 1/sqrt(n): 9x the games, about a third of the width
    assert 0.25 < large["mean_payoff_ci95"] / small["mean_payoff_ci95"] < 0.42


def test_one_game_has_no_interval():
    assert math.isnan(_nash_vs("random", 1)["mean_payoff_ci95"])


def test_a_sampled_strategy_carries_intervals_that_hold_the_exact_figures_and_shrink():
    from llm_zoo.envs.kuhn_poker import theory
    from llm_zoo.envs.kuhn_poker.evaluate import evaluate
    from llm_zoo.policies import RandomPolicy

    exact = theory.exploitability(theory.uniform_policy())  # a uniform pick among the legal replies
    small = evaluate(RandomPolicy(seed=3), method="sampled", samples=64)
    large = evaluate(RandomPolicy(seed=3), method="sampled", samples=1024)
    for result in (small, large):
        lo, hi = result["exploitability_ci95"]
        assert lo <= result["exploitability"] <= hi and lo <= exact <= hi, (result["exploitability_ci95"], exact)
        assert set(result) >= {"payoff_vs_nash_ci95", "payoff_vs_uniform_ci95"}
    # 16x the replies: about a quarter of the width
    width = [r["exploitability_ci95"][1] - r["exploitability_ci95"][0] for r in (small, large)]
    assert 0.1 < width[1] / width[0] < 0.45, width
