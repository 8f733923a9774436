"""User simulation, version 0: ``env()`` with the standard wrappers, ``raw_env``, and its ``SPEC``. Docs: :mod:`llm_zoo.envs.user_sim.env`."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from llm_zoo.envs.user_sim.env import ENV_ID, SCENARIOS, env, raw_env
from llm_zoo.envs.user_sim.scripted import PLAYERS, scripted_user
from llm_zoo.envs.user_sim.text import STOP
from llm_zoo.spec import EnvSpec, Play


def evaluate_policies(policies: Mapping[str, Any], *, play: Play, env_kwargs: Mapping[str, Any] | None = None,
                      seeds: int = 1, **_: Any) -> dict[str, Any]:
    """Success rate of ``policies["assistant"]`` against the scripted user, over every scenario x ``seeds``.

    The user seat is always the scripted user (whatever ``policies["user"]`` is), so the figure
    measures the assistant alone. Returns ``success_rate``, ``turns`` and ``tool_calls`` (means per
    episode) and ``episodes``.
    """
    names = [n for n in SCENARIOS for _ in range(seeds)]
    episodes = play({"user": scripted_user(), "assistant": policies["assistant"]},
                    [i % seeds for i in range(len(names))], options=[{"scenario": n} for n in names],
                    env_kwargs=dict(env_kwargs or {}))
    # a failed episode counts as no success, never leaves the mean: an assistant that makes its env
    # raise must not lift its own success rate
    done = [e for e in episodes if not e.failed]
    infos = [e.infos.get("assistant", {}) for e in done]
    n = max(1, len(done))
    return {"success_rate": sum(bool(i.get("success")) for i in infos) / max(1, len(episodes)),
            "turns": sum(sum(i.get("turns", {}).values()) for i in infos) / n,
            "tool_calls": sum(i.get("tool_calls", 0) for i in infos) / n,
            "episodes": len(episodes), "failed": len(episodes) - len(done)}


SPEC = EnvSpec(
    name=ENV_ID,
    env=env,
    roles=("user", "assistant"),
    learning_roles=("assistant",),  # the user is a frozen simulator
    scripted=PLAYERS,
    evaluate=evaluate_policies,
    description="a support assistant with tools and a simulated customer with a hidden goal",
)

__all__ = ["ENV_ID", "SCENARIOS", "SPEC", "STOP", "env", "evaluate_policies", "raw_env"]
