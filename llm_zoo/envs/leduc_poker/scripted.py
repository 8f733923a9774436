"""Scripted Leduc hold'em players: uniform random, a simple card-strength rule, and an exact best response."""

from __future__ import annotations

from llm_zoo.envs.leduc_poker import theory
from llm_zoo.policy import TabularPolicy


def uniform_player(seed: int | None = None) -> TabularPolicy:
    """Return a player who picks uniformly among the legal moves."""
    return TabularPolicy(theory.uniform_policy(), seed=seed, name="uniform")


def card_table() -> dict[str, dict[str, float]]:
    """Return the naive rule: with a pair or a king bet, raise or call; with a queen check or call; else check or fold."""
    table = {}
    for info_set in theory.INFO_SETS:
        cards, legal = info_set.split(":")[0], theory.legal_moves(info_set)
        strong = cards[0] == "K" or (len(cards) == 2 and cards[0] == cards[1])
        if strong:
            move = "raise" if "raise" in legal else "bet" if "bet" in legal else "call"
        elif cards[0] == "Q":
            move = "check" if "check" in legal else "call"
        else:
            move = "check" if "check" in legal else "fold"
        table[info_set] = {m: float(m == move) for m in legal}
    return table


def card_player(seed: int | None = None) -> TabularPolicy:
    """Return the naive card-strength player of :func:`card_table`."""
    return TabularPolicy(card_table(), seed=seed, name="card")


def exploiter_player(seed: int | None = None) -> TabularPolicy:
    """Return the exact best response to the card player, in both seats (it wins the most against it)."""
    table = {**theory.best_response(card_table(), 0), **theory.best_response(card_table(), 1)}
    return TabularPolicy(table, seed=seed, name="card_exploiter")


PLAYERS = {"random": uniform_player, "card": card_player, "card_exploiter": exploiter_player}
"""Name -> factory(seed=...) of every scripted player, as the CLI and benchmarks name them."""
