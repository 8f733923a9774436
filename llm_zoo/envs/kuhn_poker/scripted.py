"""Scripted Kuhn poker players: Nash equilibria, uniform random, and simple exploitable rules."""

from __future__ import annotations

from llm_zoo.envs.kuhn_poker import theory
from llm_zoo.policy import TabularPolicy


def nash_player(alpha: float = 1 / 6, seed: int | None = None) -> TabularPolicy:
    """Return a player of the Nash equilibrium with bluffing parameter ``alpha`` in [0, 1/3]."""
    return TabularPolicy(theory.nash_policy(alpha), seed=seed, name=f"nash({alpha:.3g})")


def uniform_player(seed: int | None = None) -> TabularPolicy:
    """Return a player who picks uniformly among the legal moves."""
    return TabularPolicy(theory.uniform_policy(), seed=seed, name="uniform")


def card_player(seed: int | None = None) -> TabularPolicy:
    """Return a naive player: bets or calls with K, checks or calls with Q, checks or folds with J."""
    table = {}
    for info_set in theory.INFO_SETS:
        card, legal = info_set[0], theory.legal_moves(info_set)
        aggressive = "bet" if "bet" in legal else "call"
        passive = "check" if "check" in legal else ("call" if card == "Q" else "fold")
        table[info_set] = {m: float(m == (aggressive if card == "K" else passive)) for m in legal}
    return TabularPolicy(table, seed=seed, name="card")


PLAYERS = {"nash": nash_player, "random": uniform_player, "card": card_player}
"""Name -> factory(seed=...) of every scripted player, as the CLI and benchmarks name them."""
