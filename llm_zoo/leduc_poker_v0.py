"""Leduc hold'em, version 0: ``env()`` with the standard wrappers, ``raw_env``, and its ``SPEC``. Docs: :mod:`llm_zoo.envs.leduc_poker.env`."""

from __future__ import annotations

from llm_zoo.envs.leduc_poker import text
from llm_zoo.envs.leduc_poker.env import ENV_ID, env, raw_env
from llm_zoo.envs.leduc_poker.evaluate import evaluate_policies
from llm_zoo.envs.leduc_poker.scripted import PLAYERS
from llm_zoo.spec import EnvSpec

SPEC = EnvSpec(
    name=ENV_ID,
    env=env,
    roles=("player",),
    learning_roles=("player",),
    scripted=PLAYERS,
    corpus=text.corpus,
    evaluate=evaluate_policies,  # exact exploitability of the strategy the seats' policies play
    description="Leduc hold'em: two players, six cards, two betting rounds; the model's exact strategy is scored",
)

__all__ = ["ENV_ID", "SPEC", "env", "raw_env"]
