"""# Leduc hold'em

| | |
|---|---|
| Import | `from llm_zoo import leduc_poker_v0` |
| Registered as | `pettingzoo.make("aec", "llm_zoo/leduc_poker-v0")` |
| Agents | `player_0`, `player_1` (role `player`) |
| Turn order | the hand's first player opens both rounds, then alternately; the first player alternates between hands |
| Action | a reply (`str`), e.g. `"[raise]"` or `"A pair of kings: [raise]"` |
| Observation | `messages` (chat transcript), `legal_actions` (tuple of replies), `info_set` (`"KQ:bet,call/check"`) |
| Reward | the hand's payoff when a hand ends: -13..+13 (what the loser put in); forfeit: see Invalid moves |
| Max turns | 8 decisions per hand (4 a round), plus retries |

Two-player Leduc hold'em with the rules of OpenSpiel's `leduc_poker` (see
:mod:`llm_zoo.envs.leduc_poker.rules`), played in text. Six cards, two each of J < Q < K; each
player antes 1 and is dealt one private card; a betting round; a public card is shown; a second
betting round. Bets and raises are 2 in the first round and 4 in the second, at most two a round.
A private card pairing the public card wins the showdown, else the higher card; equal cards split.
With `num_hands=n` a match of n hands is played, the first player alternating, and payoffs add up.

## Observation
`obs["messages"]` holds what the player may see: the system prompt with the rules (or only the
reply format), its own card, the moves as the env parsed them (never the opponent's raw reply), the
public card when it is shown, the showdown when there is one, and its own earlier replies. Each
request for a move restates the player's card and the public card (`Your card: K. Public card: Q.
Your move: [fold] or [call] or [raise].`). `obs["legal_actions"]` is the tuple of canonical replies
legal now (empty when it is not this player's turn), each always read as that move.
`obs["info_set"]` is the player's information state, the key of a tabular policy (see
:mod:`llm_zoo.envs.leduc_poker.theory`). `infos[agent]` holds it too, with the card, the public card
once shown, the hand index, the seat and the running total.

## Action
Any `str`, read leniently but unambiguously: if it contains bracketed moves (`[call]`) only those
count, else whole words do; it must name exactly one move, and that move must be legal. A non-`str`
action raises `TypeError`.

## Rewards
When a hand ends, the winner gets what the loser put in (ante and bets: 1 to 13) and the loser the
negative; a split pot gives 0 to both. The rewards of a match sum to each player's total.

## Invalid moves
An invalid reply is answered with feedback and the same player replies again, up to `max_retries`
times in a row (default 1); the next invalid reply forfeits and ends the match. A forfeit gives
`-forfeit_penalty` to the offender and `+forfeit_penalty` to the opponent. The default
(`forfeit_penalty=None`) is the most a player can lose in the rest of the match, 13 chips per hand
left (the current one included): no invalid reply ever costs less than some way of playing on, so
an invalid reply is never a cheap fold. Counts are in `infos[agent]["invalid_replies"]`.

## Options
`reset(options={"deal": [("K", "Q", "J"), ...]})` fixes each hand's cards as (player_0's, player_1's,
the public card); no rank may appear three times.

## Version History
* v0: initial release.
"""

from __future__ import annotations

import functools
from typing import Any

import numpy as np
from gymnasium import spaces

from llm_zoo.envs.core import FastOrderEnforcingWrapper, text_space
from llm_zoo.envs.leduc_poker import text
from llm_zoo.envs.leduc_poker.rules import NODES, RANKS, Hand, Move, check_ranks, deal, first_player
from llm_zoo.envs.poker import AGENTS, OPPONENT, PokerMatch, memoised

ENV_ID = "leduc_poker_v0"
MAX_HAND_LOSS = max(max(n.put) for n in NODES.values())  # 13: ante 1, 2 + 2 in round 1, 4 + 4 in round 2
REWARD_RANGE = (-float(MAX_HAND_LOSS), float(MAX_HAND_LOSS))  # per hand
_MOVES = tuple(Move)
MENU = text.legal_replies(_MOVES)  # ("[check]", "[bet]", "[call]", "[raise]", "[fold]"): the discrete view's actions
_MAX_ROUND_MOVES = 4
FEATURE_SIZE = 2 * len(RANKS) + 2 * _MAX_ROUND_MOVES * len(_MOVES) + 2
_LEGAL_REPLIES = {history: text.legal_replies(node.legal) for history, node in NODES.items()}
_MOVE_LINE = {(agent, move): text.move_line(agent, move) for agent in AGENTS for move in Move}
_prompt_line = functools.lru_cache(maxsize=1024)(text.prompt_line)


class raw_env(PokerMatch):  # noqa: N801 - PettingZoo's module pattern names the class raw_env
    """Leduc hold'em as a text AEC env; see the module docstring. The match itself is :class:`~llm_zoo.envs.poker.PokerMatch`.

    Args:
        num_hands: hands in a match (>= 1); the first player alternates.
        forfeit_penalty: reward lost by a player who forfeits (and won by its opponent); None (the
            default) is 13 per hand left, the most the rest of the match could cost.
        rules_in_prompt: state the rules in the system prompt (False keeps only the reply format).
        **kwargs: the base options of :class:`llm_zoo.envs.core.TextEnv` (``render_mode``,
            ``max_retries``, ``max_reply_chars``, ...).
    """

    metadata = {"render_modes": ["human", "ansi"], "name": ENV_ID, "is_parallelizable": False}
    title = "Leduc hold'em"
    card_names = RANKS
    hand_class = Hand
    text = text
    legal_replies = _LEGAL_REPLIES
    move_lines = _MOVE_LINE
    result_line = memoised(text.result_line, 4096)
    match_over_line = memoised(text.match_over_line, 256)
    first_player = staticmethod(first_player)
    draw_deal = staticmethod(deal)

    def __init__(self, *, num_hands: int = 1, forfeit_penalty: float | None = None, rules_in_prompt: bool = True,
                 **kwargs: Any) -> None:
        if forfeit_penalty is not None and (not isinstance(forfeit_penalty, (int, float))
                                            or isinstance(forfeit_penalty, bool) or not forfeit_penalty >= 0):
            raise ValueError(f"forfeit_penalty must be a number >= 0 or None (13 per hand left); got {forfeit_penalty!r}")
        self.forfeit_penalty = None if forfeit_penalty is None else float(forfeit_penalty)
        super().__init__(num_hands=num_hands, rules_in_prompt=rules_in_prompt, **kwargs)

    # ---- hooks ----------------------------------------------------------------------------

    def extra_spaces(self) -> dict[str, spaces.Space]:
        return {"legal_actions": spaces.Sequence(text_space(8), stack=False), "info_set": text_space(48)}

    def read_deals(self, deals: Any) -> list[tuple[int, ...]] | None:
        return _read_deals(deals, self.num_hands)

    def deal_hand(self, first: str) -> tuple[int, ...]:
        if self._deals is None:
            return deal(self.rng)
        p0, p1, public = self._deals[self._hand_index]
        return (p0, p1, public) if first == AGENTS[0] else (p1, p0, public)

    def prompt(self, seat: int) -> str:
        hand = self._hand
        return _prompt_line(hand.legal_moves, hand.ranks[seat], hand.public)

    def describe_deal(self, ranks: tuple[int, ...], first: str) -> str:
        return (f"Hand {self._hand_index + 1}: {self._first[0]} has {RANKS[ranks[0]]}, "
                f"{self._first[1]} has {RANKS[ranks[1]]}, public {RANKS[ranks[2]]}; {first} acts first")

    def between_moves(self, before: Hand) -> None:
        if self._hand.round != before.round:  # the first round closed: show the public card to both
            line = text.public_line(self._hand.ranks[2])
            for a in AGENTS:
                self._pending[a].append(line)
                self.infos[a]["public"] = RANKS[self._hand.ranks[2]]
            if self.render_mode is not None:
                self.narrate(f"   public card {RANKS[self._hand.ranks[2]]}")

    def action_menu(self) -> tuple[str, ...]:
        return MENU

    def features(self, agent: str) -> np.ndarray:
        # card one-hot (3) | public card one-hot (3; zeros in round 1) | each round's moves, one-hot per
        # position (2 rounds x 4 positions x 5 moves) | own seat (2)
        vec = np.zeros(FEATURE_SIZE, dtype=np.float32)
        hand, seat = self._hand, self._first.index(agent)
        vec[hand.ranks[seat]] = 1.0
        if hand.public is not None:
            vec[len(RANKS) + hand.public] = 1.0
        base = 2 * len(RANKS)
        for r, moves in enumerate(hand.history):
            for i, move in enumerate(moves):
                vec[base + (r * _MAX_ROUND_MOVES + i) * len(_MOVES) + _MOVES.index(move)] = 1.0
        vec[FEATURE_SIZE - 2 + seat] = 1.0
        return vec

    def feature_space(self) -> spaces.Box:
        return spaces.Box(0.0, 1.0, (FEATURE_SIZE,), np.float32)

    def forfeit_rewards(self, agent: str) -> dict[str, float]:
        penalty = self.forfeit_penalty
        if penalty is None:
            penalty = float(MAX_HAND_LOSS * (self.num_hands - self._hand_index))
        return {agent: -penalty, OPPONENT[agent]: penalty}


def _read_deals(deals: Any, num_hands: int) -> list[tuple[int, int, int]] | None:
    """Read ``options["deal"]``: per hand, (player_0's card, player_1's card, public card) as letters or ranks."""
    if deals is None:
        return None
    if not isinstance(deals, (list, tuple)) or len(deals) != num_hands:
        raise ValueError(f"options['deal'] must list {num_hands} (player_0 card, player_1 card, public card) "
                         f"triples; got {deals!r:.200}")
    out = []
    for triple in deals:
        try:
            ranks = tuple(RANKS.index(c) if isinstance(c, str) else int(c) for c in triple)
            check_ranks(ranks)
        except (ValueError, TypeError) as exc:
            raise ValueError(f"options['deal'] has a bad triple {triple!r:.80}: expected three cards of {RANKS}, "
                             "no rank three times (the deck has two of each)") from exc
        out.append(ranks)
    return out


def env(**kwargs: Any) -> FastOrderEnforcingWrapper:
    """Make Leduc hold'em with the standard wrappers (call-order checks); see :class:`raw_env`."""
    return FastOrderEnforcingWrapper(raw_env(**kwargs))
