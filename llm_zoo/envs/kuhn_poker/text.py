"""The model-facing text of Kuhn poker: prompts, and reading a reply as a move.

Every string a player can be shown is built here, so that :func:`corpus` can list the whole
vocabulary of the env (a word-level tokenizer for a tiny model is drawn from it).
"""

from __future__ import annotations

import functools
from collections.abc import Iterable, Sequence

from llm_zoo.envs.core import MoveReader
from llm_zoo.envs.kuhn_poker.rules import CARDS, Move

SYSTEM_PROMPT = "You are {agent} in a match of Kuhn poker ({hands}).\n{rules}"
RULES = (
    "Rules: the deck has three cards, J < Q < K. Each player antes 1 chip and gets one card. "
    "The first player may check or bet 1 chip. After a check, the other player may check or bet. "
    "Facing a bet, a player may call or fold. If both check, or a bet is called, the higher card "
    "wins the pot. A player who folds loses the pot. The first player alternates between hands.\n"
)
REPLY_FORMAT = (
    "Reply with your move in square brackets: [check], [bet], [call] or [fold]. "
    "You may think before it, but name exactly one move."
)
_VERB = {Move.CHECK: "checks", Move.BET: "bets", Move.CALL: "calls", Move.FOLD: "folds"}


@functools.lru_cache(maxsize=64)  # built at every reset; the same few prompts recur
def system_prompt(agent: str, num_hands: int, rules: bool = True) -> str:
    """Return the system prompt of ``agent`` for a match of ``num_hands`` hands (with the rules or not)."""
    hands = "1 hand" if num_hands == 1 else f"{num_hands} hands"
    return SYSTEM_PROMPT.format(agent=agent, hands=hands, rules=RULES if rules else "") + REPLY_FORMAT


def reply_for(move: Move) -> str:
    """Return the canonical reply for a move, e.g. ``"[bet]"``."""
    return f"[{Move(move).value}]"


_READER = MoveReader(Move)  # "[bet]" -> Move.BET read without a regex; see MoveReader


def legal_replies(moves: Sequence[Move]) -> tuple[str, ...]:
    """Return the canonical replies for the legal moves; each is always read as that move."""
    return tuple(reply_for(m) for m in moves)


def deal_line(hand_index: int, num_hands: int, card: int) -> str:
    """Tell a player its card at the start of a hand."""
    return f"Hand {hand_index + 1} of {num_hands}. Your card: {CARDS[card]}."


def move_line(agent: str, move: Move) -> str:
    """Tell a player the move another player made (the parsed move, never the raw reply)."""
    return f"{agent} {_VERB[Move(move)]}."


def prompt_line(moves: Sequence[Move], card: int | None = None) -> str:
    """Ask for a move among the legal ones, restating the player's card when given.

    The question then carries the whole decision state (the card here, the last move on the line
    above), so a reader does not have to find the card several lines back: a small model trained
    from scratch separates its information sets better so (exploitability 0.06-0.08 against
    0.10-0.12 without the card, same self-play budget).
    """
    ask = "Your move: " + " or ".join(legal_replies(moves)) + "."
    return ask if card is None else f"Your card: {CARDS[card]}. {ask}"


def result_line(hand_index: int, winner: str, amount: float, shown: str | None, you: str, total: float) -> str:
    """Tell a player how a hand ended: who won what, the opponent's card if shown, the running total."""
    shown_part = f" Showdown: {shown}." if shown else ""
    won = f"{'You' if winner == you else winner} won {amount:g}"
    return f"Hand {hand_index + 1} is over.{shown_part} {won}. Your total: {total:+g}."


def match_over_line(total: float) -> str:
    """Tell a player that the match is over."""
    return f"The match is over. Your total: {total:+g}."


def parse_move(reply: str, legal: Sequence[Move]) -> Move | None:
    """Read a reply as one move, or None if it names no move, two different moves, or an illegal one.

    Lenient about case and surrounding text, strict about ambiguity. If the reply has bracketed moves
    (``[bet]``), only those count; otherwise whole words count (``"I bet"`` is a bet, ``"alphabet"``
    and ``"betting"`` are not). A reply naming two different moves is invalid.
    """
    return _READER.parse(reply, legal)


def invalid_feedback(reply: str, legal: Sequence[Move]) -> str:
    """Explain why a reply was not read as a legal move."""
    return _READER.feedback(reply, legal)


def corpus(max_hands: int = 2, agents: Iterable[str] = ("player_0", "player_1")) -> list[str]:
    """Return every prompt string the env can show, for building a vocabulary from (errors excluded)."""
    agents = list(agents)
    lines = [system_prompt(a, n, r) for a in agents for n in range(1, max_hands + 1) for r in (True, False)]
    lines += [deal_line(h, n, c) for n in range(1, max_hands + 1) for h in range(n) for c in range(len(CARDS))]
    lines += [move_line(a, m) for a in agents for m in Move]
    lines += [prompt_line(ms, c) for ms in ((Move.CHECK, Move.BET), (Move.CALL, Move.FOLD))
              for c in (None, *range(len(CARDS)))]
    lines += [result_line(0, w, 1, f"{a} had {c}", a, 1) for w in agents + ["you"] for a in agents for c in CARDS]
    lines += [match_over_line(t) for t in (-2, -1, 0, 1, 2)]
    lines += [invalid_feedback("", (Move.CHECK, Move.BET)), "Invalid reply: Reply again. You have no retries left and forfeit."]
    return lines
