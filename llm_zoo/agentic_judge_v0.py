"""Agentic judge, version 0: ``env()`` with the standard wrappers, ``raw_env``, and its ``SPEC``. Docs: :mod:`llm_zoo.envs.agentic_judge.env`."""

from __future__ import annotations

from llm_zoo.envs.agentic_judge import scripted
from llm_zoo.envs.agentic_judge.env import ENV_ID, env, raw_env
from llm_zoo.envs.agentic_judge.evaluate import SPLITS, evaluate_policies, split_of
from llm_zoo.envs.agentic_judge.scripted import PLAYERS
from llm_zoo.spec import EnvSpec

SPEC = EnvSpec(
    name=ENV_ID,
    env=env,
    roles=("solver", "judge"),
    learning_roles=("solver",),  # the judge stays frozen by default
    frozen_players={"judge": "scripted:rule_judge"},
    scripted=PLAYERS,
    corpus=scripted.corpus,
    evaluate=evaluate_policies,  # envs/agentic_judge/evaluate.py: the hidden-test pass rate on held-out seeds
    description="a solver writes code in a sandbox; an agentic judge with tools rules PASS or FAIL",
)

__all__ = ["ENV_ID", "SPEC", "SPLITS", "env", "evaluate_policies", "raw_env", "split_of"]
