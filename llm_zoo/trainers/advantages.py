"""Advantage estimators: pure functions from rewards (and group keys or baselines) to advantages.

Each takes one reward per sample (an agent's return in an episode) and returns one advantage per
sample; the trainer spreads a sample's advantage over the completion tokens of that agent's turns.

* :func:`grpo` — group-relative (Shao et al., 2024, DeepSeekMath): compare samples that faced the
  same task.
* :func:`rae` — role-conditioned EMA baselines (reinforced advantage estimation): one running
  baseline per (env, role), as in SPIRAL (Liu et al., 2025), for multi-agent self-play where groups
  of identical tasks are costly.
* :func:`hgrpo` — hierarchical GRPO: reward minus the mean of a comparison group the env defines
  (solvers of one problem; proposers of one seed topic), with no std scaling.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Hashable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Literal

GROUP_STD_EPS = 1e-4


def _check_lengths(rewards: Sequence[float], keys: Sequence[Hashable], what: str) -> None:
    if len(rewards) != len(keys):
        raise ValueError(f"need one {what} per reward: got {len(rewards)} rewards and {len(keys)} {what}s")


def group_stats(rewards: Sequence[float], groups: Sequence[Hashable]) -> dict[Hashable, tuple[float, float, int]]:
    """Return group -> (mean, population std, size)."""
    members: dict[Hashable, list[float]] = {}
    for r, g in zip(rewards, groups):
        members.setdefault(g, []).append(float(r))
    stats = {}
    for g, rs in members.items():
        mean = sum(rs) / len(rs)
        stats[g] = (mean, math.sqrt(sum((r - mean) ** 2 for r in rs) / len(rs)), len(rs))
    return stats


def grpo(rewards: Sequence[float], groups: Sequence[Hashable],
         scale: Literal["group", "batch", "none"] = "group") -> list[float]:
    """Return group-relative advantages.

    ``A_i = (r_i - mean_{g(i)}) / s``, where ``mean_g`` is the mean reward of sample i's group and
    ``s`` is the group's (population) std + 1e-4 for ``scale="group"``, the std of all rewards in
    the batch (+ 1e-4) for ``"batch"``, and 1 for ``"none"``. A group of one sample gets 0.
    """
    _check_lengths(rewards, groups, "group")
    if scale not in ("group", "batch", "none"):
        raise ValueError(f"scale must be 'group', 'batch' or 'none'; got {scale!r}")
    stats = group_stats(rewards, groups)
    batch_std = group_stats(rewards, [0] * len(rewards))[0][1] if scale == "batch" and rewards else 0.0
    out = []
    for r, g in zip(rewards, groups):
        mean, std, size = stats[g]
        if size == 1:
            out.append(0.0)
            continue
        denom = {"group": std + GROUP_STD_EPS, "batch": batch_std + GROUP_STD_EPS, "none": 1.0}[scale]
        out.append((float(r) - mean) / denom)
    return out


@dataclass
class RAEState:
    """The EMA baselines of :func:`rae`: key -> baseline. Plain data, so it saves in a checkpoint."""

    baselines: dict[str, float] = field(default_factory=dict)

    def to_dict(self) -> dict[str, float]:
        """Return the baselines as a JSON-serialisable dict."""
        return dict(self.baselines)

    @classmethod
    def from_dict(cls, data: Mapping[str, float]) -> RAEState:
        """Rebuild the state saved by :meth:`to_dict`."""
        return cls({str(k): float(v) for k, v in data.items()})


def rae(rewards: Sequence[float], keys: Sequence[Hashable], state: RAEState, decay: float = 0.95) -> list[float]:
    """Return advantages against per-key EMA baselines, then move the baselines (in ``state``).

    ``A_i = r_i - b_k`` with ``b_k`` the baseline of sample i's key (env id and role) as it stood
    before this batch (0 for a new key). Then, for each key, ``b_k <- decay * b_k + (1 - decay) *
    mean(r_i for i with key k)`` — one EMA update per key per batch.
    """
    _check_lengths(rewards, keys, "key")
    if not 0.0 <= decay <= 1.0:
        raise ValueError(f"decay must be in [0, 1]; got {decay!r}")
    names = [str(k) for k in keys]
    before = {k: state.baselines.get(k, 0.0) for k in names}
    advantages = [float(r) - before[k] for r, k in zip(rewards, names)]
    for key, (mean, _, _) in group_stats(rewards, names).items():
        state.baselines[key] = decay * before[key] + (1.0 - decay) * mean
    return advantages


def hgrpo(rewards: Sequence[float], groups: Sequence[Hashable]) -> list[float]:
    """Return hierarchical-GRPO advantages: ``A_i = r_i - mean_{g(i)}``, with no std scaling.

    The groups come from the env (``infos[agent]["group"]``): e.g. the solvers of one problem, or the
    proposers of one seed topic. A group of one sample gets 0.
    """
    return grpo(rewards, groups, scale="none")


def no_baseline(rewards: Sequence[float]) -> list[float]:
    """Return the rewards themselves (REINFORCE without a baseline), for ablations."""
    return [float(r) for r in rewards]


# ---------------------------------------------------------------------------------------------
# THE TABLE the trainer looks estimators up in (``config.algorithm``)
# ---------------------------------------------------------------------------------------------

RAE_DECAY = 0.95
"""EMA decay of the RAE baselines, as SPIRAL uses (about a 20-step memory)."""

Estimator = Callable[[Sequence[float], Sequence[Hashable], Sequence[Hashable], RAEState], list[float]]
"""``estimator(rewards, baseline_keys, group_keys, rae_state) -> advantages``: one uniform signature,
each estimator reading what it needs (RAE the keys and its state, the GRPOs the groups)."""


def rae_advantages(rewards: Sequence[float], keys: Sequence[Hashable], groups: Sequence[Hashable],
                   state: RAEState) -> list[float]:
    """:func:`rae` over per-key baselines with decay :data:`RAE_DECAY` (the groups are not read)."""
    return rae(rewards, keys, state, RAE_DECAY)


def grpo_advantages(rewards: Sequence[float], keys: Sequence[Hashable], groups: Sequence[Hashable],
                    state: RAEState) -> list[float]:
    """:func:`grpo` within groups, scaled by each group's std."""
    return grpo(rewards, groups)


def hgrpo_advantages(rewards: Sequence[float], keys: Sequence[Hashable], groups: Sequence[Hashable],
                     state: RAEState) -> list[float]:
    """:func:`hgrpo`: reward minus its env-defined group's mean."""
    return hgrpo(rewards, groups)


def raw_returns(rewards: Sequence[float], keys: Sequence[Hashable], groups: Sequence[Hashable],
                state: RAEState) -> list[float]:
    """:func:`no_baseline`: the rewards themselves, for ablations."""
    return no_baseline(rewards)


ESTIMATORS: dict[str, Estimator] = {
    "rae": rae_advantages,
    "grpo": grpo_advantages,
    "hgrpo": hgrpo_advantages,
    "none": raw_returns,
}
"""``config.algorithm`` -> its advantage estimator."""
