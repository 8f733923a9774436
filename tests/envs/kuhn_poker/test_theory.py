"""Tests for llm_zoo.envs.kuhn_poker.theory: exact values, best responses, OpenSpiel agreement."""

from __future__ import annotations

import itertools
import math

import numpy as np
import pytest

from llm_zoo.envs.kuhn_poker import theory
from llm_zoo.envs.kuhn_poker.theory import (
    GAME_VALUE,
    INFO_SETS,
    UNIFORM_EXPLOITABILITY,
    best_response,
    exploitability,
    game_value,
    legal_moves,
    nash_conv,
    nash_policy,
    player_of,
    pure_policy,
    uniform_policy,
    validate_policy,
)

ALPHAS = [0.0, 1 / 18, 1 / 9, 1 / 6, 2 / 9, 5 / 18, 1 / 3]
P0 = INFO_SETS[:6]


def everywhere(first: str, facing_bet: str, player: int) -> dict[str, dict[str, float]]:
    """Return a pure one-player policy: `first` when nobody has bet, `facing_bet` when facing one."""
    return pure_policy(
        {i: first if "check" in legal_moves(i) else facing_bet for i in INFO_SETS if player_of(i) == player}
    )


def random_policy(rng: np.random.Generator) -> dict[str, dict[str, float]]:
    """Return a random full policy: a Dirichlet(1, 1) row at every info set."""
    return {i: dict(zip(legal_moves(i), map(float, rng.dirichlet(np.ones(2))))) for i in INFO_SETS}


def all_pure(player: int) -> list[dict[str, dict[str, float]]]:
    """Return all 2**6 pure policies of `player`."""
    own = [i for i in INFO_SETS if player_of(i) == player]
    return [pure_policy(dict(zip(own, moves))) for moves in itertools.product(*(legal_moves(i) for i in own))]


# --- info sets -------------------------------------------------------------------------------------


def test_info_sets_are_the_twelve_documented_ones_in_order():
    assert INFO_SETS == (
        "J:", "Q:", "K:", "J:check,bet", "Q:check,bet", "K:check,bet",
        "J:check", "Q:check", "K:check", "J:bet", "Q:bet", "K:bet",
    )  # fmt: skip
    assert [player_of(i) for i in INFO_SETS] == [0] * 6 + [1] * 6
    assert legal_moves("J:") == legal_moves("K:check") == ("check", "bet")
    assert legal_moves("Q:bet") == legal_moves("K:check,bet") == ("call", "fold")


@pytest.mark.parametrize("bad", ["A:", "K", "K:bet,call", "k:check", ""])
def test_unknown_info_set_is_refused(bad):
    with pytest.raises(ValueError, match="unknown info set"):
        legal_moves(bad)
    with pytest.raises(ValueError, match="unknown info set"):
        player_of(bad)


# --- known values ----------------------------------------------------------------------------------


def test_uniform_exploitability_is_11_over_24():
    # Hand computation (both halves also asserted below): BR_0 = 1/2, BR_1 = 5/12, mean 11/24.
    assert UNIFORM_EXPLOITABILITY == pytest.approx(0.4583333333333333, abs=1e-15)
    assert exploitability(uniform_policy()) == pytest.approx(11 / 24, abs=1e-12)
    assert nash_conv(uniform_policy()) == pytest.approx(11 / 12, abs=1e-12)


def test_best_response_against_uniform_matches_hand_computation():
    # player_1 vs uniform player_0 (bets 1/2, calls 1/2 after check-bet):
    #   facing a bet: K calls (+2), Q calls (J or K equally: 0 > -1), J folds (-1 > -2);
    #   after a check: bet beats check for every card: K 1.5 > 1, Q 0.5 > 0, J -0.5 > -1.
    #   K: 1/2*2 + 1/2*1.5 = 1.75, Q: 1/2*0 + 1/2*0.5 = 0.25, J: 1/2*-1 + 1/2*-0.5 = -0.75 -> 5/12.
    value_1, br_1 = best_response(uniform_policy(), 1)
    assert value_1 == pytest.approx(5 / 12, abs=1e-12)
    assert br_1 == everywhere("bet", "call", 1) | pure_policy({"J:bet": "fold"})
    # player_0 vs uniform player_1: at check-bet K/Q call (+2, 0), J folds (-1);
    #   first move: Q bets (0.5 > 0), J bets (-0.5 > -1), K is a tie (1.5 either way) -> 1/2.
    value_0, br_0 = best_response(uniform_policy(), 0)
    assert value_0 == pytest.approx(1 / 2, abs=1e-12)
    assert br_0["J:"]["bet"] == br_0["Q:"]["bet"] == 1.0
    assert br_0["J:check,bet"]["fold"] == br_0["Q:check,bet"]["call"] == br_0["K:check,bet"]["call"] == 1.0


@pytest.mark.parametrize("alpha", ALPHAS)
def test_every_nash_policy_has_zero_exploitability_and_the_game_value(alpha):
    nash = nash_policy(alpha)
    assert exploitability(nash) < 1e-9
    assert game_value(nash, nash) == pytest.approx(GAME_VALUE, abs=1e-12)
    assert best_response(nash, 0)[0] == pytest.approx(GAME_VALUE, abs=1e-12)
    assert best_response(nash, 1)[0] == pytest.approx(-GAME_VALUE, abs=1e-12)


@pytest.mark.parametrize("alpha, beta", itertools.product(ALPHAS[::2], ALPHAS[1::2]))
def test_nash_policies_mixed_with_each_other_keep_the_game_value(alpha, beta):
    assert game_value(nash_policy(alpha), nash_policy(beta)) == pytest.approx(-1 / 18, abs=1e-12)
    assert game_value(nash_policy(beta), nash_policy(alpha)) == pytest.approx(-1 / 18, abs=1e-12)


def test_nash_policy_follows_kuhns_table():
    nash = nash_policy(0.25)
    assert nash["J:"] == {"check": 0.75, "bet": 0.25}
    assert nash["K:"] == {"check": 0.25, "bet": 0.75}
    assert nash["Q:check,bet"]["call"] == pytest.approx(0.25 + 1 / 3)
    assert nash["Q:bet"]["call"] == nash["J:check"]["bet"] == pytest.approx(1 / 3)
    assert nash["Q:"]["bet"] == nash["Q:check"]["bet"] == nash["J:bet"]["call"] == 0.0


@pytest.mark.parametrize("alpha", [-0.01, 1 / 3 + 1e-9, math.nan, "0.1"])
def test_nash_policy_refuses_alpha_outside_range(alpha):
    with pytest.raises(ValueError, match=r"alpha must be a number in \[0, 1/3\]"):
        nash_policy(alpha)


# Each case: (player_0's first move, its move facing a bet after check-bet), the same for player_1
# (move after a check, move facing a bet), and player_0's value computed by hand.
HAND_CASES = {
    # Every hand goes bet-call: a +-2 showdown, and the 6 deals are symmetric -> 0.
    "all bet and call": (("bet", "call"), ("bet", "call"), 0.0),
    # Every hand goes check-check: a +-1 showdown -> 0.
    "all check": (("check", "fold"), ("check", "fold"), 0.0),
    # player_0 checks and folds to player_1's bet: player_0 loses the ante, -1.
    "check-fold vs bettor": (("check", "fold"), ("bet", "call"), -1.0),
    # player_0 bets and player_1 always folds: +1.
    "bettor vs folder": (("bet", "call"), ("check", "fold"), 1.0),
    # check, bet, call every time: a +-2 showdown -> 0.
    "check-call vs bettor": (("check", "call"), ("bet", "fold"), 0.0),
}


@pytest.mark.parametrize("case", HAND_CASES)
def test_hand_computed_values(case):
    (first_0, facing_0), (first_1, facing_1), expected = HAND_CASES[case]
    value = game_value(everywhere(first_0, facing_0, 0), everywhere(first_1, facing_1, 1))
    assert value == pytest.approx(expected, abs=1e-12)


def test_check_fold_against_uniform_loses_half():
    # player_0 checks and folds to any bet; uniform player_1 bets half the time (player_0 loses 1)
    # and checks half the time (a +-1 showdown, 0 on average) -> -1/2.
    assert game_value(everywhere("check", "fold", 0), uniform_policy()) == pytest.approx(-0.5, abs=1e-12)


def test_best_response_to_a_player_who_always_folds_is_to_bet_everything():
    # player_1 folds to every bet and checks behind: betting wins the ante, +1, with any card;
    # checking wins only with the better card, so J and Q bet and K is a tie (+1 either way).
    value, br = best_response(everywhere("check", "fold", 1), 0)
    assert value == pytest.approx(1.0, abs=1e-12)
    assert br["J:"]["bet"] == br["Q:"]["bet"] == 1.0
    assert list(br) == list(P0)
    # If player_1 instead bets after a check (still folding to a bet), K checks and calls for +2:
    # J and Q bet (+1), K check-calls (+2) -> (1 + 1 + 2) / 3 = 4/3.
    value, br = best_response(everywhere("bet", "fold", 1), 0)
    assert value == pytest.approx(4 / 3, abs=1e-12)
    assert br == pure_policy(
        {
            "J:": "bet",
            "Q:": "bet",
            "K:": "check",
            "J:check,bet": "fold",
            "Q:check,bet": "call",
            "K:check,bet": "call",
        }
    )


def test_best_response_to_an_always_bettor_calls_with_q_and_k_only():
    # player_0 always bets: calling with K wins 2, with Q wins 2 vs J and loses 2 vs K (0 > -1),
    # with J loses 2 (< -1 folding). player_1's value: (2 + 0 - 1) / 3 = 1/3.
    value, br = best_response(everywhere("bet", "call", 0), 1)
    assert value == pytest.approx(1 / 3, abs=1e-12)
    assert br["J:bet"]["fold"] == br["Q:bet"]["call"] == br["K:bet"]["call"] == 1.0


@pytest.mark.parametrize("seed", range(4))
@pytest.mark.parametrize("player", [0, 1])
def test_best_response_beats_every_pure_policy(seed, player):
    policy = random_policy(np.random.default_rng(seed))
    value, br = best_response(policy, player)
    sign = 1 if player == 0 else -1

    def payoff(own):
        pair = (own, policy) if player == 0 else (policy, own)
        return sign * game_value(*pair)

    assert payoff(br) == pytest.approx(value, abs=1e-12)
    assert max(payoff(own) for own in all_pure(player)) == pytest.approx(value, abs=1e-12)


def test_game_value_reads_only_the_relevant_players_info_sets():
    policy_0 = {i: row for i, row in nash_policy(0.1).items() if player_of(i) == 0}
    policy_1 = {i: row for i, row in nash_policy(0.0).items() if player_of(i) == 1}
    assert game_value(policy_0, policy_1) == pytest.approx(GAME_VALUE, abs=1e-12)
    # Uniform vs uniform: per deal check-check 1/4, bet-call 1/4, bet-fold 1/4 (+1), check-bet-call
    # 1/8, check-bet-fold 1/8 (-1); the showdowns cancel over the deals -> 1/4 - 1/8 = 1/8.
    assert game_value(lambda i: uniform_policy()[i], uniform_policy()) == pytest.approx(1 / 8, abs=1e-12)


# --- validation ------------------------------------------------------------------------------------


def test_validate_policy_fills_moves_and_normalizes():
    policy = uniform_policy() | {"K:": {"bet": 1}, "Q:bet": {"call": 0.3, "fold": 0.7000004}}
    checked = validate_policy(policy)
    assert list(checked) == list(INFO_SETS)
    assert checked["K:"] == {"check": 0.0, "bet": 1.0}
    assert math.fsum(checked["Q:bet"].values()) == pytest.approx(1.0, abs=1e-15)
    assert validate_policy(checked) == checked
    assert checked is not policy and checked["J:"] is not policy["J:"]
    assert validate_policy(lambda i: uniform_policy()[i]) == uniform_policy()


@pytest.mark.parametrize(
    "change, error, pattern",
    [
        ({"Q:check": None}, ValueError, r"no entry for info set 'Q:check'"),
        ({"K:bet": {"call": 0.5, "raise": 0.5}}, ValueError, r"'K:bet': move 'raise' is not legal; expected moves from \('call', 'fold'\)"),
        ({"J:": {"check": 1.5, "bet": -0.5}}, ValueError, r"'J:': probability of 'bet' must be finite and >= 0, got -0.5"),
        ({"J:": {"check": math.nan, "bet": 0.5}}, ValueError, r"'J:': probability of 'check' must be finite and >= 0, got nan"),
        ({"K:check,bet": {"call": 0.5, "fold": 0.4}}, ValueError, r"'K:check,bet': probabilities must sum to 1 \(within 1e-06\), got .* summing to 0\.9"),
        ({"Q:": {"check": "1"}}, TypeError, r"'Q:': probability of 'check' must be a real number, got '1'"),
        ({"Q:": [0.5, 0.5]}, TypeError, r"'Q:': expected a mapping \{move: probability\} over \('check', 'bet'\), got list"),
        ({"K:call": {"call": 1.0}}, ValueError, r"unknown info set 'K:call'"),
    ],
)  # fmt: skip
def test_validate_policy_errors_name_the_info_set(change, error, pattern):
    policy = uniform_policy() | change
    policy = {i: row for i, row in policy.items() if row is not None}
    with pytest.raises(error, match=pattern):
        validate_policy(policy)


def test_validate_policy_refuses_non_policies():
    with pytest.raises(TypeError, match="expected a policy as a mapping or a callable"):
        validate_policy(42)
    with pytest.raises(ValueError, match="player must be 0, 1 or None, got 2"):
        validate_policy(uniform_policy(), player=2)
    with pytest.raises(ValueError, match="player must be 0 or 1, got -1"):
        best_response(uniform_policy(), -1)
    with pytest.raises(ValueError, match=r"'J:': move 'call' is not legal; expected one of"):
        pure_policy({"J:": "call"})


# --- OpenSpiel cross-check -------------------------------------------------------------------------


@pytest.fixture(scope="module")
def openspiel():
    pyspiel = pytest.importorskip("pyspiel")
    from open_spiel.python import policy as os_policy
    from open_spiel.python.algorithms import expected_game_score
    from open_spiel.python.algorithms import exploitability as os_exploitability

    return pyspiel.load_game("kuhn_poker"), os_policy, os_exploitability, expected_game_score


def test_info_set_mapping_matches_openspiel_states(openspiel):
    # Walk OpenSpiel's tree; at each decision node rebuild our info set from the deal and the
    # action strings ("Pass"/"Bet"), and check the key mapping and the player agree.
    game = openspiel[0]
    seen = {}

    def walk(state, cards, moves):
        if state.is_terminal():
            return
        if state.is_chance_node():
            for action, _ in state.chance_outcomes():
                walk(state.child(action), (*cards, action), moves)
            return
        player = state.current_player()
        facing_bet = "bet" in moves
        info_set = f"{'JQK'[cards[player]]}:{','.join(moves)}"
        assert player_of(info_set) == player
        seen[info_set] = state.information_state_string()
        for action in state.legal_actions():
            name = state.action_to_string(player, action)
            move = {"Pass": "fold" if facing_bet else "check", "Bet": "call" if facing_bet else "bet"}[name]
            assert move in legal_moves(info_set)
            walk(state.child(action), cards, (*moves, move))

    walk(game.new_initial_state(), (), ())
    assert set(seen) == set(INFO_SETS)
    assert all(theory.openspiel_key(i) == key for i, key in seen.items())


def test_exploitability_and_values_match_openspiel(openspiel):
    game, _, os_exploitability, expected_game_score = openspiel
    rng = np.random.default_rng(20240611)
    policies = [random_policy(rng) for _ in range(20)] + [uniform_policy()] + [nash_policy(a) for a in ALPHAS]
    diffs = []
    for ours in policies:
        tabular = theory.to_openspiel(ours, game)
        diffs.append(abs(exploitability(ours) - os_exploitability.exploitability(game, tabular)))
        diffs.append(abs(nash_conv(ours) - os_exploitability.nash_conv(game, tabular)))
    for ours_0, ours_1 in zip(policies[:10], policies[10:20]):
        # player_0 from one policy, player_1 from the other.
        tabular = theory.to_openspiel(validate_policy(ours_0, 0) | validate_policy(ours_1, 1), game)
        value_0 = expected_game_score.policy_value(game.new_initial_state(), [tabular, tabular])[0]
        diffs.append(abs(game_value(ours_0, ours_1) - value_0))
    assert max(diffs) < 1e-9


def test_openspiel_round_trip_is_exact(openspiel):
    game, os_policy, _, _ = openspiel
    rng = np.random.default_rng(7)
    for ours in [random_policy(rng) for _ in range(5)] + [uniform_policy(), nash_policy(1 / 7)]:
        assert theory.from_openspiel(theory.to_openspiel(ours)) == validate_policy(ours)
    tabular = os_policy.TabularPolicy(game)
    tabular.action_probability_array[:] = rng.dirichlet(
        np.ones(2), size=len(tabular.action_probability_array)
    )
    back = theory.to_openspiel(theory.from_openspiel(tabular), game)
    assert np.array_equal(back.action_probability_array, tabular.action_probability_array)
    assert back.state_lookup == tabular.state_lookup


def test_openspiel_conversion_errors(openspiel):
    game, os_policy, _, _ = openspiel
    pyspiel = pytest.importorskip("pyspiel")
    with pytest.raises(ValueError, match="expected a two-player kuhn_poker game"):
        theory.to_openspiel(uniform_policy(), pyspiel.load_game("kuhn_poker", {"players": 3}))
    with pytest.raises(ValueError, match="TabularPolicy has no info state '0'"):
        theory.from_openspiel(os_policy.TabularPolicy(game, players=[1]))
    with pytest.raises(TypeError, match="convert it with from_openspiel"):
        exploitability(os_policy.TabularPolicy(game))
