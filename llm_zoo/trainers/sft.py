"""Supervised warm start: fit a role's policy to traces of the env's scripted players.

Reads top to bottom: the config, the per-env teachers, then the stages of :func:`sft`:
TRACES (every seat a scripted player, episodes played by :func:`~llm_zoo.trainers.rollout.collect`)
-> ROWS (the Episode SFT export, :func:`~llm_zoo.episode.export_chat_jsonl`, one conversation per
agent, so one sequence carries all of the role's turns) -> SPLIT (a held-out share of the
episodes) -> TOKENS (the learner's tokenizer's chat template, rendered prefix by prefix: the role's turns
are the ``assistant`` messages of its own transcript, and only the tokens each adds carry loss, for any
template: :func:`assistant_mask`; then the memory preflight, as train's)
-> FIT (token-level mean negative log-likelihood, micro-batches bounded by a token budget, the rows'
shared leading tokens run once per micro-batch, logits computed in chunks for the loss positions only)
-> LOG and CHECKPOINT, in the layout of :mod:`~llm_zoo.trainers.checkpoint`, so ``llm-zoo eval ENV
--checkpoint DIR`` and ``llm-zoo train ENV --set init=DIR`` read it.

The loss is the one trl's ``SFTTrainer`` computes with ``assistant_only_loss=True``: the sum of
``-log p(token | prefix)`` over the batch's assistant tokens divided by their count
(``tests/trainers/test_sft.py`` checks the two agree on a batch to 1e-4).

The model is built as the trainer builds it, by :func:`llm_zoo.models.build_tokenizer_and_model` (a
local model directory, or the env's tokenizer and a tiny model of the configured shape), and the
checkpoint is the trainer's record (:class:`~llm_zoo.trainers.checkpoint.Checkpoint`) with the fitted
policy and its optimiser, written by the same :func:`~llm_zoo.trainers.checkpoint.save_checkpoint`.
"""

from __future__ import annotations

import dataclasses
import json
import math
import random
import time
import warnings
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import torch
import torch.nn.functional as F
from torch.utils.checkpoint import checkpoint as recompute

import llm_zoo
from llm_zoo.catalogue import is_pretrained
from llm_zoo.envs.agentic_judge.env import LEARNING_TASKS
from llm_zoo.episode import Episode, export_chat_jsonl
from llm_zoo.models import build_tokenizer_and_model, check_model_fields
from llm_zoo.scoring import (
    PrefixPlan,
    checkpoints_activations,
    dedupe,
    forward_prompts,
    plan_prefixes,
    right_pad,
)
from llm_zoo.seating import Seating, scripted_name
from llm_zoo.spec import EnvSpec
from llm_zoo.trainers import presets
from llm_zoo.trainers.checkpoint import Checkpoint, PolicyCheckpoint, save_checkpoint
from llm_zoo.trainers.memory import sft_preflight
from llm_zoo.trainers.rollout import collect
from llm_zoo.trainers.schedules import check_schedule, lr_factor

__all__ = ["SFT_PRESETS", "SFT_PRETRAINED_PRESETS", "SFTConfig", "SFTRows", "assistant_mask", "check_stage_fields",
           "digit_tokens", "make_sft_config", "micro_batches", "pass_tokens", "play_traces", "policy_name",
           "prefix_plan", "sft", "sft_loss", "teachers_of", "tokenize_rows", "token_nll", "warm_start"]

# ---------------------------------------------------------------------------------------------
# CONFIG
# ---------------------------------------------------------------------------------------------


@dataclass
class SFTConfig:
    """Everything an SFT run needs; every field has a default. The model fields, ``env_kwargs`` and
    ``policies`` start from the env's training preset (so the fitted model is the one ``train``
    builds), then :data:`SFT_PRESETS` (and for a pretrained model :data:`SFT_PRETRAINED_PRESETS`), a config file and
    ``--set`` apply."""

    env: str = "kuhn_poker_v0"
    """Versioned env name."""
    role: str = ""
    """The role (or agent) whose turns are fitted, or several comma-separated that one policy serves;
    empty = the env's first learning role."""
    env_kwargs: dict[str, Any] = field(default_factory=dict)
    """Keyword arguments of the env the traces are played in (default: the env's training preset's)."""
    options: list[dict[str, Any]] = field(default_factory=list)
    """Reset options of the trace episodes, cycled over them (episode i gets options[i % len]), e.g.
    [{scenario: refund_late}, {scenario: reset_password}] to take traces from some scenarios only; empty = none."""
    teachers: dict[str, str | list[str]] = field(default_factory=dict)
    """Role (or agent) -> the env's scripted player seated there, by name, or a list of names, one drawn
    per episode; roles not named get the env's default (SFT_PRESETS)."""
    episodes: int = 256
    """Trace episodes played (failed ones are left out)."""
    val_fraction: float = 0.1
    """Share of the trace episodes held out for the validation loss (split by episode)."""
    seed: int = 0
    """Seed of the traces, the split, the shuffles and the tiny model's initialisation."""

    model: str = "tiny"
    """tiny (the model train builds for the env, offline), a local model directory, a hub name (owner/name) or a
    catalogue name such as smollm2-135m (`llm-zoo models`); a pretrained model adds SFT_PRETRAINED_PRESETS."""
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
    """Start the tiny model's output layer at zero."""
    model_copy_heads: bool = False
    """Start the tiny model's first two layers as an induction circuit (llm_zoo.models.install_copy_heads)."""
    dtype: str = "auto"
    """float32, bfloat16, or auto: bfloat16 for a model directory on a GPU that supports it, float32 otherwise
    (the tiny model always)."""
    gradient_checkpointing: bool = False
    """Recompute each decoder block's activations in the backward pass instead of keeping them: an update's
    activations shrink to one block's plus a hidden state per block, for about a third more compute."""
    lora_r: int = 0
    """0: every weight trains (full fine-tuning). Above 0: the model is frozen and LoRA adapters of this rank
    train on it (peft); the KL reference is the model with its adapters disabled, and checkpoints hold only the
    adapters, naming the base model. Needs a model directory (config.model)."""
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
    policies: dict[str, str] = field(default_factory=dict)
    """Role or agent -> policy name, as train reads it; the checkpoint holds the fitted role's policy
    under that name (policies.get(role, "main"))."""

    epochs: int = 3
    """Passes over the training conversations."""
    batch_size: int = 16
    """Conversations per optimiser step (the loss is the mean over their role tokens)."""
    max_tokens_per_micro_batch: int = 8192
    """Token budget of one forward/backward (padded length x sequences, a shared prefix counted once per group of
    rows: sft.pass_tokens); a longer sequence runs alone."""
    max_length: int = 0
    """Truncate each sequence to this many tokens, keeping its start (0: no truncation)."""
    memory_limit_gb: float = 3.5
    """Budget of the fit's estimated peak memory (trainers/memory.py, as train's), checked once the conversations are
    tokenized, before the first step; a setting over it is refused, naming the fields to lower. 0 skips the check."""
    lr: float = 3e-3
    """Peak learning rate (AdamW; after warm-up, ``lr_schedule``): for the tiny models (Kuhn, 32 steps: val loss 0.56 at
    1e-3, 0.27 at 3e-3, 0.28 at 1e-2); a pretrained model wants about 1e-5."""
    lr_schedule: str = "constant"
    """constant, linear or cosine decay to lr_min_ratio * lr over the fit (the trainer's ``lr_schedule``). A decay
    is what makes a memorised reply come back token for token: agentic_judge's solver, 240 steps at 3e-3, kept a
    train loss of 0.064 at a constant rate (docs/warm_start.md)."""
    lr_min_ratio: float = 0.1
    """Final learning rate as a fraction of lr, for the linear and cosine schedules."""
    warmup_steps: int = 0
    """Linear warm-up steps."""
    weight_decay: float = 0.0
    """AdamW weight decay."""
    max_grad_norm: float = 1.0
    """Gradient clipping by global norm (0: none)."""

    run_dir: str = ""
    """Where the run writes; empty = runs/<env>-sft-<time>."""
    eval_every: int = 0
    """Validation loss every this many steps (and before the first and after the last); 0 = only those."""
    checkpoint_every: int = 0
    """Write a checkpoint every this many steps (and at the end); 0 = only at the end."""
    keep_checkpoints: int = 1
    """Most checkpoints kept on disk."""
    rollout_batch_size: int = 16
    """Envs run side by side while the traces are played."""
    device: str = "auto"
    """auto (cuda if available), cpu or cuda."""
    threads: int = 0
    """torch CPU threads; 0 = torch's default."""
    progress: bool = True
    """Show a progress bar."""
    tensorboard: bool = True
    """Also write TensorBoard event files (when tensorboard is installed)."""

    def __post_init__(self) -> None:
        for name in ("episodes", "epochs", "batch_size", "max_tokens_per_micro_batch", "rollout_batch_size",
                     "keep_checkpoints"):
            if int(getattr(self, name)) < 1:
                raise ValueError(f"sft config.{name} must be >= 1; got {getattr(self, name)!r}")
        for name in ("max_length", "warmup_steps", "eval_every", "checkpoint_every", "threads"):
            if int(getattr(self, name)) < 0:
                raise ValueError(f"sft config.{name} must be >= 0; got {getattr(self, name)!r}")
        if not 0.0 <= self.val_fraction < 1.0:
            raise ValueError(f"sft config.val_fraction must be in [0, 1); got {self.val_fraction!r}")
        if self.lr <= 0 or self.weight_decay < 0 or self.max_grad_norm < 0:
            raise ValueError(f"sft config: lr must be > 0, weight_decay and max_grad_norm >= 0; got lr={self.lr!r}, "
                             f"weight_decay={self.weight_decay!r}, max_grad_norm={self.max_grad_norm!r}")
        check_schedule(self.lr_schedule, self.lr_min_ratio, "sft config")
        check_model_fields(self, "sft config")
        if not self.memory_limit_gb >= 0.0:
            raise ValueError(f"sft config.memory_limit_gb must be >= 0 (0: no check); got {self.memory_limit_gb!r}")
        if self.device not in ("auto", "cpu", "cuda"):
            raise ValueError(f"sft config.device must be auto, cpu or cuda; got {self.device!r}")
        if self.env not in llm_zoo.registered():
            raise ValueError(f"sft config.env must be a registered env, one of {llm_zoo.registered()}; "
                             f"got {self.env!r}")
        bad = {k: v for k, v in self.teachers.items() if isinstance(v, list) and not v}
        if bad:
            raise ValueError(f"sft config.teachers: a list of names must name at least one player; got {bad!r}")
        if any(not isinstance(o, Mapping) for o in self.options):
            raise ValueError(f"sft config.options must be a list of reset-option mappings; got {self.options!r:.200}")


SHARED_WITH_TRAIN = ("env_kwargs", "seed", "model", "model_hidden_size", "model_layers", "model_tokenizer", "model_init_std",
                     "model_zero_head", "model_copy_heads", "dtype", "gradient_checkpointing", "lora_r", "lora_alpha",
                     "lora_dropout", "lora_target_modules", "lora_layers", "memory_limit_gb", "policies", "device", "threads",
                     "progress", "tensorboard")
"""Fields SFTConfig shares with TrainConfig (same names and meaning): the env's training preset and
``train``'s own config set them, so the warm start fits the model RL goes on with."""

SFT_PRESETS: dict[str, dict[str, Any]] = {
    "kuhn_poker_v0": {"teachers": {"player": "nash"}},
    # the solver's traces mix correct and wrong solutions, so a warm-started solver samples both
    "agentic_judge_v0": {"teachers": {"solver": ["reference", "alternative", "wrong"], "judge": "rule_judge"}},
    "proposer_solver_v0": {"teachers": {"proposer": "proposer", "solver": "solver"}},
    # one scripted player plays both seats: the faithful user and the assistant that solves the scenario
    # 32 episodes, 8 steps: val loss 5.57 -> 4.77 at lr 1e-3, -> 3.57 at 1e-2 (the byte-level model has far to go)
    "user_sim_v0": {"teachers": {"user": "scripted", "assistant": "scripted"}, "lr": 1e-2},
}
"""Env name -> SFT fields over the dataclass defaults (the teachers of each role)."""

SFT_PRETRAINED_PRESETS: dict[str, dict[str, Any]] = {
    # SmolLM2-135M-Instruct on the nash player's traces, LoRA r16 from the training preset, 2 CPU cores: masked
    # exploitability 0.0425-0.0485 (zero-shot 0.339), unmasked legal mass 0.994 (zero-shot 0.060); 87 steps of
    # about 15 s with each seat's rules run once a micro-batch (28 s a step whole, on the same cores), 25.7 min at a
    # peak of 3.8 GB; repeated conversations run once (17 distinct among 512): 13.2 s a step against 23.7 on slower
    # cores (docs/training.md); 64 episodes x 2 epochs (3.5 min) stayed blind to its card (0.905)
    "kuhn_poker_v0": {"lr": 1e-3, "episodes": 256, "epochs": 3,
                      "max_tokens_per_micro_batch": 1024,  # 1.31 GiB resident + 3.39 GiB a pass, estimated
                      "memory_limit_gb": 6.0},  # 4.70 GiB estimated against 3.8 GB measured (4.5 whole rows)
    # the warm start of user_sim's main job, also as `llm-zoo sft user_sim_v0 --role assistant`: 2.8 GB at most
    "user_sim_v0": dict(presets.USER_SIM_V0_PRETRAINED["sft"]),
    # the solver's tool calls in the model's own format: correct and wrong stored solutions of the six tasks mixed,
    # as the tiny solver's warm start (the longest conversation 1284 tokens of SmolLM2's). One conversation a step
    # and the rate decayed linearly to 0, as user_sim's warm start and the tiny judge's (docs/warm_start.md): 48
    # steps of 11-14 s with SmolLM2-135M-Instruct on 2 CPU cores, the hidden tests then passed in 5 and 4 of 24
    # evaluation episodes (two runs of seed 0), against 2 after the same tokens in 12 steps of 4 at a constant rate
    "agentic_judge_v0": {"teachers": {"solver": ["reference", "alternative", "wrong"], "judge": "rule_judge"},
                         "options": [{"task": t} for t in LEARNING_TASKS], "episodes": 24, "epochs": 2,
                         **presets.SFT_ONE_A_STEP, "val_fraction": 0.0, "max_tokens_per_micro_batch": 2048},
    # tasks of every difficulty, as the tiny proposer's warm start; one task a step and the rate decayed linearly to 0,
    # as user_sim's and the judge's: over the benchmark's 3 seeds, 0.06 of the tasks invalid after it against 0.27
    # after 16 steps of 8 at a constant rate, and 16 RL steps from it 0.5417 ± 0.0430 against 0.5339 ± 0.1376
    # (docs/training.md)
    "proposer_solver_v0": {"teachers": {"proposer": "proposer_mixed"}, "episodes": 64, "epochs": 2,
                           **presets.SFT_ONE_A_STEP, "val_fraction": 0.1, "max_tokens_per_micro_batch": 1024},
}
"""Env name -> SFT fields for a pretrained model (:func:`llm_zoo.catalogue.is_pretrained`), over :data:`SFT_PRESETS`;
the model fields (LoRA, gradient checkpointing) come from the env's pretrained training preset."""


def make_sft_config(env: str = "kuhn_poker_v0", overrides: Mapping[str, Any] | None = None) -> SFTConfig:
    """Build an SFT config: dataclass defaults, the env's training preset's shared fields, :data:`SFT_PRESETS`, for a
    pretrained model :data:`SFT_PRETRAINED_PRESETS`, then ``overrides``."""
    from llm_zoo.configdoc import check_overrides

    model = str((overrides or {}).get("model", presets.default_model(env)))
    train_preset = {**presets.preset(env, model=model), "model": model}  # for the model's kind
    values: dict[str, Any] = {k: train_preset[k] for k in SHARED_WITH_TRAIN if k in train_preset}
    values.update(_copy(SFT_PRESETS.get(env, {})))
    if is_pretrained(model):
        values.update(_copy(SFT_PRETRAINED_PRESETS.get(env, {})))
    values.update(check_overrides(SFTConfig, dict(overrides or {}), source="the sft config"))
    values["env"] = env
    return SFTConfig(**check_overrides(SFTConfig, values, source="the sft config"))


def _copy(values: Mapping[str, Any]) -> dict[str, Any]:
    return {k: (dict(v) if isinstance(v, Mapping) else list(v) if isinstance(v, list) else v)
            for k, v in values.items()}


# ---------------------------------------------------------------------------------------------
# HELPERS: who is fitted, by whom, under which name; tokens and the loss
# ---------------------------------------------------------------------------------------------


def _agents(config: SFTConfig, spec: EnvSpec) -> tuple[dict[str, str], list[str]]:
    """Return (agent -> role of every agent, the agents whose turns are fitted); refuse an unknown role."""
    probe = llm_zoo.make_env(config.env, **config.env_kwargs).unwrapped
    roles = {a: probe.role_of(a) for a in probe.possible_agents}
    wanted = {r.strip() for r in config.role.split(",") if r.strip()} or {spec.learning_roles[0]}
    unknown = sorted(wanted - set(roles) - set(roles.values()))
    if unknown:
        raise ValueError(f"sft config.role names {unknown}, which {config.env} does not have; its roles are "
                         f"{sorted(set(roles.values()))} and its agents {sorted(roles)} (--role ROLE)")
    return roles, [a for a in roles if a in wanted or roles[a] in wanted]


def policy_name(config: SFTConfig, roles: Mapping[str, str], agents: Sequence[str]) -> str:
    """Return the policy name train gives the fitted agents (``policies``: agent, then role, then "main")."""
    seating = Seating.parse(config.policies)
    names = {seating.player(a, roles[a]) for a in agents}
    if len(names) != 1:
        raise ValueError(f"sft config.role {config.role!r} covers agents that config.policies maps to different "
                         f"policies {sorted(names)}; fit one policy at a time (--role one of {sorted(agents)})")
    name = names.pop()
    if scripted_name(name) is not None:  # train seats a scripted player there, not a model
        raise ValueError(f"sft config.policies seats the scripted player {name!r} where {sorted(agents)} play, so "
                         f"train would never load a model for them; name their policy, e.g. --set "
                         f"'policies={{{roles[agents[0]]}: {roles[agents[0]]}_model}}'")
    return name


def teachers_of(config: SFTConfig, spec: EnvSpec, roles: Mapping[str, str]) -> dict[str, list[str]]:
    """Return seat key (role, or an agent named in ``teachers``) -> the scripted players drawn from there.

    A role missing from ``teachers`` and :data:`SFT_PRESETS` gets its frozen player
    (:attr:`EnvSpec.frozen_players`), else the scripted player named after it, or the env's only one.
    """
    given = {**SFT_PRESETS.get(config.env, {}).get("teachers", {}), **config.teachers}
    players = sorted(spec.scripted)
    out: dict[str, list[str]] = {}
    for key, names in given.items():
        if key not in roles and key not in roles.values():
            raise ValueError(f"sft config.teachers names {key!r}, which is neither a role "
                             f"{sorted(set(roles.values()))} nor an agent {sorted(roles)} of {config.env}")
        out[key] = [names] if isinstance(names, str) else list(names)
    for role in sorted(set(roles.values())):
        if role in out or all(a in out for a, r in roles.items() if r == role):
            continue
        if role in spec.frozen_players:  # the player the env seats there when the role does not learn
            out[role] = [scripted_name(spec.frozen_players[role])]
        elif role in spec.scripted or len(players) == 1:
            out[role] = [role if role in spec.scripted else players[0]]
        else:
            raise ValueError(f"sft config.teachers has no scripted player for the role {role!r} of {config.env}; "
                             f"set teachers: {{{role}: NAME}} with NAME one of {players}")
    for key, names in out.items():
        missing = [n for n in names if n not in spec.scripted]
        if missing:
            raise ValueError(f"sft config.teachers[{key!r}] names {missing}, not scripted players of {config.env}; "
                             f"its players are {players}")
    return out


@dataclass
class SFTRows:
    """Tokenized conversations: per row its token ids and its loss mask (1 on the role's own tokens)."""

    input_ids: list[list[int]]
    loss_mask: list[list[int]]
    """1 where the token is part of an ``assistant`` message (the role's reply and its end-of-turn token)."""

    def __len__(self) -> int:
        return len(self.input_ids)

    def tokens(self) -> int:
        """Loss-carrying tokens over all rows."""
        return sum(sum(m[1:]) for m in self.loss_mask)  # the first token is never predicted


def tokenize_rows(tokenizer: Any, rows: Sequence[Mapping[str, Any]], max_length: int = 0) -> SFTRows:
    """Tokenize chat records (``{"messages": [...]}``, with ``tools`` where the row has them) with the chat
    template; mask = the assistant tokens (:func:`assistant_mask`, for any template).

    Raises:
        ValueError: A row has no assistant token left to learn (``max_length`` cut them all), or the template
            renders an earlier turn differently once later ones follow (:func:`assistant_mask`).
    """
    ids, masks = [], []
    for i, row in enumerate(rows):
        row_ids, mask = assistant_mask(tokenizer, list(row["messages"]), tools=row.get("tools"))
        if max_length:
            row_ids, mask = row_ids[:max_length], mask[:max_length]
        if not any(mask[1:]):
            raise ValueError(f"sft: row {i} has no assistant token to learn (after max_length={max_length} "
                             "truncation); raise max_length (0: no truncation) so that some of the replies stay")
        ids.append(row_ids)
        masks.append(mask)
    return SFTRows(ids, masks)


def assistant_mask(tokenizer: Any, messages: Sequence[Mapping[str, Any]], *,
                   tools: Sequence[Mapping[str, Any]] | None = None) -> tuple[list[int], list[int]]:
    """Return the conversation's token ids under the chat template and a mask, 1 on the tokens the assistant writes.

    The conversation is rendered prefix by prefix: for each assistant message, the tokens before it (with the
    template's generation prompt, as the policy is prompted) and the tokens through it; the tokens it adds are
    the reply, up to and including the first end-of-turn token (the tokenizer's ``eos_token``; what the
    template writes after it, such as a newline, the model never samples). No ``{% generation %}`` markers
    are needed, so any chat template works.

    Raises:
        ValueError: The rendering of a prefix is not the start of the whole conversation's (a template that
            rewrites earlier turns, e.g. dropping their reasoning, once later ones follow); the message names
            the reply.
    """
    def render(part: Sequence[Mapping[str, Any]], prompt: bool) -> list[int]:
        out = tokenizer.apply_chat_template(list(part), tools=tools, tokenize=True, return_dict=True,
                                            add_generation_prompt=prompt)
        return list(out["input_ids"])

    ids = render(messages, False)
    mask = [0] * len(ids)
    end = tokenizer.eos_token_id
    for k, message in enumerate(messages):
        if message.get("role") != "assistant":
            continue
        before, through = (render(messages[:k], True) if k else []), render(messages[:k + 1], False)
        if through[:len(before)] != before or ids[:len(through)] != through:
            raise ValueError(f"sft: the chat template renders the conversation before assistant message {k} "
                             f"({str(message.get('content'))[:60]!r}) differently once later messages follow, so "
                             "its tokens cannot be told apart; fit conversations that end at that reply (the "
                             "Episode export's per='turn'), or use a template that keeps earlier turns as they were")
        added = range(len(before), len(through))
        stop = next((i for i in added if ids[i] == end), added.stop - 1)
        for i in range(added.start, stop + 1):
            mask[i] = 1
    return ids, mask


LOGIT_CHUNK_FLOATS = 2**25
"""Most logits (rows x vocabulary) one chunk of the loss materialises: 128 MiB in float32."""


def token_nll(model: torch.nn.Module, input_ids: Sequence[Sequence[int]], loss_mask: Sequence[Sequence[int]],
              *, pad_token_id: int, device: torch.device | str = "cpu",
              share_prefix: bool = True) -> tuple[torch.Tensor, torch.Tensor]:
    """Return ``-log p(token | prefix)`` of every loss token of a micro-batch, flat, in row order ([N]),
    and whether the model's argmax is that token ([N], bool).

    The decoder runs once over the rows, then the output layer runs only on the hidden states that predict a loss
    token, in chunks of at most :data:`LOGIT_CHUNK_FLOATS` logits, each recomputed in the backward pass rather than
    kept: a [B, T, V] tensor never exists.

    With ``share_prefix`` (and no gradient checkpointing, which drops the KV cache in training), the leading tokens
    that rows share before their first loss token (a system prompt, a game's rules) run once per group of rows, as
    the scoring pass shares a prompt's prefix (:func:`llm_zoo.scoring.forward_prompts`): a first pass computes each
    group's KV cache, a second runs the rest of each row on top of it, with position ids that go on from the
    prefix; gradients flow back through the cache. The values agree with ``share_prefix=False`` to float
    rounding. Where no plan saves work, the rows run whole.
    """
    causal_lm = model.get_base_model() if callable(getattr(type(model), "get_base_model", None)) else model  # peft's
    decoder = causal_lm.base_model  # LoRA's layers are inside it
    device = torch.device(device)
    if share_prefix and not checkpoints_activations(causal_lm) and prefix_plan(input_ids, loss_mask) is not None:
        # each row as a prompt (what comes before its first loss token) and a completion (the rest), through the
        # scoring pass's shared-prefix forward; the decoder returns hidden states, no logits
        firsts = _first_loss_tokens(input_ids, loss_mask)
        tails, tails_real = right_pad([row[f:] for row, f in zip(input_ids, firsts)], pad_token_id, device)
        tails_mask = right_pad([row_mask[f:] for row_mask, f in zip(loss_mask, firsts)], 0, device)[0].bool()
        out, _ = forward_prompts(decoder, [row[:f] for row, f in zip(input_ids, firsts)], pad_token_id, device,
                                 completions=(tails, tails_real), share_prefix=True, use_cache=False)
        width = tails.shape[1]  # the position before each completion token predicts it
        h = out.last_hidden_state[:, -width - 1:-1][tails_mask]  # [N, H]
        targets = tails[tails_mask]  # [N]
    else:
        ids = right_pad(input_ids, pad_token_id, device)[0]
        targets_mask = right_pad(loss_mask, 0, device)[0].bool()[:, 1:]  # position t predicts token t + 1
        # No attention mask: the pads come after every real token, which causal attention never lets a real
        # token see, so the real tokens' outputs are those of a masked pass; and without a padding mask
        # sdpa takes its fused causal kernel instead of a [B, T, T] mask (4x faster at 11k tokens, batch 2).
        hidden = decoder(input_ids=ids).last_hidden_state  # [B, T, H]
        h = hidden[:, :-1][targets_mask]  # [N, H]
        targets = ids[:, 1:][targets_mask]  # [N]
    head = model.get_output_embeddings()
    rows = max(1, LOGIT_CHUNK_FLOATS // head.weight.shape[0])
    nll, hits = [h.new_zeros(0)], [torch.zeros(0, dtype=torch.bool, device=h.device)]
    for start in range(0, h.shape[0], rows):
        part, hit = recompute(_chunk_nll, head, h[start:start + rows], targets[start:start + rows],
                              use_reentrant=False)
        nll.append(part)
        hits.append(hit)
    return torch.cat(nll), torch.cat(hits)


def prefix_plan(input_ids: Sequence[Sequence[int]], loss_mask: Sequence[Sequence[int]]) -> PrefixPlan | None:
    """The rows' shared prefixes, as :func:`token_nll` runs them: the groups of rows whose leading tokens before their
    first loss token agree, when running each group's prefix once saves work (None when nothing does)."""
    if len(input_ids) < 2:
        return None
    # a prefix must end before the position that predicts the row's first loss token
    return plan_prefixes([list(row[:f]) for row, f in zip(input_ids, _first_loss_tokens(input_ids, loss_mask))])


def _first_loss_tokens(input_ids: Sequence[Sequence[int]], loss_mask: Sequence[Sequence[int]]) -> list[int]:
    """Each row's first loss token's position (the row's length where none is)."""
    return [next((t for t, m in enumerate(row_mask) if m), len(row)) for row, row_mask in zip(input_ids, loss_mask)]


def pass_tokens(input_ids: Sequence[Sequence[int]], loss_mask: Sequence[Sequence[int]], share_prefix: bool) -> int:
    """The padded tokens :func:`token_nll`'s passes run for these rows (what a micro-batch's budget counts): rows
    times the longest row, or with a shared-prefix plan, groups times the widest prefix plus rows times the longest
    rest."""
    plan = prefix_plan(input_ids, loss_mask) if share_prefix else None
    if plan is None:
        return len(input_ids) * max(map(len, input_ids))
    return (len(plan.prefixes) * max(map(len, plan.prefixes))
            + len(input_ids) * max(len(row) - n for row, n in zip(input_ids, plan.shared)))


def _chunk_nll(head: torch.nn.Module, h: torch.Tensor, targets: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    logits = head(h).float()  # [n, V]
    return F.cross_entropy(logits, targets, reduction="none"), logits.argmax(dim=-1) == targets


def micro_batches(lengths: Sequence[int], budget: int,
                  cost: Callable[[Sequence[int]], int] | None = None) -> list[list[int]]:
    """Group row indices (longest first) so that each group's padded size stays within ``budget``: rows x longest,
    or ``cost(group)`` (the tokens its passes run: :func:`pass_tokens`) where given. A row over the budget runs
    alone."""
    order = sorted(range(len(lengths)), key=lambda i: -lengths[i])
    groups: list[list[int]] = []
    for i in order:
        if groups and ((len(groups[-1]) + 1) * lengths[groups[-1][0]] if cost is None
                       else cost([*groups[-1], i])) <= budget:
            groups[-1].append(i)
        else:
            groups.append([i])
    return groups


def sft_loss(model: torch.nn.Module, rows: SFTRows, indices: Sequence[int], *, pad_token_id: int,
             budget: int, device: torch.device | str = "cpu", backward: bool = False,
             digits: torch.Tensor | None = None, tally: dict[str, int] | None = None) -> tuple[float, int, int]:
    """Return (mean NLL over the loss tokens of ``rows[indices]``, their count, how many are the model's argmax).

    The mean is over the batch's tokens, as trl's (each micro-batch's sum divided by the batch's
    count); with ``backward`` the gradients of that mean accumulate on the model. Rows that repeat in the batch
    (same tokens, same mask: a small game's traces hold few distinct conversations) run once, their loss counted
    as many times as they appear. With ``digits`` (a bool per vocabulary id: :func:`digit_tokens`) and a ``tally``
    dict, the digit tokens among the loss tokens are counted into ``tally["digits"]`` and the model's argmax hits
    on them into ``tally["digit_hits"]``.
    """
    total = sum(sum(rows.loss_mask[i][1:]) for i in indices)
    keys, row_of = dedupe((tuple(rows.input_ids[i]), tuple(rows.loss_mask[i])) for i in indices)
    first = dict(zip(reversed(row_of), reversed(indices)))  # each distinct row's first index in the batch
    distinct = [first[k] for k in range(len(keys))]  # each distinct row once, with how often it appears
    count = [row_of.count(k) for k in range(len(keys))]
    loss_sum, correct = 0.0, 0
    share = not checkpoints_activations(model)  # a shared prefix lets a micro-batch hold more rows

    def cost(group: Sequence[int]) -> int:
        chosen = [distinct[g] for g in group]
        return pass_tokens([rows.input_ids[i] for i in chosen], [rows.loss_mask[i] for i in chosen], share)

    for group in micro_batches([len(rows.input_ids[i]) for i in distinct], budget, cost if share else None):
        chosen = [distinct[g] for g in group]
        nll, hits = token_nll(model, [rows.input_ids[i] for i in chosen], [rows.loss_mask[i] for i in chosen],
                              pad_token_id=pad_token_id, device=device, share_prefix=share)
        # token_nll's order is row by row, each row's loss tokens in order: each weighs as often as its row appears
        weight = torch.tensor([count[g] for g in group for _ in range(sum(rows.loss_mask[distinct[g]][1:]))],
                              dtype=nll.dtype, device=nll.device)
        if weight.numel() != nll.numel():  # a row whose first token carries loss: nothing predicts that token
            raise ValueError(f"sft: {nll.numel()} loss tokens scored where the masks hold {weight.numel()} after "
                             "each row's first token; a row's first token cannot be a loss token")
        if backward:
            ((nll * weight).sum() / max(1, total)).backward()
        loss_sum += float((nll.detach() * weight).sum())
        correct += int((hits * weight.long()).sum())
        if digits is not None and tally is not None:
            targets = torch.tensor([t for i in chosen for t, m in zip(rows.input_ids[i][1:], rows.loss_mask[i][1:]) if m],
                                   dtype=torch.long)
            is_digit = digits[targets].to(hits.device)
            tally["digits"] = tally.get("digits", 0) + int((is_digit * weight.long()).sum())
            tally["digit_hits"] = tally.get("digit_hits", 0) + int(((hits & is_digit) * weight.long()).sum())
    return loss_sum / max(1, total), total, correct


def digit_tokens(tokenizer: Any) -> torch.Tensor:
    """Return a bool per vocabulary id: the token decodes to digits only (ids, amounts, dates a reply copies).

    A reply's digits mostly come from its context (an order id the customer gave, an amount a tool
    returned), so the validation's accuracy on them (``charts/val_digit_accuracy``) tells whether the
    model copies from its context; the template text around them is learned long before.
    """
    texts = (t.strip() for t in tokenizer.batch_decode([[i] for i in range(len(tokenizer))]))
    return torch.tensor([bool(t) and t.isascii() and t.isdigit() for t in texts], dtype=torch.bool)


# ---------------------------------------------------------------------------------------------
# THE RUN
# ---------------------------------------------------------------------------------------------


def play_traces(config: SFTConfig, teachers: Mapping[str, Sequence[str]] | None = None) -> list[Episode]:
    """Play ``config.episodes`` episodes with every seat a scripted player (:func:`teachers_of`); return them all.

    The env seeds are drawn from ``[2**20, 2**31)`` under ``config.seed``, away from the small seeds
    evaluations use; ``config.options`` are cycled over the episodes.
    """
    spec = llm_zoo.env_spec(config.env)
    if teachers is None:
        teachers = teachers_of(config, spec, _agents(config, spec)[0])
    rng = random.Random(f"{config.seed}/sft/traces")
    seeds = [rng.randrange(2**20, 2**31) for _ in range(config.episodes)]
    players = {n: spec.scripted[n](seed=config.seed) for names in teachers.values() for n in names}
    seating = [{key: players[rng.choice(list(names))] for key, names in teachers.items()} for _ in seeds]
    options = [config.options[i % len(config.options)] for i in range(len(seeds))] if config.options else None
    return collect(config.env, seating, seeds, batch_size=config.rollout_batch_size, options=options,
                   env_kwargs=config.env_kwargs, seed=config.seed)


def sft(config: SFTConfig) -> dict[str, Any]:
    """Fit ``config.role``'s policy to traces of the env's scripted players; return the summary (also summary.json).

    The summary holds ``run_dir``, ``checkpoint`` (a directory ``train --set init=DIR`` and
    ``llm-zoo eval --checkpoint DIR`` read), ``policy`` (the name it is saved under), the
    validation loss before and after (``val_loss_initial``, ``val_loss``), the last step's
    ``train_loss``, and the counts of episodes, conversations and tokens.
    """
    from llm_zoo.trainers.logging import MetricsLogger, progress_bar

    t_start = time.perf_counter()
    if config.threads:
        torch.set_num_threads(config.threads)
    device = torch.device("cuda" if config.device == "auto" and torch.cuda.is_available()
                          else ("cpu" if config.device == "auto" else config.device))
    spec = llm_zoo.env_spec(config.env)
    roles, fitted_agents = _agents(config, spec)
    name = policy_name(config, roles, fitted_agents)
    teachers = teachers_of(config, spec, roles)
    run_dir = Path(config.run_dir or f"runs/{config.env}-sft-{time.strftime('%Y%m%d-%H%M%S')}")
    run_dir.mkdir(parents=True, exist_ok=True)
    _write_config(run_dir, config)

    # TRACES: every seat a scripted player; a list of teachers draws one per episode
    episodes = play_traces(config, teachers)
    finished = [e for e in episodes if not e.failed]
    if not finished:
        raise RuntimeError(f"sft: every one of the {len(episodes)} trace episodes failed; the first error: "
                           f"{(episodes[0].error or '')[-400:]!r}")

    # SPLIT by episode, then ROWS: one conversation per fitted agent (the Episode SFT export)
    order = list(range(len(finished)))
    random.Random(f"{config.seed}/sft/split").shuffle(order)
    n_val = min(len(finished) - 1, max(1, round(config.val_fraction * len(finished)))) if config.val_fraction else 0
    val_eps = [finished[i] for i in sorted(order[:n_val])]
    train_eps = [finished[i] for i in sorted(order[n_val:])]
    data = run_dir / "data"
    data.mkdir(exist_ok=True)
    export_chat_jsonl(data / "train.jsonl", train_eps, per="conversation", agents=fitted_agents)
    export_chat_jsonl(data / "val.jsonl", val_eps, per="conversation", agents=fitted_agents)
    train_rows, val_rows = _read_rows(data / "train.jsonl"), _read_rows(data / "val.jsonl")
    if not train_rows:
        raise RuntimeError(f"sft: the traces hold no turn of {sorted(fitted_agents)} (config.role={config.role!r})")
    clipped = _clipped_transcripts(train_eps + val_eps, fitted_agents)

    # TOKENS
    tokenizer, model = build_tokenizer_and_model(config, seed=config.seed, spec=spec)
    model.to(device)
    train_tok = tokenize_rows(tokenizer, train_rows, config.max_length)
    val_tok = tokenize_rows(tokenizer, val_rows, config.max_length)
    # a setting that cannot fit is refused here, before the first step
    sft_preflight(config, model.config, max(map(len, train_tok.input_ids + val_tok.input_ids)), LOGIT_CHUNK_FLOATS)
    pad = tokenizer.pad_token_id if tokenizer.pad_token_id is not None else tokenizer.eos_token_id
    trained = [p for p in model.parameters() if p.requires_grad]  # LoRA: the adapters alone
    optimizer = torch.optim.AdamW(trained, lr=config.lr, weight_decay=config.weight_decay)
    steps_per_epoch = math.ceil(len(train_tok) / config.batch_size)
    steps = config.epochs * steps_per_epoch
    logger = MetricsLogger(run_dir, tensorboard=config.tensorboard)
    bar = progress_bar(total=steps, initial=0, desc=f"sft {config.env}:{name}") if config.progress else None
    fitted = {name: PolicyCheckpoint(model, tokenizer, optimizer)}

    digits = digit_tokens(tokenizer)

    def validate() -> dict[str, float]:
        if not len(val_tok):
            return {}
        model.eval()
        tally: dict[str, int] = {}
        with torch.no_grad():
            loss, n, right = sft_loss(model, val_tok, range(len(val_tok)), pad_token_id=pad,
                                      budget=config.max_tokens_per_micro_batch, device=device, digits=digits,
                                      tally=tally)
        figures = {"losses/val": loss, "charts/val_token_accuracy": right / max(1, n)}
        if tally.get("digits"):  # the replies hold digits: how many of them the model gets (mostly copies)
            figures["charts/val_digit_accuracy"] = tally["digit_hits"] / tally["digits"]
            figures["charts/val_other_accuracy"] = (right - tally["digit_hits"]) / max(1, n - tally["digits"])
        return figures

    first = validate()
    logger.log(0, {**first, "data/train_conversations": len(train_tok), "data/val_conversations": len(val_tok),
                   "data/train_tokens": train_tok.tokens(), "data/val_tokens": val_tok.tokens(),
                   "data/clipped_transcripts": clipped})
    last: dict[str, float] = dict(first)
    step = 0
    # FIT: epochs of shuffled batches; a step's loss is the mean over its batch's role tokens
    for epoch in range(config.epochs):
        order = list(range(len(train_tok)))
        random.Random(f"{config.seed}/sft/epoch/{epoch}").shuffle(order)
        for start in range(0, len(order), config.batch_size):
            t0 = time.perf_counter()
            lr = config.lr * lr_factor(step, steps, config.warmup_steps, config.lr_schedule, config.lr_min_ratio)
            for group in optimizer.param_groups:
                group["lr"] = lr
            model.train()
            optimizer.zero_grad(set_to_none=True)
            loss, n_tokens, right = sft_loss(model, train_tok, order[start:start + config.batch_size],
                                             pad_token_id=pad, budget=config.max_tokens_per_micro_batch,
                                             device=device, backward=True)
            grad_norm = (torch.nn.utils.clip_grad_norm_(trained, config.max_grad_norm)
                         if config.max_grad_norm else torch.tensor(math.nan))
            optimizer.step()
            step += 1
            metrics = {"losses/train": loss, "charts/train_token_accuracy": right / max(1, n_tokens),
                       "charts/lr": lr, "charts/epoch": epoch + (start + config.batch_size) / len(order),
                       "losses/grad_norm": float(grad_norm), "perf/tokens": n_tokens,
                       "perf/step_s": time.perf_counter() - t0}
            if (config.eval_every and step % config.eval_every == 0) or step == steps:
                metrics.update(validate())
            logger.log(step, metrics)
            last.update(metrics)
            if (config.checkpoint_every and step % config.checkpoint_every == 0) and step != steps:
                save_checkpoint(run_dir, Checkpoint(step, fitted), config.keep_checkpoints)
            if bar is not None:
                bar.update(1)
                bar.set_postfix({"loss": f"{loss:.3f}", **({"val": f"{last['losses/val']:.3f}"}
                                                          if "losses/val" in last else {})}, refresh=False)
    if bar is not None:
        bar.close()
    logger.close()
    model.eval()
    ckpt = save_checkpoint(run_dir, Checkpoint(step, fitted), config.keep_checkpoints)
    summary = {"run_dir": str(run_dir), "checkpoint": str(ckpt), "policy": name, "role": config.role,
               "agents": fitted_agents, "steps": step,
               "train_loss": last.get("losses/train"), "val_loss_initial": first.get("losses/val"),
               "val_loss": last.get("losses/val"), "val_token_accuracy": last.get("charts/val_token_accuracy"),
               "val_digit_accuracy": last.get("charts/val_digit_accuracy"),
               "val_other_accuracy": last.get("charts/val_other_accuracy"),
               "episodes": len(episodes), "failed_episodes": len(episodes) - len(finished),
               "train_episodes": len(train_eps), "val_episodes": len(val_eps),
               "train_conversations": len(train_tok), "val_conversations": len(val_tok),
               "train_tokens": train_tok.tokens(), "val_tokens": val_tok.tokens(),
               "seconds": time.perf_counter() - t_start}
    (run_dir / "summary.json").write_text(json.dumps(summary, indent=2))
    return summary


def _read_rows(path: Path) -> list[dict[str, Any]]:
    return [json.loads(line) for line in path.read_text().splitlines() if line.strip()]


def _clipped_transcripts(episodes: Sequence[Episode], agents: Sequence[str]) -> int:
    """Count the fitted conversations whose last transcript shows fewer replies than the agent made.

    An env that drops old messages from the observation shows the agent only its recent turns; the
    conversation export then fits those alone (warned once).
    """
    clipped = 0
    for episode in episodes:
        for agent in agents:
            turns = episode.turns_of(agent)
            if turns and sum(m.get("role") == "assistant" for m in turns[-1].messages) + 1 < len(turns):
                clipped += 1
    if clipped:
        warnings.warn(f"sft: {clipped} transcripts show the agent fewer of its replies than it made (the env "
                      "clips its observations); those conversations fit only the replies shown", stacklevel=3)
    return clipped


def _write_config(run_dir: Path, config: SFTConfig) -> None:
    # the sampling fields llm-zoo eval reads off a run's config.json (its defaults unless the env's preset sets them)
    sampling = {k: v for k, v in presets.preset(config.env, model=config.model).items()
                if k in ("temperature", "top_p", "max_new_tokens", "constrain_to_legal")}
    data = {**dataclasses.asdict(config), **sampling, "stage": "sft"}
    (run_dir / "config.json").write_text(json.dumps(data, indent=2))
    try:
        import yaml
    except ImportError:
        return
    (run_dir / "config.yaml").write_text(yaml.safe_dump(data, sort_keys=False))


# ---------------------------------------------------------------------------------------------
# THE SFT STAGE OF TRAIN (init: sft)
# ---------------------------------------------------------------------------------------------


STAGE_OWN = ("env", "role", "run_dir")
"""SFT fields that ``init: sft`` sets itself: the training run's env, each learner's agents, RUN_DIR/sft."""


def check_stage_fields(fields: Mapping[str, Any]) -> dict[str, Any]:
    """Return ``train``'s ``config.sft`` with its values coerced; refuse unknown fields and those the stage sets.

    Raises:
        ValueError: A key is not an :class:`SFTConfig` field (the nearest are suggested) or is one of
            :data:`STAGE_OWN`, or a value does not fit its field's type.
    """
    from llm_zoo.configdoc import check_overrides

    own = sorted(set(fields) & set(STAGE_OWN))
    if own:
        raise ValueError(f"config.sft sets {own}, which the SFT stage of train sets itself (the run's env, each "
                         f"learner's agents, RUN_DIR/sft); drop them from config.sft")
    return check_overrides(SFTConfig, fields, source="config.sft")


def warm_start(train_config: Any, run_dir: Path, policy_of: Mapping[str, str], learners: Sequence[str],
               roles: Mapping[str, str]) -> dict[str, Path]:
    """Run the SFT stage for every learner of a training run (``init: sft``); return name -> policy directory.

    Each learner is fitted on the turns of the agents it serves, with the training run's shared
    fields (:data:`SHARED_WITH_TRAIN`) and then ``train_config.sft``; the run writes to
    ``run_dir/sft`` (``run_dir/sft/NAME`` for each of several learners).
    """
    shared = {k: getattr(train_config, k) for k in SHARED_WITH_TRAIN}
    out = {}
    for name in learners:
        agents = [a for a in policy_of if policy_of[a] == name]
        overrides = {**shared, **dict(train_config.sft), "role": ",".join(agents),
                     "run_dir": str(run_dir / "sft" / name if len(learners) > 1 else run_dir / "sft")}
        summary = sft(make_sft_config(train_config.env, overrides))
        out[name] = Path(summary["checkpoint"]) / "policies" / name
    return out
