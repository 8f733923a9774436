"""Agentic judge, version 0: ``env()`` with the standard wrappers and ``raw_env``. Docs: :mod:`llm_zoo.envs.agentic_judge.env`."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from llm_zoo.envs.agentic_judge.env import ENV_ID, env, raw_env
from llm_zoo.envs.agentic_judge.scripted import PLAYERS as SCRIPTED

LEARNING_ROLES = ("solver",)
"""Roles the trainer trains unless its config says otherwise: the judge stays frozen."""

TRAIN_DEFAULTS: dict[str, Any] = {
    # a reply is a tool call with a short file, or a verdict: long enough for real models, short for tiny ones
    "max_new_tokens": 256,
    # every episode runs a few sandboxed programs; groups of 4 solvers share a task (GRPO's comparison)
    "episodes_per_step": 8,
    "group_size": 4,
    "rollout_batch_size": 8,
    "algorithm": "grpo",
    # the judge is frozen by default: the rule-based judge, which uses its tools but never the hidden tests
    "policies": {"judge": "scripted:rule_judge"},
}
"""Defaults of the trainer's config for this env (``llm-zoo train agentic_judge_v0``)."""


def evaluate_policies(policies: Mapping[str, Any], env_kwargs: Mapping[str, Any] | None = None,
                      episodes: int = 8, seed: int = 12345) -> dict[str, float]:
    """Play ``episodes`` episodes with the given agent -> policy mapping; return the headline rates.

    Returns the mean solver reward, the share of submissions that pass the hidden tests, and the
    judge's agreement with them.
    """
    from llm_zoo.trainers.rollout import collect

    records = collect(ENV_ID, dict(policies), [seed + i for i in range(episodes)], env_kwargs=dict(env_kwargs or {}),
                      seed=seed)
    done = [r for r in records if not r.failed]
    infos = [r.infos.get("judge", {}) for r in done]
    n = max(1, len(done))
    return {"solver_reward": sum(r.returns.get("solver", 0.0) for r in done) / n,
            "hidden_pass_rate": sum(bool(i.get("hidden_pass")) for i in infos) / n,
            "judge_agreement": sum(bool(i.get("judge_agrees")) for i in infos) / n,
            "failed_episodes": float(len(records) - len(done))}


__all__ = ["ENV_ID", "LEARNING_ROLES", "SCRIPTED", "TRAIN_DEFAULTS", "env", "evaluate_policies", "raw_env"]
