"""Proposer-solver, version 0: ``env()`` with the standard wrappers and ``raw_env``. Docs: :mod:`llm_zoo.envs.proposer_solver.env`."""

from __future__ import annotations

from typing import Any

from llm_zoo.envs.proposer_solver.env import ENV_ID, TOPICS, env, raw_env
from llm_zoo.envs.proposer_solver.scripted import PLAYERS as SCRIPTED

LEARNING_ROLES = ("proposer", "solver")
"""Roles the trainer trains unless its config says otherwise (``learn=[solver]`` freezes the proposer)."""

TRAIN_DEFAULTS: dict[str, Any] = {
    # The comparison groups come from the env (solvers of one problem, proposers of one topic).
    "algorithm": "hgrpo",
    # Short replies and small batches: with the byte-level tiny model a step stays a CPU smoke run;
    # a real model needs max_new_tokens of several hundred.
    "max_new_tokens": 48,
    "steps": 4,
    "episodes_per_step": 4,
    # Two episodes per env seed share the topic, so the proposers' groups have two members.
    "group_size": 2,
    "rollout_batch_size": 4,
    "micro_batch_size": 8,
    # No retries: a malformed reply ends the proposer's episode at once, and prompts stay short.
    "env_kwargs": {"max_retries": 0},
}
"""Defaults of the trainer's config for this env (``llm-zoo train proposer_solver_v0``)."""

__all__ = ["ENV_ID", "LEARNING_ROLES", "SCRIPTED", "TOPICS", "TRAIN_DEFAULTS", "env", "raw_env"]
