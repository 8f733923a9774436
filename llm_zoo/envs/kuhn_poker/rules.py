"""Kuhn poker, the pure game: cards, moves, who acts, legal moves, payoffs. No text, no I/O.

Standard Kuhn poker (Kuhn, 1950): a deck of three cards J < Q < K, each player antes 1 and is dealt
one card, the first player acts first, there is one bet of size 1. Check-check and a called bet
go to showdown (the higher card wins 1 or 2); a fold loses the ante. Zero-sum.

In a hand, seat 0 is the player who acts first. A match of several hands alternates who that is;
:func:`first_player` says which player (0 or 1) holds seat 0 in hand ``h``.

    >>> h = Hand(cards=(2, 0))              # seat 0 holds K, seat 1 holds J
    >>> h = h.play(Move.BET).play(Move.FOLD)
    >>> h.is_terminal, h.payoff
    (True, 1.0)
"""

from __future__ import annotations

import enum
import random
from dataclasses import dataclass

CARDS: tuple[str, ...] = ("J", "Q", "K")  # index = rank
ANTE = 1
BET_SIZE = 1
NUM_PLAYERS = 2


class Move(str, enum.Enum):
    """A betting move."""

    CHECK = "check"
    BET = "bet"
    CALL = "call"
    FOLD = "fold"


C, B, CA, F = Move.CHECK, Move.BET, Move.CALL, Move.FOLD

# history -> legal moves of the seat to act (seat = len(history) % 2)
LEGAL: dict[tuple[Move, ...], tuple[Move, ...]] = {
    (): (C, B),
    (C,): (C, B),
    (B,): (CA, F),
    (C, B): (CA, F),
}

# terminal history -> (winner, amount): winner is "showdown" or the seat that wins the pot
TERMINAL: dict[tuple[Move, ...], tuple[str | int, int]] = {
    (C, C): ("showdown", ANTE),
    (B, CA): ("showdown", ANTE + BET_SIZE),
    (B, F): (0, ANTE),
    (C, B, CA): ("showdown", ANTE + BET_SIZE),
    (C, B, F): (1, ANTE),
}


def first_player(hand_index: int) -> int:
    """Return the player (0 or 1) who acts first in hand ``hand_index`` of a match."""
    return hand_index % 2


def deal(rng: random.Random) -> tuple[int, int]:
    """Deal two distinct cards (ranks) to seat 0 and seat 1."""
    a, b = rng.sample(range(len(CARDS)), 2)
    return a, b


@dataclass(frozen=True)
class Hand:
    """One hand: the seats' cards (ranks, seat 0 first) and the moves so far."""

    cards: tuple[int, int]
    history: tuple[Move, ...] = ()

    def __post_init__(self) -> None:
        if len(self.cards) != 2 or self.cards[0] == self.cards[1] or not all(0 <= c < len(CARDS) for c in self.cards):
            raise ValueError(f"cards must be two different ranks in 0..{len(CARDS) - 1}; got {self.cards!r}")

    @property
    def to_act(self) -> int:
        """Return the seat to act (0 or 1); meaningless once terminal."""
        return len(self.history) % 2

    @property
    def legal_moves(self) -> tuple[Move, ...]:
        """Return the legal moves of the seat to act (empty once terminal)."""
        return LEGAL.get(self.history, ())

    @property
    def is_terminal(self) -> bool:
        """Return whether the hand is over."""
        return self.history in TERMINAL

    @property
    def is_showdown(self) -> bool:
        """Return whether the hand ended with both cards shown."""
        return TERMINAL.get(self.history, (None,))[0] == "showdown"

    @property
    def payoff(self) -> float:
        """Return seat 0's payoff (seat 1 gets the negative); requires a terminal hand."""
        if not self.is_terminal:
            raise ValueError(f"payoff of a hand in progress (history {self.history!r})")
        winner, amount = TERMINAL[self.history]
        if winner == "showdown":
            winner = 0 if self.cards[0] > self.cards[1] else 1
        return float(amount if winner == 0 else -amount)

    def play(self, move: Move) -> Hand:
        """Return the hand after the seat to act plays ``move``."""
        if move not in self.legal_moves:
            raise ValueError(f"illegal move {move!r} after {[m.value for m in self.history]}; legal: "
                             f"{[m.value for m in self.legal_moves]}")
        return Hand(self.cards, (*self.history, Move(move)))

    def info_set(self, seat: int) -> str:
        """Return seat's information state as ``"<card>:<moves,comma,separated>"`` (e.g. ``"K:check,bet"``)."""
        return f"{CARDS[self.cards[seat]]}:{','.join(m.value for m in self.history)}"
