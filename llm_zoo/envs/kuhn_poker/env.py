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

import functools
import random
from collections.abc import Mapping
from typing import Any

import numpy as np
from gymnasium import spaces

from llm_zoo.envs.core import FastOrderEnforcingWrapper, InvalidReply, TextEnv, text_space
from llm_zoo.envs.kuhn_poker import text
from llm_zoo.envs.kuhn_poker.rules import CARDS, LEGAL, Hand, Move, deal, first_player

ENV_ID = "kuhn_poker_v0"
AGENTS = ("player_0", "player_1")
REWARD_RANGE = (-2.0, 2.0)  # per hand
_MOVES = tuple(Move)
MENU = text.legal_replies(_MOVES)  # ("[check]", "[bet]", "[call]", "[fold]"): the discrete view's actions
FEATURE_SIZE = 3 + 3 * len(_MOVES) + 2
# history -> what the player to act is shown: its legal replies and the prompt naming them (texts built once)
_LEGAL_REPLIES = {history: text.legal_replies(moves) for history, moves in LEGAL.items()}
_PROMPT_LINE = {(card, history): text.prompt_line(moves, card)
                for history, moves in LEGAL.items() for card in range(len(CARDS))}
_MOVE_LINE = {(agent, move): text.move_line(agent, move) for agent in AGENTS for move in Move}
_OPPONENT = {AGENTS[0]: AGENTS[1], AGENTS[1]: AGENTS[0]}
# Formatting the amounts (:g) is most of the cost of a hand's end, and the same few lines recur. (A
# memo cannot tell -0.0 from 0.0; totals never are -0.0: they start at 0.0 and move by non-zero payoffs.)
_result_line = functools.lru_cache(maxsize=1024)(text.result_line)
_match_over_line = functools.lru_cache(maxsize=64)(text.match_over_line)


class raw_env(TextEnv):  # noqa: N801 - PettingZoo's module pattern names the class raw_env
    """Kuhn poker as a text AEC env; see the module docstring.

    Args:
        num_hands: hands in a match (>= 1); the first player alternates.
        forfeit_penalty: reward lost by a player who forfeits (and won by its opponent).
        rules_in_prompt: state the rules in the system prompt (False keeps only the reply format:
            a shorter prompt for small models that learn the game from play).
        **kwargs: the base options of :class:`llm_zoo.envs.core.TextEnv` (``render_mode``,
            ``max_retries``, ``max_reply_chars``, ...).
    """

    metadata = {"render_modes": ["human", "ansi"], "name": ENV_ID, "is_parallelizable": False}
    possible_agents = list(AGENTS)

    def __init__(self, *, num_hands: int = 1, forfeit_penalty: float = 1.0, rules_in_prompt: bool = True,
                 **kwargs: Any) -> None:
        if not isinstance(num_hands, int) or isinstance(num_hands, bool) or num_hands < 1:
            raise ValueError(f"num_hands must be an integer >= 1; got {num_hands!r}")
        if not isinstance(forfeit_penalty, (int, float)) or forfeit_penalty < 0:
            raise ValueError(f"forfeit_penalty must be a number >= 0; got {forfeit_penalty!r}")
        self.num_hands = num_hands
        self.forfeit_penalty = float(forfeit_penalty)
        self.rules_in_prompt = bool(rules_in_prompt)
        self.possible_agents = list(AGENTS)
        super().__init__(**kwargs)

    # ---- hooks ----------------------------------------------------------------------------

    def extra_spaces(self) -> dict[str, spaces.Space]:
        return {"legal_actions": spaces.Sequence(text_space(8), stack=False), "info_set": text_space(32)}

    def extra_observation(self, agent: str) -> dict[str, Any]:
        acting = agent == self.agent_selection and not (self.terminations.get(agent) or self.truncations.get(agent))
        legal = _LEGAL_REPLIES.get(self._hand.history, ()) if acting else ()
        return {"legal_actions": legal, "info_set": self._hand.info_set(self._first.index(agent))}

    def system_prompt(self, agent: str) -> str:
        return text.system_prompt(agent, self.num_hands, self.rules_in_prompt)

    def start(self, rng: random.Random, options: Mapping[str, Any] | None) -> str:
        self._deals = _read_deals((options or {}).get("deal"), self.num_hands)
        self._hand_index = 0
        self._totals = {a: 0.0 for a in AGENTS}
        self._pending: dict[str, list[str]] = {a: [] for a in AGENTS}
        if self.render_mode is not None:  # here and below: no transcript line is formatted that nothing shows
            self.narrate(f"Kuhn poker, {self.num_hands} hand(s).")
        return self._start_hand()

    def parse(self, agent: str, reply: str) -> Move:
        move = text.parse_move(reply, self._hand.legal_moves)
        if move is None:
            raise InvalidReply(text.invalid_feedback(reply, self._hand.legal_moves))
        return move

    def play(self, agent: str, move: Move) -> None:
        self._hand = self._hand.play(move)
        other = _OPPONENT[agent]
        self._pending[other].append(_MOVE_LINE[agent, move])
        if self.render_mode is not None:
            self.narrate(f"   {agent} {move.value}s")
        if not self._hand.is_terminal:
            self._ask(other)
            return
        self._settle_hand()
        self._hand_index += 1
        if self._hand_index < self.num_hands:
            self._start_hand()
            return
        for a in AGENTS:
            self._pending[a].append(_match_over_line(self._totals[a]))
            self._flush(a)
        self.end(totals=dict(self._totals))

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
        return {agent: -self.forfeit_penalty, _OPPONENT[agent]: self.forfeit_penalty}

    # ---- internals ------------------------------------------------------------------------

    def _start_hand(self) -> str:
        first = AGENTS[first_player(self._hand_index)]
        self._first = (first, _OPPONENT[first])
        if self._deals is not None:
            by_agent = dict(zip(AGENTS, self._deals[self._hand_index]))
            cards = (by_agent[self._first[0]], by_agent[self._first[1]])
        else:
            cards = deal(self.rng)
        self._hand = Hand(cards)
        for seat, agent in enumerate(self._first):
            self._pending[agent].append(text.deal_line(self._hand_index, self.num_hands, cards[seat]))
            self.infos[agent].update(card=CARDS[cards[seat]], hand=self._hand_index, seat=seat)
        if self.render_mode is not None:
            self.narrate(f"Hand {self._hand_index + 1}: {self._first[0]} has {CARDS[cards[0]]}, "
                         f"{self._first[1]} has {CARDS[cards[1]]}; {first} acts first")
        self._ask(first)
        return first

    def _ask(self, agent: str) -> None:
        seat = self._first.index(agent)
        self._pending[agent].append(_PROMPT_LINE[self._hand.cards[seat], self._hand.history])
        self._flush(agent)
        self.infos[agent]["info_set"] = self._hand.info_set(seat)
        if self.agents:
            self.pass_turn(agent)

    def _flush(self, agent: str) -> None:
        if self._pending[agent]:
            self.tell(agent, "\n".join(self._pending[agent]))
            self._pending[agent] = []

    def _settle_hand(self) -> None:
        hand, first = self._hand, self._first
        payoff, showdown = hand.payoff, hand.is_showdown  # seat 0's payoff
        winner = first[0] if payoff > 0 else first[1]
        for seat, agent in enumerate(first):
            won = payoff if seat == 0 else -payoff
            self.reward(agent, won)
            self._totals[agent] += won
            shown = f"{first[1 - seat]} had {CARDS[hand.cards[1 - seat]]}" if showdown else None
            self._pending[agent].append(
                _result_line(self._hand_index, winner, abs(payoff), shown, agent, self._totals[agent]))
            self.infos[agent].setdefault("payoffs", []).append(won)
            self.infos[agent]["total"] = self._totals[agent]
        if self.render_mode is not None:
            self.narrate(f"   {winner} wins {abs(payoff):g}" + (" at showdown" if showdown else ""))


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
