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
- ``memory_limit_gb``: the budget :func:`preflight` checks :func:`estimate` against.

The estimate adds what lives through the run (the process itself, every model's weights, the learner's
gradients and AdamW's two moments, snapshots) to the largest of the passes: a rollout prefill (its
activations, its attention scores, its chunk's KV cache) and an update's forward and backward (the
activations autograd saves, its attention, the completion logits with their log-softmax and entropy).
Its constants are upper bounds for transformers' Llama and Qwen2 blocks with sdpa attention on a CPU,
checked against measured peaks in ``tests/trainers/test_memory.py``; the estimate errs high.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

from llm_zoo.scoring import dedupe, row_chunks

__all__ = ["Estimate", "estimate", "micro_batches", "pass_bytes", "preflight"]

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
               cache: bool = False) -> int:
    """Estimate the peak bytes of one forward pass (and its backward, with ``grad``) beyond its weights.

    ``rows`` sequences run ``tokens`` new tokens each against ``keys`` keys (cache + new); ``logits``
    positions a row keep their logits; ``cache`` keeps the KV cache (sampling).
    """
    hidden, mlp, layers = shape["hidden"], shape["mlp"], shape["layers"]
    per_token = SAVED_PER_TOKEN if grad else TRANSIENT_PER_TOKEN
    activations = rows * tokens * (per_token[0] * hidden + per_token[1] * mlp) * FLOAT * (layers if grad else 1)
    no_grad, saved, transient = ATTENTION_PAIR_BYTES
    attention = rows * tokens * keys * (saved * layers + transient if grad else no_grad)
    kv = rows * keys * layers * 2 * shape["kv_heads"] * shape["head_dim"] * FLOAT * 2 if cache else 0  # + laid-out copy
    logit_bytes = rows * logits * shape["vocab"] * FLOAT * (LOGIT_COPIES if grad else 2)
    return activations + attention + kv + logit_bytes


def estimate(config: Any, model_config: Any, *, learners: int = 1) -> Estimate:
    """Estimate the peak memory of a run of ``config`` (a ``TrainConfig``) with models of ``model_config``.

    ``learners`` counts the trained models (one per distinct policy name that is not scripted).
    """
    shape = model_shape(model_config)
    budget = int(config.max_forward_tokens)
    longest = int(config.max_prompt_tokens) + int(config.max_new_tokens)
    hidden, vocab, layers, mlp = shape["hidden"], shape["vocab"], shape["layers"], shape["mlp"]
    params = 2 * vocab * hidden + layers * (4 * hidden * hidden + 3 * hidden * mlp + 2 * hidden)
    copies = 4  # weights, gradients, AdamW's two moments
    copies += bool(config.beta) + bool(config.average_ema) + (config.pool_size if config.pool_every else 0)
    resident = PROCESS_BYTES + learners * params * FLOAT * copies

    # ROLLOUT: the largest prefill chunk (rows within the budget, a longer row in column chunks), no grad
    rows = max(1, min(int(config.rollout_batch_size), budget // longest))
    query = max(1, min(longest, budget // rows))
    rollout = pass_bytes(shape, rows, query, longest, grad=False, cache=True)
    # UPDATE: the largest micro-batch within micro_batch_size and the budget, forward and backward; a row
    # longer than the budget runs in column chunks whose saved activations still add up to the whole row
    rows = max(1, min(int(config.micro_batch_size), budget // longest))
    update = pass_bytes(shape, rows, longest, longest, grad=True, logits=int(config.max_new_tokens))
    if config.beta:  # the reference's no-grad pass runs while the learner's graph is held
        update += pass_bytes(shape, rows, min(longest, budget // rows), longest, grad=False,
                             logits=int(config.max_new_tokens))
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
        rows = min(int(getattr(config, batch_field)), config.max_forward_tokens // longest)
        if rows <= 1:  # one sequence a pass already: only a shorter sequence helps
            fields = ["max_prompt_tokens", "max_new_tokens"]
        elif getattr(config, batch_field) < config.max_forward_tokens // longest:  # the batch field binds
            fields = [batch_field, "max_prompt_tokens", "max_new_tokens"]
        else:
            fields = ["max_forward_tokens", "max_prompt_tokens", "max_new_tokens"]
        if found.parts["resident"] > limit * GIB:
            fields = ["model_hidden_size", "model_layers", "pool_size"]
        raise ValueError(
            f"this run would need about {found.gib:.2f} GiB ({found.describe()}), over memory_limit_gb="
            f"{limit:g}: its largest pass is the {dominant}, sequences of up to max_prompt_tokens + max_new_tokens = "
            f"{longest} tokens, {max(1, rows)} of them a pass (max_forward_tokens={config.max_forward_tokens}). Lower "
            f"{', '.join(fields)} (e.g. --set {fields[0]}=...), or raise memory_limit_gb if the machine has the memory."
        )
    return found


def micro_batches(batch: Sequence[Any], micro_batch_size: int, token_budget: int | None) -> list[list[Any]]:
    """Split a step's samples (with ``prompt_ids`` and ``completion_ids``) into the update's micro-batches.

    First ``micro_batch_size`` samples at a time, in order, as before; then each of those, when its
    distinct (prompt, completion) rows times their padded length exceed ``token_budget``, into chunks
    within it (:func:`~llm_zoo.scoring.row_chunks`; rows of one distinct pair stay together). A
    micro-batch within the budget is kept whole, so runs whose passes fit are unchanged.
    """
    out: list[list[Any]] = []
    for start in range(0, len(batch), micro_batch_size):
        mb = list(batch[start:start + micro_batch_size])
        if token_budget is None:
            out.append(mb)
            continue
        keys = [(tuple(b.prompt_ids), tuple(b.completion_ids)) for b in mb]
        distinct, row_of = dedupe(keys)
        width = max(len(c) for _, c in distinct)
        prompt = max(len(p) for p, _ in distinct)
        if len(distinct) * (prompt + width) <= token_budget:
            out.append(mb)
            continue
        chunks = row_chunks([len(p) + width for p, _ in distinct], token_budget)
        chunk_of = {d: c for c, members in enumerate(chunks) for d in members}
        parts: list[list[Any]] = [[] for _ in chunks]
        for sample, d in zip(mb, row_of):
            parts[chunk_of[d]].append(sample)
        out.extend(parts)
    return out
