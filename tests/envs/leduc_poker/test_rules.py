"""leduc_poker rules against OpenSpiel's leduc_poker: legal moves, turn order and payoffs on every deal and line."""

from __future__ import annotations

import random

import pyspiel
import pytest

from llm_zoo.envs.leduc_poker import rules
from llm_zoo.envs.leduc_poker.rules import NEXT, NODES, Hand, Move, deal, showdown_winner

# OpenSpiel's actions: 0 fold, 1 call (our check or call), 2 raise (our bet or raise)
OPENSPIEL = {Move.FOLD: 0, Move.CHECK: 1, Move.CALL: 1, Move.BET: 2, Move.RAISE: 2}


def walk(game, state, hand, cards):
    """Play every line of one deal in both games side by side; return how many terminal lines agreed."""
    if state.is_chance_node():
        state.apply_action(cards[2])  # the public card, drawn when OpenSpiel's first round closes
        assert hand.round == 1
    if state.is_terminal():
        assert hand.is_terminal
        assert state.returns() == [hand.payoff, -hand.payoff]
        return 1
    assert state.current_player() == hand.to_act
    assert sorted(OPENSPIEL[m] for m in hand.legal_moves) == state.legal_actions()
    total = 0
    for move in hand.legal_moves:
        child = state.clone()
        child.apply_action(OPENSPIEL[move])
        total += walk(game, child, hand.play(move), cards)
    return total


def test_every_line_of_every_deal_matches_openspiel():
    game = pyspiel.load_game("leduc_poker")
    lines = 0
    for cards in [(a, b, c) for a in range(6) for b in range(6) for c in range(6) if len({a, b, c}) == 3]:
        state = game.new_initial_state()
        state.apply_action(cards[0])
        state.apply_action(cards[1])
        lines += walk(game, state, Hand(tuple(c // 2 for c in cards)), cards)
    assert lines == 120 * sum(1 for n in NODES.values() if n.to_act is None)


def test_tables_have_36_decisions_and_pay_at_most_13():
    decisions = [h for h, n in NODES.items() if n.to_act is not None]
    assert len(decisions) == 6 + 5 * 6  # 6 in round 1, 6 in round 2 after each of 5 ways round 1 closes
    assert max(max(n.put) for n in NODES.values()) == 13
    h = Hand((2, 1, 0))
    for move in (Move.BET, Move.RAISE, Move.CALL, Move.BET, Move.RAISE, Move.CALL):
        h = h.play(move)
    assert h.is_terminal and h.is_showdown and h.payoff == 13.0
    assert all((h, m) in NEXT for h, n in NODES.items() for m in n.legal)


@pytest.mark.parametrize(("ranks", "winner"), [((0, 1, 0), 0), ((2, 1, 1), 1), ((2, 1, 0), 0), ((0, 0, 1), None),
                                               ((1, 1, 0), None), ((0, 2, 0), 0)])
def test_showdown_pair_beats_high_card_and_equal_ranks_split(ranks, winner):
    assert showdown_winner(ranks) == winner


def test_fold_loses_what_the_folder_put_in():
    h = Hand((2, 0, 1)).play(Move.BET).play(Move.RAISE).play(Move.FOLD)  # seat 0 bet 2 then folds to a raise
    assert h.is_terminal and not h.is_showdown and h.payoff == -3.0
    h = Hand((2, 0, 1)).play(Move.CHECK).play(Move.CHECK).play(Move.BET).play(Move.FOLD)
    assert h.payoff == 1.0 and h.public == 1


def test_illegal_moves_and_bad_ranks_are_value_errors():
    with pytest.raises(ValueError, match="illegal move"):
        Hand((0, 1, 2)).play(Move.CALL)
    with pytest.raises(ValueError, match="illegal move"):
        Hand((0, 1, 2)).play(Move.BET).play(Move.RAISE).play(Move.RAISE)  # at most two raises a round
    with pytest.raises(ValueError, match="no rank more than 2"):
        Hand((1, 1, 1))


def test_deal_draws_three_cards_of_the_deck():
    rng = random.Random(0)
    counts = {}
    for _ in range(30_000):
        ranks = deal(rng)
        rules.check_ranks(ranks)
        counts[ranks] = counts.get(ranks, 0) + 1
    assert len(counts) == 24  # every rank triple but the three with one rank three times
    # a pair dealt to both players: 2/6 * 1/5 = 1/15 per rank, public card then another rank
    assert abs(counts[(0, 0, 1)] / 30_000 - 1 / 30) < 0.006
