"""Token-level GRPO / RAE training of LLM policies on llm_zoo's multi-agent envs.

Reads top to bottom: the config, small pure helpers (the per-token loss, the loss normalisations,
the learning-rate schedules, the records of a step: :class:`Outcome` and :class:`Sample`), a learner
per policy, then :func:`train`, whose body is the loop: ROLLOUT -> REWARDS -> ADVANTAGES -> LOSS and
STEP -> LOG, and :func:`update`, the token-level step. Its neighbours hold the rest: advantage
estimators (:mod:`~llm_zoo.trainers.advantages`, one table), the plug-ins beyond the core loop (the
magnet, the weights' average, the validity term, the fit without the mask, per-layer rates, copy heads,
turn baselines: :mod:`~llm_zoo.trainers.plugins`, one table, each a config section such as
``--set magnet.ema=0.95``), per-env defaults (:mod:`~llm_zoo.trainers.presets`), checkpoints
(:mod:`~llm_zoo.trainers.checkpoint`), the self-play pool and schedules
(:mod:`~llm_zoo.trainers.selfplay`), and the scoring pass (:mod:`llm_zoo.scoring`).

Roles map to policies: ``policies={"player": "main"}`` (the default: every role one shared model)
or ``{"player_0": "p0", "player_1": "p1"}`` (one model and optimiser per seat). Only the completion
tokens of turns whose role is in ``learn`` and whose policy is a current learner carry loss; prompt
tokens, tool results and other agents' tokens carry none. Self-play draws opponents from a pool of
past snapshots (``pool_every``, ``pool_size``, ``p_latest``). A run may start from trained weights
(``init``: a checkpoint of ``llm-zoo sft`` or ``train``, or ``sft`` to run :mod:`~llm_zoo.trainers.sft` first).

Every random draw of a step derives from ``(seed, step)``, so a run resumed from a checkpoint
replays exactly what the uninterrupted run would have done.
"""

from __future__ import annotations

import contextlib
import copy
import dataclasses
import hashlib
import json
import random
import sys
import time
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, ClassVar

import torch

import llm_zoo
from llm_zoo.episode import Episode, write_jsonl
from llm_zoo.models import build_tokenizer_and_model, check_model_fields, model_config
from llm_zoo.policies.constraints import allowed_per_position
from llm_zoo.policies.transformers import TransformersPolicy
from llm_zoo.scoring import completion_logprobs, dedupe_rows, long_tensor
from llm_zoo.seating import Seating, scripted_name
from llm_zoo.spec import EnvSpec
from llm_zoo.trainers import advantages as adv
from llm_zoo.trainers import distributed, plugins, presets
from llm_zoo.trainers import sft as sft_stage
from llm_zoo.trainers.checkpoint import (
    Checkpoint,
    PolicyCheckpoint,
    init_checkpoint,
    latest_checkpoint,
    load_checkpoint,
    own_run_dir,
    resume_dir,
    save_checkpoint,
)
from llm_zoo.trainers.curriculum import CurriculumConfig, CurriculumState, check_options, group_spreads
from llm_zoo.trainers.evaluation import headline_evaluator
from llm_zoo.trainers.executors import EXECUTORS, make_executor
from llm_zoo.trainers.memory import micro_batches, preflight
from llm_zoo.trainers.plugins import (
    AverageConfig,
    BodyLRConfig,
    CopyHeadsConfig,
    MagnetConfig,
    TurnBaselineConfig,
    UnmaskConfig,
    ValidityConfig,
)
from llm_zoo.trainers.rollout import MemoExecutor, collect
from llm_zoo.trainers.schedules import check_schedule, lr_factor
from llm_zoo.trainers.selfplay import (
    SCHEDULES,
    active_learners,
    add_snapshot,
    meet_snapshots,
    snapshot_policy,
)

# ---------------------------------------------------------------------------------------------
# CONFIG
# ---------------------------------------------------------------------------------------------

OPTIMIZERS = ("adamw", "sgd")
"""The values of ``TrainConfig.optimizer``."""


@dataclass
class TrainConfig:
    """Everything a training run needs; every field has a default. Per-env defaults
    (:mod:`llm_zoo.trainers.presets`) apply over these before a config file and ``--set`` do. The fields
    every run uses come first; the plug-ins (:mod:`~llm_zoo.trainers.plugins`) are sections, one field each,
    set as ``SECTION.FIELD`` (docs/training.md)."""

    env: str = "kuhn_poker_v0"
    """Versioned env name."""
    env_kwargs: dict[str, Any] = field(default_factory=dict)
    """Keyword arguments of the env (e.g. ``{"num_hands": 2}``)."""
    seed: int = 0
    """Seed of everything: model init, deals, sampling, self-play draws."""
    steps: int = 200
    """Training steps (one rollout batch and one update each)."""
    episodes_per_step: int = 64
    """Episodes collected per step."""
    group_size: int = 1
    """Episodes per env seed: GRPO compares episodes that share a seed (the same deal or task)."""
    algorithm: str = "rae"
    """Advantage estimator, a name in ``advantages.ESTIMATORS``: rae, grpo, hgrpo or none (raw returns)."""
    baseline_key: str = "role"
    """What RAE baselines and GRPO groups are keyed by besides the env: ``role``, ``agent``, or ``prompt``
    (the role and the agent's first prompt in the episode: one baseline per opening state, as GRPO
    compares completions of one prompt; for Kuhn poker, per seat, card and what was seen before)."""

    model: str = "tiny"
    """tiny (built from a config for the env, offline), a local model directory, a hub name (owner/name) or a
    catalogue name such as smollm2-135m (converted once and cached; `llm-zoo models` lists them). A pretrained
    model starts from the env's preset for pretrained models (trainers/presets.py)."""
    model_hidden_size: int = 64
    """Width of the tiny model."""
    model_layers: int = 2
    """Layers of the tiny model."""
    model_tokenizer: str = "auto"
    """How the tiny model's tokenizer is drawn from the env's corpus: words (word-level; decoding joins words with
    spaces, so no tool call comes back parsable), bpe (byte-level BPE, lossless), bpe_words (BPE with merges kept
    inside words: an id has the same tokens where it is read and where it is copied), or auto (bpe_words for an env
    that declares tools, else words). Bytes for an env without a corpus."""
    model_init_std: float = 0.02
    """Std of the tiny model's weight initialisation."""
    model_zero_head: bool = False
    """Start the tiny model's output layer at zero: a uniform first policy whatever the seed."""
    dtype: str = "auto"
    """float32, bfloat16, or auto: bfloat16 for a model directory on a GPU that supports it, float32 otherwise
    (the tiny model always)."""
    gradient_checkpointing: bool = False
    """Recompute each decoder block's activations in the backward pass instead of keeping them: an update's
    activations shrink to one block's plus a hidden state per block, for about a third more compute."""
    lora_r: int = 0
    """0: every weight trains (full fine-tuning). Above 0: the model is frozen and LoRA adapters of this rank
    train on it (peft); the KL reference is the model with its adapters disabled (with a magnet, adapters of its own
    over the same base weights), and checkpoints hold only the adapters, naming the base model. Needs a model
    directory (config.model)."""
    lora_alpha: float = 16.0
    """LoRA's scale numerator: an adapter's update is scaled by lora_alpha / lora_r."""
    lora_dropout: float = 0.0
    """Dropout on the adapters' input while training."""
    lora_target_modules: list[str] = field(default_factory=list)
    """Names of the modules the adapters wrap (e.g. [q_proj, v_proj]); empty = every linear layer of the
    decoder blocks (llm_zoo.models.LORA_DEFAULT_TARGETS)."""
    lora_layers: int = 0
    """0: the adapters wrap their modules in every decoder block. N above 0: in the top N blocks only, so the
    backward stops at the lowest adapted block and the frozen blocks below it keep no activations (SmolLM2-135M,
    30 blocks, under checkpointing on 2 CPU cores: a forward and backward of 1000 tokens in 14 s with the top 15
    adapted, 22 s with all)."""
    init: str = ""
    """Start the learners from trained weights: a checkpoint directory or a run directory (its latest
    checkpoint) of `llm-zoo sft` or `train`, holding policies/NAME for every learner (a checkpoint of one
    policy of another name starts every learner, e.g. one per seat, from it); or sft: run the SFT
    stage first (fields in config.sft, written under RUN_DIR/sft) and start from it. Empty or none = fresh
    weights. --resume takes precedence (the run's checkpoint is loaded, init is not read)."""
    sft: dict[str, Any] = field(default_factory=dict)
    """Fields of the SFT stage that init=sft runs (llm_zoo.trainers.sft.SFTConfig, e.g. {episodes: 128,
    epochs: 2}; `llm-zoo sft ENV --help` lists them). The fields both configs have (model, env_kwargs,
    policies, seed, ...) are this run's unless set here; role and run_dir are the stage's own."""
    policies: dict[str, str] = field(default_factory=dict)
    """Role or agent -> policy name; roles not named get the policy "main". A name "scripted:NAME"
    seats the env's scripted player NAME there (frozen), e.g. {"user": "scripted:scripted"}."""
    learn: list[str] = field(default_factory=list)
    """Roles (or agents) whose turns are trained; empty = the env's default learning roles."""
    schedule: str = "together"
    """together (all learners every step) or freeze_rotate (one learning role at a time)."""
    rotate_every: int = 25
    """Steps each role learns for under freeze_rotate."""

    temperature: float = 1.0
    """Sampling temperature (the loss uses the same tempered distribution)."""
    top_p: float = 1.0
    """Nucleus sampling mass."""
    max_new_tokens: int = 64
    """Longest reply, in tokens."""
    constrain_to_legal: bool = False
    """Sample only the replies an observation lists in legal_actions (action masking for LLMs);
    the loss then uses the constrained distribution's log-probs."""
    generation: str = "transformers"
    """Who samples the rollouts: transformers (each learner's own model) or vllm (a VLLMPolicy: vLLM's CUDA
    build on a GPU, or its CPU build; loaded with the learner's weights, pushed in place after every update)."""
    vllm_gpu_memory_utilization: float = 0.3
    """Share of the GPU's memory the vLLM engine may take under generation=vllm; the trainer gets the rest."""

    lr: float = 1e-3
    """Peak learning rate (of the optimizer below)."""
    optimizer: str = "adamw"
    """adamw, or sgd (plain gradient steps, no momentum: a step shrinks with its gradient)."""
    lr_schedule: str = "constant"
    """constant, linear or cosine decay to lr_min_ratio * lr over the run."""
    lr_min_ratio: float = 0.1
    """Final learning rate as a fraction of lr, for the linear and cosine schedules."""
    warmup_steps: int = 0
    """Linear warm-up steps."""
    epsilon_low: float = 0.2
    """Lower clip of the importance ratio (1 - epsilon_low)."""
    epsilon_high: float = 0.2
    """Upper clip of the importance ratio (1 + epsilon_high)."""
    micro_batch_size: int = 64
    """Sequences per forward/backward; gradients accumulate over a step's micro-batches."""
    max_prompt_tokens: int = 4096
    """Longest prompt a learner runs, in tokens: an observation whose prompt is longer ends its episode as
    failed (scored as the step's worst finished return of its key: never more than finishing)."""
    max_forward_tokens: int = 16384
    """Most tokens (rows x padded length) of one forward pass: rollouts, scoring and the update's
    micro-batches are split under it, so a pass's memory is bounded whatever the batch."""
    max_rollout_tokens: int = 0
    """Most tokens of one forward pass while sampling (the rollouts' and the evaluations'), which keeps no
    activations for a backward and so may run more rows a pass than the update; 0: max_forward_tokens."""
    memory_limit_gb: float = 3.5
    """Budget of the run's estimated peak memory (trainers/memory.py), checked before the first step;
    a setting over it is refused, naming the fields to lower. 0 skips the check."""
    aggregation: str = "token"
    """token (mean over the batch's completion tokens), sequence (mean of per-sequence means),
    or constant (sum over tokens / (sequences * max_new_tokens))."""
    beta: float = 0.0
    """Weight of the KL penalty to the reference policy (0: no reference model)."""
    kl_estimator: str = "k3"
    """k3 (sampled-token estimator) or exact (summed over the vocabulary)."""
    entropy_coef: float = 0.0
    """Weight of the entropy bonus on completion tokens."""

    # plug-ins (trainers/plugins.py), each off by default and set as a section: --set magnet.ema=0.95
    magnet: MagnetConfig = field(default_factory=MagnetConfig)
    """The KL reference follows the learner (ema, ema_final), becomes its weights' average (average_from), and the KL
    weight rises to beta_final."""
    average: AverageConfig = field(default_factory=AverageConfig)
    """The trained policy is an average of the learner's weights (ema, debias, power)."""
    validity: ValidityConfig = field(default_factory=ValidityConfig)
    """A loss term for the unconstrained mass of the legal replies (coef)."""
    unmask: UnmaskConfig = field(default_factory=UnmaskConfig)
    """After the last step, fit the delivered policy to play its masked strategy without the mask (steps, lr,
    prompts)."""
    body_lr: BodyLRConfig = field(default_factory=BodyLRConfig)
    """The body of the model at a fraction of the output layer's learning rate (scale)."""
    copy_heads: CopyHeadsConfig = field(default_factory=CopyHeadsConfig)
    """Start the tiny model with an induction circuit (enabled)."""
    turn_baseline: TurnBaselineConfig = field(default_factory=TurnBaselineConfig)
    """Centre each trained turn's advantage on the step's turns with the same prompt (mode)."""
    curriculum: CurriculumConfig = field(default_factory=CurriculumConfig)
    """Reset options the step's groups play, each group's drawn where rewards are least settled (options,
    weighting): :mod:`~llm_zoo.trainers.curriculum`. Off by default (each group's env draws from its seed)."""

    pool_every: int = 0
    """Snapshot each learner into the self-play pool every this many steps (0: no pool)."""
    pool_size: int = 4
    """Most snapshots kept per policy (the oldest go first)."""
    p_latest: float = 0.5
    """Probability that an episode pits the learners against themselves rather than a snapshot."""

    run_dir: str = ""
    """Where the run writes; empty = runs/<env>-<time>."""
    eval_every: int = 20
    """Evaluate the env's headline metric every this many steps (and at the end); 0 = only at the end."""
    checkpoint_every: int = 50
    """Write a checkpoint every this many steps (and at the end); 0 = only at the end."""
    keep_checkpoints: int = 2
    """Most checkpoints kept on disk."""
    sample_every: int = 50
    """Write a few episode transcripts every this many steps (and at the end); 0 = never."""
    rollout_batch_size: int = 64
    """Envs run side by side during a rollout."""
    executor: str = "local"
    """Where rollouts step the envs: local (this process) or ray (env_workers Ray actors run the envs, their
    sandboxes and scripted players; model policies act here; the same episodes: trainers/executors.py)."""
    env_workers: int = 2
    """Ray actors under executor=ray (each takes one CPU of the Ray cluster)."""
    device: str = "auto"
    """auto (cuda if available), cpu or cuda."""
    threads: int = 0
    """torch CPU threads; 0 = torch's default."""
    progress: bool = True
    """Show a progress bar."""
    tensorboard: bool = True
    """Also write TensorBoard event files (when tensorboard is installed)."""

    RENAMED: ClassVar[dict[str, str]] = plugins.RENAMED
    """Former fields -> the plug-in fields that hold them now (a config that sets one is refused, naming it)."""

    def __post_init__(self) -> None:
        for name, plugin in plugins.PLUGINS.items():  # TrainConfig(magnet={"ema": 0.9}) as a section would be built
            if isinstance(getattr(self, name), Mapping):
                setattr(self, name, plugin.config_class(**getattr(self, name)))
        if isinstance(self.curriculum, Mapping):
            self.curriculum = CurriculumConfig(**self.curriculum)
        # first: a tiny-model setting on a pretrained model is the cause of whatever else would not fit with it
        presets.check_model_settings(self)
        choices = {"algorithm": tuple(adv.ESTIMATORS), "schedule": tuple(SCHEDULES),
                   "aggregation": tuple(AGGREGATIONS),
                   "baseline_key": ("role", "agent", "prompt"),
                   "kl_estimator": ("k3", "exact"),
                   "generation": ("transformers", "vllm"), "executor": EXECUTORS,
                   "optimizer": OPTIMIZERS}
        for name, allowed in choices.items():
            if getattr(self, name) not in allowed:
                raise ValueError(f"config.{name} must be one of {allowed}; got {getattr(self, name)!r}")
        for name in ("steps", "episodes_per_step", "group_size", "max_new_tokens", "micro_batch_size",
                     "rollout_batch_size", "rotate_every", "pool_size", "max_prompt_tokens", "max_forward_tokens",
                     "env_workers"):
            if int(getattr(self, name)) < 1:
                raise ValueError(f"config.{name} must be >= 1; got {getattr(self, name)!r}")
        if int(self.max_rollout_tokens) < 0:
            raise ValueError(f"config.max_rollout_tokens must be >= 0 (0: max_forward_tokens); got "
                             f"{self.max_rollout_tokens!r}")
        if self.episodes_per_step % self.group_size:
            raise ValueError(f"config.episodes_per_step ({self.episodes_per_step}) must be a multiple of "
                             f"config.group_size ({self.group_size})")
        if not self.memory_limit_gb >= 0.0:
            raise ValueError(f"config.memory_limit_gb must be >= 0 (0: no check); got {self.memory_limit_gb!r}")
        check_schedule(self.lr_schedule, self.lr_min_ratio)
        if not 0.0 <= self.p_latest <= 1.0:
            raise ValueError(f"config.p_latest must be in [0, 1]; got {self.p_latest!r}")
        if not 0.0 < self.vllm_gpu_memory_utilization < 1.0:
            raise ValueError(f"config.vllm_gpu_memory_utilization must be in (0, 1); "
                             f"got {self.vllm_gpu_memory_utilization!r}")
        if self.env not in llm_zoo.registered():
            raise ValueError(f"config.env must be a registered env, one of {llm_zoo.registered()}; got {self.env!r}")
        sft_stage.check_stage_fields(self.sft)
        check_model_fields(self)
        for name in plugins.PLUGINS:  # each plug-in checks its own section against the rest
            getattr(self, name).check(self)
        self.curriculum.check(self)
        if self.init == "none":  # the word a preset's comment and the docs use for fresh weights
            self.init = ""

    @property
    def model_copy_heads(self) -> bool:
        """``copy_heads.enabled``, under the name the model builder and the SFT stage's shared fields read (derived)."""
        return self.copy_heads.enabled


def make_config(env: str = "kuhn_poker_v0", overrides: Mapping[str, Any] | None = None) -> TrainConfig:
    """Build a config: dataclass defaults, then the env's preset (:mod:`~llm_zoo.trainers.presets`), then ``overrides``.

    The model is the one ``overrides`` names, else the env's default (:func:`~llm_zoo.trainers.presets.default_model`:
    the tiny model, or for user_sim_v0 a pretrained one), and the preset is the one for its kind.

    A plug-in's fields are set as ``SECTION.FIELD`` keys or as a mapping under ``SECTION``, and merge field by
    field (:func:`llm_zoo.configdoc.check_overrides`). An env that is not registered fails in ``TrainConfig``'s
    check, which lists the registered ones.
    """
    from llm_zoo.configdoc import check_overrides, nest

    model = str((overrides or {}).get("model", presets.default_model(env)))
    values = check_overrides(TrainConfig, {**presets.preset(env, model=model), "model": model},
                             source=f"the preset of {env}")  # the preset for the model's kind
    values.update(check_overrides(TrainConfig, {**(overrides or {}), "env": env}, source="the overrides"))
    return TrainConfig(**nest(TrainConfig, values))


# ---------------------------------------------------------------------------------------------
# PURE HELPERS
# ---------------------------------------------------------------------------------------------


MAX_GRAD_NORM = 1.0
"""Gradient clipping by global norm (every measured run used 1.0)."""


@dataclass(frozen=True)
class Outcome:
    """One trained agent's return in one episode of the step: what the advantage estimators read."""

    episode: int
    """Index of the episode in the step's batch."""
    agent: str
    reward: float
    """The agent's return (a failed episode's: :func:`score_failures`)."""
    key: str
    """The baseline key (``config.baseline_key``, under the env's name)."""
    group: str
    """The group key: the episodes that share an env seed (GRPO's group), per baseline key."""


@dataclass(frozen=True)
class Sample:
    """One trained turn: its tokens, sampling log-probs, advantage and (when constrained) allowed tokens."""

    prompt_ids: list[int]
    completion_ids: list[int]
    logprobs: list[float]
    advantage: float
    allowed: list[list[int]] | None = None
    valid_paths: tuple[tuple[int, ...], ...] | None = None
    """The legal replies' token paths, each ending in end of turn, for the validity plug-in (``validity.coef``)."""


def per_token_policy_loss(
    per_token_logps: torch.Tensor,  # [batch, T] under the current policy (with grad)
    old_per_token_logps: torch.Tensor,  # [batch, T] at sampling time
    advantages: torch.Tensor,  # [batch]
    completion_mask: torch.Tensor,  # [batch, T] 1 on tokens that carry loss
    *,
    epsilon_low: float,
    epsilon_high: float,
    ref_per_token_logps: torch.Tensor | None = None,
    beta: float = 0.0,
    per_token_kl: torch.Tensor | None = None,
    per_token_entropy: torch.Tensor | None = None,
    entropy_coef: float = 0.0,
) -> tuple[torch.Tensor, dict[str, torch.Tensor]]:
    """Return the clipped importance-ratio loss per token ([batch, T], zero off the mask) and stats.

    ``loss_t = -min(r_t A, clip(r_t, 1 - eps_low, 1 + eps_high) A) + beta * KL_t - entropy_coef * H_t``
    with ``r_t = exp(logp_t - old_logp_t)`` and ``KL_t`` the k3 estimator
    ``exp(ref_t - logp_t) - (ref_t - logp_t) - 1`` (Schulman, 2020), or ``per_token_kl`` when given
    (e.g. :func:`exact_kl`). Tokens off the mask are multiplied out, so neither their values nor
    their gradients reach the loss.
    """
    mask = completion_mask.to(per_token_logps.dtype)
    log_ratio = (per_token_logps - old_per_token_logps) * mask
    ratio = torch.exp(log_ratio)
    a = advantages[:, None]
    unclipped = ratio * a
    clipped = torch.clamp(ratio, 1.0 - epsilon_low, 1.0 + epsilon_high) * a
    per_token_loss = -torch.min(unclipped, clipped)
    stats = {"clip_fraction": ((clipped != unclipped).to(mask.dtype) * mask).sum() / mask.sum().clamp(min=1)}
    if per_token_kl is None and ref_per_token_logps is not None and beta:
        delta = (ref_per_token_logps - per_token_logps) * mask
        per_token_kl = torch.exp(delta) - delta - 1.0
    if per_token_kl is not None and beta:
        per_token_loss = per_token_loss + beta * per_token_kl
        stats["kl"] = (per_token_kl * mask).sum() / mask.sum().clamp(min=1)
    if per_token_entropy is not None:
        if entropy_coef:
            per_token_loss = per_token_loss - entropy_coef * per_token_entropy
        stats["entropy"] = (per_token_entropy * mask).sum() / mask.sum().clamp(min=1)
    return per_token_loss * mask, stats


def distinct_rows(batch: Sequence[Sample], device: torch.device) -> tuple[list[Sample], torch.Tensor]:
    """Return one sample per distinct (prompt, completion, allowed) row, and each sample's row among them ([batch]).

    The update scores the distinct rows and reads every sample's per-token values off its row: a row's
    log-probs, entropy and KL depend on its tokens alone, so this is the per-sample loss, to float rounding in
    the gradient's sums, and the passes, the log-softmax and the exact KL run over the distinct rows. The Kuhn
    main job's 1024 hands give each seat about 12 distinct rows a step (docs/kuhn_selfplay.md, section 14).
    """
    _, row_of = dedupe_rows([[b.prompt_ids for b in batch], [b.completion_ids for b in batch],
                             [b.allowed for b in batch]], _row_key)
    first: dict[int, Sample] = {}
    for b, row in zip(batch, row_of):
        first.setdefault(row, b)
    return list(first.values()), long_tensor(row_of, device)


def _row_key(row: tuple[Sequence[int], Sequence[int], Sequence[Sequence[int]] | None]) -> tuple:
    """A (prompt, completion, allowed) row's value, as :func:`distinct_rows` compares rows."""
    prompt, completion, allowed = row
    return tuple(prompt), tuple(completion), None if allowed is None else tuple(map(tuple, allowed))


def exact_kl(all_logps: torch.Tensor, ref_all_logps: torch.Tensor) -> torch.Tensor:
    """Return ``KL(p || q)`` per position from full log-prob rows [batch, T, vocab] (-inf = excluded)."""
    finite = torch.isfinite(all_logps) & torch.isfinite(ref_all_logps)
    # zero the excluded entries before the arithmetic: -inf there would make NaN gradients through where()
    p_log = torch.where(finite, all_logps, 0.0)
    q_log = torch.where(finite, ref_all_logps, 0.0)
    return torch.where(finite, p_log.exp() * (p_log - q_log), 0.0).sum(dim=-1)


def _token_sum(per_token_loss: torch.Tensor, completion_mask: torch.Tensor) -> torch.Tensor:
    """Sum over every completion token."""
    return per_token_loss.sum()


def _sequence_means(per_token_loss: torch.Tensor, completion_mask: torch.Tensor) -> torch.Tensor:
    """Sum over sequences of each sequence's mean over its tokens."""
    return (per_token_loss.sum(dim=1) / completion_mask.sum(dim=1).clamp(min=1)).sum()


@dataclass(frozen=True)
class Aggregation:
    """A loss normalisation: how a micro-batch's tokens are summed, and what the step's sum is divided by."""

    reduce: Callable[[torch.Tensor, torch.Tensor], torch.Tensor]
    """(per-token loss, completion mask) -> the micro-batch's sum."""
    normalizer: Callable[[Sequence[Sample], int], float]
    """(the step's samples, max_new_tokens) -> the divisor, the same for every micro-batch of the step."""


AGGREGATIONS: dict[str, Aggregation] = {
    # mean over the step's completion tokens (DAPO's token-level loss)
    "token": Aggregation(_token_sum, lambda batch, _: sum(len(b.completion_ids) for b in batch)),
    # mean of per-sequence means (GRPO as first published)
    "sequence": Aggregation(_sequence_means, lambda batch, _: len(batch)),
    # sum over tokens / (sequences * max_new_tokens) (Dr. GRPO: no length bias)
    "constant": Aggregation(_token_sum, lambda batch, longest: len(batch) * longest),
}
"""``config.aggregation`` -> its normalisation."""


def aggregate(per_token_loss: torch.Tensor, completion_mask: torch.Tensor, aggregation: str,
              normalizer: float) -> torch.Tensor:
    """Reduce a micro-batch's per-token loss to its share of the step's loss (``AGGREGATIONS[aggregation]``).

    Summing the shares of all micro-batches, each divided by the step's ``normalizer``, gives the step's loss.
    """
    return AGGREGATIONS[aggregation].reduce(per_token_loss, completion_mask) / normalizer


def learning_rate_factor(step: int, config: TrainConfig) -> float:
    """Return the multiplier of ``lr`` at ``step``: linear warm-up, then the configured decay."""
    return lr_factor(step, config.steps, config.warmup_steps, config.lr_schedule, config.lr_min_ratio)


def step_rng(seed: int, step: int, purpose: str) -> random.Random:
    """Return an RNG determined by (seed, step, purpose): no state to carry across a resume."""
    return random.Random(f"{seed}/{step}/{purpose}")


def score_failures(finished: Sequence[Outcome], failed: Sequence[Outcome]) -> list[Outcome]:
    """Return the outcomes of failed episodes, each scored as the worst finished return of its baseline key.

    An episode fails when its env raised (``collect`` keeps it, marked ``failed``). Dropping it
    would let a policy that makes its env raise escape a low reward; scoring it as the step's
    worst finished return of the same key means a failure never pays more than any finished
    episode. A failed outcome whose key has no finished peer this step is dropped (a failure of
    the whole batch, such as a sandbox that cannot start, says nothing about the policy).
    """
    worst: dict[str, float] = {}
    for o in finished:
        worst[o.key] = min(o.reward, worst.get(o.key, o.reward))
    return [dataclasses.replace(o, reward=worst[o.key]) for o in failed if o.key in worst]


def _opening(episode: Episode, agent: str) -> str:
    """Return a short digest of the agent's first prompt in an episode (its token ids, else its messages)."""
    first = next((t for t in episode.turns if t.agent == agent), None)
    if first is None:
        return "none"
    seen = first.prompt_ids if first.prompt_ids else first.observation.get("messages", first.observation)
    return hashlib.blake2b(json.dumps(seen, default=str).encode(), digest_size=8).hexdigest()


# ---------------------------------------------------------------------------------------------
# LEARNERS
# ---------------------------------------------------------------------------------------------


@dataclass
class Learner:
    """One trainable policy: its sampling policy (sharing the model), optimiser, reference and average."""

    name: str
    policy: TransformersPolicy
    optimizer: torch.optim.Optimizer
    reference: torch.nn.Module | None = None
    pool: list[tuple[int, dict[str, torch.Tensor]]] = field(default_factory=list)
    average: TransformersPolicy | None = None
    """The EMA of the learner's weights (``config.average_ema``), or None."""
    met: dict[tuple[int, ...], tuple[str, ...]] = field(default_factory=dict)
    """The distinct prompts with legal replies its trained turns met, in the order met (``config.unmask_steps``)."""
    adapters: bool = False
    """LoRA (``config.lora_r``): only the adapters train, and the KL reference is the model with them disabled."""

    @property
    def model(self) -> torch.nn.Module:
        return self.policy.model

    @property
    def trained(self) -> TransformersPolicy:
        """The policy this learner delivers: its weights' average when kept, else the learner itself."""
        return self.average if self.average is not None else self.policy


def make_learner(name: str, config: TrainConfig, device: torch.device, index: int,
                 spec: EnvSpec | None = None, init: Path | None = None) -> Learner:
    """Build a learner: model, sampling policy, optimiser (``config.optimizer``), a frozen reference when ``beta > 0``
    (with LoRA none, :func:`reference_logprobs` disabling the adapters instead, unless a magnet moves it: then a copy
    of the adapters over the learner's base weights, :func:`adapter_copy`), and what
    the plug-ins keep on it (``setup``: the weights' average).

    ``init``: a policy directory to load the weights and tokenizer from (``config.init``); the
    reference and the weights' average then start from those weights too.
    """
    source = config if init is None else dataclasses.replace(config, model=str(init))
    tokenizer, model = build_tokenizer_and_model(source, seed=config.seed + index, spec=spec)
    policy = TransformersPolicy(model, tokenizer, name=name, temperature=config.temperature, top_p=config.top_p,
                                max_new_tokens=config.max_new_tokens, device=device,
                                constrain=config.constrain_to_legal, max_prompt_tokens=config.max_prompt_tokens,
                                max_forward_tokens=config.max_rollout_tokens or config.max_forward_tokens)
    groups = param_groups(policy.model, config)
    optimizer = (torch.optim.SGD(groups, lr=config.lr) if config.optimizer == "sgd"
                 else torch.optim.AdamW(groups, lr=config.lr, weight_decay=0.0))
    reference = None
    if config.beta and not config.lora_r:  # with LoRA the reference is the same model, its adapters disabled
        reference = copy.deepcopy(policy.model).eval().requires_grad_(False)
    elif config.lora_r and plugins.moving_reference(config):
        reference = adapter_copy(policy.model)
    learner = Learner(name, policy, optimizer, reference, adapters=bool(config.lora_r))
    for plugin in plugins.enabled(config):
        plugin.setup(learner)
    return learner


def adapter_copy(model: torch.nn.Module) -> torch.nn.Module:
    """Return a frozen copy of a peft ``model`` whose adapters are its own and whose other weights are ``model``'s.

    A magnet with LoRA (``plugins.moving_reference``): the reference follows the learner's adapters while the base
    weights, which neither trains, are held once; the copy costs the adapters' memory, not the model's."""
    trained = {name for name, p in model.named_parameters() if p.requires_grad}
    source = dict(model.named_parameters())
    base = {name: p.data for name, p in source.items() if name not in trained}
    for name, p in source.items():  # the copy below must not duplicate the base weights, even for a moment
        if name in base:
            p.data = torch.empty(0, dtype=p.dtype, device=p.device)
    try:
        reference = copy.deepcopy(model)
    finally:
        for name, data in base.items():
            source[name].data = data
    for name, p in reference.named_parameters():
        if name in base:
            p.data = base[name]
    return reference.eval().requires_grad_(False)


def policy_checkpoint(learner: Learner) -> PolicyCheckpoint:
    """Return the learner as its checkpoint records it: the policy it delivers, and what resuming needs besides."""
    return PolicyCheckpoint(learner.trained.model, learner.policy.tokenizer, learner.optimizer,
                            learner=learner.model if learner.average is not None else None,
                            reference=learner.reference, pool=learner.pool, met=learner.met)


def resume_learners(path: Path, learners: Mapping[str, Learner]) -> Checkpoint:
    """Load a checkpoint into the learners (weights and optimisers in place, pool and met set); return it (its step,
    RAE baselines and curriculum are the run's state)."""
    loaded = load_checkpoint(path, {name: policy_checkpoint(learner) for name, learner in learners.items()})
    for name, part in loaded.policies.items():
        learners[name].pool, learners[name].met = part.pool, part.met
    return loaded


def param_groups(model: torch.nn.Module, config: TrainConfig) -> list[dict[str, Any]]:
    """The optimiser's parameter groups: one at ``lr`` (``lr_scale`` 1, which the trainer's schedule multiplies in),
    unless a plug-in splits them (``body_lr.scale``)."""
    params = [p for p in model.parameters() if p.requires_grad]  # LoRA: the adapters alone
    for plugin in plugins.enabled(config):
        if (groups := plugin.param_groups(model, params)) is not None:
            return groups
    return [{"params": params, "lr_scale": 1.0}]


def reference_logprobs(learner: Learner, prompts: Sequence[Sequence[int]], completions: Sequence[Sequence[int]],
                       **kwargs: Any) -> tuple:
    """Score completions under the KL reference (:func:`~llm_zoo.scoring.completion_logprobs`'s outputs): its own
    frozen model (with LoRA and a magnet, adapters of its own over the learner's base weights), or with LoRA the
    learner's model with its adapters disabled (the base, no second copy)."""
    if learner.reference is not None:
        return completion_logprobs(learner.reference, prompts, completions, **kwargs)
    with learner.model.disable_adapter():
        return completion_logprobs(learner.model, prompts, completions, **kwargs)


def make_vllm_generator(learner: Learner, path: Path, config: TrainConfig):
    """Return a VLLMPolicy that samples for ``learner``: its current weights, saved to ``path`` for vLLM to load.

    With LoRA (``lora_r``) ``path`` gets the base model and the engine takes the adapters through vLLM's LoRA,
    pushed now and after each update (:mod:`llm_zoo.policies.vllm`, LoRA adapters)."""
    from llm_zoo.policies.vllm import VLLMPolicy, adapter_rank, save_lora_base

    lora = learner.adapters  # the learner records LoRA; its model is then a peft model
    if lora:
        save_lora_base(learner.model, path)
    else:
        learner.model.save_pretrained(path)
    learner.policy.tokenizer.save_pretrained(path)
    policy = VLLMPolicy(path, name=learner.name, temperature=config.temperature, top_p=config.top_p,
                        max_new_tokens=config.max_new_tokens, seed=config.seed, constrain=config.constrain_to_legal,
                        max_prompt_tokens=config.max_prompt_tokens, gpu_memory_utilization=config.vllm_gpu_memory_utilization,
                        dtype=str(learner.model.dtype).removeprefix("torch."), lora_rank=adapter_rank(learner.model) if lora else None)
    if lora:  # adapters from a warm start or a resumed run are live from the first rollout
        policy.sync_from(learner.model)
    return policy


# ---------------------------------------------------------------------------------------------
# THE LOOP
# ---------------------------------------------------------------------------------------------


def train(config: TrainConfig, *, resume: bool = False, overwrite: bool = False) -> dict[str, Any]:
    """Train the policies of ``config``; return the final evaluation (also written to eval.json).

    With ``resume`` the run continues from the latest checkpoint of ``config.run_dir``, or, when
    that is empty, of the newest run of the env under ``runs/``; ``FileNotFoundError`` when there
    is none (:func:`~llm_zoo.trainers.checkpoint.resume_dir`). A fresh run into a directory that
    holds a run is refused unless ``overwrite`` (which removes that run's files), and two runs never
    write one directory (:func:`~llm_zoo.trainers.checkpoint.own_run_dir`). Under ``torchrun`` each
    rank calls it and the run is data-parallel (:mod:`~llm_zoo.trainers.distributed`).
    """
    if config.threads:
        torch.set_num_threads(config.threads)
    joined = distributed.setup(config.device)  # under torchrun: one rank of a data-parallel run
    try:
        if resume:
            run_dir = resume_dir(config.env, config.run_dir)
        else:
            run_dir = Path(config.run_dir or f"runs/{config.env}-{time.strftime('%Y%m%d-%H%M%S')}")
        run_dir = distributed.broadcast(run_dir)
        # rank 0 holds the run directory (its lock) until the run ends, however it ends
        with (own_run_dir(run_dir, resume=resume, overwrite=overwrite) if distributed.is_main()
              else contextlib.nullcontext()):
            return _train(config, resume, distributed.device(config.device), run_dir)
    finally:
        distributed.teardown(joined)


def _train(config: TrainConfig, resume: bool, device: torch.device, run_dir: Path) -> dict[str, Any]:
    from llm_zoo.trainers.logging import MetricsLogger

    # SETUP: who plays which agent, the learners (fresh, warm-started or resumed), who samples for them
    main = distributed.is_main()  # rank 0 writes the run directory, logs and shows progress
    spec = llm_zoo.env_spec(config.env)
    probe = llm_zoo.make_env(config.env, **config.env_kwargs).unwrapped
    agents = list(probe.possible_agents)
    roles = {a: probe.role_of(a) for a in agents}
    learn = set(config.learn or spec.learning_roles)
    # a role that does not learn gets the env's frozen player, never the learner (refused when it has none)
    config = dataclasses.replace(config, policies=spec.seat_frozen_roles(config.policies, roles, learn))
    seating = Seating.parse(config.policies)
    policy_of = seating.assign(roles)
    if main:
        (run_dir / "config.json").write_text(json.dumps(dataclasses.asdict(config), indent=2))
        _write_yaml(run_dir / "config.yaml", dataclasses.asdict(config))

    players = spec.scripted
    seating.check_scripted(roles, players, env=config.env)
    scripted = {n for n in policy_of.values() if scripted_name(n) is not None}
    names = sorted(set(policy_of.values()) - scripted)
    init = {}
    if config.init == "sft" and not resume:  # a resumed run loads its own checkpoint instead
        if names:  # refuse a setting that cannot fit before the SFT stage runs
            preflight(config, model_config(config, spec), learners=len(names))
        # rank 0 alone fits (one fit, one writer of run_dir/sft); the other ranks wait for its checkpoint
        init = distributed.broadcast(sft_stage.warm_start(config, run_dir, policy_of, names, roles) if main else {})
    elif config.init and not resume:
        init = init_checkpoint(config.init, names)
    learners = {name: make_learner(name, config, device, i, spec, init.get(name)) for i, name in enumerate(names)}
    if learners:  # a setting that cannot fit is refused here, before the first step
        preflight(config, next(iter(learners.values())).model.config, learners=len(learners))
    rae_state, curriculum, start = adv.RAEState(), CurriculumState(), 0
    if resume and (ckpt := latest_checkpoint(run_dir)) is not None:
        loaded = resume_learners(ckpt, learners)
        start, rae_state, curriculum = loaded.step, loaded.rae, loaded.curriculum
    # Who samples each learner's turns: the learner's own policy, or a vLLM engine fed its weights.
    acting = {name: learner.policy for name, learner in learners.items()}
    if config.generation == "vllm":  # VLLMPolicy says what is missing (vLLM, or a GPU for its CUDA build)
        acting = {name: make_vllm_generator(learner, run_dir / "vllm" / distributed.rank_name(name), config)
                  for name, learner in learners.items()}
    acting.update({n: players[scripted_name(n)](seed=config.seed) for n in scripted})
    seated = {a: learners[n].trained if n in learners else acting[n] for a, n in policy_of.items()}
    logger = (MetricsLogger(run_dir, resume_from=start, tensorboard=config.tensorboard) if main
              else distributed.NullLogger())
    evaluate = headline_evaluator(spec)
    check_options(config.env, config.curriculum, config.env_kwargs)  # an option the env refuses, before any step
    snapshots: dict[tuple[str, int], TransformersPolicy] = {}
    pool_of = {a: (learners[policy_of[a]].pool if policy_of[a] in learners else []) for a in agents}.__getitem__

    def snapshot(agent: str, snap_step: int, state: Mapping[str, torch.Tensor]) -> TransformersPolicy:
        return snapshot_policy(learners[policy_of[agent]].policy, snap_step, state, snapshots)

    hooks = plugins.enabled(config)
    totals = {"episodes": start * config.episodes_per_step}
    bar = _progress(config, start) if main else None
    # in this process the envs that name their draw replay a memo of their states (rollout.MemoEnvs)
    executor = make_executor(config.executor, config.env_workers) or MemoExecutor()
    final_eval: dict[str, Any] = {}

    for step in range(start, config.steps):
        t0 = time.perf_counter()
        sandbox_before = _sandbox_runs()
        active = active_learners(step, config.schedule, config.rotate_every, learn, roles, policy_of) - scripted
        _set_learning_rates(learners.values(), step, config)

        # ROLLOUT: groups of episodes share an env seed; some episodes meet pool snapshots
        rng = step_rng(config.seed, step, "rollout")
        n_groups = config.episodes_per_step // config.group_size
        seeds = [s for s in (rng.randrange(2**31) for _ in range(n_groups)) for _ in range(config.group_size)]
        options = None  # a curriculum draws each group's reset options from its own generator: the seeds stay
        if config.curriculum.options:
            drawn = curriculum.draw(config.curriculum, n_groups, step_rng(config.seed, step, "curriculum"))
            options = [o for o in drawn for _ in range(config.group_size)]
        assignments, trained_agents = [], []
        every_seat = {a: acting[policy_of[a]] for a in agents}
        trained = {a for a in agents if (roles[a] in learn or a in learn) and policy_of[a] in active}
        for _ in seeds:  # without a pool every episode shares one mapping and one set (read-only)
            mapping, trainable = every_seat, trained
            if config.pool_every:  # a snapshot may take a seat: the episode's own mapping
                mapping = dict(every_seat)
                trainable = meet_snapshots(mapping, set(trained), rng, config.p_latest, pool_of, snapshot)
            assignments.append(mapping)
            trained_agents.append(trainable)
        mine = distributed.episode_slice(len(seeds), config.group_size)  # every episode in one process
        episodes = distributed.gather(collect(config.env, assignments[mine], seeds[mine],
                                              options=None if options is None else options[mine],
                                              batch_size=config.rollout_batch_size, env_kwargs=config.env_kwargs,
                                              seed=distributed.rollout_seed(rng.randrange(2**31)), executor=executor))
        t_rollout = time.perf_counter() - t0
        # the KV each sampler kept between turns (its own weights', pool snapshots' too): freed before the update
        for policy in {id(p): p for mapping in assignments for p in mapping.values()}.values():
            getattr(policy, "forget_turns", lambda: None)()

        # REWARDS: one outcome per (episode, trained agent): its return, spread over its turns' tokens
        outcomes = _outcomes(episodes, trained_agents, roles, config)

        spreads = (group_spreads([o.reward for o in outcomes], [o.group for o in outcomes],
                                 [o.episode for o in outcomes], config.group_size, n_groups)
                   if config.group_size > 1 else [])
        if options is not None and spreads:  # groups of one (weighting uniform) measure no spread
            curriculum.observe(config.curriculum, drawn, spreads)

        # ADVANTAGES, by the estimator config.algorithm names
        advantages = adv.ESTIMATORS[config.algorithm]([o.reward for o in outcomes], [o.key for o in outcomes],
                                                      [o.group for o in outcomes], rae_state)

        # LOSS and STEP, per learner, over the completion tokens of its trained turns
        t1 = time.perf_counter()
        batches = _samples(outcomes, advantages, episodes, learners, policy_of, hooks)
        metrics: dict[str, float] = {}
        for name, batch in batches.items():
            if batch:
                stats = update(learners[name], batch, config, step=step, hooks=hooks)
                metrics.update({f"losses/{k}/{name}": v for k, v in stats.items()})
                if acting[name] is not learners[name].policy:  # the next rollout samples the new weights
                    acting[name].sync_from(learners[name].model)
        t_update = time.perf_counter() - t1
        done = step + 1
        if done == config.steps:  # plug-ins that act once the training is over (unmask: the fit without the mask)
            for plugin in hooks:
                metrics.update(plugin.after_training(learners))

        # SNAPSHOTS for self-play
        if config.pool_every and done % config.pool_every == 0:
            for name in active:
                add_snapshot(learners[name].pool, done, learners[name].model, config.pool_size)

        # LOG, EVALUATE, CHECKPOINT
        totals["episodes"] += len(episodes)
        metrics.update(_rollout_metrics(episodes, roles, config))
        if any(s is not None for s in spreads):  # groups whose rewards differ: the ones GRPO learns from
            measured = [s for s in spreads if s is not None]
            metrics["charts/split_groups"] = sum(s > 0.0 for s in measured) / len(measured)
        if options is not None:
            metrics.update(curriculum.metrics(config.curriculum))
        metrics.update({"charts/episodes": totals["episodes"], "charts/lr": config.lr * learning_rate_factor(step, config),
                        "perf/rollout_s": t_rollout, "perf/update_s": t_update,
                        "perf/step_s": time.perf_counter() - t0, "perf/sandbox_runs": _sandbox_runs() - sandbox_before})
        if main and evaluate and ((config.eval_every and done % config.eval_every == 0) or done == config.steps):
            final_eval = evaluate(seated, env_kwargs=config.env_kwargs)
            metrics.update({f"eval/{k}": v for k, v in final_eval.items() if isinstance(v, (int, float))})
            if any(learner.average is not None for learner in learners.values()):  # the last iterate, beside
                last = evaluate({a: learners[n].policy if n in learners else acting[n] for a, n in policy_of.items()},
                                env_kwargs=config.env_kwargs)
                metrics.update({f"eval/learner/{k}": v for k, v in last.items() if isinstance(v, (int, float))})
        logger.log(done, metrics)
        if main and config.sample_every and (done % config.sample_every == 0 or done == config.steps):
            _write_samples(run_dir / "samples" / f"step_{done:06d}.jsonl", episodes[:4])
        if (config.checkpoint_every and done % config.checkpoint_every == 0) or done == config.steps:
            if main:
                parts = {n: policy_checkpoint(learner) for n, learner in learners.items()}
                save_checkpoint(run_dir, Checkpoint(done, parts, rae_state, curriculum), config.keep_checkpoints)
            distributed.barrier()  # no rank runs ahead of a checkpoint it might resume from
        if bar is not None:
            bar.update(1)
            bar.set_postfix(_postfix(metrics, roles), refresh=False)

    if bar is not None:
        bar.close()
    if executor is not None:
        executor.close()
    logger.close()
    if main and not final_eval and evaluate:
        final_eval = evaluate(seated, env_kwargs=config.env_kwargs)
    if main:
        (run_dir / "eval.json").write_text(json.dumps(final_eval, indent=2, default=str))
    return distributed.broadcast(final_eval)


def _set_learning_rates(learners: Iterable[Learner], step: int, config: TrainConfig) -> None:
    """Set each parameter group's rate for ``step``: ``lr`` on the schedule, times the group's ``lr_scale``."""
    for learner in learners:
        for group in learner.optimizer.param_groups:
            group["lr"] = config.lr * learning_rate_factor(step, config) * group.get("lr_scale", 1.0)


def _outcomes(episodes: Sequence[Episode], trained_agents: Sequence[set[str]], roles: Mapping[str, str],
              config: TrainConfig) -> list[Outcome]:
    """Return one :class:`Outcome` per (episode, trained agent), in episode order, failed episodes' last and scored
    by :func:`score_failures`."""
    finished, failed = [], []
    in_order: dict[int, list[str]] = {}  # a set shared by many episodes (the step's trained agents) sorted once
    who_of = {a: a if config.baseline_key == "agent" else role for a, role in roles.items()}  # every agent's
    key_of = {a: f"{config.env}/{who}" for a, who in who_of.items()}
    for i, (episode, trainable) in enumerate(zip(episodes, trained_agents)):
        agents = in_order.get(id(trainable))  # trained_agents holds every set: an id is its set's own
        if agents is None:
            agents = in_order[id(trainable)] = sorted(trainable)
        for agent in agents:
            who, key = who_of[agent], key_of[agent]
            if config.baseline_key == "prompt":
                who = f"{who}/{_opening(episode, agent)}"
                key = f"{config.env}/{who}"
            group = episode.infos.get(agent, {}).get("group", episode.seed)
            (failed if episode.failed else finished).append(
                Outcome(i, agent, episode.returns.get(agent, 0.0), key, f"{group}/{who}"))
    return finished + score_failures(finished, failed)


def _samples(outcomes: Sequence[Outcome], advantages: Sequence[float], episodes: Sequence[Episode],
             learners: Mapping[str, Learner], policy_of: Mapping[str, str],
             hooks: Sequence[plugins.Plugin]) -> dict[str, list[Sample]]:
    """Return each learner's :class:`Sample` per trained turn: the turn's tokens and its outcome's advantage (the
    plug-ins see each distinct turn, and then each learner's batch).

    A step's turns repeat a few states (the rollout memo shows every episode that reaches a state the same
    observation object): the turns of one learner, state and reply share one row, its prompt, reply, allowed
    tokens and the plug-ins' fields, built once, so the update finds its distinct rows by identity
    (:func:`distinct_rows`). Samples read their lists and do not change them.
    """
    batches: dict[str, list[Sample]] = {n: [] for n in learners}
    allowed_of: dict[tuple[int, tuple[int, ...]], tuple[Any, list[list[int]]]] = {}  # a step repeats a few
    rows: dict[tuple[str, int, tuple[int, ...]], _Row] = {}  # (learner, id of the observation, reply) -> its row
    for outcome, a in zip(outcomes, advantages):
        name = policy_of[outcome.agent]
        learner, batch = learners[name], batches[name]
        for turn in episodes[outcome.episode].turns:
            if turn.agent != outcome.agent or not turn.completion_ids or turn.policy != name:
                continue
            key = (name, id(turn.observation), tuple(turn.completion_ids))
            row = rows.get(key)  # the row holds its observation, so no other object takes its id meanwhile
            if row is None or row.prompt_ids != turn.prompt_ids:
                row = rows[key] = _row(learner, turn, hooks, allowed_of)
            batch.append(Sample(row.prompt_ids, row.completion_ids, turn.logprobs, a, row.allowed, **row.extra))
    for plugin in hooks:
        batches = {name: plugin.advantages(batch) for name, batch in batches.items()}
    return batches


@dataclass(frozen=True)
class _Row:
    """What the samples of one learner's turns at one state with one reply share (:func:`_samples`)."""

    observation: Any
    prompt_ids: list[int]
    completion_ids: list[int]
    allowed: list[list[int]] | None
    extra: dict[str, Any]
    """The plug-ins' fields of its samples."""


def _row(learner: Learner, turn: Any, hooks: Sequence[plugins.Plugin],
         allowed_of: dict[tuple[int, tuple[int, ...]], tuple[Any, list[list[int]]]]) -> _Row:
    """Build a turn's :class:`_Row`: its allowed tokens under the legal paths (one list per distinct paths and reply)
    and the plug-ins' fields (``see_turn``)."""
    paths = learner.policy.legal_paths(turn.observation) if learner.policy.constrain else None
    allowed = None
    if paths:  # the memoised paths object, kept alive by the entry: found by identity
        seen = allowed_of.get(key := (id(paths), tuple(turn.completion_ids)))
        if seen is None or seen[0] is not paths:
            seen = allowed_of[key] = (paths, allowed_per_position(paths, turn.completion_ids))
        allowed = seen[1]
    extra: dict[str, Any] = {}
    for plugin in hooks:
        extra.update(plugin.see_turn(learner, turn))
    return _Row(turn.observation, turn.prompt_ids, turn.completion_ids, allowed, extra)


# ---------------------------------------------------------------------------------------------
# THE UPDATE
# ---------------------------------------------------------------------------------------------


def update(learner: Learner, batch: Sequence[Sample], config: TrainConfig, step: int = 0,
           hooks: Sequence[plugins.Plugin] | None = None) -> dict[str, float]:
    """Take one optimiser step on a learner's batch, accumulating gradients over micro-batches; return its stats.

    ``step`` (0-based) is the run's step, which plug-ins read (the magnet's schedule, the weights' average);
    ``hooks`` are the run's plug-ins (:func:`~llm_zoo.trainers.plugins.enabled` of ``config`` when not given).
    """
    hooks = plugins.enabled(config) if hooks is None else hooks
    model = learner.model
    device = learner.policy.device
    pad = learner.policy.pad_token_id
    n_tokens = sum(len(b.completion_ids) for b in batch)
    aggregation = AGGREGATIONS[config.aggregation]
    normalizer = aggregation.normalizer(batch, config.max_new_tokens)  # of the whole batch, on every rank
    whole = batch  # the plug-ins' terms read the whole batch, before the skip and the ranks' split
    beta = config.beta
    for plugin in hooks:
        beta = plugin.kl_weight(step, beta)
    has_reference = learner.reference is not None or (learner.adapters and bool(config.beta))
    # SKIP the forward and backward of samples whose advantage is 0 (a group whose rewards are all equal): their
    # clipped term is 0 with 0 gradient, so only the KL and entropy terms could move them; the step is the same
    skipped, n_kept = 0, n_tokens
    if not ((has_reference and beta) or config.entropy_coef):
        kept = [b for b in batch if b.advantage != 0.0]
        skipped, batch = len(batch) - len(kept), kept
        n_kept = sum(len(b.completion_ids) for b in batch)
    n_trained = sum(len(b.prompt_ids) + len(b.completion_ids) for b in batch)  # MFU's useful tokens (passes may run fewer: shared prefixes)
    batch = distributed.shard(batch)  # this rank's share (all of it in one process)
    exact = has_reference and config.kl_estimator == "exact"
    temperature = config.temperature or 1.0
    stats_sum: dict[str, float] = {}
    model.train()
    learner.optimizer.zero_grad(set_to_none=True)
    total_loss = 0.0
    for mb in micro_batches(batch, config.micro_batch_size, config.max_forward_tokens):
        # SCORE each distinct (prompt, completion, allowed) row once, under the current weights (with grad), then
        # under the reference; every sample's row is then read off its distinct row's (distinct_rows)
        distinct, rows = distinct_rows(mb, device)
        prompts, completions = [b.prompt_ids for b in distinct], [b.completion_ids for b in distinct]
        allowed = [b.allowed for b in distinct]
        mb_logps, mb_mask, mb_entropy, *mb_all = completion_logprobs(
            model, prompts, completions, pad_token_id=pad, temperature=temperature, with_entropy=True,
            allowed=allowed, with_all_logps=exact)
        width = mb_logps.shape[1]
        old = torch.tensor([x for b in mb for x in (b.logprobs if len(b.logprobs) == width
                                                     else b.logprobs + [0.0] * (width - len(b.logprobs)))],
                           device=device).view(len(mb), width)  # one flat list: torch reads it at a third the cost
        mb_adv = torch.tensor([b.advantage for b in mb], device=device, dtype=mb_logps.dtype)
        ref = kl = None
        if has_reference:
            with torch.no_grad():
                ref, _, *ref_all = reference_logprobs(learner, prompts, completions, pad_token_id=pad,
                                                      temperature=temperature, allowed=allowed,
                                                      with_all_logps=exact, token_budget=config.max_forward_tokens)
            if exact:
                kl = exact_kl(mb_all[0], ref_all[0])[rows]
            ref = ref[rows]
        mb_logps, mb_mask, mb_entropy = mb_logps[rows], mb_mask[rows], mb_entropy[rows]
        # LOSS of the micro-batch, its share of the step's
        per_token_loss, stats = per_token_policy_loss(
            mb_logps, old, mb_adv, mb_mask, epsilon_low=config.epsilon_low, epsilon_high=config.epsilon_high,
            ref_per_token_logps=ref, beta=beta, per_token_kl=kl, per_token_entropy=mb_entropy,
            entropy_coef=config.entropy_coef)
        loss = aggregation.reduce(per_token_loss, mb_mask) / normalizer
        loss.backward()
        total_loss += loss.item()
        share = mb_mask.sum().item() / max(1, n_kept)  # the stats: means over the tokens that ran
        for k, v in stats.items():
            stats_sum[k] = stats_sum.get(k, 0.0) + v.item() * share
    # PLUG-IN TERMS, once per step (each runs its own backward: the validity term)
    for plugin in hooks:
        value, stats = plugin.extra_loss(learner, whole, temperature)
        total_loss += value
        stats_sum.update(stats)
    if skipped:  # a weight no pass reached gets its zero gradient, so the optimiser steps (and decays) as before
        for p in model.parameters():
            if p.requires_grad and p.grad is None:
                p.grad = torch.zeros_like(p)
    # STEP on the whole batch's gradient (every rank's, summed)
    distributed.reduce_gradients(model)
    stats_sum = distributed.sum_stats({**stats_sum, "loss": total_loss})
    total_loss = stats_sum.pop("loss")
    grad_norm = torch.nn.utils.clip_grad_norm_(model.parameters(), MAX_GRAD_NORM)
    learner.optimizer.step()
    # AFTER THE STEP the plug-ins move what follows the weights (the average, then the magnet)
    with torch.no_grad():
        for plugin in hooks:
            plugin.after_step(learner, step)
    model.eval()
    return {**stats_sum, "loss": total_loss, "grad_norm": float(grad_norm), "tokens": float(n_tokens),
            "skipped_samples": float(skipped), "trained_tokens": float(n_trained)}


# ---------------------------------------------------------------------------------------------
# LOGGING
# ---------------------------------------------------------------------------------------------


def _sandbox_runs() -> int:
    """Return how many sandboxed programs this process has started (0 when the sandbox was never imported)."""
    sandbox = sys.modules.get("llm_zoo.sandbox")
    counter = getattr(sandbox, "runs_started", None)
    return int(counter()) if callable(counter) else 0


def _rollout_metrics(episodes: Sequence[Episode], roles: Mapping[str, str], config: TrainConfig) -> dict[str, float]:
    out: dict[str, float] = {}
    by_agent: dict[str, list[float]] = {}
    invalid = replies = 0
    prompt_tokens = completion_tokens = 0
    for episode in episodes:
        for agent, value in episode.returns.items():
            by_agent.setdefault(agent, []).append(value)
        for info in episode.infos.values():
            invalid += int(info.get("invalid_replies", 0))
        for turn in episode.turns:
            replies += 1
            prompt_tokens += len(turn.prompt_ids or ())
            completion_tokens += len(turn.completion_ids or ())
    seats_of: dict[str, list[str]] = {}
    for agent in by_agent:
        seats_of.setdefault(roles.get(agent, agent), []).append(agent)
    for role, seats in seats_of.items():
        values = [v for agent in seats for v in by_agent[agent]]
        out[f"charts/reward/{role}"] = sum(values) / len(values)
        if len(seats) > 1:  # seats that share a role (Kuhn's zero-sum pair averages to 0): each seat too
            for agent in seats:
                out[f"charts/reward/{role}/{agent}"] = sum(by_agent[agent]) / len(by_agent[agent])
    out["charts/invalid_reply_rate"] = invalid / max(1, replies)
    out["charts/failed_episodes"] = float(sum(e.failed for e in episodes))
    out["perf/prompt_tokens"] = float(prompt_tokens)
    out["perf/completion_tokens"] = float(completion_tokens)
    return out


def _postfix(metrics: Mapping[str, float], roles: Mapping[str, str]) -> dict[str, str]:
    post = {}
    for role in sorted(set(roles.values())):
        seats = [a for a in sorted(roles) if roles[a] == role and f"charts/reward/{role}/{a}" in metrics]
        if seats:  # a role several seats share: its mean says little (0 in a zero-sum game), each seat's more
            post.update({a: f"{metrics[f'charts/reward/{role}/{a}']:+.3f}" for a in seats})
        elif f"charts/reward/{role}" in metrics:
            post[role] = f"{metrics[f'charts/reward/{role}']:+.3f}"
    post["invalid"] = f"{metrics.get('charts/invalid_reply_rate', 0):.2f}"
    for key in ("eval/exploitability", "eval/headline"):
        if key in metrics:
            post[key.split("/")[1][:5]] = f"{metrics[key]:.4f}"
    return post


def _progress(config: TrainConfig, start: int):
    from llm_zoo.trainers.logging import progress_bar

    return progress_bar(total=config.steps, initial=start, desc=f"train {config.env}") if config.progress else None


def _write_samples(path: Path, episodes: Sequence[Episode]) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    write_jsonl(path, episodes)  # atomic, and a reply holding a lone surrogate cannot crash the run


def _write_yaml(path: Path, data: Mapping[str, Any]) -> None:
    try:
        import yaml
    except ImportError:
        return
    path.write_text(yaml.safe_dump(dict(data), sort_keys=False))
