"""Proposer-solver, version 0: ``env()`` with the standard wrappers, ``raw_env``, and its ``SPEC``. Docs: :mod:`llm_zoo.envs.proposer_solver.env`."""

from __future__ import annotations

from llm_zoo.envs.proposer_solver import scripted
from llm_zoo.envs.proposer_solver.env import (
    ENV_ID,
    HELD_OUT_TOPICS,
    TOPIC_SPLITS,
    TOPICS,
    TRAINING_TOPICS,
    env,
    raw_env,
)
from llm_zoo.envs.proposer_solver.evaluate import PANEL, evaluate_policies
from llm_zoo.envs.proposer_solver.scripted import PLAYERS
from llm_zoo.spec import EnvSpec

SPEC = EnvSpec(
    name=ENV_ID,
    env=env,
    roles=("proposer", "solver"),
    learning_roles=("proposer", "solver"),  # `learn=[solver]` in the trainer's config freezes the proposer
    frozen_players={"proposer": "scripted:proposer", "solver": "scripted:solver"},  # for `learn=[...]`
    scripted=PLAYERS,
    corpus=scripted.corpus,
    evaluate=evaluate_policies,  # envs/proposer_solver/evaluate.py: learnability of held-out tasks for a scripted panel
    description="one agent proposes verifiable programming tasks, several solvers attempt them",
)

__all__ = ["ENV_ID", "HELD_OUT_TOPICS", "PANEL", "SPEC", "TOPICS", "TOPIC_SPLITS", "TRAINING_TOPICS", "env",
           "evaluate_policies", "raw_env"]
