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

# (history, move) -> the history after it, for every legal move: Hand.play's check and step in one lookup
NEXT: dict[tuple[tuple[Move, ...], Move], tuple[Move, ...]] = {
    (history, move): (*history, move) for history, moves in LEGAL.items() for move in moves
}

# the ordered pairs of different ranks: every valid (seat 0 card, seat 1 card)
DEALS: frozenset[tuple[int, int]] = frozenset(
    (a, b) for a in range(len(CARDS)) for b in range(len(CARDS)) if a != b
)


def _info_set_text(card: int, history: tuple[Move, ...]) -> str:
    return f"{CARDS[card]}:{','.join(m.value for m in history)}"


# (card, history) -> the info-set string, for every reachable history: Hand.info_set reads it from here
INFO_SET: dict[tuple[int, tuple[Move, ...]], str] = {
    (card, history): _info_set_text(card, history)
    for card in range(len(CARDS)) for history in (*LEGAL, *TERMINAL)
}


def first_player(hand_index: int) -> int:
    """Return the player (0 or 1) who acts first in hand ``hand_index`` of a match."""
    return hand_index % 2


# After rng.sample(range(n), 2) draws card i, the cards left are range(n) with the last card moved
# into slot i: _LEFT_AFTER[i] lists them in that order.
_LEFT_AFTER = tuple(tuple(len(CARDS) - 1 if c == i else c for c in range(len(CARDS) - 1)) for i in range(len(CARDS)))


def deal(rng: random.Random) -> tuple[int, int]:
    """Deal two distinct cards (ranks) to seat 0 and seat 1."""
    # The same draws as rng.sample(range(3), 2), so seeded deals are unchanged, at a third of its cost
    # (sample's generic checks cost more than the draws); tests check the two agree.
    first = rng.randrange(len(CARDS))
    return first, _LEFT_AFTER[first][rng.randrange(len(CARDS) - 1)]


@dataclass(frozen=True)
class Hand:
    """One hand: the seats' cards (ranks, seat 0 first) and the moves so far."""

    cards: tuple[int, int]
    history: tuple[Move, ...] = ()

    def __post_init__(self) -> None:
        if tuple(self.cards) not in DEALS:
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
        history = NEXT.get((self.history, move))
        if history is None:
            raise ValueError(f"illegal move {move!r} after {[m.value for m in self.history]}; legal: "
                             f"{[m.value for m in self.legal_moves]}")
        return Hand(self.cards, history)

    def info_set(self, seat: int) -> str:
        """Return seat's information state as ``"<card>:<moves,comma,separated>"`` (e.g. ``"K:check,bet"``)."""
        card = self.cards[seat]
        return INFO_SET.get((card, self.history)) or _info_set_text(card, self.history)
