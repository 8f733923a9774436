"""A curriculum over an env's reset options: each group of a step plays the option whose rewards are least settled.

GRPO learns only from a group whose rewards differ: a group whose episodes all succeed, or all fail, has advantage 0
everywhere and trains nothing (the trainer skips its update). When an env's episodes come from a few kinds (user_sim's
templates, proposer_solver's topics), most kinds soon end alike in every group, and a step drawn uniformly spends most
of its rollout on them. DAPO's dynamic sampling plays more groups and drops the settled ones; this plays fewer of them
in the first place. Each option keeps an estimate of the spread of its rewards within a group (the sample variance;
p(1 - p) for a 0/1 reward whose success rate is p), which moves toward each new group's spread that played it, and a
step draws each group's option in proportion to that estimate plus a floor, so that an option once settled is still
revisited now and then (a policy that changes may unsettle it).

The state is plain data (option key -> estimate), saved in checkpoints, so that a resumed run draws as the
uninterrupted one would. The draws come from their own generator per (seed, step), so the env seeds of a run with a
curriculum are those of the same run without one.
"""

from __future__ import annotations

import json
import math
import random
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from llm_zoo.envs.core import check_option_keys
from llm_zoo.trainers.advantages import group_stats

__all__ = ["WEIGHTINGS", "CurriculumConfig", "CurriculumState", "check_options", "group_spreads", "option_key",
           "option_labels"]

WEIGHTINGS = ("spread", "uniform")
"""The values of ``curriculum.weighting``."""


@dataclass(frozen=True)
class CurriculumConfig:
    """The curriculum: which reset options a step's groups play, and how each group's is drawn."""

    options: list[dict[str, Any]] = field(default_factory=list)
    """Reset options a group may play (its episodes reset with them), e.g. ``[{"scenario": "cancel_mistake"},
    {"scenario": "payment_to_paypal"}]`` for user_sim_v0. Empty: off, each group's env draws from its seed alone."""
    weighting: str = "spread"
    """``spread``: a group's option is drawn in proportion to the option's estimated spread of rewards within a group,
    plus ``floor`` (groups go where their rewards differ, which is where GRPO learns); ``uniform``: each option alike
    (a baseline for the comparison, and a way to play the options' mix rather than the env's own draw)."""
    prior: float = 0.25
    """An option's estimate before a group has played it (0.25, a 0/1 reward's largest spread: unseen options first).
    On the scale of the env's rewards' variance."""
    decay: float = 0.5
    """How much of an option's estimate stays when a group plays it: ``estimate <- decay * estimate + (1 - decay) *
    the group's spread``. 0 keeps only the newest group's."""
    floor: float = 0.02
    """Added to every option's estimate before drawing: an option whose groups ended alike is still drawn now and
    then. On the scale of ``prior``."""

    def __post_init__(self) -> None:
        if not isinstance(self.options, list) or not all(isinstance(o, Mapping) for o in self.options):
            raise ValueError(f"config.curriculum.options must be a list of reset-option mappings; got "
                             f"{self.options!r:.200}")
        keys = [option_key(o) for o in self.options]
        if len(set(keys)) != len(keys):
            raise ValueError(f"config.curriculum.options lists an option twice: {keys!r:.200}")
        if self.weighting not in WEIGHTINGS:
            raise ValueError(f"config.curriculum.weighting must be one of {WEIGHTINGS}; got {self.weighting!r}")
        for name in ("prior", "floor"):
            value = getattr(self, name)
            if not (math.isfinite(value) and value >= 0.0):
                raise ValueError(f"config.curriculum.{name} must be a finite number >= 0; got {value!r}")
        if self.prior + self.floor <= 0.0:
            raise ValueError("config.curriculum.prior and config.curriculum.floor cannot both be 0: an unseen option "
                             "would never be drawn")
        if not 0.0 <= self.decay < 1.0:
            raise ValueError(f"config.curriculum.decay must be in [0, 1); got {self.decay!r}")

    def check(self, config: Any) -> None:
        """Refuse a curriculum that cannot measure a group's spread (groups of one episode)."""
        if self.options and self.weighting == "spread" and config.group_size < 2:
            raise ValueError(f"config.curriculum.weighting='spread' needs groups of 2 or more episodes to measure their "
                             f"spread; got config.group_size={config.group_size} (set group_size, or "
                             f"curriculum.weighting=uniform)")


def option_key(option: Mapping[str, Any]) -> str:
    """Return the option's key in the state: its JSON with sorted keys."""
    return json.dumps(dict(option), sort_keys=True, default=str)


def option_labels(options: Sequence[Mapping[str, Any]]) -> list[str]:
    """Return a short name per option for metrics: the value alone where every option has one key and the values
    differ, else ``k=v`` pairs, else (two options alike in that form) the option's key."""
    short = [str(next(iter(o.values()))) if len(o) == 1 else ",".join(f"{k}={v}" for k, v in sorted(o.items()))
             for o in options]
    if len(set(short)) == len(short):
        return short
    return [option_key(o) for o in options]


def check_options(env: str, config: CurriculumConfig, env_kwargs: Mapping[str, Any] | None = None) -> None:
    """Reset the env once with each option; refuse, before the first step, one it does not take (rather than fail
    every episode drawn on it), naming the option and the env's reason."""
    import llm_zoo

    if not config.options:
        return
    env_instance = llm_zoo.make_env(env, **dict(env_kwargs or {}))
    try:
        check_option_keys(env_instance, config.options, "config.curriculum.options")
        for option in config.options:
            try:
                env_instance.reset(seed=0, options=dict(option))
            except Exception as exc:  # noqa: BLE001 - whatever the env raises, the option is what the user must fix
                raise ValueError(f"config.curriculum.options: {env} does not reset with {dict(option)!r:.200} "
                                 f"({type(exc).__name__}: {exc}); every option must be reset options the env takes"
                                 ) from None
    finally:
        env_instance.close()


@dataclass
class CurriculumState:
    """Each option's estimated spread (option key -> estimate). Plain data, so it saves in a checkpoint."""

    spread: dict[str, float] = field(default_factory=dict)

    def to_dict(self) -> dict[str, float]:
        """Return the estimates as a JSON-serialisable dict."""
        return dict(self.spread)

    @classmethod
    def from_dict(cls, data: Mapping[str, float]) -> CurriculumState:
        """Rebuild the state saved by :meth:`to_dict`."""
        return cls({str(k): float(v) for k, v in data.items()})

    def weights(self, config: CurriculumConfig) -> list[float]:
        """Return each option's drawing weight, in ``config.options``'s order."""
        if config.weighting == "uniform":
            return [1.0] * len(config.options)
        weights = [self.spread.get(option_key(o), config.prior) + config.floor for o in config.options]
        # floor 0 and every option settled: nothing to prefer, so each alike (a draw needs some weight)
        return weights if any(weights) else [1.0] * len(weights)

    def draw(self, config: CurriculumConfig, n_groups: int, rng: random.Random) -> list[dict[str, Any]]:
        """Return the options of ``n_groups`` groups, each drawn by :meth:`weights` (with replacement)."""
        picked = rng.choices(range(len(config.options)), weights=self.weights(config), k=n_groups)
        return [dict(config.options[i]) for i in picked]

    def observe(self, config: CurriculumConfig, options: Sequence[Mapping[str, Any]],
                spreads: Sequence[float | None]) -> None:
        """Move each played option's estimate toward its groups' spreads, in order (None: a group not measured)."""
        for option, spread in zip(options, spreads, strict=True):
            if spread is None:
                continue
            key = option_key(option)
            before = self.spread.get(key, config.prior)
            self.spread[key] = config.decay * before + (1.0 - config.decay) * float(spread)

    def metrics(self, config: CurriculumConfig) -> dict[str, float]:
        """Return each option's share of the draw, as ``curriculum/share/LABEL``."""
        weights = self.weights(config)
        total = sum(weights)
        return {f"curriculum/share/{label}": w / total for label, w in zip(option_labels(config.options), weights)}


def group_spreads(rewards: Sequence[float], groups: Sequence[str], episodes: Sequence[int], group_size: int,
                  n_groups: int) -> list[float | None]:
    """Return each step group's spread of rewards: the sample variance of each of its groups' rewards (the
    advantage estimators' groups: one env seed's episodes, per baseline key), averaged over them.

    ``rewards``, ``groups`` and ``episodes`` are the outcomes' (an episode index ``i`` belongs to step group
    ``i // group_size``). A step group none of whose groups holds two rewards is None (not measured).
    """
    step_group_of = {group: episode // group_size for group, episode in zip(groups, episodes, strict=True)}
    measured: list[list[float]] = [[] for _ in range(n_groups)]
    for group, (_, std, size) in group_stats(rewards, groups).items():
        if size >= 2:  # the sample variance, from the population std
            measured[step_group_of[group]].append(std * std * size / (size - 1))
    return [sum(v) / len(v) if v else None for v in measured]
