"""User simulation, version 0: ``env()`` with the standard wrappers, ``raw_env``, and its ``SPEC``. Docs: :mod:`llm_zoo.envs.user_sim.env`."""

from __future__ import annotations

from llm_zoo.envs.user_sim import scripted
from llm_zoo.envs.user_sim.env import (
    ENV_ID,
    LEARNING_SCENARIOS,
    SCENARIOS,
    WARM_START_SCENARIOS,
    env,
    raw_env,
)
from llm_zoo.envs.user_sim.evaluate import evaluate_policies, wilson_interval
from llm_zoo.envs.user_sim.scripted import PLAYERS
from llm_zoo.envs.user_sim.text import STOP
from llm_zoo.spec import EnvSpec

SPEC = EnvSpec(
    name=ENV_ID,
    env=env,
    roles=("user", "assistant"),
    learning_roles=("assistant",),  # the user is a frozen simulator
    frozen_players={"user": "scripted:scripted"},
    scripted=PLAYERS,
    corpus=scripted.corpus,
    evaluate=evaluate_policies,  # envs/user_sim/evaluate.py: the success rate against the scripted user
    description="a support assistant with tools and a simulated customer with a hidden goal",
)

__all__ = ["ENV_ID", "LEARNING_SCENARIOS", "SCENARIOS", "SPEC", "STOP", "WARM_START_SCENARIOS", "env", "evaluate_policies", "raw_env",
           "wilson_interval"]
