"""Additions to the trainer's loss and its weight averages, each off by default.

* :func:`centre_by_prompt` (``config.turn_baseline``): each trained turn's advantage minus the mean
  advantage of the step's turns of the same learner with the same prompt (and, with ``"prompt_std"``,
  divided by their std). In a game whose prompt is the acting player's whole view (Kuhn poker), that
  is one baseline per information set: the return's spread that comes from the card held no longer
  reaches the gradient.
* :func:`validity_loss` (``config.validity_coef``): ``-log`` of the unconstrained probability that
  the model's reply is a legal one followed by end of turn, averaged over the step's distinct
  prompts. A policy trained under a decoding mask (``constrain_to_legal``) learns only the ratios
  between its legal replies; this term also teaches it to put its mass on them, so that it plays
  without the mask (served by ``llm-zoo serve`` to a client that cannot constrain decoding).
* :func:`magnet_decay` (``config.reference_ema_final``): the magnet's EMA decay moved over the run,
  from a fast magnet early (``reference_ema``) to a slow one late, linearly in its horizon
  ``1 / (1 - decay)``.
* :func:`average_keep` (``config.average_power``): the weights' average with weights ``t ** power``
  over steps ``1..t`` (CFR+ averages its strategies linearly, power 1) in place of a constant EMA decay.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Any

import torch

from llm_zoo.scoring import completion_logprobs

TURN_BASELINES = ("none", "prompt", "prompt_std")
"""The values of ``config.turn_baseline``."""

STD_EPS = 1e-4


def magnet_decay(step: int, steps: int, start: float, final: float) -> float:
    """Return the magnet's EMA decay at ``step`` (0-based) of ``steps``: ``start`` when ``final`` is 0, else
    the decay whose horizon ``1 / (1 - decay)`` moves linearly from ``start``'s to ``final``'s over the run."""
    if not final:
        return start
    progress = step / max(1, steps - 1)
    horizon = 1.0 / (1.0 - start) + (1.0 / (1.0 - final) - 1.0 / (1.0 - start)) * progress
    return 1.0 - 1.0 / horizon


def average_keep(t: int, power: float) -> float:
    """Return the share of the old average to keep at update ``t`` (1-based) so that the average weights the
    iterates of steps ``1..t`` in proportion to ``step ** power`` (exactly: a running weighted mean)."""
    total = math.fsum(i ** power for i in range(1, t + 1))
    return 1.0 - t ** power / total


def centre_by_prompt(advantages: Sequence[float], prompts: Sequence[Sequence[int]], mode: str) -> list[float]:
    """Return each advantage minus the mean over the advantages with the same prompt (``mode="prompt"``),
    also divided by their population std + 1e-4 (``"prompt_std"``), or unchanged (``"none"``).

    A prompt seen once gets 0: it has nothing to be compared with.
    """
    if mode not in TURN_BASELINES:
        raise ValueError(f"turn_baseline must be one of {TURN_BASELINES}; got {mode!r}")
    if mode == "none":
        return [float(a) for a in advantages]
    if len(advantages) != len(prompts):
        raise ValueError(f"need one prompt per advantage: got {len(advantages)} advantages and {len(prompts)} prompts")
    members: dict[tuple[int, ...], list[float]] = {}
    keys = [tuple(p) for p in prompts]
    for a, key in zip(advantages, keys):
        members.setdefault(key, []).append(float(a))
    stats = {}
    for key, values in members.items():
        mean = sum(values) / len(values)
        std = math.sqrt(sum((v - mean) ** 2 for v in values) / len(values))
        stats[key] = (mean, std + STD_EPS if mode == "prompt_std" else 1.0, len(values))
    out = []
    for a, key in zip(advantages, keys):
        mean, scale, size = stats[key]
        out.append(0.0 if size == 1 else (float(a) - mean) / scale)
    return out


def validity_paths(tokenizer: Any, replies: Sequence[str], eos_token_id: int) -> tuple[tuple[int, ...], ...]:
    """Return each legal reply's tokens followed by end of turn: the replies the term rewards."""
    paths = []
    for reply in replies:
        ids = tuple(tokenizer.encode(reply, add_special_tokens=False))
        if ids:
            paths.append(ids + (eos_token_id,))
    return tuple(paths)


def validity_loss(model: torch.nn.Module, items: Sequence[tuple[Sequence[int], Sequence[Sequence[int]]]], *,
                  pad_token_id: int, temperature: float = 1.0) -> tuple[torch.Tensor, float]:
    """Return (``-mean log P(some legal reply, then end of turn)`` over ``items``, that probability's mean).

    ``items`` are ``(prompt ids, token paths of its legal replies)``, one per distinct prompt. The
    probabilities are the model's own, unconstrained, at ``temperature`` (with grad).
    """
    prompts, completions, owner = [], [], []
    for i, (prompt, paths) in enumerate(items):
        for path in paths:
            prompts.append(list(prompt))
            completions.append(list(path))
            owner.append(i)
    if not prompts:
        zero = next(model.parameters()).new_zeros(())
        return zero, 1.0
    per_token, mask = completion_logprobs(model, prompts, completions, pad_token_id=pad_token_id,
                                          temperature=temperature)
    sequence = (per_token * mask).sum(dim=1)  # log P(path) per row
    index = torch.tensor(owner, device=sequence.device)
    log_mass = torch.stack([torch.logsumexp(sequence[index == i], dim=0) for i in range(len(items))])
    return -log_mass.mean(), float(log_mass.detach().exp().mean())
