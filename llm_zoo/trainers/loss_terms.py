"""The math of the trainer's plug-ins (:mod:`~llm_zoo.trainers.plugins`), as pure functions; each plug-in is off
by default.

* :func:`centre_by_prompt` (``turn_baseline.mode``): each trained turn's advantage minus the mean
  advantage of the step's turns of the same learner with the same prompt (and, with ``"prompt_std"``,
  divided by their std). In a game whose prompt is the acting player's whole view (Kuhn poker), that
  is one baseline per information set: the return's spread that comes from the card held no longer
  reaches the gradient.
* :func:`validity_loss` (``validity.coef``): ``-log`` of the unconstrained probability that
  the model's reply is a legal one followed by end of turn, averaged over the step's distinct
  prompts. A policy trained under a decoding mask (``constrain_to_legal``) learns only the ratios
  between its legal replies; this term also teaches it to put its mass on them, so that it plays
  without the mask (served by ``llm-zoo serve`` to a client that cannot constrain decoding).
* :func:`unmask_fit` (``unmask.steps``): after the last step, the delivered policy is fitted with no
  decoding mask to its own masked strategy at every distinct prompt its trained turns met: the
  cross-entropy ``-sum_i q_i log p(reply_i, then end of turn)``, with ``q`` the masked probabilities
  before the fit (frozen), is least where the unconstrained model plays exactly ``q`` and nothing
  else. RL keeps the mask, whose gradient is clean; the fit then moves the legal replies' mass to
  1 without moving the strategy (a distillation of the masked policy into the unmasked one).
* :func:`magnet_decay` (``magnet.ema_final``): the magnet's EMA decay moved over the run,
  from a fast magnet early (``magnet.ema``) to a slow one late, linearly in its horizon
  ``1 / (1 - decay)``.
* :func:`average_keep` (``average.power``): the weights' average with weights ``t ** power``
  over steps ``1..t`` (CFR+ averages its strategies linearly, power 1) in place of a constant EMA decay.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import torch

from llm_zoo.policies.constraints import allowed_per_position
from llm_zoo.scoring import completion_logprobs

TURN_BASELINES = ("none", "prompt", "prompt_std")
"""The values of ``turn_baseline.mode``."""

STD_EPS = 1e-4


def magnet_decay(step: int, steps: int, start: float, final: float) -> float:
    """Return the magnet's EMA decay at ``step`` (0-based) of ``steps``: ``start`` when ``final`` is 0, else
    the decay whose horizon ``1 / (1 - decay)`` moves linearly from ``start``'s to ``final``'s over the run."""
    if not final:
        return start
    progress = step / max(1, steps - 1)
    horizon = 1.0 / (1.0 - start) + (1.0 / (1.0 - final) - 1.0 / (1.0 - start)) * progress
    return 1.0 - 1.0 / horizon


def kl_weight(step: int, steps: int, beta: float, final: float, start: int = 0) -> float:
    """Return the KL weight at ``step`` (0-based) of ``steps``: ``beta`` when ``final`` is 0 or before ``start``,
    else moving linearly from ``beta`` at ``start`` to ``final`` at the last step."""
    if not final or step <= start:
        return beta
    progress = min(1.0, (step - start) / max(1, steps - 1 - start))
    return beta + (final - beta) * progress


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
        raise ValueError(f"turn_baseline.mode must be one of {TURN_BASELINES}; got {mode!r}")
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


UNMASK_TARGET_MASS = 0.999
""":func:`unmask_fit` stops once every prompt's legal mass is at least this..."""
UNMASK_TOLERANCE = 1e-3
"""...and its masked strategy is within this total variation of where it started."""


@dataclass(frozen=True)
class UnmaskItem:
    """One prompt of :func:`unmask_fit`: its ids and, per legal reply, the masked sampling path and the reply's
    tokens then end of turn (the path a client without a mask must produce)."""

    prompt_ids: tuple[int, ...]
    masked_paths: tuple[tuple[int, ...], ...]
    reply_paths: tuple[tuple[int, ...], ...]


def unmask_items(tokenizer: Any, prompts: Mapping[tuple[int, ...], Sequence[str]], eos_token_id: int,
                 max_new_tokens: int) -> list[UnmaskItem]:
    """Return an :class:`UnmaskItem` per prompt of ``prompts`` (prompt ids -> its legal replies), replies that
    encode to no token left out, and prompts with fewer than one such reply too."""
    items = []
    for prompt, replies in prompts.items():
        plain = validity_paths(tokenizer, replies, eos_token_id)
        if plain:  # the masked path is the reply then end of turn cut to the token budget, as legal_paths makes it
            items.append(UnmaskItem(tuple(prompt), tuple(p[:max_new_tokens] for p in plain), plain))
    return items


def _masked_targets(model: torch.nn.Module, items: Sequence[UnmaskItem], *, pad_token_id: int, temperature: float,
                    token_budget: int | None) -> list[torch.Tensor]:
    """Each item's masked probabilities of its replies (the strategy the mask samples), as a tensor summing to 1."""
    prompts, completions, allowed = [], [], []
    for item in items:
        for path in item.masked_paths:
            prompts.append(list(item.prompt_ids))
            completions.append(list(path))
            allowed.append(allowed_per_position(item.masked_paths, path))
    with torch.no_grad():
        per_token, mask = completion_logprobs(model, prompts, completions, pad_token_id=pad_token_id,
                                              temperature=temperature, allowed=allowed, token_budget=token_budget)
    sequence = (per_token * mask).sum(dim=1).exp()
    return [q / q.sum() for q in sequence.split([len(item.masked_paths) for item in items])]


def _unmasked(model: torch.nn.Module, items: Sequence[UnmaskItem], *, pad_token_id: int, temperature: float,
              token_budget: int | None) -> list[torch.Tensor]:
    """Each item's unconstrained ``log p(reply, then end of turn)`` per reply (with grad when enabled)."""
    prompts = [list(item.prompt_ids) for item in items for _ in item.reply_paths]
    completions = [list(path) for item in items for path in item.reply_paths]
    per_token, mask = completion_logprobs(model, prompts, completions, pad_token_id=pad_token_id,
                                          temperature=temperature, token_budget=token_budget)
    return list((per_token * mask).sum(dim=1).split([len(item.reply_paths) for item in items]))


def unmask_fit(model: torch.nn.Module, items: Sequence[UnmaskItem], *, steps: int, lr: float, pad_token_id: int,
               temperature: float = 1.0, prompts_per_pass: int = 64, token_budget: int | None = None,
               target_mass: float = UNMASK_TARGET_MASS, tolerance: float = UNMASK_TOLERANCE,
               check_every: int = 25) -> dict[str, float]:
    """Fit ``model`` with no mask to its own masked strategy at each item's prompt (module docstring); return figures.

    Up to ``steps`` full-batch Adam steps (a fresh optimiser, rate ``lr``, gradient norm clipped to 1), each summing
    the gradients of chunks of ``prompts_per_pass`` prompts; every ``check_every`` steps the fit stops once every
    prompt's legal mass is at least ``target_mass`` and its masked strategy is within ``tolerance`` (total
    variation) of the target. The figures, before and after: the least and the mean over the prompts of the
    unconstrained mass of the legal replies (``valid_mass_*``); after, the largest total variation between the masked
    strategy and its target (``tv_max``: 0 means the strategy did not move) and the ``steps`` taken.
    """
    if steps < 0 or not (math.isfinite(lr) and lr > 0):
        raise ValueError(f"unmask_fit needs steps >= 0 and a finite lr > 0; got steps={steps!r}, lr={lr!r}")
    if not items:
        return {}
    kwargs = {"pad_token_id": pad_token_id, "temperature": temperature, "token_budget": token_budget}
    chunks = [items[i:i + prompts_per_pass] for i in range(0, len(items), prompts_per_pass)]
    was_training = model.training
    model.eval()  # no dropout: the fit is of the policy as it samples

    def masses() -> list[float]:
        with torch.no_grad():
            return [float(lp.exp().sum()) for chunk in chunks for lp in _unmasked(model, chunk, **kwargs)]

    targets = [t for chunk in chunks for t in _masked_targets(model, chunk, **kwargs)]
    before = masses()
    params = list(model.parameters())
    frozen = [p for p in params if not p.requires_grad]  # a weights' average is kept frozen: thawed for the fit
    for p in frozen:
        p.requires_grad_(True)
    optimizer = torch.optim.Adam(params, lr=lr)
    def moved() -> float:
        now = [t for chunk in chunks for t in _masked_targets(model, chunk, **kwargs)]
        return max(float((m - t).abs().sum()) / 2 for m, t in zip(now, targets))

    loss_value, taken = 0.0, 0
    for taken in range(1, steps + 1):
        optimizer.zero_grad(set_to_none=True)
        loss_value, at = 0.0, 0
        for chunk in chunks:
            logps = _unmasked(model, chunk, **kwargs)
            loss = -sum((q * lp).sum() for q, lp in zip(targets[at:at + len(chunk)], logps)) / len(items)
            at += len(chunk)
            loss.backward()
            loss_value += float(loss.detach())
        torch.nn.utils.clip_grad_norm_(params, 1.0)
        optimizer.step()
        if taken % check_every == 0 and min(masses()) >= target_mass and moved() <= tolerance:
            break
    optimizer.zero_grad(set_to_none=True)
    after, tv = masses(), moved()
    model.train(was_training)
    for p in frozen:
        p.requires_grad_(False)
        p.grad = None
    return {"valid_mass_min_before": min(before), "valid_mass_mean_before": sum(before) / len(before),
            "valid_mass_min": min(after), "valid_mass_mean": sum(after) / len(after), "tv_max": tv,
            "loss": loss_value, "prompts": float(len(items)), "steps": float(taken)}
