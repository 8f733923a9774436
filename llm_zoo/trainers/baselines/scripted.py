"""Every env's scripted players as baselines, with their strategy tables where they are tabular.

The players themselves live with their envs (the `scripted` field of each env's spec, e.g. Kuhn
poker's `nash`, `random`, `card`); this module gathers them over the registry so a benchmark or
`llm-zoo crossplay` can enumerate them, and reads the table of a `TabularPolicy` so that Kuhn's
scripted players are scored by the same exploitability function as CFR, PPO and the LLM trainer.

    >>> from llm_zoo.trainers.baselines import scripted
    >>> sorted(scripted.players("kuhn_poker_v0"))
    ['card', 'nash', 'random']
    >>> from llm_zoo.envs.kuhn_poker import theory
    >>> round(theory.exploitability(scripted.tables("kuhn_poker_v0")["random"]), 4)
    0.4583
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import llm_zoo
from llm_zoo.policy import Policy, TabularPolicy

__all__ = ["all_players", "players", "table_of", "tables"]

Factory = Callable[..., Policy]
"""`factory(seed=None) -> Policy`, as each env spec's `scripted` holds them."""


def players(env: str) -> dict[str, Factory]:
    """Return the scripted players of `env` (a versioned name), name -> factory(seed=...).

    Raises:
        ValueError: `env` is not a registered env.
    """
    return dict(llm_zoo.env_spec(env).scripted)


def all_players() -> dict[str, dict[str, Factory]]:
    """Return the scripted players of every env: env -> name -> factory(seed=...)."""
    return {env: players(env) for env in llm_zoo.registered()}


def table_of(policy: Any) -> dict[str, dict[str, float]] | None:
    """Return the strategy table a policy plays (a `TabularPolicy`'s `table`), or None for any other policy."""
    return {k: dict(v) for k, v in policy.table.items()} if isinstance(policy, TabularPolicy) else None


def tables(env: str) -> dict[str, dict[str, dict[str, float]]]:
    """Return the tables of `env`'s tabular scripted players, name -> table (the others are left out)."""
    out = {}
    for name, factory in players(env).items():
        table = table_of(factory(seed=0))
        if table is not None:
            out[name] = table
    return out
