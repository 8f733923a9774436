"""Self-play: each learner's pool of past snapshots, the opponents drawn from it, and who learns when.

With ``pool_every`` set, every learner that learned in the last ``pool_every`` steps adds a
snapshot of its weights to its pool (the newest ``pool_size`` are kept). At rollout time each
episode, with probability ``1 - p_latest``, keeps one trainable agent learning and seats a pool
snapshot in every other learner seat (:func:`meet_snapshots`); only the kept agent's turns are
trained. Schedules (:data:`SCHEDULES`) say which learners learn at a step: all of them together,
or one learning role at a time (``freeze_rotate``, ``rotate_every`` steps each).
"""

from __future__ import annotations

import copy
import random
from collections.abc import Callable, Mapping, MutableMapping, Sequence
from typing import Any

import torch

from llm_zoo.policies.transformers import TransformersPolicy

__all__ = ["SCHEDULES", "Pool", "active_learners", "add_snapshot", "frozen_copy", "meet_snapshots", "snapshot_policy"]

Pool = list[tuple[int, dict[str, torch.Tensor]]]
"""A learner's snapshots: (step, state dict on the CPU), oldest first."""


def frozen_copy(policy: TransformersPolicy, name: str,
                state: Mapping[str, torch.Tensor] | None = None) -> TransformersPolicy:
    """Return a policy that samples like ``policy`` from a frozen copy of its model (with ``state`` loaded)."""
    model = copy.deepcopy(policy.model)
    if state is not None:
        model.load_state_dict(state)
    return TransformersPolicy(model.eval().requires_grad_(False), policy.tokenizer, name=name,
                              temperature=policy.temperature, top_p=policy.top_p,
                              max_new_tokens=policy.max_new_tokens, device=policy.device,
                              constrain=policy.constrain, max_prompt_tokens=policy.max_prompt_tokens,
                              max_forward_tokens=policy.max_forward_tokens)


def add_snapshot(pool: Pool, step: int, model: torch.nn.Module, size: int) -> None:
    """Append a CPU copy of ``model``'s weights after ``step`` steps to ``pool``; keep the newest ``size``."""
    pool.append((step, {k: v.detach().cpu().clone() for k, v in model.state_dict().items()}))
    del pool[:-size]


def snapshot_policy(policy: TransformersPolicy, snapshot_step: int, state: Mapping[str, torch.Tensor],
                    cache: MutableMapping[tuple[str, int], TransformersPolicy]) -> TransformersPolicy:
    """Return a frozen policy for a pool snapshot of ``policy`` (built once, then reused from ``cache``)."""
    key = (policy.name, snapshot_step)
    if key not in cache:
        cache[key] = frozen_copy(policy, f"{policy.name}@{snapshot_step}", state)
    return cache[key]


def meet_snapshots(mapping: dict[str, Any], trainable: set[str], rng: random.Random, p_latest: float,
                   pool_of: Callable[[str], Sequence[tuple[int, Mapping[str, torch.Tensor]]]],
                   snapshot: Callable[[str, int, Mapping[str, torch.Tensor]], Any]) -> set[str]:
    """Maybe seat pool snapshots against one of an episode's trainable agents; return the agents still trained.

    With probability ``1 - p_latest`` (and a trainable agent), one trainable agent is drawn to
    stay, and every other agent whose learner has a pool gets one of its snapshots
    (``snapshot(agent, step, state)``) in ``mapping``, in place. Draws come from ``rng`` alone.
    """
    if not (rng.random() >= p_latest and trainable):
        return trainable
    me = rng.choice(sorted(trainable))
    replaced = set()
    for agent in mapping:
        pool = pool_of(agent)
        if agent != me and pool:
            snap_step, state = pool[rng.randrange(len(pool))]
            mapping[agent] = snapshot(agent, snap_step, state)
            replaced.add(agent)
    return {a for a in trainable if a not in replaced}


def _together(step: int, learn: set[str], roles: Mapping[str, str], learning_agents: Sequence[str],
              rotate_every: int) -> list[str]:
    """Every learning agent learns at every step."""
    return list(learning_agents)


def _freeze_rotate(step: int, learn: set[str], roles: Mapping[str, str], learning_agents: Sequence[str],
                   rotate_every: int) -> list[str]:
    """One learning role (or agent) at a time, in name order, ``rotate_every`` steps each; the rest are frozen."""
    order = sorted(learn)
    current = order[(step // rotate_every) % len(order)]
    return [a for a in learning_agents if roles[a] == current or a == current]


SCHEDULES: dict[str, Callable[..., list[str]]] = {"together": _together, "freeze_rotate": _freeze_rotate}
"""Schedule name (``config.schedule``) -> the agents that learn at a step."""


def active_learners(step: int, schedule: str, rotate_every: int, learn: set[str], roles: Mapping[str, str],
                    policy_of: Mapping[str, str]) -> set[str]:
    """Return the policy names that learn at ``step`` under ``schedule``."""
    learning_agents = [a for a in policy_of if roles[a] in learn or a in learn]
    return {policy_of[a] for a in SCHEDULES[schedule](step, learn, roles, learning_agents, rotate_every)}
