"""Kuhn poker rules, scripted as data: (cards of seat 0 and 1, moves, seat 0's payoff)."""

from __future__ import annotations

import itertools
import random

import pytest

from llm_zoo.envs.kuhn_poker.rules import CARDS, LEGAL, TERMINAL, Hand, Move, deal, first_player

C, B, CA, F = Move.CHECK, Move.BET, Move.CALL, Move.FOLD
J, Q, K = 0, 1, 2

GAMES = [
    ((K, J), (C, C), 1.0),
    ((J, K), (C, C), -1.0),
    ((K, Q), (B, CA), 2.0),
    ((Q, K), (B, CA), -2.0),
    ((J, K), (B, F), 1.0),  # a bluff that works
    ((K, J), (C, B, F), -1.0),
    ((J, Q), (C, B, CA), -2.0),
    ((Q, J), (C, B, CA), 2.0),
]


@pytest.mark.parametrize(("cards", "moves", "payoff"), GAMES)
def test_scripted_games(cards, moves, payoff):
    hand = Hand(cards)
    for i, move in enumerate(moves):
        assert not hand.is_terminal
        assert hand.to_act == i % 2
        assert move in hand.legal_moves
        hand = hand.play(move)
    assert hand.is_terminal
    assert hand.legal_moves == ()
    assert hand.payoff == payoff


def test_zero_sum_and_payoff_sizes():
    """Every terminal history pays ±1 or ±2 and the deal decides only showdowns."""
    for cards in itertools.permutations(range(3), 2):
        for history in TERMINAL:
            hand = Hand(cards, history)
            assert abs(hand.payoff) in (1.0, 2.0)
            assert abs(hand.payoff) == (2.0 if CA in history else 1.0)


def test_legal_table_covers_every_nonterminal_history():
    reachable = {(), (C,), (B,), (C, B)}
    assert set(LEGAL) == reachable
    for history in reachable:
        for move in LEGAL[history]:
            child = (*history, move)
            assert child in LEGAL or child in TERMINAL


def test_illegal_moves_and_bad_cards_raise():
    with pytest.raises(ValueError, match="illegal move"):
        Hand((K, J)).play(CA)
    with pytest.raises(ValueError, match="payoff of a hand in progress"):
        _ = Hand((K, J)).payoff
    with pytest.raises(ValueError, match="two different ranks"):
        Hand((K, K))


def test_info_set_strings():
    hand = Hand((K, Q)).play(C).play(B)
    assert hand.info_set(0) == "K:check,bet"
    assert hand.info_set(1) == "Q:check,bet"
    assert Hand((J, Q)).info_set(0) == "J:"


def test_deal_is_uniform_over_ordered_pairs():
    rng = random.Random(0)
    counts = {}
    for _ in range(6000):
        pair = deal(rng)
        counts[pair] = counts.get(pair, 0) + 1
    assert set(counts) == set(itertools.permutations(range(len(CARDS)), 2))
    assert all(800 < n < 1200 for n in counts.values())


def test_first_player_alternates():
    assert [first_player(h) for h in range(4)] == [0, 1, 0, 1]
