"""Kuhn poker, version 0: ``env()`` with the standard wrappers and ``raw_env``. Docs: :mod:`llm_zoo.envs.kuhn_poker.env`."""

from __future__ import annotations

from typing import Any

from llm_zoo.envs.kuhn_poker.env import ENV_ID, env, raw_env
from llm_zoo.envs.kuhn_poker.scripted import PLAYERS as SCRIPTED
from llm_zoo.envs.kuhn_poker.text import corpus

LEARNING_ROLES = ("player",)
"""Roles the trainer trains unless its config says otherwise."""

TRAIN_DEFAULTS: dict[str, Any] = {
    # one-token replies: the built-in tiny model's vocabulary has each move as a single token
    "max_new_tokens": 1,
    # The rules stay out of the prompt: the tiny model learns the game from play, 3x faster per step.
    # No retries: an invalid reply forfeits at once, so it costs what it should (with a free retry,
    # an entropy bonus would keep mass on invalid first replies).
    "env_kwargs": {"rules_in_prompt": False, "max_retries": 0},
}
"""Defaults of the trainer's config for this env (``llm-zoo train kuhn_poker_v0``)."""


def evaluate_policies(policies, **kwargs):
    """Exact exploitability of the strategy the seats' policies play; see :mod:`llm_zoo.envs.kuhn_poker.evaluate`."""
    from llm_zoo.envs.kuhn_poker.evaluate import evaluate_policies as _evaluate

    return _evaluate(policies, **kwargs)


__all__ = ["ENV_ID", "LEARNING_ROLES", "SCRIPTED", "TRAIN_DEFAULTS", "corpus", "env", "evaluate_policies", "raw_env"]
