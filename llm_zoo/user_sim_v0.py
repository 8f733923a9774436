"""User simulation, version 0: ``env()`` with the standard wrappers and ``raw_env``. Docs: :mod:`llm_zoo.envs.user_sim.env`."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from llm_zoo.envs.user_sim.env import ENV_ID, SCENARIOS, env, raw_env
from llm_zoo.envs.user_sim.scripted import PLAYERS as SCRIPTED
from llm_zoo.envs.user_sim.text import STOP

LEARNING_ROLES = ("assistant",)
"""Roles the trainer trains unless its config says otherwise: the user is a frozen simulator."""

TRAIN_DEFAULTS: dict[str, Any] = {
    "max_new_tokens": 128,
    # the user is frozen by default: the scripted simulator plays each persona faithfully
    "policies": {"user": "scripted:scripted"},
}
"""Defaults of the trainer's config for this env (``llm-zoo train user_sim_v0``)."""


def evaluate_policies(policies: Mapping[str, Any], *, env_kwargs: Mapping[str, Any] | None = None,
                      seeds: int = 1, **_: Any) -> dict[str, Any]:
    """Success rate of ``policies["assistant"]`` against the scripted user, over every scenario x ``seeds``.

    The user seat is always the scripted user (whatever ``policies["user"]`` is), so the figure
    measures the assistant alone. Returns ``success_rate``, ``turns`` and ``tool_calls`` (means per
    episode) and ``episodes``.
    """
    from llm_zoo.envs.user_sim.scripted import scripted_user
    from llm_zoo.trainers.rollout import collect

    names = [n for n in SCENARIOS for _ in range(seeds)]
    episodes = collect(lambda: env(**dict(env_kwargs or {})), {"user": scripted_user(), "assistant": policies["assistant"]},
                       [i % seeds for i in range(len(names))], options=[{"scenario": n} for n in names])
    done = [e for e in episodes if not e.failed]
    infos = [e.infos.get("assistant", {}) for e in done]
    n = max(1, len(done))
    return {"success_rate": sum(bool(i.get("success")) for i in infos) / n,
            "turns": sum(sum(i.get("turns", {}).values()) for i in infos) / n,
            "tool_calls": sum(i.get("tool_calls", 0) for i in infos) / n,
            "episodes": len(episodes), "failed": len(episodes) - len(done)}


__all__ = ["ENV_ID", "LEARNING_ROLES", "SCENARIOS", "SCRIPTED", "STOP", "TRAIN_DEFAULTS", "env",
           "evaluate_policies", "raw_env"]
