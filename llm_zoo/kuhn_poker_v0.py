"""Kuhn poker, version 0: ``env()`` with the standard wrappers and ``raw_env``. Docs: :mod:`llm_zoo.envs.kuhn_poker.env`."""

from __future__ import annotations

from typing import Any

from llm_zoo.envs.kuhn_poker.env import ENV_ID, env, raw_env
from llm_zoo.envs.kuhn_poker.scripted import PLAYERS as SCRIPTED
from llm_zoo.envs.kuhn_poker.text import corpus

LEARNING_ROLES = ("player",)
"""Roles the trainer trains unless its config says otherwise."""

TRAIN_DEFAULTS: dict[str, Any] = {
    # The main job (`llm-zoo train kuhn_poker_v0`): self-play of one shared tiny model with RAE, on a
    # 2-core CPU in minutes. Each choice below was measured; see the closing notes of issue 4.
    "steps": 1500,
    "episodes_per_step": 128,
    "eval_every": 50,
    "checkpoint_every": 250,
    # one-token replies: the tiny model's vocabulary has each move as a single token
    "max_new_tokens": 1,
    # The rules stay out of the prompt: the tiny model learns the game from play, 3x faster per step.
    # No retries: an invalid reply forfeits at once, so it costs what it should.
    "env_kwargs": {"rules_in_prompt": False, "max_retries": 0},
    # Sample only legal replies (action masking, as MaskablePPO does): a model learning from scratch
    # otherwise spends its budget on the format and collapses onto one token for every context.
    "constrain_to_legal": True,
    # A magnet: an exact KL to an EMA of the learner's own weights. Plain self-play policy gradients
    # cycle around Kuhn's mixed equilibrium (exploitability 0.15-0.4 with an entropy bonus alone).
    "beta": 1.0,
    "reference_ema": 0.995,
    "kl_estimator": "exact",
    # a wider model than the default decouples the 12 information sets better (0.08-0.11 vs 0.1-0.2)
    "model_hidden_size": 128,
    "model_init_std": 0.125,
    "lr": 1e-4,
    "lr_schedule": "linear",
    # one torch thread: the tiny model's kernels are too small to gain from more, and lose to contention
    "threads": 1,
}
"""Defaults of the trainer's config for this env (``llm-zoo train kuhn_poker_v0``)."""


def evaluate_policies(policies, **kwargs):
    """Exact exploitability of the strategy the seats' policies play; see :mod:`llm_zoo.envs.kuhn_poker.evaluate`."""
    from llm_zoo.envs.kuhn_poker.evaluate import evaluate_policies as _evaluate

    return _evaluate(policies, **kwargs)


__all__ = ["ENV_ID", "LEARNING_ROLES", "SCRIPTED", "TRAIN_DEFAULTS", "corpus", "env", "evaluate_policies", "raw_env"]
