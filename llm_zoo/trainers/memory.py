"""Memory budget of a training run: an estimate of its peak from the config, and a preflight that refuses a
setting that cannot fit before the first step.

What bounds a run's memory (:mod:`llm_zoo.scoring`, :class:`~llm_zoo.policies.transformers.TransformersPolicy`):

- ``max_prompt_tokens``: a prompt longer than this is never run; its episode ends as failed (the policy
  raises ``PromptTooLong``, :func:`~llm_zoo.trainers.rollout.collect` fails that episode, and the
  trainer scores a failed episode as the step's worst finished return of its key, so ending that way
  never pays more than finishing). So the longest sequence of any pass is ``max_prompt_tokens +
  max_new_tokens``.
- ``max_forward_tokens``: the most tokens (rows x padded length) of one forward pass. Sampling runs the
  rollout batch in chunks of prompts under it (each chunk its own prefill, KV cache and decode loop);
  the scoring passes (the reference's, the evaluators') split their rows the same way; and the update's
  micro-batches (``micro_batch_size`` sequences at most) are split further under it
  (:func:`micro_batches`), the gradients accumulating over them as over any micro-batches.
- ``max_rollout_tokens``: sampling's own budget, where it is set (a pass without gradients holds no
  activations for a backward, so it may run more rows than the update's). The sampler also keeps the KV
  cache of as many tokens from one call to the next (replies longer than one token: a conversation's
  later turn runs only its new tokens), which the rollout's part counts.
- ``memory_limit_gb``: the budget :func:`preflight` checks :func:`estimate` against.

The estimate adds what lives through the run (the process itself, every model's weights, the trained
weights' gradients and AdamW's two moments, snapshots) to the largest of the passes: a rollout prefill (its
activations, its attention scores, its chunk's KV cache) and an update's forward and backward (the
activations autograd saves, its attention, the completion logits with their log-softmax and entropy).
It follows the model fields: ``dtype`` (2 bytes a weight and activation in bfloat16, 4 in float32),
``lora_r`` (only the adapters have gradients and optimiser state, in float32 as peft keeps them, and no
reference copy: the reference is the model with its adapters disabled, or with a magnet a copy of the adapters
alone over the learner's base weights) and ``gradient_checkpointing``
(a backward keeps one hidden state per block and token, plus one block's activations while it is recomputed).
Its constants are upper bounds for transformers' Llama and Qwen2 blocks with sdpa attention on a CPU,
checked against measured peaks in ``tests/trainers/test_memory.py``; the estimate errs high for each pass. A
whole run measured: ``llm-zoo train kuhn_poker_v0`` setting (``--set``) model=DIR, lora_r=8, steps=2,
episodes_per_step=8, rollout_batch_size=8, micro_batch_size=8 and beta=0.05, with SmolLM2-135M-Instruct (the
pretrained preset otherwise: checkpointing, 1024 tokens a pass), peaked at 2.51 GiB of RSS (``/usr/bin/time -v``)
against 2.33 GiB estimated: the estimate counts whole rows of the longest length under the budget (2 of 392
tokens), while its rows of about 230 tokens packed 4 to a pass. Counting a pass as the whole budget closes that
gap but lifts the tiny Kuhn preset's estimate to its limit; it is not done yet.
:func:`sft_estimate` and :func:`sft_preflight` do the same for the warm start (``llm-zoo sft``).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

import torch

from llm_zoo.scoring import dedupe_rows, nests, plan_nesting, row_chunks
from llm_zoo.trainers import plugins

__all__ = ["Estimate", "estimate", "micro_batches", "pass_bytes", "preflight", "sft_estimate", "sft_preflight",
           "trainable_params"]

GIB = 1024**3
FLOAT = 4
"""Bytes of a float32: the trainer's dtype on a CPU."""
PROCESS_BYTES = 600 * 1024**2
"""The process before any model: Python, torch, transformers, the env (measured about 390 MB of RSS)."""
SAVED_PER_TOKEN = (16, 8)
"""Floats autograd saves per token and layer, as multiples of (hidden size, MLP width): norms, the
q/k/v/o projections and rotary copies (about 12 h), the gated MLP's gate, up, activation and product (4 m),
with room for the allocator's slack (measured: 16 rows of 564 tokens, 226 MB against 276 MB estimated)."""
TRANSIENT_PER_TOKEN = (8, 3)
"""Floats a no-grad pass holds per token at once (one layer's intermediates), as the same multiples."""
ATTENTION_PAIR_BYTES = (12, 6, 8)
"""Bytes per (query, key) pair of a padded batch's attention, measured with transformers' sdpa on a CPU
(whose kernel does not materialise scores per head; the expanded padding mask and its float copy do):
a no-grad pass holds one layer's (12); a backward saves 6 per layer, plus 8 of transient."""
LOGIT_COPIES = 6
"""Float [rows, completion, vocab] tensors of the scoring pass: logits, tempered, log-softmax, entropy terms,
and their gradients."""


@dataclass(frozen=True)
class Estimate:
    """The estimated peak of a run, with its parts (bytes)."""

    total: int
    parts: dict[str, int] = field(default_factory=dict)
    """What makes the total: ``resident`` (process, weights, optimiser) plus the larger of ``rollout``
    and ``update`` (the other is listed for the record)."""

    @property
    def gib(self) -> float:
        return self.total / GIB

    def describe(self) -> str:
        return ", ".join(f"{k} {v / GIB:.2f} GiB" for k, v in self.parts.items())


def model_shape(model_config: Any) -> dict[str, int]:
    """Read the sizes the estimate needs off a transformers config (Llama, Qwen2 and the like)."""
    hidden = int(model_config.hidden_size)
    heads = int(model_config.num_attention_heads)
    head_dim = int(getattr(model_config, "head_dim", None) or hidden // heads)
    return {"hidden": hidden, "mlp": int(getattr(model_config, "intermediate_size", None) or 4 * hidden),
            "layers": int(model_config.num_hidden_layers), "heads": heads,
            "kv_heads": int(getattr(model_config, "num_key_value_heads", None) or heads),
            "head_dim": head_dim, "vocab": int(model_config.vocab_size)}


def pass_bytes(shape: dict[str, int], rows: int, tokens: int, keys: int, *, grad: bool, logits: int = 1,
               cache: bool = False, width: int = FLOAT, checkpointing: bool = False, lora_r: int = 0,
               lora_layers: int = 0) -> int:
    """Estimate the peak bytes of one forward pass (and its backward, with ``grad``) beyond its weights.

    ``rows`` sequences run ``tokens`` new tokens each against ``keys`` keys (cache + new); ``logits``
    positions a row keep their logits (in float32 whatever the model's dtype); ``cache`` keeps the KV cache
    (sampling). ``width``: bytes of an activation (the model's dtype); ``checkpointing``: the backward keeps one
    hidden state per block and recomputes one block at a time; ``lora_r``: adapters add their rank-r
    intermediates on every linear layer; ``lora_layers`` (with ``lora_r``): adapters in the top N blocks only, so
    the backward keeps the activations of those N blocks and none of the frozen ones below them.
    """
    hidden, mlp, layers = shape["hidden"], shape["mlp"], shape["layers"]
    kept_blocks = min(lora_layers, layers) if grad and lora_r and lora_layers else layers
    per_token = SAVED_PER_TOKEN if grad else TRANSIENT_PER_TOKEN
    block = rows * tokens * (per_token[0] * hidden + per_token[1] * mlp + 7 * lora_r * grad) * width
    no_grad, saved, transient = ATTENTION_PAIR_BYTES
    pairs = rows * tokens * keys
    if not grad:
        activations, attention = block, pairs * no_grad
    elif checkpointing:  # what each block keeps for its recompute, and one block's saved activations at a time
        kept = CHECKPOINT_KEPT[bool(lora_r)]
        activations = rows * tokens * kept * hidden * width * kept_blocks + block
        attention = pairs * (saved + transient)
    else:
        activations, attention = block * kept_blocks, pairs * (saved * kept_blocks + transient)
    if grad and lora_r:
        activations += LORA_BLOCKS * block
    kv = rows * keys * layers * 2 * shape["kv_heads"] * shape["head_dim"] * width * 2 if cache else 0  # + laid-out copy
    logit_bytes = rows * logits * shape["vocab"] * FLOAT * (LOGIT_COPIES if grad else 2)
    return activations + attention + kv + logit_bytes


CHECKPOINT_KEPT = (10, 16)
"""Hidden-size floats per token and block that a backward under gradient checkpointing holds (without LoRA, with
it): more than the one hidden state each block's recompute starts from, as measured on SmolLM2-135M (8 rows of 234
tokens: 8 and 15 hidden sizes per token and block over the weights and their gradients)."""

LORA_BLOCKS = 2
"""Blocks' worth of activations that peft's adapters add to a backward: each adapted layer's output is summed
anew with its adapter's, and the recomputed block's sums are held beside its gradients (measured with
checkpointing on the tiny Llama: 1.3-2.1 blocks more than without the adapters)."""

LORA_MODULES = {"q_proj": ("hidden", "q"), "k_proj": ("hidden", "kv"), "v_proj": ("hidden", "kv"),
                "o_proj": ("q", "hidden"), "gate_proj": ("hidden", "mlp"), "up_proj": ("hidden", "mlp"),
                "down_proj": ("mlp", "hidden")}
"""The linear layers of a Llama/Qwen2 block, as (input, output) sizes: what LoRA's default targets."""


def trainable_params(config: Any, shape: dict[str, int]) -> int:
    """Count the weights the optimiser updates: all of them, or with ``lora_r`` the adapters' (r x (in + out)
    per adapted linear layer, in every block or the top ``lora_layers``; a module name outside
    :data:`LORA_MODULES` counts as hidden -> hidden)."""
    sizes = {"hidden": shape["hidden"], "mlp": shape["mlp"], "q": shape["heads"] * shape["head_dim"],
             "kv": shape["kv_heads"] * shape["head_dim"]}
    if not config.lora_r:
        return model_params(shape)
    names = list(config.lora_target_modules) or list(LORA_MODULES)
    per_block = sum(sizes[LORA_MODULES[n][0]] + sizes[LORA_MODULES[n][1]] if n in LORA_MODULES else 2 * sizes["hidden"]
                    for n in names)
    return int(config.lora_r) * per_block * (min(int(config.lora_layers), shape["layers"]) or shape["layers"])


def model_params(shape: dict[str, int]) -> int:
    """Count a Llama/Qwen2 model's weights (an untied output layer counted: the estimate errs high)."""
    hidden, mlp, vocab = shape["hidden"], shape["mlp"], shape["vocab"]
    return 2 * vocab * hidden + shape["layers"] * (4 * hidden * hidden + 3 * hidden * mlp + 2 * hidden)


def _width(config: Any) -> int:
    """Bytes of a weight and an activation in the dtype the run builds its models in."""
    from llm_zoo.models import resolve_dtype

    return 2 if resolve_dtype(config.dtype, pretrained=config.model != "tiny", device=config.device) != torch.float32 \
        else FLOAT


def _resident(config: Any, shape: dict[str, int], learners: int, frozen_copies: int) -> int:
    """The process, every learner's weights, the trained weights' gradients and optimiser state, frozen copies."""
    width, params = _width(config), model_params(shape)
    trained = trainable_params(config, shape)
    moments = 2 if getattr(config, "optimizer", "adamw") == "adamw" else 0
    # full fine-tuning keeps gradients and moments in the weights' dtype; peft keeps adapters in float32
    per_learner = params * width * (1 + frozen_copies) + trained * (width if not config.lora_r else FLOAT) * (
        1 + moments) + (trained * FLOAT if config.lora_r else 0)
    return PROCESS_BYTES + learners * per_learner


def estimate(config: Any, model_config: Any, *, learners: int = 1) -> Estimate:
    """Estimate the peak memory of a run of ``config`` (a ``TrainConfig``) with models of ``model_config``.

    ``learners`` counts the trained models (one per distinct policy name that is not scripted).
    """
    shape = model_shape(model_config)
    budget = int(config.max_forward_tokens)
    longest = int(config.max_prompt_tokens) + int(config.max_new_tokens)
    width = _width(config)
    # frozen copies of the whole model: the reference (with LoRA none, or a magnet's adapters: below), the weights'
    # average, pool snapshots
    copies = bool(config.beta and not config.lora_r) + bool(config.average.ema) + (
        config.pool_size if config.pool_every else 0)
    resident = _resident(config, shape, learners, copies)
    if config.lora_r and plugins.moving_reference(config):
        # a magnet with LoRA: a copy of the adapters over the learner's base weights (grpo.adapter_copy)
        resident += learners * trainable_params(config, shape) * FLOAT

    # ROLLOUT: the largest prefill chunk (rows within the budget, a longer row in column chunks), no grad
    sampling = int(config.max_rollout_tokens) or budget
    rows = max(1, min(int(config.rollout_batch_size), sampling // longest))
    query = max(1, min(longest, sampling // rows))
    rollout = pass_bytes(shape, rows, query, longest, grad=False, cache=True, width=width)
    if int(config.max_new_tokens) > 1:  # the KV the sampler keeps from one turn to the next: the budget's tokens
        rollout += sampling * shape["layers"] * 2 * shape["kv_heads"] * shape["head_dim"] * width
    # UPDATE: the largest micro-batch within micro_batch_size and the budget, forward and backward; a row
    # longer than the budget runs in column chunks whose saved activations still add up to the whole row
    rows = max(1, min(int(config.micro_batch_size), budget // longest))
    update = pass_bytes(shape, rows, longest, longest, grad=True, logits=int(config.max_new_tokens), width=width,
                        checkpointing=bool(config.gradient_checkpointing), lora_r=int(config.lora_r),
                        lora_layers=int(config.lora_layers))
    if config.beta:  # the reference's no-grad pass runs while the learner's graph is held
        update += pass_bytes(shape, rows, min(longest, budget // rows), longest, grad=False,
                             logits=int(config.max_new_tokens), width=width)
    parts = {"resident": resident, "rollout": rollout, "update": update}
    return Estimate(resident + max(rollout, update), parts)


def preflight(config: Any, model_config: Any, *, learners: int = 1) -> Estimate:
    """Refuse a config whose estimated peak exceeds ``memory_limit_gb`` (``ValueError`` naming the fields to change).

    ``memory_limit_gb=0`` skips the check. Returns the estimate.
    """
    found = estimate(config, model_config, learners=learners)
    limit = float(config.memory_limit_gb)
    if limit and found.total > limit * GIB:
        longest = config.max_prompt_tokens + config.max_new_tokens
        dominant = "update" if found.parts["update"] >= found.parts["rollout"] else "rollout"
        batch_field = "micro_batch_size" if dominant == "update" else "rollout_batch_size"
        budget_field = "max_rollout_tokens" if dominant == "rollout" and config.max_rollout_tokens else \
            "max_forward_tokens"
        budget = int(getattr(config, budget_field))
        rows = min(int(getattr(config, batch_field)), budget // longest)
        if rows <= 1:  # one sequence a pass already: only a shorter sequence helps
            fields = ["max_prompt_tokens", "max_new_tokens"]
        elif getattr(config, batch_field) < budget // longest:  # the batch field binds
            fields = [batch_field, "max_prompt_tokens", "max_new_tokens"]
        else:
            fields = [budget_field, "max_prompt_tokens", "max_new_tokens"]
        if found.parts["resident"] > limit * GIB:
            fields = (["model_hidden_size", "model_layers", "pool_size"] if config.model == "tiny" else
                      ["lora_r", "dtype", "pool_size"])
        raise ValueError(
            f"this run would need about {found.gib:.2f} GiB ({found.describe()}), over memory_limit_gb="
            f"{limit:g}: its largest pass is the {dominant}, sequences of up to max_prompt_tokens + max_new_tokens = "
            f"{longest} tokens, {max(1, rows)} of them a pass ({budget_field}={budget}). "
            f"{_advice(config, found, fields)}, or raise memory_limit_gb if the machine has the memory."
        )
    return found


def sft_estimate(config: Any, model_config: Any, longest: int, logit_floats: int = 2**25) -> Estimate:
    """Estimate the peak memory of a warm start of ``config`` (an ``SFTConfig``) whose longest row has ``longest``
    tokens: the resident part as :func:`estimate`'s, and the largest micro-batch's forward and backward (rows
    within ``max_tokens_per_micro_batch``, a longer row alone; no padding mask, so sdpa's fused causal kernel keeps
    no [T, T] scores; the loss's logits in chunks of ``logit_floats``, ``sft.LOGIT_CHUNK_FLOATS``)."""
    shape = model_shape(model_config)
    tokens = max(int(config.max_tokens_per_micro_batch), longest)
    activations = pass_bytes(shape, 1, tokens, 0, grad=True, logits=0, width=_width(config),
                             checkpointing=bool(config.gradient_checkpointing), lora_r=int(config.lora_r),
                             lora_layers=int(config.lora_layers))
    update = activations + min(logit_floats, tokens * shape["vocab"]) * FLOAT * LOGIT_COPIES
    resident = _resident(config, shape, 1, 0)
    return Estimate(resident + update, {"resident": resident, "update": update})


def sft_preflight(config: Any, model_config: Any, longest: int, logit_floats: int = 2**25) -> Estimate:
    """Refuse a warm start whose estimated peak exceeds ``memory_limit_gb`` (``ValueError`` naming the fields to
    change), as :func:`preflight` refuses a training run; ``memory_limit_gb=0`` skips the check."""
    found = sft_estimate(config, model_config, longest, logit_floats)
    limit = float(config.memory_limit_gb)
    if limit and found.total > limit * GIB:
        fields = ["max_tokens_per_micro_batch", "max_length"]
        if found.parts["resident"] > limit * GIB:
            fields = ["lora_r", "dtype"] if config.model != "tiny" else ["model_hidden_size", "model_layers"]
        raise ValueError(
            f"sft: this fit would need about {found.gib:.2f} GiB ({found.describe()}), over memory_limit_gb={limit:g}: "
            f"its longest conversation is {longest} tokens and a micro-batch holds up to max_tokens_per_micro_batch="
            f"{config.max_tokens_per_micro_batch}. {_advice(config, found, fields)}, or raise memory_limit_gb if the "
            f"machine has the memory.")
    return found


def _advice(config: Any, found: Estimate, fields: list[str]) -> str:
    """What to change: the fields to lower, after gradient checkpointing (the cheapest fix for a pretrained model's
    pass) when it is off; with LoRA off and the resident part too large, LoRA first."""
    lower = f"Lower {', '.join(fields)} (e.g. --set {fields[0]}=...)"
    if config.model == "tiny":
        return lower
    if fields[0] == "lora_r":  # the weights and their optimiser state are what does not fit
        return ("Set lora_r=8 (--set lora_r=8: adapters only, no gradients or optimiser state for the model's weights)"
                if not config.lora_r else "Set dtype=bfloat16 (--set dtype=bfloat16)")
    if not config.gradient_checkpointing:
        return f"Set gradient_checkpointing=true (--set gradient_checkpointing=true), or l{lower[1:]}"
    return lower


def _pair_key(row: tuple[Sequence[int], Sequence[int]]) -> tuple[tuple[int, ...], tuple[int, ...]]:
    return tuple(row[0]), tuple(row[1])


def micro_batches(batch: Sequence[Any], micro_batch_size: int, token_budget: int | None) -> list[list[Any]]:
    """Split a step's samples (with ``prompt_ids``, ``completion_ids`` and ``allowed``) into the update's micro-batches.

    First ``micro_batch_size`` samples at a time, in order, as before; then each of those, when the
    rows its pass runs times their padded length exceed ``token_budget``, into chunks within it
    (:func:`~llm_zoo.scoring.row_chunks`). The rows a pass runs are the distinct (prompt, completion)
    pairs, or, where the turns of a conversation nest (:func:`~llm_zoo.scoring.plan_nesting`), each
    conversation's longest row: a chunk keeps a host with every row it hosts. A micro-batch within the
    budget is kept whole, so runs whose passes fit are unchanged.
    """
    out: list[list[Any]] = []
    for start in range(0, len(batch), micro_batch_size):
        mb = list(batch[start:start + micro_batch_size])
        if token_budget is None:
            out.append(mb)
            continue
        distinct, row_of = dedupe_rows([[b.prompt_ids for b in mb], [b.completion_ids for b in mb]], _pair_key)
        width = max(len(c) for _, c in distinct)
        lengths = [len(p) + width for p, _ in distinct]
        pass_of = list(range(len(distinct)))
        if nests([c for _, c in distinct], [b.allowed for b in mb]):
            plan = plan_nesting([p for p, _ in distinct], [c for _, c in distinct])
            if plan is not None:
                host_width = max(len(c) for c in plan.completions)
                lengths, pass_of = [len(p) + host_width for p in plan.prompts], plan.host
        if len(lengths) * max(lengths) <= token_budget:
            out.append(mb)
            continue
        chunks = row_chunks(lengths, token_budget)
        chunk_of = {d: c for c, members in enumerate(chunks) for d in members}
        parts: list[list[Any]] = [[] for _ in chunks]
        for sample, d in zip(mb, row_of):
            parts[chunk_of[pass_of[d]]].append(sample)
        out.extend(parts)
    return out
