"""Exact Leduc theory against OpenSpiel: exploitability within 1e-9 on random policies, uniform's 2.3736."""

from __future__ import annotations

import numpy as np
import pyspiel
import pytest
from open_spiel.python import policy as openspiel_policy
from open_spiel.python.algorithms import exploitability as openspiel_exploitability

from llm_zoo.envs.leduc_poker import theory
from llm_zoo.envs.leduc_poker.theory import INFO_SETS, legal_moves, player_of

GAME = pyspiel.load_game("leduc_poker")


def random_policy(rng: np.random.Generator, concentration: float = 1.0) -> dict[str, dict[str, float]]:
    """Return a random full policy: a Dirichlet row at every info set."""
    return {i: dict(zip(legal_moves(i), map(float, rng.dirichlet(np.full(len(legal_moves(i)), concentration)))))
            for i in INFO_SETS}


def test_info_sets_count_ranks_and_both_seats():
    assert len(INFO_SETS) == 288 == 2 * 144
    assert [player_of(i) for i in INFO_SETS] == [0] * 144 + [1] * 144
    assert legal_moves("J:") == ("check", "bet")
    assert legal_moves("Q:bet") == ("fold", "call", "raise")
    assert legal_moves("KQ:bet,call/bet,raise") == ("fold", "call")
    assert player_of("QK:check,check/bet") == 1
    # every OpenSpiel information state (936, suits included) maps onto one of ours, and all of ours are hit
    keys = openspiel_policy.TabularPolicy(GAME).state_lookup
    assert len(keys) == 936
    assert {theory.from_openspiel_key(k) for k in keys} == set(INFO_SETS)


def test_uniform_exploitability_is_openspiels():
    ours = theory.exploitability(theory.uniform_policy())
    theirs = openspiel_exploitability.exploitability(GAME, openspiel_policy.UniformRandomPolicy(GAME))
    assert abs(ours - theirs) < 1e-12
    assert abs(ours - theory.UNIFORM_EXPLOITABILITY) < 1e-12
    assert round(ours, 4) == 2.3736


@pytest.mark.parametrize("concentration", [1.0, 0.2, 5.0])
def test_exploitability_of_random_policies_matches_openspiel(concentration):
    rng = np.random.default_rng(int(concentration * 10))
    for _ in range(4):
        table = random_policy(rng, concentration)
        ours = theory.exploitability(table)
        theirs = openspiel_exploitability.exploitability(GAME, theory.to_openspiel(table, GAME))
        assert abs(ours - theirs) < 1e-9, (ours, theirs)
        # nash_conv and each seat's best-response value too
        assert abs(theory.nash_conv(table) - openspiel_exploitability.nash_conv(GAME, theory.to_openspiel(table))) < 1e-9


def test_pure_policies_with_zero_rows_match_openspiel():
    rng = np.random.default_rng(3)
    chosen = {i: legal_moves(i)[rng.integers(len(legal_moves(i)))] for i in INFO_SETS}
    table = {i: {m: float(m == chosen[i]) for m in legal_moves(i)} for i in INFO_SETS}
    ours = theory.exploitability(table)
    theirs = openspiel_exploitability.exploitability(GAME, theory.to_openspiel(table))
    assert abs(ours - theirs) < 1e-9


def test_best_response_attains_its_value_and_beats_every_other_reply():
    rng = np.random.default_rng(1)
    table = random_policy(rng)
    for player in (0, 1):
        response = theory.best_response(table, player)
        value = theory.best_response_value(table, player)
        pair = (response, table) if player == 0 else (table, response)
        played = theory.game_value(*pair) * (1 if player == 0 else -1)
        assert abs(played - value) < 1e-12
        for _ in range(5):  # no other policy of that seat does better
            other = random_policy(rng, 0.3)
            pair = (other, table) if player == 0 else (table, other)
            assert theory.game_value(*pair) * (1 if player == 0 else -1) <= value + 1e-12


def test_game_value_is_zero_sum_symmetric_for_uniform_and_matches_openspiel():
    from open_spiel.python.algorithms import expected_game_score

    rng = np.random.default_rng(5)
    a, b = random_policy(rng), random_policy(rng)
    mixed = {**{i: a[i] for i in INFO_SETS if player_of(i) == 0}, **{i: b[i] for i in INFO_SETS if player_of(i) == 1}}
    theirs = expected_game_score.policy_value(GAME.new_initial_state(), [theory.to_openspiel(mixed)] * 2)
    assert abs(theory.game_value(a, b) - theirs[0]) < 1e-12


def test_openspiel_round_trip_and_suit_check():
    rng = np.random.default_rng(2)
    table = theory.validate_policy(random_policy(rng))
    tabular = theory.to_openspiel(table)
    assert theory.from_openspiel(tabular) == table
    tabular.action_probability_array[0] = [0.0, 0.3, 0.7]  # one suit of one info set plays differently
    with pytest.raises(ValueError, match="suits of it play differently"):
        theory.from_openspiel(tabular)


@pytest.mark.parametrize(("policy", "match"), [
    ({"J:": {"check": 1.0}}, "no entry for info set"),
    ({**theory.uniform_policy(), "J:": {"call": 1.0}}, "not legal"),
    ({**theory.uniform_policy(), "J:": {"check": 0.7, "bet": 0.7}}, "sum to 1"),
    ({**theory.uniform_policy(), "J:": {"check": float("nan"), "bet": 1.0}}, "finite"),
    ({**theory.uniform_policy(), "X:": {"check": 1.0}}, "unknown info set"),
])
def test_bad_policies_are_refused_with_the_info_set_named(policy, match):
    with pytest.raises(ValueError, match=match):
        theory.exploitability(policy)
