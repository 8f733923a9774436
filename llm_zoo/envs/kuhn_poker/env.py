"""# Kuhn poker

| | |
|---|---|
| Import | `from llm_zoo import kuhn_poker_v0` |
| Registered as | `pettingzoo.make("aec", "llm_zoo/kuhn_poker-v0")` |
| Agents | `player_0`, `player_1` (role `player`) |
| Turn order | the hand's first player, then alternately; the first player alternates between hands |
| Action | a reply (`str`), e.g. `"[bet]"` or `"I hold the king, so [bet]"` |
| Observation | `messages` (chat transcript), `legal_actions` (tuple of replies), `info_set` (`"K:check,bet"`) |
| Reward | the hand's payoff when a hand ends: ±1 (check-check, fold) or ±2 (called bet); forfeit −1/+1 |
| Max turns | 3 decisions per hand, plus retries |

Standard two-player Kuhn poker, played in text. Three cards J < Q < K; each player antes 1 and is
dealt one card; one bet of size 1. With `num_hands=n` a match of n hands is played, the first
player alternating, and the payoffs add up.

## Observation
`obs["messages"]` holds what the player may see: the system prompt with the rules and the reply
format, its own card, the moves of the hand as the env parsed them (never the opponent's raw reply),
the showdown when there is one, and its own earlier replies. Each request for a move restates the
player's card (`Your card: K. Your move: [check] or [bet].`). `obs["legal_actions"]` is the tuple of
canonical replies legal now (empty when it is not this player's turn), each always read as that
move. `obs["info_set"]` is the player's information state in the current hand, the key of a
tabular policy (see `llm_zoo.envs.kuhn_poker.theory`). `infos[agent]` holds the same info set, the
card, the hand index and the running total.

## Action
Any `str`. The reply is read leniently but unambiguously: if it contains bracketed moves
(`[check]`), only those count, else whole words do; it must name exactly one move, and that move
must be legal. A non-`str` action raises `TypeError`.

## Rewards
When a hand ends, the winner gets the pot's net (+1 or +2) and the loser the negative, so the
rewards of a match sum to each player's total. A forfeit gives `-forfeit_penalty` to the offender
and `+forfeit_penalty` to the opponent and ends the match.

## Invalid moves
An invalid reply is answered with feedback and the same player replies again, up to `max_retries`
times in a row (default 1); the next invalid reply forfeits. Counts are in
`infos[agent]["invalid_replies"]`.

## Options
`reset(options={"deal": [("K", "Q"), ...]})` fixes each hand's cards as (player_0's, player_1's).

## Version History
* v0: initial release.
"""

from __future__ import annotations

from typing import Any

import numpy as np
from gymnasium import spaces

from llm_zoo.envs.core import FastOrderEnforcingWrapper, text_space
from llm_zoo.envs.kuhn_poker import text
from llm_zoo.envs.kuhn_poker.rules import CARDS, LEGAL, Hand, Move, deal, first_player
from llm_zoo.envs.poker import AGENTS, OPPONENT, PokerMatch, memoised

ENV_ID = "kuhn_poker_v0"
REWARD_RANGE = (-2.0, 2.0)  # per hand
_MOVES = tuple(Move)
MENU = text.legal_replies(_MOVES)  # ("[check]", "[bet]", "[call]", "[fold]"): the discrete view's actions
FEATURE_SIZE = 3 + 3 * len(_MOVES) + 2
# history -> what the player to act is shown: its legal replies and the prompt naming them (texts built once)
_LEGAL_REPLIES = {history: text.legal_replies(moves) for history, moves in LEGAL.items()}
_PROMPT_LINE = {(card, history): text.prompt_line(moves, card)
                for history, moves in LEGAL.items() for card in range(len(CARDS))}
_MOVE_LINE = {(agent, move): text.move_line(agent, move) for agent in AGENTS for move in Move}


class raw_env(PokerMatch):  # noqa: N801 - PettingZoo's module pattern names the class raw_env
    """Kuhn poker as a text AEC env; see the module docstring. The match itself is :class:`~llm_zoo.envs.poker.PokerMatch`.

    Args:
        num_hands: hands in a match (>= 1); the first player alternates.
        forfeit_penalty: reward lost by a player who forfeits (and won by its opponent).
        rules_in_prompt: state the rules in the system prompt (False keeps only the reply format:
            a shorter prompt for small models that learn the game from play).
        **kwargs: the base options of :class:`llm_zoo.envs.core.TextEnv` (``render_mode``,
            ``max_retries``, ``max_reply_chars``, ...).
    """

    metadata = {"render_modes": ["human", "ansi"], "name": ENV_ID, "is_parallelizable": False}
    title = "Kuhn poker"
    card_names = CARDS
    hand_class = Hand
    text = text
    legal_replies = _LEGAL_REPLIES
    move_lines = _MOVE_LINE
    result_line = memoised(text.result_line, 1024)
    match_over_line = memoised(text.match_over_line, 64)
    first_player = staticmethod(first_player)
    draw_deal = staticmethod(deal)

    def __init__(self, *, num_hands: int = 1, forfeit_penalty: float = 1.0, rules_in_prompt: bool = True,
                 **kwargs: Any) -> None:
        if not isinstance(forfeit_penalty, (int, float)) or forfeit_penalty < 0:
            raise ValueError(f"forfeit_penalty must be a number >= 0; got {forfeit_penalty!r}")
        self.forfeit_penalty = float(forfeit_penalty)
        super().__init__(num_hands=num_hands, rules_in_prompt=rules_in_prompt, **kwargs)

    # ---- hooks ----------------------------------------------------------------------------

    def extra_spaces(self) -> dict[str, spaces.Space]:
        return {"legal_actions": spaces.Sequence(text_space(8), stack=False), "info_set": text_space(32)}

    def read_deals(self, deals: Any) -> list[tuple[int, ...]] | None:
        return _read_deals(deals, self.num_hands)

    def deal_hand(self, first: str) -> tuple[int, ...]:
        if self._deals is None:
            return deal(self.rng)
        by_agent = dict(zip(AGENTS, self._deals[self._hand_index]))
        return by_agent[first], by_agent[OPPONENT[first]]

    def prompt(self, seat: int) -> str:
        return _PROMPT_LINE[self._hand.cards[seat], self._hand.history]

    def action_menu(self) -> tuple[str, ...]:
        return MENU

    def features(self, agent: str) -> np.ndarray:
        # card one-hot (3) | the hand's moves so far, one-hot per position (3 x 4) | own seat (2)
        vec = np.zeros(FEATURE_SIZE, dtype=np.float32)
        hand, seat = self._hand, self._first.index(agent)
        vec[hand.cards[seat]] = 1.0
        for i, move in enumerate(hand.history):
            vec[3 + 4 * i + _MOVES.index(move)] = 1.0
        vec[15 + seat] = 1.0
        return vec

    def feature_space(self) -> spaces.Box:
        return spaces.Box(0.0, 1.0, (FEATURE_SIZE,), np.float32)

    def forfeit_rewards(self, agent: str) -> dict[str, float]:
        return {agent: -self.forfeit_penalty, OPPONENT[agent]: self.forfeit_penalty}


def _read_deals(deals: Any, num_hands: int) -> list[tuple[int, int]] | None:
    """Read ``options["deal"]``: per hand, (player_0's card, player_1's card) as letters or ranks."""
    if deals is None:
        return None
    if not isinstance(deals, (list, tuple)) or len(deals) != num_hands:
        raise ValueError(f"options['deal'] must list {num_hands} (player_0 card, player_1 card) pairs; got {deals!r}")
    out = []
    for pair in deals:
        try:
            ranks = tuple(CARDS.index(c) if isinstance(c, str) else int(c) for c in pair)
            Hand(ranks)  # validates
        except (ValueError, TypeError) as exc:
            raise ValueError(f"options['deal'] has a bad pair {pair!r}: expected two different cards of "
                             f"{CARDS}") from exc
        out.append(ranks)
    return out


def env(**kwargs: Any) -> FastOrderEnforcingWrapper:
    """Make Kuhn poker with the standard wrappers (call-order checks); see :class:`raw_env`."""
    return FastOrderEnforcingWrapper(raw_env(**kwargs))
