"""Exact game-theoretic evaluation of two-player Leduc hold'em: values, best responses, exploitability.

Leduc is small enough for exact tree walks: 24 rank deals (seat 0's card, seat 1's card, the public
card), 36 decision histories, 288 information sets. Everything here is exact up to floating-point
rounding, no sampling. The game is :mod:`llm_zoo.envs.leduc_poker.rules`'s; the independent check is
OpenSpiel, whose ``exploitability`` agrees with :func:`exploitability` within 1e-9 on random
policies (``tests/envs/leduc_poker/test_theory.py``).

| Fact              | Value                                                                          |
|-------------------|--------------------------------------------------------------------------------|
| Players           | seat 0 (acts first in both rounds), seat 1                                     |
| Deck              | J J Q Q K K; three different cards dealt: two private, one public              |
| Moves             | `check`, `bet` (nobody has bet this round); `fold`, `call`, `raise` (facing a bet); `fold`, `call` (facing a raise) |
| Stakes            | ante 1 each; bets and raises of 2 in round 1, 4 in round 2; at most 2 per round |
| Info sets         | 288 (144 per seat) as rank strings `"<card><public>:<round 1>/<round 2>"`      |
| Uniform policy    | `UNIFORM_EXPLOITABILITY` = 1709/720 = 2.37361...; OpenSpiel: 2.373611111111111 |

## Policies

A tabular policy is a `Mapping[str, Mapping[str, float]]` from info-set strings to move
probabilities, e.g. `{"K:bet": {"fold": 0.0, "call": 0.5, "raise": 0.5}, ...}`. An info set is the
acting player's card, the public card once revealed, a colon, and the moves so far: round 1's joined
by commas, then `/` and round 2's. `"J:"` is seat 0's first decision holding a jack; `"QK:check,check/bet"`
is seat 1 holding a queen, with a king on the board, facing a bet in round 2. A callable
`info_set -> {move: probability}` is accepted wherever a policy is.

## Suits and OpenSpiel's 936 information states

OpenSpiel's `leduc_poker` keys its information states by card (suit included): 936 of them. Suits
never change a payoff and a player's two suits of a rank are symmetric, so a best response can
ignore them too and the rank-level policy here has the same exploitability as its suit-level copy
(`to_openspiel` writes each row to both suits; `from_openspiel` reads them back and refuses a
policy whose suits disagree). OpenSpiel's actions are 0 fold, 1 call (our check or call), 2 raise
(our bet or raise).

References: F. Southey et al., "Bayes' Bluff: Opponent Modelling in Poker", UAI 2005; Lanctot et
al., "OpenSpiel" (2019), `leduc_poker`.
"""

from __future__ import annotations

import math
import numbers
import re
from collections import Counter
from collections.abc import Callable, Mapping
from itertools import permutations
from typing import TYPE_CHECKING, Any

from llm_zoo.envs.leduc_poker.rules import (
    DECK_SIZE,
    NEXT,
    NODES,
    NUM_PLAYERS,
    RANKS,
    SUITS,
    History,
    Move,
    info_set,
    showdown_winner,
)

if TYPE_CHECKING:
    import pyspiel
    from open_spiel.python.policy import TabularPolicy

Policy = Mapping[str, Mapping[str, float]]
PolicyLike = Policy | Callable[[str], Mapping[str, float]]

UNIFORM_EXPLOITABILITY = 1709 / 720
"""Exploitability of the uniform random policy; OpenSpiel's `exploitability` gives 2.373611111111111."""

_SUM_KEPT_TOL = 1e-12
_SUM_TOL = 1e-6

# (seat 0's rank, seat 1's rank, public rank) -> probability: three different cards of the six, ranks kept
DEALS: dict[tuple[int, int, int], float] = {
    ranks: count / (DECK_SIZE * (DECK_SIZE - 1) * (DECK_SIZE - 2))
    for ranks, count in Counter(tuple(c // SUITS for c in cards) for cards in permutations(range(DECK_SIZE), 3)).items()
}
"""The 24 rank deals and their probabilities (no rank three times: the deck has two of each)."""

_DECISIONS: tuple[History, ...] = tuple(h for h, n in NODES.items() if n.to_act is not None)
# deepest first: a best response decides an info set after every info set below it
_BY_DEPTH: tuple[History, ...] = tuple(sorted(_DECISIONS, key=lambda h: -sum(map(len, h))))


def _key(card: int, public: int, history: History) -> str:
    return info_set(card, public if len(history) > 1 else None, history)


INFO_SETS: tuple[str, ...] = tuple(dict.fromkeys(
    _key(ranks[NODES[h].to_act], ranks[2], h)
    for player in range(NUM_PLAYERS) for h in sorted(_DECISIONS, key=lambda h: (len(h), sum(map(len, h))))
    if NODES[h].to_act == player for ranks in sorted(DEALS)
))
"""All 288 info sets: seat 0's 144 first, then seat 1's; within a seat, round 1 before round 2."""

_INFO: dict[str, tuple[int, tuple[str, ...]]] = {}
for _h in _DECISIONS:
    for _ranks in DEALS:
        _INFO[_key(_ranks[NODES[_h].to_act], _ranks[2], _h)] = (NODES[_h].to_act, tuple(m.value for m in NODES[_h].legal))
del _h, _ranks
_PLAYER_INFO_SETS = tuple(tuple(i for i in INFO_SETS if _INFO[i][0] == p) for p in range(NUM_PLAYERS))


def _short(value: Any, limit: int = 200) -> str:
    text = repr(value)
    return text if len(text) <= limit else text[: limit - 3] + "..."


def _info(info_set_: str) -> tuple[int, tuple[str, ...]]:
    try:
        return _INFO[info_set_]
    except (KeyError, TypeError):
        raise ValueError(f"unknown info set {_short(info_set_)}; expected '<card><public>:<round 1>/<round 2>' such "
                         f"as 'K:' or 'KQ:bet,call/check', one of theory.INFO_SETS ({len(INFO_SETS)})") from None


def legal_moves(info_set_: str) -> tuple[str, ...]:
    """Return the legal moves at ``info_set_``, e.g. ``("fold", "call", "raise")`` for ``"Q:bet"``."""
    return _info(info_set_)[1]


def player_of(info_set_: str) -> int:
    """Return the seat (0 or 1) that decides at ``info_set_``."""
    return _info(info_set_)[0]


def uniform_policy() -> dict[str, dict[str, float]]:
    """Return the policy that plays each legal move with equal probability at every info set."""
    return {i: {m: 1 / len(legal_moves(i)) for m in legal_moves(i)} for i in INFO_SETS}


def _checked_row(info_set_: str, row: Any) -> dict[str, float]:
    legal = legal_moves(info_set_)
    if not isinstance(row, Mapping):
        raise TypeError(f"info set {info_set_!r}: expected a mapping {{move: probability}} over {legal!r}, got "
                        f"{type(row).__name__} {_short(row)}")
    for move, prob in row.items():
        if move not in legal:
            raise ValueError(f"info set {info_set_!r}: move {move!r} is not legal; expected moves from {legal!r}")
        if not isinstance(prob, numbers.Real) or not math.isfinite(prob) or prob < 0:
            raise ValueError(f"info set {info_set_!r}: probability of {move!r} must be a finite number >= 0, "
                             f"got {_short(prob)}")
    probs = {m: float(row.get(m, 0.0)) for m in legal}
    total = math.fsum(probs.values())
    if abs(total - 1) > _SUM_TOL:
        raise ValueError(f"info set {info_set_!r}: probabilities must sum to 1 (within {_SUM_TOL:g}), got "
                         f"{_short(dict(row))} summing to {total!r}")
    return probs if abs(total - 1) <= _SUM_KEPT_TOL else {m: p / total for m, p in probs.items()}


def validate_policy(policy: PolicyLike, player: int | None = None) -> dict[str, dict[str, float]]:
    """Check a policy and return a normalised full copy over the required info sets, in ``INFO_SETS`` order.

    Args:
        policy: A mapping ``info_set -> {move: probability}``, or a callable doing the same.
        player: Check and return only this seat's 144 info sets; None requires all 288.

    Raises:
        ValueError: An info set is missing or unknown, a move illegal, a probability negative or not
            finite, or a row does not sum to 1 within 1e-6 (rows within 1e-12 are kept as given).
        TypeError: The policy is neither a mapping nor a callable, or a row has the wrong type.
    """
    if player not in (None, 0, 1):
        raise ValueError(f"player must be 0, 1 or None, got {player!r}")
    required = INFO_SETS if player is None else _PLAYER_INFO_SETS[player]
    if hasattr(policy, "action_probability_array"):
        raise TypeError("got an OpenSpiel TabularPolicy; convert it with from_openspiel(policy) first")
    if isinstance(policy, Mapping):
        for key in policy:
            _info(key)
        missing = [i for i in required if i not in policy]
        if missing:
            raise ValueError(f"policy has no entry for info set {missing[0]!r} ({len(missing)} missing); expected a "
                             f"{{move: probability}} row for each of the {len(required)} info sets of theory.INFO_SETS")
        lookup: Callable[[str], Any] = policy.__getitem__
    elif callable(policy):
        lookup = policy
    else:
        raise TypeError(f"expected a policy as a mapping or a callable info_set -> {{move: probability}}, got "
                        f"{type(policy).__name__} {_short(policy)}")
    return {i: _checked_row(i, lookup(i)) for i in required}


# ---------------------------------------------------------------------------------------------------
# Tree walks
# ---------------------------------------------------------------------------------------------------


def _payoff_0(ranks: tuple[int, int, int], history: History) -> float:
    node = NODES[history]
    if node.folder is not None:
        return float(node.put[1] if node.folder == 1 else -node.put[0])
    winner = showdown_winner(ranks)
    return 0.0 if winner is None else float(node.put[1] if winner == 0 else -node.put[0])


def game_value(policy_0: PolicyLike, policy_1: PolicyLike) -> float:
    """Return seat 0's expected payoff when seat 0 plays ``policy_0``'s rows and seat 1 plays ``policy_1``'s."""
    rows = {**validate_policy(policy_0, 0), **validate_policy(policy_1, 1)}

    def value(ranks: tuple[int, int, int], history: History) -> float:
        node = NODES[history]
        if node.to_act is None:
            return _payoff_0(ranks, history)
        row = rows[_key(ranks[node.to_act], ranks[2], history)]
        return sum(p * value(ranks, NEXT[history, Move(m)]) for m, p in row.items() if p)

    return sum(prob * value(ranks, ((),)) for ranks, prob in DEALS.items())


def _best_response(policy: PolicyLike, player: int) -> tuple[float, dict[str, str]]:
    """Return (the value to ``player`` of a best response to the other seat's rows of ``policy``, its moves)."""
    other = validate_policy(policy, 1 - player)
    sign = 1.0 if player == 0 else -1.0
    # reach of each (deal, history) by chance and the other seat's moves
    reach: dict[tuple[tuple[int, int, int], History], float] = {}

    def walk(ranks: tuple[int, int, int], history: History, weight: float) -> None:
        node = NODES[history]
        if node.to_act is None:
            return
        reach[ranks, history] = weight
        if node.to_act == player:
            for move in node.legal:
                walk(ranks, NEXT[history, move], weight)
        else:
            row = other[_key(ranks[node.to_act], ranks[2], history)]
            for move in node.legal:
                if row[move.value] > 0:
                    walk(ranks, NEXT[history, move], weight * row[move.value])

    for ranks, prob in DEALS.items():
        walk(ranks, ((),), prob)
    # gather the player's decision nodes by info set, deepest first
    members: dict[str, list[tuple[tuple[int, int, int], History]]] = {}
    for history in _BY_DEPTH:
        if NODES[history].to_act == player:
            for ranks in DEALS:
                if (ranks, history) in reach:
                    members.setdefault(_key(ranks[player], ranks[2], history), []).append((ranks, history))
    choice: dict[str, str] = {}
    memo: dict[tuple[tuple[int, int, int], History], float] = {}

    def value(ranks: tuple[int, int, int], history: History) -> float:
        """The player's payoff below this node, the other seat playing its rows and the player its choices."""
        found = memo.get((ranks, history))
        if found is not None:
            return found
        node = NODES[history]
        if node.to_act is None:
            out = sign * _payoff_0(ranks, history)
        elif node.to_act == player:
            out = value(ranks, NEXT[history, Move(choice[_key(ranks[player], ranks[2], history)])])
        else:
            row = other[_key(ranks[node.to_act], ranks[2], history)]
            out = sum(p * value(ranks, NEXT[history, Move(m)]) for m, p in row.items() if p)
        memo[ranks, history] = out
        return out

    for key, nodes in members.items():  # deepest first, so every choice below is made
        moves = legal_moves(key)
        totals = [math.fsum(reach[n] * value(n[0], NEXT[n[1], Move(m)]) for n in nodes) for m in moves]
        choice[key] = moves[max(range(len(moves)), key=totals.__getitem__)]
    for key in _PLAYER_INFO_SETS[player]:  # info sets the other seat never lets happen: any move is a best one
        choice.setdefault(key, legal_moves(key)[0])
    total = sum(prob * value(ranks, ((),)) for ranks, prob in DEALS.items())
    return total, choice


def best_response_value(policy: PolicyLike, player: int) -> float:
    """Return the most ``player`` can expect against the other seat's rows of ``policy`` (exact)."""
    if player not in (0, 1):
        raise ValueError(f"player must be 0 or 1, got {player!r}")
    return _best_response(policy, player)[0]


def best_response(policy: PolicyLike, player: int) -> dict[str, dict[str, float]]:
    """Return a pure best response of ``player`` to the other seat's rows of ``policy`` (its 144 info sets)."""
    if player not in (0, 1):
        raise ValueError(f"player must be 0 or 1, got {player!r}")
    moves = _best_response(policy, player)[1]
    return {key: {m: float(m == moves[key]) for m in legal_moves(key)} for key in _PLAYER_INFO_SETS[player]}


def nash_conv(policy: PolicyLike) -> float:
    """Return the sum over seats of what a best response gains against ``policy`` (0 at a Nash equilibrium)."""
    return best_response_value(policy, 0) + best_response_value(policy, 1)  # the game is zero-sum: values sum to 0


def exploitability(policy: PolicyLike) -> float:
    """Return ``nash_conv(policy) / 2``, OpenSpiel's ``exploitability`` for a two-player zero-sum game."""
    return nash_conv(policy) / NUM_PLAYERS


# ---------------------------------------------------------------------------------------------------
# OpenSpiel conversion (pyspiel is imported lazily: it belongs to the `baselines` extra)
# ---------------------------------------------------------------------------------------------------

OPENSPIEL_ACTION = {"fold": 0, "check": 1, "call": 1, "bet": 2, "raise": 2}
"""OpenSpiel's ``leduc_poker`` action of each move (its actions: 0 fold, 1 call or check, 2 raise or bet)."""
_STATE = re.compile(r"\[Private: (\d)\].*?(?:\[Public: (\d)\])?\[Round1: ([\d ]*)\]\[Round2: ([\d ]*)\]")


def from_openspiel_key(key: str) -> str:
    """Return our info set for an OpenSpiel ``leduc_poker`` information-state string.

    >>> from_openspiel_key("[Observer: 1][Private: 5][Round 2][Player: 1][Pot: 6][Money: 97 97]"
    ...                    "[Public: 2][Round1: 2 1][Round2: ]")
    'KQ:bet,call/'
    """
    match = _STATE.search(key)
    if match is None:
        raise ValueError(f"not a leduc_poker information-state string: {_short(key)}")
    private, public, *rounds = match.groups()
    history: list[tuple[Move, ...]] = []
    state: History = ((),)
    for actions in rounds[: 2 if public is not None else 1]:
        for action in actions.split():
            node = NODES[state]
            move = next(m for m in node.legal if OPENSPIEL_ACTION[m.value] == int(action))
            state = NEXT[state, move]
    del history
    return info_set(int(private) // SUITS, None if public is None else int(public) // SUITS, state)


def to_openspiel(policy: PolicyLike, game: pyspiel.Game | None = None) -> TabularPolicy:
    """Return ``policy`` as an OpenSpiel ``TabularPolicy`` on ``pyspiel.load_game("leduc_poker")`` (both suits alike)."""
    import pyspiel
    from open_spiel.python.policy import TabularPolicy

    game = game or pyspiel.load_game("leduc_poker")
    if game.get_type().short_name != "leduc_poker" or game.num_players() != NUM_PLAYERS:
        raise ValueError(f"expected a two-player leduc_poker game, got {str(game)!r}")
    checked = validate_policy(policy)
    tabular = TabularPolicy(game)
    for key, index in tabular.state_lookup.items():
        tabular.action_probability_array[index, :] = 0.0
        for move, prob in checked[from_openspiel_key(key)].items():
            tabular.action_probability_array[index, OPENSPIEL_ACTION[move]] = prob
    return tabular


def from_openspiel(tabular_policy: TabularPolicy, tol: float = 1e-9) -> dict[str, dict[str, float]]:
    """Return our rank-level policy for an OpenSpiel ``TabularPolicy`` on two-player ``leduc_poker``.

    Each of our info sets is the mean of its OpenSpiel states (the two suits of the private card, and
    of the public one); they must agree within ``tol``, as a suit-symmetric solver's (CFR's) do.

    Raises:
        ValueError: Two suits of one info set differ by more than ``tol``, or an info set is missing.
    """
    rows: dict[str, list[list[float]]] = {}
    for key, index in tabular_policy.state_lookup.items():
        ours = from_openspiel_key(key)
        probs = tabular_policy.action_probability_array[index]
        rows.setdefault(ours, []).append([float(probs[OPENSPIEL_ACTION[m]]) for m in legal_moves(ours)])
    out = {}
    for ours in INFO_SETS:
        if ours not in rows:
            raise ValueError(f"TabularPolicy has no information state for our {ours!r}; expected one built with "
                             "TabularPolicy(pyspiel.load_game('leduc_poker')) covering both players")
        variants = rows[ours]
        spread = max(abs(a - b) for row in variants for a, b in zip(row, variants[0]))
        if spread > tol:
            raise ValueError(f"info set {ours!r}: OpenSpiel's suits of it play differently (by {spread:.3g} > tol "
                             f"{tol:g}): {variants!r:.300}; a rank-level policy cannot hold it")
        out[ours] = {m: math.fsum(row[j] for row in variants) / len(variants) for j, m in enumerate(legal_moves(ours))}
    return validate_policy(out)


__all__ = ["DEALS", "INFO_SETS", "OPENSPIEL_ACTION", "RANKS", "UNIFORM_EXPLOITABILITY", "best_response",
           "best_response_value", "exploitability", "from_openspiel", "from_openspiel_key", "game_value", "legal_moves",
           "nash_conv", "player_of", "to_openspiel", "uniform_policy", "validate_policy"]
