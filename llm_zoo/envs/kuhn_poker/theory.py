"""Exact game-theoretic evaluation of two-player Kuhn poker.

Kuhn poker (Kuhn 1950) is small enough to solve by enumeration, so the numbers here are exact up to
floating-point rounding: no sampling, no iterative solver. This module scores tabular policies
against each other, computes best responses and exploitability, and provides the known Nash
equilibrium family. It is self-contained (standard library only) on purpose: it serves as an
independent check of the env's rules rather than a re-use of them.

| Fact              | Value                                                            |
|-------------------|------------------------------------------------------------------|
| Players           | `player_0` (acts first), `player_1`                              |
| Deck              | J < Q < K, one card each, 6 ordered deals, uniform               |
| Moves             | `check`, `bet` (nobody has bet yet); `call`, `fold` (facing a bet) |
| Stakes            | ante 1 each, one bet of 1                                        |
| Info sets         | 12 (6 per player), strings `"<card>:<history>"`                  |
| Game value        | `GAME_VALUE` = -1/18 for player_0 at every equilibrium           |
| Uniform policy    | `UNIFORM_EXPLOITABILITY` = 11/24                                 |

## Game tree

| History           | To act   | Legal moves   | Terminal payoff to player_0          |
|-------------------|----------|---------------|--------------------------------------|
| `()`              | player_0 | check, bet    |                                      |
| `check`           | player_1 | check, bet    |                                      |
| `bet`             | player_1 | call, fold    |                                      |
| `check,bet`       | player_0 | call, fold    |                                      |
| `check,check`     |          |               | showdown, +-1                        |
| `bet,call`        |          |               | showdown, +-2                        |
| `bet,fold`        |          |               | +1                                   |
| `check,bet,call`  |          |               | showdown, +-2                        |
| `check,bet,fold`  |          |               | -1                                   |

The game is zero-sum: player_1's payoff is the negative of player_0's.

## Policies

A tabular policy is a `Mapping[str, Mapping[str, float]]` from info-set strings to move
probabilities, e.g. `{"K:check,bet": {"call": 1.0, "fold": 0.0}, ...}`. An info set is the acting
player's card, a colon, and the moves so far joined by commas: `"J:"` is player_0's first decision
holding the jack, `"Q:bet"` is player_1 facing a bet with the queen. A callable
`info_set -> {move: probability}` is accepted wherever a policy is. Functions that only need one
player's half of a policy read only that player's info sets.

## Conventions shared with OpenSpiel

`exploitability` and `nash_conv` follow OpenSpiel's definitions for a two-player zero-sum game, and
`to_openspiel` / `from_openspiel` convert to and from its `TabularPolicy` on
`pyspiel.load_game("kuhn_poker")` (cards 0, 1, 2 = J, Q, K; action 0 = pass = check or fold,
action 1 = bet = bet or call; info-state strings such as `"0"`, `"2b"`, `"1pb"`).

References: H. W. Kuhn, "A simplified two-person poker", Contributions to the Theory of Games I
(1950); https://en.wikipedia.org/wiki/Kuhn_poker; Lanctot et al., "OpenSpiel" (2019).
"""

from __future__ import annotations

import math
import numbers
from collections.abc import Callable, Mapping
from itertools import permutations
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    import pyspiel
    from open_spiel.python.policy import TabularPolicy

History = tuple[str, ...]
Policy = Mapping[str, Mapping[str, float]]
PolicyLike = Policy | Callable[[str], Mapping[str, float]]

# ---------------------------------------------------------------------------------------------------
# Static facts
# ---------------------------------------------------------------------------------------------------

GAME_VALUE = -1 / 18
"""Player_0's expected payoff at every Nash equilibrium (Kuhn 1950)."""

UNIFORM_EXPLOITABILITY = 11 / 24
"""Exploitability of the uniform random policy: (1/2 + 5/12) / 2; OpenSpiel gives 0.458333..."""

NUM_PLAYERS = 2
CARDS = ("J", "Q", "K")
"""Card names in rank order: a higher index wins the showdown."""

_TO_ACT: dict[History, int] = {
    (): 0,
    ("check",): 1,
    ("bet",): 1,
    ("check", "bet"): 0,
}
_LEGAL: dict[History, tuple[str, ...]] = {
    (): ("check", "bet"),
    ("check",): ("check", "bet"),
    ("bet",): ("call", "fold"),
    ("check", "bet"): ("call", "fold"),
}
# history -> (stake, winner); winner None means the higher card wins the showdown.
_TERMINAL: dict[History, tuple[int, int | None]] = {
    ("check", "check"): (1, None),
    ("bet", "call"): (2, None),
    ("bet", "fold"): (1, 0),
    ("check", "bet", "call"): (2, None),
    ("check", "bet", "fold"): (1, 1),
}
# Chance deals (player_0's card, player_1's card), card indices into CARDS, each with probability 1/6.
_DEALS: tuple[tuple[int, int], ...] = tuple(permutations(range(len(CARDS)), 2))
_DEAL_PROB = 1 / len(_DEALS)

# OpenSpiel's kuhn_poker has two actions everywhere: 0 "Pass" and 1 "Bet" (checked against
# `state.action_to_string` and `information_state_string`, open_spiel 2.0).
_OPENSPIEL_ACTION = {"check": 0, "fold": 0, "bet": 1, "call": 1}
_OPENSPIEL_LETTER = ("p", "b")

# Rows whose sum is this close to 1 are kept as given, so that validating twice, or a round trip
# through OpenSpiel, gives back the very same floats; rows further off are divided by their sum.
_SUM_KEPT_TOL = 1e-12
_SUM_TOL = 1e-6
_TIE_TOL = 1e-12

INFO_SETS: tuple[str, ...] = tuple(
    f"{card}:{','.join(history)}"
    for player in range(NUM_PLAYERS)
    for history, to_act in _TO_ACT.items()
    if to_act == player
    for card in CARDS
)
"""All 12 info sets, player_0's six first, then player_1's; within a player by history in the
order `()`, `check`, `bet`, `check,bet`, then by card J, Q, K:
`J: Q: K: J:check,bet Q:check,bet K:check,bet J:check Q:check K:check J:bet Q:bet K:bet`."""

_PARSED: dict[str, tuple[int, History]] = {
    info_set: (CARDS.index(info_set[0]), tuple(info_set[2:].split(",")) if info_set[2:] else ())
    for info_set in INFO_SETS
}
_PLAYER_INFO_SETS: tuple[tuple[str, ...], ...] = tuple(
    tuple(i for i in INFO_SETS if _TO_ACT[_PARSED[i][1]] == player) for player in range(NUM_PLAYERS)
)


# ---------------------------------------------------------------------------------------------------
# Info sets and policies
# ---------------------------------------------------------------------------------------------------


def _short(value: Any, limit: int = 200) -> str:
    text = repr(value)
    return text if len(text) <= limit else text[: limit - 3] + "..."


def _parse(info_set: str) -> tuple[int, History]:
    try:
        return _PARSED[info_set]
    except (KeyError, TypeError):
        raise ValueError(
            f"unknown info set {_short(info_set)}; expected '<card>:<history>', one of {INFO_SETS!r}"
        ) from None


def _info_set(card: int, history: History) -> str:
    return f"{CARDS[card]}:{','.join(history)}"


def legal_moves(info_set: str) -> tuple[str, ...]:
    """Return the legal moves at `info_set`, e.g. `("call", "fold")` for `"Q:bet"`."""
    return _LEGAL[_parse(info_set)[1]]


def player_of(info_set: str) -> int:
    """Return the player (0 or 1) who decides at `info_set`."""
    return _TO_ACT[_parse(info_set)[1]]


def _checked_row(info_set: str, row: Any) -> dict[str, float]:
    legal = legal_moves(info_set)
    if not isinstance(row, Mapping):
        raise TypeError(
            f"info set {info_set!r}: expected a mapping {{move: probability}} over {legal!r}, "
            f"got {type(row).__name__} {_short(row)}"
        )
    for move, prob in row.items():
        if move not in legal:
            raise ValueError(
                f"info set {info_set!r}: move {move!r} is not legal; expected moves from {legal!r}"
            )
        if not isinstance(prob, numbers.Real):
            raise TypeError(
                f"info set {info_set!r}: probability of {move!r} must be a real number, got {_short(prob)}"
            )
        if not math.isfinite(prob) or prob < 0:
            raise ValueError(
                f"info set {info_set!r}: probability of {move!r} must be finite and >= 0, got {prob!r}"
            )
    probs = {move: float(row.get(move, 0.0)) for move in legal}
    total = math.fsum(probs.values())
    if abs(total - 1) > _SUM_TOL:
        raise ValueError(
            f"info set {info_set!r}: probabilities must sum to 1 (within {_SUM_TOL:g}), "
            f"got {_short(dict(row))} summing to {total!r}"
        )
    if abs(total - 1) > _SUM_KEPT_TOL:
        probs = {move: prob / total for move, prob in probs.items()}
    return probs


def validate_policy(policy: PolicyLike, player: int | None = None) -> dict[str, dict[str, float]]:
    """Check a policy and return a normalized full copy.

    The copy maps each required info set to `{move: probability}` over all of its legal moves, in
    `legal_moves` order, with absent moves filled in as 0.0. A row whose probabilities sum to within
    1e-6 of 1 is divided by its sum (rows within 1e-12 of 1 are kept exactly as given, so validation
    is idempotent).

    Args:
        policy: A mapping `info_set -> {move: probability}`, or a callable `info_set -> {move:
            probability}`.
        player: Check and return only this player's six info sets (the rest of a mapping is then
            ignored, except that unknown keys are still refused). `None` requires all 12.

    Returns:
        A new `dict[str, dict[str, float]]` over the required info sets, in `INFO_SETS` order.

    Raises:
        ValueError: An info set is missing or unknown, a move is illegal, a probability is negative
            or not finite, or a row does not sum to 1 within 1e-6; the message names the info set.
        TypeError: The policy is neither a mapping nor a callable, or a row or probability has the
            wrong type.
    """
    if player is None:
        required = INFO_SETS
    elif player in (0, 1):
        required = _PLAYER_INFO_SETS[player]
    else:
        raise ValueError(f"player must be 0, 1 or None, got {player!r}")
    if hasattr(policy, "action_probability_array"):
        raise TypeError("got an OpenSpiel TabularPolicy; convert it with from_openspiel(policy) first")
    if isinstance(policy, Mapping):
        for key in policy:
            _parse(key)
        lookup: Callable[[str], Any] = policy.__getitem__
        missing = [i for i in required if i not in policy]
        if missing:
            raise ValueError(
                f"policy has no entry for info set {missing[0]!r} (missing: {missing!r}); expected a "
                f"{{move: probability}} mapping over {legal_moves(missing[0])!r} for each of {required!r}"
            )
    elif callable(policy):
        lookup = policy
    else:
        raise TypeError(
            f"expected a policy as a mapping or a callable info_set -> {{move: probability}}, "
            f"got {type(policy).__name__} {_short(policy)}"
        )
    return {info_set: _checked_row(info_set, lookup(info_set)) for info_set in required}


def uniform_policy() -> dict[str, dict[str, float]]:
    """Return the policy that plays each legal move with probability 1/2 at every info set."""
    return {i: {move: 1 / len(legal_moves(i)) for move in legal_moves(i)} for i in INFO_SETS}


def nash_policy(alpha: float) -> dict[str, dict[str, float]]:
    """Return the Nash equilibrium of Kuhn (1950) with player_0's bluffing rate `alpha`.

    With a in [0, 1/3] (cards J < Q < K):

    | Info set        | Play                                  |
    |-----------------|---------------------------------------|
    | player_0 first  | bet J with prob a, Q never, K with 3a |
    | player_0 `check,bet` | call J never, Q with a + 1/3, K always |
    | player_1 `bet`  | call J never, Q with 1/3, K always    |
    | player_1 `check`| bet J with 1/3, Q never, K always     |

    Every member gives player_0 the value `GAME_VALUE` = -1/18, and player_1's strategy is unique.

    Raises:
        ValueError: `alpha` is not a number in [0, 1/3].
    """
    if not isinstance(alpha, numbers.Real) or not 0 <= alpha <= 1 / 3:
        raise ValueError(f"alpha must be a number in [0, 1/3], got {alpha!r}")
    a = float(alpha)
    # (info set, probability of the aggressive move: bet or call)
    aggressive = {
        "J:": a, "Q:": 0.0, "K:": 3 * a,
        "J:check,bet": 0.0, "Q:check,bet": a + 1 / 3, "K:check,bet": 1.0,
        "J:check": 1 / 3, "Q:check": 0.0, "K:check": 1.0,
        "J:bet": 0.0, "Q:bet": 1 / 3, "K:bet": 1.0,
    }  # fmt: skip
    policy = {}
    for info_set in INFO_SETS:
        moves = legal_moves(info_set)
        strong = "bet" if "bet" in moves else "call"
        p = aggressive[info_set]
        policy[info_set] = {move: p if move == strong else 1 - p for move in moves}
    return policy


def pure_policy(actions: Mapping[str, str]) -> dict[str, dict[str, float]]:
    """Return the deterministic policy playing `actions[info_set]` at each info set named.

    Only the info sets in `actions` appear in the result, so one player's six entries make a policy
    for that player; merge two with `{**pure_policy(a0), **pure_policy(a1)}`.

    Raises:
        ValueError: An info set is unknown or its move is not legal there.
    """
    policy = {}
    for info_set, chosen in actions.items():
        legal = legal_moves(info_set)
        if chosen not in legal:
            raise ValueError(
                f"info set {info_set!r}: move {chosen!r} is not legal; expected one of {legal!r}"
            )
        policy[info_set] = {move: float(move == chosen) for move in legal}
    return policy


# ---------------------------------------------------------------------------------------------------
# Evaluation
# ---------------------------------------------------------------------------------------------------


def _payoff_0(history: History, cards: tuple[int, int]) -> float:
    stake, winner = _TERMINAL[history]
    if winner is None:
        winner = 0 if cards[0] > cards[1] else 1
    return float(stake if winner == 0 else -stake)


def _value_0(history: History, cards: tuple[int, int], policy: Policy) -> float:
    """Player_0's expected payoff below `history` for a fixed deal."""
    if history in _TERMINAL:
        return _payoff_0(history, cards)
    row = policy[_info_set(cards[_TO_ACT[history]], history)]
    return sum(p * _value_0((*history, move), cards, policy) for move, p in row.items() if p)


def _reach(history: History, cards: tuple[int, int], policy: Policy, player: int) -> float:
    """Probability that `player` plays the moves of `history` (the other player's moves count as 1)."""
    prob = 1.0
    for depth, move in enumerate(history):
        prefix = history[:depth]
        if _TO_ACT[prefix] == player:
            prob *= policy[_info_set(cards[player], prefix)][move]
    return prob


def game_value(policy_0: PolicyLike, policy_1: PolicyLike) -> float:
    """Return player_0's exact expected payoff, player_0 playing `policy_0` and player_1 `policy_1`.

    v = sum over the 6 deals (c0, c1) of 1/6 * sum over terminal histories z of
    pi_0(z | c0) * pi_1(z | c1) * u_0(z, c0, c1). Player_1's value is -v. Only player_0's info sets
    of `policy_0` and player_1's of `policy_1` are read, so each may be a full or a one-player policy.
    """
    policy = {**validate_policy(policy_0, player=0), **validate_policy(policy_1, player=1)}
    return _DEAL_PROB * sum(_value_0((), cards, policy) for cards in _DEALS)


def best_response(policy: PolicyLike, player: int) -> tuple[float, dict[str, dict[str, float]]]:
    """Return `player`'s best-response value against the other player's part of `policy`, and a pure BR.

    The best response is computed per info set, bottom-up (deepest history first): at info set I of
    `player` with card c and history h, each move m is scored by its counterfactual value

        q(I, m) = sum over the opponent's cards d != c of 1/6 * pi_opp(h | d) * v_player(h + m | c, d),

    where pi_opp is the opponent's reach probability and v_player follows `player`'s already chosen
    moves at deeper info sets (player_0's choice at `check,bet` is made before its first move). The
    move with the largest q is chosen, ties within 1e-12 going to the move listed first in
    `legal_moves`; unreachable info sets thus get their first legal move.

    Args:
        policy: A policy holding at least the other player's six info sets.
        player: 0 or 1, the responding player.

    Returns:
        `(value, br_policy)`: `player`'s expected payoff when playing `br_policy` (its six info sets,
        probabilities 0.0 / 1.0) against the other player's part of `policy`.

    Raises:
        ValueError: `player` is not 0 or 1, or `policy` is invalid (see `validate_policy`).
    """
    if player not in (0, 1):
        raise ValueError(f"player must be 0 or 1, got {player!r}")
    opponent = 1 - player
    sign = 1.0 if player == 0 else -1.0
    combined: dict[str, dict[str, float]] = dict(validate_policy(policy, player=opponent))
    br: dict[str, dict[str, float]] = {}
    own = sorted(_PLAYER_INFO_SETS[player], key=lambda i: -len(_PARSED[i][1]))
    for info_set in own:
        card, history = _PARSED[info_set]
        q = {}
        for move in legal_moves(info_set):
            q[move] = 0.0
            for other in range(len(CARDS)):
                if other == card:
                    continue
                cards = (card, other) if player == 0 else (other, card)
                reach = _reach(history, cards, combined, opponent)
                if reach:
                    q[move] += _DEAL_PROB * reach * sign * _value_0((*history, move), cards, combined)
        best = max(q.values())
        chosen = next(move for move in legal_moves(info_set) if q[move] >= best - _TIE_TOL)
        br[info_set] = combined[info_set] = {move: float(move == chosen) for move in legal_moves(info_set)}
    value = _DEAL_PROB * sum(_value_0((), cards, combined) for cards in _DEALS)
    ordered = {i: br[i] for i in _PLAYER_INFO_SETS[player]}
    return sign * value, ordered


def nash_conv(policy: PolicyLike) -> float:
    """Return NashConv: the sum over players of (best-response value - value under `policy`).

    In a zero-sum game the on-policy values cancel, so NashConv = BR_0(pi_1) + BR_1(pi_0), where
    BR_p is player p's best-response value against the other player's part of `policy` (OpenSpiel's
    `exploitability.nash_conv`). It is >= 0 and 0 exactly at a Nash equilibrium.
    """
    full = validate_policy(policy)
    return best_response(full, 0)[0] + best_response(full, 1)[0]


def exploitability(policy: PolicyLike) -> float:
    """Return exploitability = NashConv / 2 = (BR_0(pi_1) + BR_1(pi_0)) / 2.

    This is OpenSpiel's `exploitability.exploitability` for a two-player zero-sum game: the mean
    best-response value, which is also how far the policy's guaranteed payoffs fall short of the
    game value on average. The uniform policy scores `UNIFORM_EXPLOITABILITY` = 11/24.
    """
    return nash_conv(policy) / NUM_PLAYERS


# ---------------------------------------------------------------------------------------------------
# OpenSpiel conversion (pyspiel is imported lazily: it belongs to the `baselines` extra)
# ---------------------------------------------------------------------------------------------------


def openspiel_key(info_set: str) -> str:
    """Return OpenSpiel's information-state string for `info_set`, e.g. `"K:check,bet"` -> `"2pb"`."""
    card, history = _parse(info_set)
    return str(card) + "".join(_OPENSPIEL_LETTER[_OPENSPIEL_ACTION[move]] for move in history)


def to_openspiel(policy: PolicyLike, game: pyspiel.Game | None = None) -> TabularPolicy:
    """Return `policy` as an OpenSpiel `TabularPolicy` on `pyspiel.load_game("kuhn_poker")`.

    Each info set's row gets the validated probabilities (see `validate_policy`) at action 0 (check
    or fold) and action 1 (bet or call). `from_openspiel(to_openspiel(p)) == validate_policy(p)`
    holds exactly.

    Args:
        policy: A full policy (all 12 info sets).
        game: A two-player `kuhn_poker` game to build the policy on; loaded when `None`.

    Raises:
        ValueError: `game` is not two-player Kuhn poker, or `policy` is invalid.
    """
    import pyspiel
    from open_spiel.python.policy import TabularPolicy

    if game is None:
        game = pyspiel.load_game("kuhn_poker")
    if game.get_type().short_name != "kuhn_poker" or game.num_players() != NUM_PLAYERS:
        raise ValueError(f"expected a two-player kuhn_poker game, got {str(game)!r}")
    checked = validate_policy(policy)
    tabular = TabularPolicy(game)
    for info_set, row in checked.items():
        index = tabular.state_lookup[openspiel_key(info_set)]
        tabular.action_probability_array[index, :] = 0.0
        for move, prob in row.items():
            tabular.action_probability_array[index, _OPENSPIEL_ACTION[move]] = prob
    return tabular


def from_openspiel(tabular_policy: TabularPolicy) -> dict[str, dict[str, float]]:
    """Return our tabular policy for an OpenSpiel `TabularPolicy` on two-player `kuhn_poker`.

    The inverse of `to_openspiel`: `to_openspiel(from_openspiel(t))` has the same probability array
    as `t` whenever `t`'s rows sum to 1 within 1e-12.

    Raises:
        ValueError: `tabular_policy` lacks one of the 12 info states (built for another game or
            for one player only), or a row is not a probability distribution.
    """
    rows = {}
    for info_set in INFO_SETS:
        key = openspiel_key(info_set)
        if key not in tabular_policy.state_lookup:
            raise ValueError(
                f"TabularPolicy has no info state {key!r} (our {info_set!r}); expected one built with "
                f"TabularPolicy(pyspiel.load_game('kuhn_poker')) covering both players"
            )
        probs = tabular_policy.policy_for_key(key)
        rows[info_set] = {move: float(probs[_OPENSPIEL_ACTION[move]]) for move in legal_moves(info_set)}
    return validate_policy(rows)
