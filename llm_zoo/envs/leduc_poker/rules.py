"""Leduc hold'em, the pure game: cards, moves, who acts, legal moves, payoffs. No text, no I/O.

Leduc hold'em (Southey et al., 2005) with the rules of OpenSpiel's ``leduc_poker`` (checked against
``pyspiel`` 2.0.2, see ``tests/envs/leduc_poker``): a deck of six cards, two each of J < Q < K; each
player antes 1 and is dealt one private card; a first betting round; then one public card is
revealed and a second betting round follows. Bets and raises are 2 in the first round and 4 in the
second, with at most two of them (a bet and a raise) per round. Seat 0 acts first in both rounds.
A fold loses what the folder has put in; at a showdown a private card that pairs the public card
wins, else the higher card wins, and equal ranks split the pot. Zero-sum.

Suits never matter (no flushes), so a hand holds ranks only; a deal draws three different cards of
the six, which is why two players (or a player and the board) can share a rank but three cannot.

In a hand, seat 0 is the player who acts first. A match of several hands alternates who that is;
:func:`first_player` says which player (0 or 1) holds seat 0 in hand ``h``.

    >>> h = Hand(ranks=(2, 0, 1))           # seat 0 holds K, seat 1 holds J, the public card is Q
    >>> h = h.play(Move.BET).play(Move.CALL).play(Move.CHECK).play(Move.CHECK)
    >>> h.is_terminal, h.payoff
    (True, 3.0)
"""

from __future__ import annotations

import enum
import random
from collections import Counter
from dataclasses import dataclass

RANKS: tuple[str, ...] = ("J", "Q", "K")  # index = rank
SUITS = 2  # copies of each rank in the deck
DECK_SIZE = SUITS * len(RANKS)
ANTE = 1
RAISE_SIZES = (2, 4)  # bet/raise size in round 1 and round 2
MAX_RAISES = 2  # per round: a bet and one raise
NUM_PLAYERS = 2
NUM_ROUNDS = 2


class Move(str, enum.Enum):
    """A betting move."""

    CHECK = "check"
    BET = "bet"
    CALL = "call"
    RAISE = "raise"
    FOLD = "fold"


C, B, CA, R, F = Move.CHECK, Move.BET, Move.CALL, Move.RAISE, Move.FOLD

# One betting round: its moves so far -> legal moves of the seat to act (seat = len(moves) % 2).
# Facing a bet the order is fold, call, raise: OpenSpiel's action order (0, 1, 2).
ROUND_LEGAL: dict[tuple[Move, ...], tuple[Move, ...]] = {
    (): (C, B),
    (C,): (C, B),
    (B,): (F, CA, R),
    (C, B): (F, CA, R),
    (B, R): (F, CA),
    (C, B, R): (F, CA),
}
# The moves that close a round with both players in.
ROUND_CLOSED: frozenset[tuple[Move, ...]] = frozenset({(C, C), (B, CA), (C, B, CA), (B, R, CA), (C, B, R, CA)})

History = tuple[tuple[Move, ...], ...]
"""The moves of each round so far: ``((round 1 moves), )`` or ``((round 1 moves), (round 2 moves))``."""


def _contributions(history: History) -> tuple[int, int]:
    """Return the chips each seat has put in (ante included) after ``history``."""
    put = [ANTE, ANTE]
    for size, moves in zip(RAISE_SIZES, history):
        bets = [0, 0]
        for i, move in enumerate(moves):
            seat = i % 2
            if move in (B, R):
                bets[seat] = bets[1 - seat] + size
            elif move is CA:
                bets[seat] = bets[1 - seat]
        put = [put[0] + bets[0], put[1] + bets[1]]
    return put[0], put[1]


@dataclass(frozen=True)
class Node:
    """What the rules say about one history: who acts and with which moves, or how the hand ended."""

    to_act: int | None
    """The seat to act (0 or 1), None once terminal."""
    legal: tuple[Move, ...]
    """The legal moves of the seat to act (empty once terminal)."""
    folder: int | None
    """The seat that folded, None otherwise."""
    showdown: bool
    """Whether the hand ended with both cards shown."""
    put: tuple[int, int]
    """Chips put in by each seat, antes included."""


def _build() -> tuple[dict[History, Node], dict[tuple[History, Move], History]]:
    nodes: dict[History, Node] = {}
    step: dict[tuple[History, Move], History] = {}
    todo: list[History] = [((),)]
    while todo:
        history = todo.pop()
        moves = history[-1]
        put = _contributions(history)
        if moves and moves[-1] is F:
            nodes[history] = Node(None, (), (len(moves) - 1) % 2, False, put)
        elif moves in ROUND_CLOSED:  # only the last round's: a closed first round leads on to the next (below)
            nodes[history] = Node(None, (), None, True, put)
        else:
            legal = ROUND_LEGAL[moves]
            nodes[history] = Node(len(moves) % 2, legal, None, False, put)
            for move in legal:
                after = (*history[:-1], (*moves, move))
                if after[-1] in ROUND_CLOSED and len(after) < NUM_ROUNDS:
                    after = (*after, ())  # the public card is revealed and the next round starts
                step[history, move] = after
                todo.append(after)
    return nodes, step


NODES, NEXT = _build()
"""Every reachable history -> its :class:`Node`; (history, legal move) -> the history after it."""

START: History = ((),)


def first_player(hand_index: int) -> int:
    """Return the player (0 or 1) who acts first in hand ``hand_index`` of a match."""
    return hand_index % 2


def check_ranks(ranks: tuple[int, ...]) -> None:
    """Raise ValueError unless ``ranks`` is (seat 0, seat 1, public) with no rank more than twice."""
    if (len(ranks) != 3 or not all(isinstance(r, int) and 0 <= r < len(RANKS) for r in ranks)
            or max(Counter(ranks).values()) > SUITS):
        raise ValueError(f"ranks must be (seat 0's, seat 1's, the public card's) ranks in 0..{len(RANKS) - 1}, "
                         f"no rank more than {SUITS} times (the deck has {SUITS} of each); got {ranks!r}")


def deal(rng: random.Random) -> tuple[int, int, int]:
    """Deal three different cards of the deck: seat 0's, seat 1's and the public card, as ranks."""
    cards = rng.sample(range(DECK_SIZE), 3)
    return cards[0] // SUITS, cards[1] // SUITS, cards[2] // SUITS


def showdown_winner(ranks: tuple[int, int, int]) -> int | None:
    """Return the seat that wins a showdown with these ranks (seat 0, seat 1, public), None on a tie."""
    a, b, public = ranks
    if (a == public) != (b == public):
        return 0 if a == public else 1
    return None if a == b else (0 if a > b else 1)


@dataclass(frozen=True)
class Hand:
    """One hand: the ranks (seat 0's card, seat 1's card, the public card) and the moves so far."""

    ranks: tuple[int, int, int]
    history: History = START

    def __post_init__(self) -> None:
        check_ranks(tuple(self.ranks))
        if self.history not in NODES:
            raise ValueError(f"history {self.history!r} is not reachable in Leduc hold'em")

    @property
    def node(self) -> Node:
        """Return what the rules say about this history."""
        return NODES[self.history]

    @property
    def round(self) -> int:
        """Return the betting round (0 or 1)."""
        return len(self.history) - 1

    @property
    def to_act(self) -> int | None:
        """Return the seat to act (0 or 1), None once terminal."""
        return NODES[self.history].to_act

    @property
    def legal_moves(self) -> tuple[Move, ...]:
        """Return the legal moves of the seat to act (empty once terminal)."""
        return NODES[self.history].legal

    @property
    def is_terminal(self) -> bool:
        """Return whether the hand is over."""
        return NODES[self.history].to_act is None

    @property
    def is_showdown(self) -> bool:
        """Return whether the hand ended with both cards shown."""
        return NODES[self.history].showdown

    @property
    def public(self) -> int | None:
        """Return the public card's rank once it is revealed (round 2), else None."""
        return self.ranks[2] if len(self.history) > 1 else None

    @property
    def payoff(self) -> float:
        """Return seat 0's payoff (seat 1 gets the negative); requires a terminal hand."""
        node = NODES[self.history]
        if node.to_act is not None:
            raise ValueError(f"payoff of a hand in progress (history {self.history!r})")
        if node.folder is not None:
            return float(node.put[1] if node.folder == 1 else -node.put[0])
        winner = showdown_winner(self.ranks)
        return 0.0 if winner is None else float(node.put[1] if winner == 0 else -node.put[0])

    def play(self, move: Move) -> Hand:
        """Return the hand after the seat to act plays ``move``."""
        history = NEXT.get((self.history, move))
        if history is None:
            raise ValueError(f"illegal move {move!r} after {history_text(self.history)!r}; legal: "
                             f"{[m.value for m in self.legal_moves]}")
        return Hand(self.ranks, history)

    def info_set(self, seat: int) -> str:
        """Return seat's information state, e.g. ``"K:bet,call"`` in round 1 or ``"KQ:bet,call/check"`` in round 2."""
        return info_set(self.ranks[seat], self.public, self.history)


def history_text(history: History) -> str:
    """Return the moves of ``history`` as text: rounds split by ``/``, moves by ``,`` (``"bet,call/check"``)."""
    return "/".join(",".join(m.value for m in moves) for moves in history)


def info_set(card: int, public: int | None, history: History) -> str:
    """Return the information-state string of a player holding ``card`` (ranks) at ``history``."""
    board = "" if public is None else RANKS[public]
    return f"{RANKS[card]}{board}:{history_text(history)}"
