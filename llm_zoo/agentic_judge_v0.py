"""Agentic judge, version 0: ``env()`` with the standard wrappers, ``raw_env``, and its ``SPEC``. Docs: :mod:`llm_zoo.envs.agentic_judge.env`."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from llm_zoo.envs.agentic_judge.env import ENV_ID, env, raw_env
from llm_zoo.envs.agentic_judge.scripted import PLAYERS
from llm_zoo.spec import EnvSpec, Play, eval_seeds, mean_interval, wilson_interval


def evaluate_policies(policies: Mapping[str, Any], *, play: Play, env_kwargs: Mapping[str, Any] | None = None,
                      episodes: int = 8, seed: int = 0, **_: Any) -> dict[str, Any]:
    """Play ``episodes`` episodes on held-out seeds with the given agent -> policy mapping; return the headline rates.

    Episode ``i`` plays seed ``EVAL_SEED_BASE + seed + i`` (:func:`llm_zoo.spec.eval_seeds`). The
    headline is ``hidden_pass_rate``, the share of episodes whose submission passes the hidden
    tests, with its 95% Wilson interval; beside it the mean solver reward (normal interval) and
    the judge's agreement with the hidden tests (Wilson).
    """
    seeds = eval_seeds(episodes, seed)
    records = play(dict(policies), seeds, env_kwargs=dict(env_kwargs or {}), seed=seed)
    # a failed episode counts as a failure (reward 0, not passed), never leaves the mean: a solver
    # that makes its env raise must not lift its own figures
    infos = [{} if r.failed else r.infos.get("judge", {}) for r in records]
    rewards = [0.0 if r.failed else float(r.returns.get("solver", 0.0)) for r in records]
    passed = sum(bool(i.get("hidden_pass")) for i in infos)
    agrees = sum(bool(i.get("judge_agrees")) for i in infos)
    n = len(records)
    return {"headline": "hidden_pass_rate", "hidden_pass_rate": passed / max(1, n),
            "interval": wilson_interval(passed, n), "interval_method": "wilson",
            "episodes": n, "seeds": [seeds[0], seeds[-1]] if seeds else [],
            "solver_reward": sum(rewards) / max(1, n), "solver_reward_interval": mean_interval(rewards),
            "judge_agreement": agrees / max(1, n), "judge_agreement_interval": wilson_interval(agrees, n),
            "failed_episodes": float(sum(r.failed for r in records))}


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
