"""Reading replies as moves: lenient about wording, strict about ambiguity."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from llm_zoo.envs.kuhn_poker.rules import Move
from llm_zoo.envs.kuhn_poker.text import invalid_feedback, legal_replies, parse_move

OPEN = (Move.CHECK, Move.BET)
FACING = (Move.CALL, Move.FOLD)


@pytest.mark.parametrize(
    ("reply", "legal", "expected"),
    [
        ("[bet]", OPEN, Move.BET),
        ("[BET]", OPEN, Move.BET),
        ("  [ check ]  ", OPEN, Move.CHECK),
        ("I hold the king, so I bet.", OPEN, Move.BET),
        ("I could fold, but [call]", FACING, Move.CALL),  # bracketed moves win over words
        ("Check.", OPEN, Move.CHECK),
        ("[bet] [bet]", OPEN, Move.BET),  # the same move twice is still one move
        ("bet or check? bet", OPEN, None),  # two different moves
        ("[bet] [check]", OPEN, None),
        ("[call]", OPEN, None),  # not legal now
        ("alphabet soup", OPEN, None),  # a move inside another word
        ("betting is fun", OPEN, None),
        ("checkmate", OPEN, None),
        ("", OPEN, None),
        ("pass", OPEN, None),
    ],
)
def test_parse_move(reply, legal, expected):
    assert parse_move(reply, legal) == expected


def test_legal_replies_always_parse_as_their_move():
    for legal in (OPEN, FACING):
        for move, reply in zip(legal, legal_replies(legal)):
            assert parse_move(reply, legal) == move


def test_feedback_names_the_problem():
    assert "no move found" in invalid_feedback("hello", OPEN)
    assert "names 2" in invalid_feedback("[bet] [check]", OPEN)
    assert "not legal" in invalid_feedback("[fold]", OPEN)
    assert "[check] or [bet]" in invalid_feedback("[fold]", OPEN)


@settings(max_examples=300, deadline=None)
@given(st.text(max_size=300))
def test_any_text_parses_to_a_legal_move_or_none(reply):
    move = parse_move(reply, OPEN)
    assert move is None or move in OPEN
    if move is None:
        assert isinstance(invalid_feedback(reply, OPEN), str)
