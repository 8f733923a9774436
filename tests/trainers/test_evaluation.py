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
