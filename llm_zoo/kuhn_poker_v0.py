"""Kuhn poker, version 0: ``env()`` with the standard wrappers and ``raw_env``. Docs: :mod:`llm_zoo.envs.kuhn_poker.env`."""

from llm_zoo.envs.kuhn_poker.env import ENV_ID, env, raw_env
from llm_zoo.envs.kuhn_poker.scripted import PLAYERS as SCRIPTED

__all__ = ["ENV_ID", "SCRIPTED", "env", "raw_env"]
