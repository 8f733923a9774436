"""A match of hands of a two-player poker game in text: the machinery Kuhn poker and Leduc hold'em share.

:class:`PokerMatch` is a :class:`~llm_zoo.envs.core.TextEnv` that plays ``num_hands`` hands, the
first player alternating, and keeps what each player is told: the deal, the opponent's parsed moves
(never its raw reply), the request for a move, the hand's result with the running total, and the
end of the match. A game module supplies the rules (a ``Hand`` made from the seats' cards, with
``play``, ``legal_moves``, ``to_act``, ``is_terminal``, ``payoff``, ``is_showdown``, ``info_set``,
``history``), the text
(``text.parse_move``, ``text.invalid_feedback``, ``text.deal_line``, ``text.move_line``,
``text.result_line``, ``text.match_over_line``, ``text.system_prompt``) and the few hooks below
where the games differ: how a hand is dealt, how a move is asked for, what happens between moves
(Leduc shows the public card when its first round closes), and what a forfeit costs.
"""

from __future__ import annotations

import functools
import random
from collections.abc import Callable, Hashable, Mapping
from types import ModuleType
from typing import Any

from llm_zoo.envs.core import InvalidReply, TextEnv

AGENTS = ("player_0", "player_1")
OPPONENT = {AGENTS[0]: AGENTS[1], AGENTS[1]: AGENTS[0]}


class PokerMatch(TextEnv):
    """A match of ``num_hands`` hands of a two-player poker game; subclasses name the game and fill the hooks.

    Class attributes a subclass sets: ``title`` (shown in the transcript), ``card_names`` (rank ->
    letter), ``hand_class`` (the rules' ``Hand``), ``text`` (the game's text module), ``legal_replies`` (a hand's history -> the canonical
    replies legal there), ``move_lines`` ((agent, move) -> the line the opponent is shown), and
    ``result_line`` / ``match_over_line`` (the text module's, usually memoised: the same lines recur).
    """

    title: str = "poker"
    reset_options: tuple[str, ...] | None = ("deal",)
    card_names: tuple[str, ...] = ()
    hand_class: Callable[[tuple[int, ...]], Any]
    text: ModuleType
    legal_replies: Mapping[Any, tuple[str, ...]] = {}
    move_lines: Mapping[tuple[str, Any], str] = {}
    result_line: Callable[..., str]
    match_over_line: Callable[[float], str]
    first_player: Callable[[int], int] = staticmethod(lambda hand_index: hand_index % 2)
    """The seat (0 or 1 of ``AGENTS``) that acts first in a hand: the rules module's ``first_player``."""
    draw_deal: Callable[[random.Random], tuple[int, ...]]
    """The rules module's ``deal``: one hand's random cards, in seat order, from the episode's RNG."""
    possible_agents = list(AGENTS)

    def __init__(self, *, num_hands: int = 1, rules_in_prompt: bool = True, **kwargs: Any) -> None:
        if not isinstance(num_hands, int) or isinstance(num_hands, bool) or num_hands < 1:
            raise ValueError(f"num_hands must be an integer >= 1; got {num_hands!r}")
        self.num_hands = num_hands
        self.rules_in_prompt = bool(rules_in_prompt)
        self.possible_agents = list(AGENTS)
        super().__init__(**kwargs)

    # ---- hooks of the game ----------------------------------------------------------------

    def read_deals(self, deals: Any) -> list[tuple[int, ...]] | None:
        """Read ``options["deal"]`` (per hand, player_0's card first), or None for random deals."""
        raise NotImplementedError

    def deal_hand(self, first: str) -> tuple[int, ...]:
        """Return this hand's cards in seat order (the first player's first): the fixed deal's or a random one."""
        raise NotImplementedError

    def prompt(self, seat: int) -> str:
        """Return the request for a move shown to the player in ``seat`` (the legal replies, its card)."""
        raise NotImplementedError

    def describe_deal(self, ranks: tuple[int, ...], first: str) -> str:
        """Return the transcript's line for a new hand (only built when something shows it)."""
        return (f"Hand {self._hand_index + 1}: {self._first[0]} has {self.card_names[ranks[0]]}, "
                f"{self._first[1]} has {self.card_names[ranks[1]]}; {first} acts first")

    def between_moves(self, before: Any) -> None:
        """Called after a move when the hand goes on (``before``: the hand before it), before the next request."""

    def opening(self, seed: int | None, options: Mapping[str, Any] | None) -> Hashable | None:
        """Return every hand's cards as ``reset(seed=seed, options=options)`` deals them, without resetting.

        A match is a pure function of its cards and the replies: the deal is the only draw from the
        episode's RNG (one ``draw_deal`` a hand, in order), and ``options`` hold nothing but the deal.
        The trainer's rollout memo (:class:`~llm_zoo.trainers.rollout.MemoEnvs`) keys its replays by
        this; None (an unseeded reset) means the cards are not known in advance.
        """
        fixed = self.read_deals((options or {}).get("deal"))
        if fixed is not None:
            return ("deal", tuple(fixed))
        if seed is None:
            return None
        rng = random.Random(seed)
        return tuple(self.draw_deal(rng) for _ in range(self.num_hands))

    # ---- TextEnv hooks ----------------------------------------------------------------------

    def extra_observation(self, agent: str) -> dict[str, Any]:
        acting = agent == self.agent_selection and not (self.terminations.get(agent) or self.truncations.get(agent))
        legal = self.legal_replies.get(self._hand.history, ()) if acting else ()
        return {"legal_actions": legal, "info_set": self._hand.info_set(self._first.index(agent))}

    def system_prompt(self, agent: str) -> str:
        return self.text.system_prompt(agent, self.num_hands, self.rules_in_prompt)

    def start(self, rng: random.Random, options: Mapping[str, Any] | None) -> str:
        self._deals = self.read_deals((options or {}).get("deal"))
        self._hand_index = 0
        self._totals = {a: 0.0 for a in AGENTS}
        self._pending: dict[str, list[str]] = {a: [] for a in AGENTS}
        if self.render_mode is not None:  # here and below: no transcript line is formatted that nothing shows
            self.narrate(f"{self.title}, {self.num_hands} hand(s).")
        return self._start_hand()

    def parse(self, agent: str, reply: str) -> Any:
        move = self.text.parse_move(reply, self._hand.legal_moves)
        if move is None:
            raise InvalidReply(self.text.invalid_feedback(reply, self._hand.legal_moves))
        return move

    def play(self, agent: str, move: Any) -> None:
        before = self._hand
        self._hand = before.play(move)
        self._pending[OPPONENT[agent]].append(self.move_lines[agent, move])
        if self.render_mode is not None:
            self.narrate(f"   {agent} {move.value}s")
        if not self._hand.is_terminal:
            self.between_moves(before)
            self._ask(self._first[self._hand.to_act])
            return
        self._settle_hand()
        self._hand_index += 1
        if self._hand_index < self.num_hands:
            self._start_hand()
            return
        for a in AGENTS:
            self._pending[a].append(self.match_over_line(self._totals[a]))
            self._flush(a)
        self.end(totals=dict(self._totals))

    # ---- the match --------------------------------------------------------------------------

    def _start_hand(self) -> str:
        first = AGENTS[self.first_player(self._hand_index)]
        self._first = (first, OPPONENT[first])
        ranks = self.deal_hand(first)
        self._ranks, self._hand = ranks, self.hand_class(ranks)
        for seat, agent in enumerate(self._first):
            self._pending[agent].append(self.text.deal_line(self._hand_index, self.num_hands, ranks[seat]))
            self.infos[agent].update(card=self.card_names[ranks[seat]], hand=self._hand_index, seat=seat)
            self.infos[agent].pop("public", None)
        if self.render_mode is not None:
            self.narrate(self.describe_deal(ranks, first))
        self._ask(first)
        return first

    def _ask(self, agent: str) -> None:
        seat = self._first.index(agent)
        self._pending[agent].append(self.prompt(seat))
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
        winner = None if payoff == 0 else first[0] if payoff > 0 else first[1]  # None: a split pot
        for seat, agent in enumerate(first):
            won = payoff if seat == 0 else -payoff
            self.reward(agent, won)
            self._totals[agent] += won
            shown = f"{first[1 - seat]} had {self.card_names[self._ranks[1 - seat]]}" if showdown else None
            self._pending[agent].append(
                self.result_line(self._hand_index, winner, abs(payoff), shown, agent, self._totals[agent]))
            self.infos[agent].setdefault("payoffs", []).append(won)
            self.infos[agent]["total"] = self._totals[agent]
        if self.render_mode is not None:
            self.narrate(f"   {winner or 'nobody'} wins {abs(payoff):g}" + (" at showdown" if showdown else ""))


def memoised(function: Callable[..., str], size: int) -> Callable[..., str]:
    """Return ``function`` memoised (a line's formatting, ``:g`` of amounts, is most of a hand's end cost).

    A memo cannot tell -0.0 from 0.0; the totals never are -0.0 (they start at 0.0 and move by
    non-zero payoffs, or by 0.0 on a split pot).
    """
    return staticmethod(functools.lru_cache(maxsize=size)(function))  # type: ignore[return-value]
