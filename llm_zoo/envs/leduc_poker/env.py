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
import random
from collections.abc import Mapping
from typing import Any

import numpy as np
from gymnasium import spaces

from llm_zoo.envs.core import FastOrderEnforcingWrapper, InvalidReply, TextEnv, text_space
from llm_zoo.envs.leduc_poker import text
from llm_zoo.envs.leduc_poker.rules import NODES, RANKS, Hand, Move, check_ranks, deal, first_player

ENV_ID = "leduc_poker_v0"
AGENTS = ("player_0", "player_1")
MAX_HAND_LOSS = max(max(n.put) for n in NODES.values())  # 13: ante 1, 2 + 2 in round 1, 4 + 4 in round 2
REWARD_RANGE = (-float(MAX_HAND_LOSS), float(MAX_HAND_LOSS))  # per hand
_MOVES = tuple(Move)
MENU = text.legal_replies(_MOVES)  # ("[check]", "[bet]", "[call]", "[raise]", "[fold]"): the discrete view's actions
_MAX_ROUND_MOVES = 4
FEATURE_SIZE = 2 * len(RANKS) + 2 * _MAX_ROUND_MOVES * len(_MOVES) + 2
_LEGAL_REPLIES = {history: text.legal_replies(node.legal) for history, node in NODES.items()}
_MOVE_LINE = {(agent, move): text.move_line(agent, move) for agent in AGENTS for move in Move}
_OPPONENT = {AGENTS[0]: AGENTS[1], AGENTS[1]: AGENTS[0]}
_prompt_line = functools.lru_cache(maxsize=1024)(text.prompt_line)
_result_line = functools.lru_cache(maxsize=4096)(text.result_line)
_match_over_line = functools.lru_cache(maxsize=256)(text.match_over_line)


class raw_env(TextEnv):  # noqa: N801 - PettingZoo's module pattern names the class raw_env
    """Leduc hold'em as a text AEC env; see the module docstring.

    Args:
        num_hands: hands in a match (>= 1); the first player alternates.
        forfeit_penalty: reward lost by a player who forfeits (and won by its opponent); None (the
            default) is 13 per hand left, the most the rest of the match could cost.
        rules_in_prompt: state the rules in the system prompt (False keeps only the reply format).
        **kwargs: the base options of :class:`llm_zoo.envs.core.TextEnv` (``render_mode``,
            ``max_retries``, ``max_reply_chars``, ...).
    """

    metadata = {"render_modes": ["human", "ansi"], "name": ENV_ID, "is_parallelizable": False}
    possible_agents = list(AGENTS)

    def __init__(self, *, num_hands: int = 1, forfeit_penalty: float | None = None, rules_in_prompt: bool = True,
                 **kwargs: Any) -> None:
        if not isinstance(num_hands, int) or isinstance(num_hands, bool) or num_hands < 1:
            raise ValueError(f"num_hands must be an integer >= 1; got {num_hands!r}")
        if forfeit_penalty is not None and (not isinstance(forfeit_penalty, (int, float))
                                            or isinstance(forfeit_penalty, bool) or not forfeit_penalty >= 0):
            raise ValueError(f"forfeit_penalty must be a number >= 0 or None (13 per hand left); got {forfeit_penalty!r}")
        self.num_hands = num_hands
        self.forfeit_penalty = None if forfeit_penalty is None else float(forfeit_penalty)
        self.rules_in_prompt = bool(rules_in_prompt)
        self.possible_agents = list(AGENTS)
        super().__init__(**kwargs)

    # ---- hooks ----------------------------------------------------------------------------

    def extra_spaces(self) -> dict[str, spaces.Space]:
        return {"legal_actions": spaces.Sequence(text_space(8), stack=False), "info_set": text_space(48)}

    def extra_observation(self, agent: str) -> dict[str, Any]:
        acting = agent == self.agent_selection and not (self.terminations.get(agent) or self.truncations.get(agent))
        legal = _LEGAL_REPLIES[self._hand.history] if acting else ()
        return {"legal_actions": legal, "info_set": self._hand.info_set(self._first.index(agent))}

    def system_prompt(self, agent: str) -> str:
        return text.system_prompt(agent, self.num_hands, self.rules_in_prompt)

    def start(self, rng: random.Random, options: Mapping[str, Any] | None) -> str:
        self._deals = _read_deals((options or {}).get("deal"), self.num_hands)
        self._hand_index = 0
        self._totals = {a: 0.0 for a in AGENTS}
        self._pending: dict[str, list[str]] = {a: [] for a in AGENTS}
        if self.render_mode is not None:
            self.narrate(f"Leduc hold'em, {self.num_hands} hand(s).")
        return self._start_hand()

    def parse(self, agent: str, reply: str) -> Move:
        move = text.parse_move(reply, self._hand.legal_moves)
        if move is None:
            raise InvalidReply(text.invalid_feedback(reply, self._hand.legal_moves))
        return move

    def play(self, agent: str, move: Move) -> None:
        before = self._hand.round
        self._hand = self._hand.play(move)
        other = _OPPONENT[agent]
        self._pending[other].append(_MOVE_LINE[agent, move])
        if self.render_mode is not None:
            self.narrate(f"   {agent} {move.value}s")
        if not self._hand.is_terminal:
            if self._hand.round != before:  # the first round closed: show the public card to both
                line = text.public_line(self._hand.ranks[2])
                for a in AGENTS:
                    self._pending[a].append(line)
                    self.infos[a]["public"] = RANKS[self._hand.ranks[2]]
                if self.render_mode is not None:
                    self.narrate(f"   public card {RANKS[self._hand.ranks[2]]}")
            self._ask(self._first[self._hand.to_act])
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
        return {agent: -penalty, _OPPONENT[agent]: penalty}

    # ---- internals ------------------------------------------------------------------------

    def _start_hand(self) -> str:
        first = AGENTS[first_player(self._hand_index)]
        self._first = (first, _OPPONENT[first])
        if self._deals is not None:
            p0, p1, public = self._deals[self._hand_index]
            ranks = (p0, p1, public) if first == AGENTS[0] else (p1, p0, public)
        else:
            ranks = deal(self.rng)
        self._hand = Hand(ranks)
        for seat, agent in enumerate(self._first):
            self._pending[agent].append(text.deal_line(self._hand_index, self.num_hands, ranks[seat]))
            self.infos[agent].update(card=RANKS[ranks[seat]], hand=self._hand_index, seat=seat)
            self.infos[agent].pop("public", None)
        if self.render_mode is not None:
            self.narrate(f"Hand {self._hand_index + 1}: {self._first[0]} has {RANKS[ranks[0]]}, "
                         f"{self._first[1]} has {RANKS[ranks[1]]}, public {RANKS[ranks[2]]}; {first} acts first")
        self._ask(first)
        return first

    def _ask(self, agent: str) -> None:
        seat = self._first.index(agent)
        hand = self._hand
        self._pending[agent].append(_prompt_line(hand.legal_moves, hand.ranks[seat], hand.public))
        self._flush(agent)
        self.infos[agent]["info_set"] = hand.info_set(seat)
        if self.agents:
            self.pass_turn(agent)

    def _flush(self, agent: str) -> None:
        if self._pending[agent]:
            self.tell(agent, "\n".join(self._pending[agent]))
            self._pending[agent] = []

    def _settle_hand(self) -> None:
        hand, first = self._hand, self._first
        payoff, showdown = hand.payoff, hand.is_showdown  # seat 0's payoff
        winner = None if payoff == 0 else first[0] if payoff > 0 else first[1]
        for seat, agent in enumerate(first):
            won = payoff if seat == 0 else -payoff
            self.reward(agent, won)
            self._totals[agent] += won
            shown = f"{first[1 - seat]} had {RANKS[hand.ranks[1 - seat]]}" if showdown else None
            self._pending[agent].append(
                _result_line(self._hand_index, winner, abs(payoff), shown, agent, self._totals[agent]))
            self.infos[agent].setdefault("payoffs", []).append(won)
            self.infos[agent]["total"] = self._totals[agent]
        if self.render_mode is not None:
            self.narrate(f"   {winner or 'nobody'} wins {abs(payoff):g}" + (" at showdown" if showdown else ""))


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
