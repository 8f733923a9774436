"""Agentic judge, version 0: ``env()`` with the standard wrappers, ``raw_env``, and its ``SPEC``. Docs: :mod:`llm_zoo.envs.agentic_judge.env`."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from llm_zoo.envs.agentic_judge.env import ENV_ID, env, raw_env
from llm_zoo.envs.agentic_judge.scripted import PLAYERS
from llm_zoo.spec import EnvSpec, Play


def evaluate_policies(policies: Mapping[str, Any], *, play: Play, env_kwargs: Mapping[str, Any] | None = None,
                      episodes: int = 8, seed: int = 12345, **_: Any) -> dict[str, float]:
    """Play ``episodes`` episodes with the given agent -> policy mapping; return the headline rates.

    Returns the mean solver reward, the share of submissions that pass the hidden tests, and the
    judge's agreement with them.
    """
    records = play(dict(policies), [seed + i for i in range(episodes)], env_kwargs=dict(env_kwargs or {}), seed=seed)
    # a failed episode counts as a failure (reward 0, not passed), never leaves the mean: a solver
    # that makes its env raise must not lift its own figures
    done = [r for r in records if not r.failed]
    infos = [r.infos.get("judge", {}) for r in done]
    n = max(1, len(records))
    return {"solver_reward": sum(r.returns.get("solver", 0.0) for r in done) / n,
            "hidden_pass_rate": sum(bool(i.get("hidden_pass")) for i in infos) / n,
            "judge_agreement": sum(bool(i.get("judge_agrees")) for i in infos) / n,
            "failed_episodes": float(len(records) - len(done))}


SPEC = EnvSpec(
    name=ENV_ID,
    env=env,
    roles=("solver", "judge"),
    learning_roles=("solver",),  # the judge stays frozen by default
    scripted=PLAYERS,
    evaluate=evaluate_policies,
    description="a solver writes code in a sandbox; an agentic judge with tools rules PASS or FAIL",
)

__all__ = ["ENV_ID", "SPEC", "env", "evaluate_policies", "raw_env"]
