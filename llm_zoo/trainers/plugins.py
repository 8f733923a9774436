"""The trainer's plug-ins: research machinery beyond the core loop, each with its own config, each off by default.

A plug-in is a small config dataclass, which is one section of
:class:`~llm_zoo.trainers.grpo.TrainConfig` (``--set magnet.ema=0.95``, or ``magnet: {ema: 0.95}`` in a
config file), and a class whose hooks the loop calls from one place each. :data:`PLUGINS` is the table,
as :data:`~llm_zoo.trainers.advantages.ESTIMATORS` is for the advantage estimators; :func:`enabled`
returns the plug-ins a config switches on, in the table's order, which is the order their hooks run.

The hooks, in the order a run meets them (each a no-op on :class:`Plugin`):

* ``param_groups(model, params)``: the optimiser's parameter groups, or None for one group at ``lr``;
* ``setup(learner)``: once, right after a learner is built (the state it keeps lives on the learner, so
  that checkpoints save and restore it);
* ``see_turn(learner, turn)``: for each trained turn of a step; returns extra fields of its
  :class:`~llm_zoo.trainers.grpo.Sample`;
* ``advantages(batch)``: a learner's samples of the step, before its update; returns them, changed or not;
* ``kl_weight(step, beta)``: the weight of the KL term at ``step`` (0-based);
* ``extra_loss(learner, batch, temperature)``: after the policy loss's backward; a term that runs its own
  backward and returns (its value, its stats);
* ``after_step(learner, step)``: after the optimiser's step, in ``torch.no_grad``;
* ``after_training(learners)``: after the last step's update; returns metrics.

A hook that raises fails the run. Each config checks its own values when built (``__post_init__``) and its
fit with the rest of the config in ``check`` (``TrainConfig`` calls it), and each error names its field
as ``config.SECTION.FIELD``.
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any, ClassVar

import torch

from llm_zoo.trainers import distributed, loss_terms
from llm_zoo.trainers.selfplay import frozen_copy

__all__ = ["PLUGINS", "RENAMED", "AverageConfig", "BodyLRConfig", "CopyHeadsConfig", "MagnetConfig", "Plugin",
           "TurnBaselineConfig", "UnmaskConfig", "ValidityConfig", "enabled"]


def _finite_at_least(value: float, low: float) -> bool:
    return math.isfinite(value) and value >= low


# ---------------------------------------------------------------------------------------------
# CONFIGS: one section of TrainConfig each
# ---------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class MagnetConfig:
    """The magnet: the KL reference (``beta`` > 0) follows the learner as an EMA of its weights, on a schedule."""

    ema: float = 1.0
    """1 keeps the reference at the initial policy; below 1 the reference follows the learner as an EMA of its weights
    (decay per step): a magnet that regularises self-play toward its own recent past (as in magnetic mirror descent
    and R-NaD), which damps the cycling of plain self-play."""
    ema_final: float = 0.0
    """0: the decay stays ``ema``. In (0, 1): the decay moves from ``ema`` to this over the run, linearly in the
    magnet's horizon ``1 / (1 - decay)`` (a fast magnet early, a slow one late); ``loss_terms.magnet_decay``."""
    average_from: float = 0.0
    """0: off. In (0, 1): from this fraction of the run on, the magnet is the weights' average (``average.ema``) instead
    of its own EMA, so that the learner, which leads its magnet by about its advantages over ``beta``, settles where
    the average is rather than keep circling the equilibrium. Read only with both a magnet and an average."""
    beta_final: float = 0.0
    """0: the KL weight stays ``beta``. Above 0: from ``average_from`` (from the start when that is 0) the weight moves
    linearly to this at the last step, so that a learner on a weak magnet ends near it; ``loss_terms.kl_weight``."""

    def __post_init__(self) -> None:
        if not 0.0 <= self.ema <= 1.0:
            raise ValueError(f"config.magnet.ema must be in [0, 1] (1: the reference stays the initial policy); got "
                             f"{self.ema!r}")
        if not 0.0 <= self.ema_final < 1.0 or (self.ema_final and self.ema >= 1.0):
            raise ValueError(f"config.magnet.ema_final must be in [0, 1) (0: off), with magnet.ema < 1; got "
                             f"{self.ema_final!r} (magnet.ema={self.ema!r})")
        if not 0.0 <= self.average_from < 1.0:
            raise ValueError(f"config.magnet.average_from must be in [0, 1) (0: off); got {self.average_from!r}")
        if not _finite_at_least(self.beta_final, 0.0):
            raise ValueError(f"config.magnet.beta_final must be a finite number >= 0 (0: off); got {self.beta_final!r}")

    def check(self, config: Any) -> None:
        """Refuse a magnet the rest of ``config`` cannot carry (``ValueError`` naming the fields)."""
        if self.beta_final and not config.beta:
            raise ValueError(f"config.magnet.beta_final={self.beta_final!r} moves the KL weight, which needs beta > 0; "
                             f"got beta {config.beta!r}")


@dataclass(frozen=True)
class AverageConfig:
    """The weights' average: the trained policy is an average of the learner's weights (Polyak averaging)."""

    ema: float = 0.0
    """0: the trained policy is the learner itself. Above 0 the trainer also keeps an EMA of the learner's weights
    (this decay per step), and that average is the trained policy: evaluations score it and checkpoints export it
    under ``policies/`` (the learner's own weights go into ``NAME.trainer.pt``). Self-play's last iterate circles a
    mixed equilibrium; the average sits nearer its centre, as CFR and fictitious play report their average strategy."""
    debias: bool = False
    """Bias-correct the average as Adam does its moments: the starting weights get no share, so the average is the
    learner itself after the first step and tends to the plain EMA after about ``1 / (1 - ema)`` steps."""
    power: float = 0.0
    """0: the average is the EMA of ``ema``. Above 0 it weights the learner's weights after steps ``1..t`` by
    ``step ** power`` instead (1: linear, as CFR+ averages its strategies; over ``debias``): a window that grows with
    the run, in which the early steps fade; ``loss_terms.average_keep``."""

    def __post_init__(self) -> None:
        if not 0.0 <= self.ema < 1.0:
            raise ValueError(f"config.average.ema must be in [0, 1) (0: no average); got {self.ema!r}")
        if not _finite_at_least(self.power, 0.0):
            raise ValueError(f"config.average.power must be a finite number >= 0 (0: off); got {self.power!r}")

    def check(self, config: Any) -> None:
        """Nothing in the rest of the config limits the average."""


@dataclass(frozen=True)
class ValidityConfig:
    """The validity term: the unconstrained model learns to put its mass on the legal replies."""

    coef: float = 0.0
    """Weight of ``-log P(a legal reply, then end of turn)`` under the unconstrained model, per distinct prompt of the
    step: with ``constrain_to_legal`` it teaches the model to reply validly without the mask too (0: off)."""

    def __post_init__(self) -> None:
        if not _finite_at_least(self.coef, 0.0):
            raise ValueError(f"config.validity.coef must be a finite number >= 0 (0: off); got {self.coef!r}")

    def check(self, config: Any) -> None:
        """Nothing in the rest of the config limits the term."""


@dataclass(frozen=True)
class UnmaskConfig:
    """The fit without the decoding mask, after the last step."""

    steps: int = 0
    """0: off. Above 0, after the last step each learner's delivered policy is fitted with no decoding mask to its own
    masked strategy at every distinct prompt with legal replies its trained turns met, for this many full-batch Adam
    steps, so that it plays without the mask (served to a client that cannot constrain decoding);
    ``loss_terms.unmask_fit``."""
    lr: float = 3e-3
    """Learning rate of the fit (a fresh Adam, gradient norm clipped to 1)."""
    prompts: int = 1024
    """Most distinct prompts kept for the fit per learner (the first met; checkpoints keep them)."""

    def __post_init__(self) -> None:
        if int(self.steps) < 0 or int(self.prompts) < 1:
            raise ValueError(f"config.unmask.steps must be >= 0 (0: off) and config.unmask.prompts >= 1; got "
                             f"{self.steps!r} and {self.prompts!r}")
        if not (math.isfinite(self.lr) and self.lr > 0.0):
            raise ValueError(f"config.unmask.lr must be a finite number > 0; got {self.lr!r}")

    def check(self, config: Any) -> None:
        """Nothing in the rest of the config limits the fit (``presets.TINY_ONLY`` refuses it on a pretrained model)."""


@dataclass(frozen=True)
class BodyLRConfig:
    """Per-layer learning rates: the body of the model at a fraction of the output layer's."""

    scale: float = 1.0
    """The learning rate of every weight but the output layer's, as a fraction of ``lr`` (1: one rate for all). Below
    1 the body's features move slowly while the output layer learns the strategy on them (docs/kuhn_selfplay.md)."""

    def __post_init__(self) -> None:
        if not (math.isfinite(self.scale) and 0.0 <= self.scale <= 1.0):
            raise ValueError(f"config.body_lr.scale must be in [0, 1] (1: one learning rate for every weight); got "
                             f"{self.scale!r}")

    def check(self, config: Any) -> None:
        """Refuse a scale with LoRA, whose output layer is frozen (``ValueError``)."""
        if config.lora_r and self.scale != 1.0:
            raise ValueError(f"config.lora_r={config.lora_r} trains adapters only: body_lr.scale must be 1 (got "
                             f"{self.scale!r}: the output layer is frozen); or set lora_r=0")


@dataclass(frozen=True)
class CopyHeadsConfig:
    """Copy heads: the tiny model starts with an induction circuit in its first two layers."""

    enabled: bool = False
    """Start the tiny model's first two layers as an induction circuit (``llm_zoo.models.install_copy_heads``): it
    copies what its context holds (an id, an email) before any training, which a tiny model trained from scratch
    learns only after a long plateau. Needs model_layers >= 2 and 4 or more heads."""

    def check(self, config: Any) -> None:
        """The model builder checks the model's shape."""


@dataclass(frozen=True)
class TurnBaselineConfig:
    """Turn baselines: each trained turn's advantage centred on the step's turns with the same prompt."""

    mode: str = "none"
    """none, prompt (each trained turn's advantage minus the mean over the step's turns of the same learner with the
    same prompt: for Kuhn poker one baseline per information set) or prompt_std (also divided by their std)."""

    def __post_init__(self) -> None:
        if self.mode not in loss_terms.TURN_BASELINES:
            raise ValueError(f"config.turn_baseline.mode must be one of {loss_terms.TURN_BASELINES}; got {self.mode!r}")

    def check(self, config: Any) -> None:
        """Nothing in the rest of the config limits the baseline."""


# ---------------------------------------------------------------------------------------------
# PLUG-INS: the hooks
# ---------------------------------------------------------------------------------------------


class Plugin:
    """A plug-in's hooks (module docstring); each is a no-op here. ``self.config`` is its section,
    ``self.train`` the whole :class:`~llm_zoo.trainers.grpo.TrainConfig`."""

    section: ClassVar[str]
    """The ``TrainConfig`` field that holds the plug-in's config."""
    config_class: ClassVar[type]

    def __init__(self, train: Any) -> None:
        self.train = train
        self.config = getattr(train, self.section)

    def on(self) -> bool:
        """Whether the config switches the plug-in on."""
        raise NotImplementedError

    def param_groups(self, model: torch.nn.Module, params: list[torch.nn.Parameter]) -> list[dict[str, Any]] | None:
        """When a learner's optimiser is built: its parameter groups (each with an ``lr_scale``), or None for one."""
        return None

    def setup(self, learner: Any) -> None:
        """Once, right after a learner is built (before a checkpoint is loaded into it)."""
        return None

    def see_turn(self, learner: Any, turn: Any) -> dict[str, Any]:
        """For each distinct trained turn of a step (its learner, the observation it was shown and its reply), in
        episode order: extra fields of the ``Sample`` of every turn like it."""
        return {}

    def advantages(self, batch: list[Any]) -> list[Any]:
        """Once a step per learner, before its update: the learner's samples, their advantages changed or not."""
        return batch

    def kl_weight(self, step: int, beta: float) -> float:
        """At the start of each update: the KL weight of ``step`` (0-based), given the one so far."""
        return beta

    def extra_loss(self, learner: Any, batch: Sequence[Any], temperature: float) -> tuple[float, dict[str, float]]:
        """After the policy loss's backward, before the gradients are reduced: run a term's backward on the whole
        batch (each rank its share); return its value and stats."""
        return 0.0, {}

    def after_step(self, learner: Any, step: int) -> None:
        """After the optimiser's step, under ``torch.no_grad``: move what follows the weights."""
        return None

    def after_training(self, learners: Mapping[str, Any]) -> dict[str, float]:
        """After the last step's update, before the last evaluation and checkpoint: return metrics."""
        return {}


class BodyLR(Plugin):
    """The output layer at ``lr``, the rest at ``body_lr.scale * lr``."""

    section, config_class = "body_lr", BodyLRConfig

    def on(self) -> bool:
        return self.config.scale != 1.0

    def param_groups(self, model: torch.nn.Module, params: list[torch.nn.Parameter]) -> list[dict[str, Any]]:
        """Two groups: the output layer's weights (``lr_scale`` 1) and the body's (``lr_scale``: the section's scale),
        which the trainer's schedule multiplies in."""
        head = model.get_output_embeddings()
        head_ids = {id(p) for p in head.parameters()} if head is not None else set()
        if not head_ids or any(id(p) in head_ids for p in model.get_input_embeddings().parameters()):
            raise ValueError("config.body_lr.scale needs a model with an output layer of its own (not tied to the "
                             f"input embeddings); {type(model).__name__} has none, so leave body_lr.scale at 1")
        return [{"params": [p for p in params if id(p) in head_ids], "lr_scale": 1.0},
                {"params": [p for p in params if id(p) not in head_ids], "lr_scale": self.config.scale}]


class CopyHeads(Plugin):
    """Read by the model builder (``TrainConfig.model_copy_heads``); no hook of the loop."""

    section, config_class = "copy_heads", CopyHeadsConfig

    def on(self) -> bool:
        return self.config.enabled


class TurnBaseline(Plugin):
    """Centre each learner's advantages per prompt (``loss_terms.centre_by_prompt``)."""

    section, config_class = "turn_baseline", TurnBaselineConfig

    def on(self) -> bool:
        return self.config.mode != "none"

    def advantages(self, batch: list[Any]) -> list[Any]:
        centred = loss_terms.centre_by_prompt([b.advantage for b in batch], [b.prompt_ids for b in batch],
                                              self.config.mode)
        return [dataclasses.replace(b, advantage=a) for b, a in zip(batch, centred)]


class Validity(Plugin):
    """The validity term (``loss_terms.validity_loss``), once per distinct prompt of the step."""

    section, config_class = "validity", ValidityConfig

    def on(self) -> bool:
        return bool(self.config.coef)

    def see_turn(self, learner: Any, turn: Any) -> dict[str, Any]:
        legal = turn.observation.get("legal_actions")
        if not legal:
            return {}
        return {"valid_paths": loss_terms.validity_paths(learner.policy.tokenizer, legal,
                                                         learner.policy.eos_token_ids[0])}

    def extra_loss(self, learner: Any, batch: Sequence[Any], temperature: float) -> tuple[float, dict[str, float]]:
        # the distinct prompts of the whole batch (a prompt in two ranks' shares counts once)
        items = list({tuple(b.prompt_ids): b.valid_paths for b in batch if b.valid_paths}.items())
        mine = distributed.shard(items)  # under torchrun each rank scores its share of the prompts
        if not mine:
            return 0.0, {}
        v_loss, v_mass = loss_terms.validity_loss(learner.model, mine, pad_token_id=learner.policy.pad_token_id,
                                                  temperature=temperature)
        weight = len(mine) / len(items)  # the ranks' shares add up to the one mean over all the prompts
        (self.config.coef * weight * v_loss).backward()
        return self.config.coef * weight * v_loss.item(), {"valid_mass": v_mass * weight}


class Average(Plugin):
    """Keep ``Learner.average``, the trained policy, as an EMA (or a step-weighted mean) of the learner's weights."""

    section, config_class = "average", AverageConfig

    def on(self) -> bool:
        return bool(self.config.ema)

    def setup(self, learner: Any) -> None:
        learner.average = frozen_copy(learner.policy, learner.name)

    def after_step(self, learner: Any, step: int) -> None:
        keep = self.config.ema
        if self.config.power:
            keep = loss_terms.average_keep(step + 1, self.config.power)
        elif self.config.debias:  # bias-corrected EMA: weights ema^(t-i) over steps 1..t
            t = step + 1
            keep = self.config.ema * (1.0 - self.config.ema ** (t - 1)) / (1.0 - self.config.ema ** t)
        torch._foreach_lerp_(list(learner.average.model.parameters()), list(learner.model.parameters()), 1.0 - keep)


def moving_reference(config: Any) -> bool:
    """Whether ``config``'s KL reference moves during the run (a magnet: ``magnet.ema`` < 1 or ``magnet.average_from``).

    A reference that stays is the initial policy; with LoRA that is the model with its adapters disabled. One that
    moves needs weights of its own: with LoRA, a copy of the adapters over the learner's own base weights
    (``grpo.make_learner``)."""
    return bool(config.beta) and (config.magnet.ema < 1.0 or bool(config.magnet.average_from))


class Magnet(Plugin):
    """Move the KL reference toward the learner (its EMA, from ``average_from`` on the weights' average) and
    schedule the KL weight; runs after :class:`Average`, whose update it may copy."""

    section, config_class = "magnet", MagnetConfig

    def on(self) -> bool:
        return self.config.ema < 1.0 or bool(self.config.average_from) or bool(self.config.beta_final)

    def average_start(self) -> int:
        """The first step (0-based) at which the magnet is the weights' average (``magnet.average_from``)."""
        return math.ceil(self.config.average_from * self.train.steps)

    def kl_weight(self, step: int, beta: float) -> float:
        return loss_terms.kl_weight(step, self.train.steps, beta, self.config.beta_final, self.average_start())

    def after_step(self, learner: Any, step: int) -> None:
        if learner.reference is None:
            return
        # from average_from on the magnet is the average (its update ran before this hook), not its own EMA
        # with LoRA the reference holds the learner's own base weights (grpo.adapter_copy): only its adapters move
        own = [p.data_ptr() != q.data_ptr() for p, q in zip(learner.reference.parameters(), learner.model.parameters())]
        reference = [p for p, mine in zip(learner.reference.parameters(), own) if mine]
        if learner.average is not None and self.config.average_from and step >= self.average_start():
            torch._foreach_copy_(reference, [p for p, mine in zip(learner.average.model.parameters(), own) if mine])
        elif self.config.ema < 1.0:
            decay = loss_terms.magnet_decay(step, self.train.steps, self.config.ema, self.config.ema_final)
            torch._foreach_lerp_(reference, [p for p, mine in zip(learner.model.parameters(), own) if mine], 1.0 - decay)


class Unmask(Plugin):
    """Record the prompts the trained turns meet, and fit the delivered policies without the mask after the run."""

    section, config_class = "unmask", UnmaskConfig

    def on(self) -> bool:
        return bool(self.config.steps)

    def see_turn(self, learner: Any, turn: Any) -> dict[str, Any]:
        legal = turn.observation.get("legal_actions")
        if legal and len(learner.met) < self.config.prompts:
            learner.met.setdefault(tuple(turn.prompt_ids), tuple(legal))
        return {}

    def after_training(self, learners: Mapping[str, Any]) -> dict[str, float]:
        """Fit each learner's delivered policy at the prompts its trained turns met (``Learner.met``); return the
        fit's figures as ``unmask/KEY/NAME`` metrics."""
        metrics = {}
        for name, learner in learners.items():
            policy = learner.trained
            items = loss_terms.unmask_items(policy.tokenizer, learner.met, policy.eos_token_ids[0],
                                            policy.max_new_tokens)
            # a pass holds at most micro_batch_size rows (a prompt's row per legal reply), as an update's micro-batch
            # does: the fit stays within the memory the preflight estimated for the update
            rows = max((len(item.reply_paths) for item in items), default=1)
            stats = loss_terms.unmask_fit(policy.model, items, steps=self.config.steps, lr=self.config.lr,
                                          pad_token_id=policy.pad_token_id, temperature=policy.temperature,
                                          prompts_per_pass=max(1, self.train.micro_batch_size // rows),
                                          token_budget=self.train.max_forward_tokens)
            metrics.update({f"unmask/{k}/{name}": v for k, v in stats.items()})
        return metrics


PLUGINS: dict[str, type[Plugin]] = {p.section: p for p in (BodyLR, CopyHeads, TurnBaseline, Validity, Average,
                                                             Magnet, Unmask)}
"""``TrainConfig`` section -> its plug-in, in the order their hooks run (the average before the magnet, which may
copy it)."""

RENAMED: dict[str, str] = {
    "body_lr_scale": "body_lr.scale", "model_copy_heads": "copy_heads.enabled", "turn_baseline": "turn_baseline.mode",
    "validity_coef": "validity.coef", "average_ema": "average.ema", "average_debias": "average.debias",
    "average_power": "average.power", "reference_ema": "magnet.ema", "reference_ema_final": "magnet.ema_final",
    "magnet_average_from": "magnet.average_from", "beta_final": "magnet.beta_final", "unmask_steps": "unmask.steps",
    "unmask_lr": "unmask.lr", "unmask_prompts": "unmask.prompts",
}
"""A former field of ``TrainConfig`` -> the plug-in field that holds it now; a config that still sets one
(a run directory's older config.yaml) is refused with this name (:func:`llm_zoo.configdoc.check_overrides`)."""


def enabled(train: Any) -> list[Plugin]:
    """Return the plug-ins ``train`` (a ``TrainConfig``) switches on, in :data:`PLUGINS`' order."""
    return [p for p in (cls(train) for cls in PLUGINS.values()) if p.on()]
