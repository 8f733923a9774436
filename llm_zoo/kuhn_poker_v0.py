"""Kuhn poker, version 0: ``env()`` with the standard wrappers and ``raw_env``. Docs: :mod:`llm_zoo.envs.kuhn_poker.env`."""

from __future__ import annotations

from typing import Any

from llm_zoo.envs.kuhn_poker.env import ENV_ID, env, raw_env
from llm_zoo.envs.kuhn_poker.scripted import PLAYERS as SCRIPTED
from llm_zoo.envs.kuhn_poker.text import corpus

LEARNING_ROLES = ("player",)
"""Roles the trainer trains unless its config says otherwise."""

TRAIN_DEFAULTS: dict[str, Any] = {
    # The main job (`llm-zoo train kuhn_poker_v0`): self-play of the tiny model with RAE, one model
    # per seat, on a 2-core CPU in minutes. Each choice below was measured (seed 0, same budget, one
    # change at a time); docs/kuhn_selfplay.md has the runs.
    "steps": 1500,
    "episodes_per_step": 256,  # 128: the last iterate's exploitability swings 0.05-0.10 from one eval to the next
    "eval_every": 50,
    "checkpoint_every": 250,
    # one update over the whole batch: each distinct prompt then runs once (micro-batches of 64: 3x slower steps)
    "micro_batch_size": 512,
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
    # The trained policy is the EMA of the weights (Polyak averaging), as CFR reports its average
    # strategy: the last iterate keeps circling the equilibrium. 0.998 (about 500 steps) against
    # 0.995: 0.046 vs 0.053, the long average smoothing out the slow circling that 0.995 follows.
    "average_ema": 0.998,
    # One model per seat, each with its own initialisation and optimiser, both starting from the
    # uniform policy (zero output layers) and playing each other. One network playing both seats
    # ties together information sets that need different answers (K first vs K after a check, ...)
    # and stalls at 0.056-0.060 on this budget.
    "policies": {"player_0": "seat_0", "player_1": "seat_1"},
    # One RAE baseline per seat (with one model per seat, per model). Both seats have the role
    # "player", and one baseline over both seats of a zero-sum game stays at 0 (RAE would be
    # REINFORCE without a baseline); per seat it learns the first player's disadvantage.
    "baseline_key": "agent",
    # a wider model than the default decouples the 12 information sets better (0.08-0.11 vs 0.1-0.2)
    "model_hidden_size": 128,
    "model_init_std": 0.125,
    # ...but with that init a random output layer can make a context nearly deterministic from the
    # start (seed 1: call a bet with every card at 0.99), where the gradient vanishes and the run
    # sticks at 0.35; a zero output layer starts every seed from the uniform policy
    "model_zero_head": True,
    # with the average smoothing the noise, a larger step reaches the slow directions sooner
    "lr": 3e-4,
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
