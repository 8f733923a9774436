"""The model-facing text of Leduc hold'em: prompts, and reading a reply as a move.

Every string a player can be shown is built here, so that :func:`corpus` can list the whole
vocabulary of the env (a word-level tokenizer for a tiny model is drawn from it, and each
bracketed move, ``[raise]``, is then one token).
"""

from __future__ import annotations

import functools
from collections.abc import Iterable, Sequence

from llm_zoo.envs.core import MoveReader
from llm_zoo.envs.leduc_poker.rules import RANKS, ROUND_LEGAL, Move

SYSTEM_PROMPT = "You are {agent} in a match of Leduc hold'em ({hands}).\n{rules}"
RULES = (
    "Rules: the deck has six cards, two each of J < Q < K. Each player antes 1 chip and gets one private card. "
    "There are two betting rounds; after the first, one public card is shown. In each round the first player "
    "may check or bet; facing a bet a player may fold, call or raise; facing a raise, fold or call. Bets and "
    "raises are 2 chips in the first round and 4 in the second. At the showdown a card that pairs the public "
    "card wins, else the higher card wins; equal cards split the pot. A player who folds loses what they put "
    "in. The first player alternates between hands.\n"
)
REPLY_FORMAT = (
    "Reply with your move in square brackets: [check], [bet], [call], [raise] or [fold]. "
    "You may think before it, but name exactly one move."
)
_VERB = {Move.CHECK: "checks", Move.BET: "bets", Move.CALL: "calls", Move.RAISE: "raises", Move.FOLD: "folds"}


@functools.lru_cache(maxsize=64)
def system_prompt(agent: str, num_hands: int, rules: bool = True) -> str:
    """Return the system prompt of ``agent`` for a match of ``num_hands`` hands (with the rules or not)."""
    hands = "1 hand" if num_hands == 1 else f"{num_hands} hands"
    return SYSTEM_PROMPT.format(agent=agent, hands=hands, rules=RULES if rules else "") + REPLY_FORMAT


def reply_for(move: Move) -> str:
    """Return the canonical reply for a move, e.g. ``"[raise]"``."""
    return f"[{Move(move).value}]"


_READER = MoveReader(Move)  # "[bet]" -> Move.BET read without a regex; see MoveReader


def legal_replies(moves: Sequence[Move]) -> tuple[str, ...]:
    """Return the canonical replies for the legal moves; each is always read as that move."""
    return tuple(reply_for(m) for m in moves)


def deal_line(hand_index: int, num_hands: int, card: int) -> str:
    """Tell a player its private card at the start of a hand."""
    return f"Hand {hand_index + 1} of {num_hands}. Your card: {RANKS[card]}."


def public_line(card: int) -> str:
    """Tell both players the public card, revealed when the first round ends."""
    return f"Round 2. Public card: {RANKS[card]}."


def move_line(agent: str, move: Move) -> str:
    """Tell a player the move another player made (the parsed move, never the raw reply)."""
    return f"{agent} {_VERB[Move(move)]}."


def prompt_line(moves: Sequence[Move], card: int, public: int | None) -> str:
    """Ask for a move among the legal ones, restating the player's card and the public card once shown.

    The question carries the whole card state, so a reader does not have to find the cards several
    lines back (as in Kuhn poker, where this helps a small model trained from scratch).
    """
    board = "" if public is None else f" Public card: {RANKS[public]}."
    return f"Your card: {RANKS[card]}.{board} Your move: " + " or ".join(legal_replies(moves)) + "."


def result_line(hand_index: int, winner: str | None, amount: float, shown: str | None, you: str, total: float) -> str:
    """Tell a player how a hand ended: who won what (None: a split pot), the opponent's card if shown, the total."""
    shown_part = f" Showdown: {shown}." if shown else ""
    won = "The pot is split" if winner is None else f"{'You' if winner == you else winner} won {amount:g}"
    return f"Hand {hand_index + 1} is over.{shown_part} {won}. Your total: {total:+g}."


def match_over_line(total: float) -> str:
    """Tell a player that the match is over."""
    return f"The match is over. Your total: {total:+g}."


def parse_move(reply: str, legal: Sequence[Move]) -> Move | None:
    """Read a reply as one move, or None if it names no move, two different moves, or an illegal one.

    Lenient about case and surrounding text, strict about ambiguity: if the reply has bracketed moves
    (``[raise]``) only those count, otherwise whole words do (``"I raise"`` is a raise, ``"raised"``
    is not). A reply naming two different moves is invalid.
    """
    return _READER.parse(reply, legal)


def invalid_feedback(reply: str, legal: Sequence[Move]) -> str:
    """Explain why a reply was not read as a legal move."""
    return _READER.feedback(reply, legal)


def corpus(max_hands: int = 2, agents: Iterable[str] = ("player_0", "player_1")) -> list[str]:
    """Return every prompt string the env can show, for building a vocabulary from (errors excluded)."""
    agents = list(agents)
    cards = range(len(RANKS))
    lines = [system_prompt(a, n, r) for a in agents for n in range(1, max_hands + 1) for r in (True, False)]
    lines += [deal_line(h, n, c) for n in range(1, max_hands + 1) for h in range(n) for c in cards]
    lines += [public_line(c) for c in cards]
    lines += [move_line(a, m) for a in agents for m in Move]
    lines += [prompt_line(ms, c, p) for ms in set(ROUND_LEGAL.values()) for c in cards for p in (None, *cards)]
    lines += [result_line(0, w, 1, f"{a} had {RANKS[c]}", a, 1) for w in [*agents, "you", None]
              for a in agents for c in cards]
    lines += [match_over_line(t) for t in (-2, -1, 0, 1, 2)]
    lines += [invalid_feedback("", (Move.CHECK, Move.BET)), "Invalid reply: Reply again. You have no retries left and forfeit."]
    return lines
