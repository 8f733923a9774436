"""The scoring pass: log-probs of given completions under a causal LM, by teacher forcing.

:func:`completion_logprobs` is what the trainer's loss, the policies' ``logprobs_of`` and the
evaluators read; the rest of this module is its public toolkit, which the sampler
(:mod:`llm_zoo.policies.transformers`) shares: padding helpers (:func:`left_pad`,
:func:`right_pad`, :func:`position_ids_of`), row deduplication (:func:`dedupe`), the shared-prefix
plan (:func:`plan_prefixes`, :func:`forward_prompts`) and the token-tree plan (:func:`plan_tree`,
:func:`prefix_tree`, :func:`forward_tree`).

The log-prob of a token is ``log_softmax(logits / temperature)[token]`` in float32, the quantity
the sampler records for each sampled token (before top-p truncation), so a recomputed log-prob
matches the sampling one to float rounding.

Shared prompt prefixes
----------------------
Prompts of one batch often start alike: the same system prompt in every seat, the same game state
in many envs. Sampling and :func:`completion_logprobs` therefore run each distinct prompt once (rows
with the same prompt share its logits and KV cache) and run a prefix shared by several prompts
once: a first forward pass computes the KV cache of each shared prefix (one row per group of
prompts, :func:`plan_prefixes` picks the groups), the cache is copied out to the group's prompts,
and a second pass runs only what follows the prefix, laid out as ``prefix + left-padded rest``
with the pads masked and position ids that go on counting real tokens from the prefix length. The
attention of every token is the same as in one pass over the whole prompt, so log-probs agree
with an unshared pass to float rounding (about 1e-6 in float32), and gradients flow through the
copied cache. ``share_prefix=False`` (on the policy and on :func:`completion_logprobs`) runs
every row whole, as the reference. Nothing is cached across calls: the trainer updates the weights
in place between rollouts, and a stale prefix would go unnoticed.

One-token replies (``max_new_tokens=1``) need only the logits after each prompt's last token, no
cache to decode from, so the distinct prompts may also run as one token tree: their trie (each
distinct prefix once, one token per node) laid out as a single sequence, with an additive 4D
attention mask that lets each node attend to itself and its ancestors only, and position ids that
give each node its depth (:func:`prefix_tree`, :func:`forward_tree`; tree attention as in
SpecInfer and Medusa). That runs the fewest tokens of any plan, in one pass; its attention is one
dense square over all the nodes, so prompts that part early (two seats whose system prompts differ
at the seat's name) may run as separate tries, one per row of the pass, each square a quarter the
size. :func:`plan_tree` picks the tries, and picks them only when their cost, counted in tokens
and attention pairs, is below both the whole pass and the shared-prefix plan. It needs an
attention that reads a custom 4D mask as given (transformers' sdpa and eager, no sliding window).

Turns of one conversation
-------------------------
A multi-turn episode gives one row per turn, and each turn's prompt is the conversation so far: the
previous turn's prompt and reply, then what the others said. Where a row's whole sequence (prompt
then completion, as tokens) begins a longer row, a causal model computes that row's log-probs inside
the longer row's pass, the same to float rounding: :func:`plan_nesting` finds, for each row, the
longest row that extends it (its host), and :func:`completion_logprobs` runs each host once as a row
whose completion starts at the earliest prompt end it hosts, then reads every hosted row's log-probs
off its span (the log-softmax runs on the replies' columns only, not on the others' words between
them). An episode of eight turns then costs one pass over its last turn's row instead of
eight passes over growing prompts; it needs no KV cache, so it holds under gradient checkpointing.
A reply the next prompt spells in other tokens (a sampled tokenisation that re-encoding would not
give) nests nowhere and is scored as its own row. Rows with a decoding mask (``allowed``) and
one-token replies keep the plans above.

A token budget
--------------
Memory of a forward pass grows with its rows times its padded length (activations, KV cache) and,
in attention, with rows times query length times key length. ``token_budget`` (on
:func:`completion_logprobs` and :func:`forward_prompts`, and the policy's ``max_forward_tokens``)
bounds the first: :func:`row_chunks` splits the distinct rows, in order, into chunks whose rows
times padded length stay within it (a row longer than the budget alone), each chunk scored by its
own plan; and a pass whose rows times new tokens still exceed it runs its new tokens in column
chunks on top of the KV cache of the chunks before (:func:`forward_in_chunks`), which bounds the
attention scores to rows x chunk x keys. Each chunk's tokens attend to exactly what they attend to
in one pass, so log-probs agree with the unchunked pass to float rounding; ``None`` (the default)
runs the whole batch as one pass, as before.
"""

from __future__ import annotations

from collections.abc import Callable, Hashable, Iterable, Sequence
from dataclasses import dataclass
from typing import Any, TypeVar

import numpy as np
import torch
from transformers import PreTrainedModel

from llm_zoo.policies.compat import cache_argument, forward_params, keep_logits_kwargs

__all__ = [
    "NestPlan", "PASS_COST_TOKENS", "Past", "PrefixPlan", "PrefixTree", "TreeRows", "allowed_mask",
    "checkpoints_activations", "common_length", "completion_logprobs", "dedupe", "dedupe_rows", "forward_in_chunks",
    "forward_prompts", "forward_tree", "left_pad", "long_tensor", "nests", "one_token_tree_logits", "plan_nesting",
    "plan_prefixes", "plan_tree", "position_ids_of", "prefix_tree", "right_pad", "row_chunks", "tree_pair_cost",
    "tree_rows",
]


def completion_logprobs(
    model: PreTrainedModel,
    prompts_ids: Sequence[Sequence[int]],
    completions_ids: Sequence[Sequence[int]],
    *,
    pad_token_id: int,
    temperature: float = 1.0,
    with_entropy: bool = False,
    share_prefix: bool = True,
    allowed: Sequence[Sequence[Sequence[int]] | None] | None = None,
    with_all_logps: bool = False,
    token_budget: int | None = None,
) -> tuple[torch.Tensor, ...]:
    """Score completions given prompts by teacher forcing.

    The batch is laid out as sampling lays it out: prompts left-padded to a common length, then
    completions right-padded, with an attention mask over real tokens and position ids counting
    real tokens only. Only the logits that predict completion tokens are computed. Gradients flow
    when called outside ``torch.no_grad``, so the trainer can use it for the policy loss.

    With ``share_prefix`` (the default), each distinct (prompt, completion) pair is scored once and
    a prompt prefix shared by several rows runs once, in a first pass whose KV cache the second pass
    reads (module docstring): the same log-probs and gradients, to float rounding, for less work.
    It falls back to one pass when the model uses gradient checkpointing, which drops the cache; repeated
    rows are still scored once there.
    When every completion is one token, the distinct prompts run instead as one token tree (each
    shared prefix once; :func:`forward_tree`), where that is the cheaper plan. Where rows nest (a
    conversation's turns, none under ``allowed``), each is read off its longest row's pass instead
    (:func:`plan_nesting`), with or without gradient checkpointing.

    Args:
        model: The causal LM (on its device).
        prompts_ids: Token ids of each prompt, unpadded.
        completions_ids: Token ids of each completion, unpadded; may be empty.
        pad_token_id: Filler for padding (never attended to).
        temperature: Divides the logits before the log-softmax; must be > 0.
        with_entropy: Also return the entropy of the tempered next-token distribution at each
            completion position (``per_token_entropy``, same shape, 0 on padding).
        share_prefix: Share repeated rows and prompt prefixes; ``False`` runs every row whole in one pass.
        allowed: Per row, None (unconstrained) or the tokens allowed at each completion position
            (:mod:`llm_zoo.policies.constraints`): the distribution is renormalised over them, as
            constrained sampling draws from it.
        with_all_logps: Also return the full log-probability rows ``[batch, max_completion_len,
            vocab]`` (``-inf`` on disallowed tokens), for an exact KL between two models.
        token_budget: The most tokens (rows x padded length) one forward pass runs: the distinct
            rows are scored in chunks under it (module docstring), to float rounding the same
            log-probs. None: one pass. Under gradients every chunk's activations live until the
            caller's backward, so there it bounds the passes' transient memory (attention scores,
            logits), not the saved activations: the trainer sizes its micro-batches for those.

    Returns:
        ``per_token_logps`` [batch, max_completion_len], float32, and ``completion_mask`` of the
        same shape (1 on real completion tokens, 0 on padding, whose log-probs are 0); then
        ``per_token_entropy`` when ``with_entropy``; then the full log-probs when ``with_all_logps``.
    """
    if len(prompts_ids) != len(completions_ids):
        raise ValueError(
            f"completion_logprobs needs one completion per prompt, got {len(prompts_ids)} prompts "
            f"and {len(completions_ids)} completions."
        )
    if temperature <= 0:
        raise ValueError(f"completion_logprobs: temperature must be > 0, got {temperature!r}.")
    device = next(model.parameters()).device
    width = max((len(c) for c in completions_ids), default=0)
    if width == 0:
        empty = torch.zeros(len(prompts_ids), 0, device=device)
        vocab = model.get_output_embeddings().weight.shape[0]
        return (empty, empty.long(), *([empty] if with_entropy else []),
                *([torch.zeros(len(prompts_ids), 0, vocab, device=device)] if with_all_logps else []))
    allowed = list(allowed) if allowed is not None else [None] * len(prompts_ids)
    if share_prefix and nests(completions_ids, allowed):
        nesting = plan_nesting(prompts_ids, completions_ids)
        if nesting is not None:
            return _nested_logprobs(model, nesting, completions_ids, width=width, pad_token_id=pad_token_id,
                                    temperature=temperature, with_entropy=with_entropy,
                                    with_all_logps=with_all_logps, token_budget=token_budget)
    merge_rows = share_prefix  # repeated rows are scored once: no cache needed, so checkpointing keeps it
    if share_prefix and model.training and torch.is_grad_enabled() and checkpoints_activations(model):
        share_prefix = False
    if token_budget is not None:
        if token_budget < 1:
            raise ValueError(f"completion_logprobs: token_budget must be >= 1 (or None), got {token_budget!r}.")
        keys: list[Any] = (list(zip(map(tuple, prompts_ids), map(tuple, completions_ids))) if merge_rows
                           else list(range(len(prompts_ids))))  # without sharing, every row is its own
        distinct, _ = dedupe(keys)
        chunks = row_chunks([len(prompts_ids[k] if isinstance(k, int) else k[0]) + width for k in distinct],
                            token_budget)
        if len(chunks) > 1:
            return _chunked_logprobs(model, prompts_ids, completions_ids, allowed, keys, distinct, chunks,
                                     pad_token_id=pad_token_id, temperature=temperature, with_entropy=with_entropy,
                                     share_prefix=share_prefix, merge_rows=merge_rows,
                                     with_all_logps=with_all_logps, width=width, token_budget=token_budget)
    return _completion_logprobs(model, prompts_ids, completions_ids, allowed, pad_token_id=pad_token_id,
                                temperature=temperature, with_entropy=with_entropy, share_prefix=share_prefix,
                                merge_rows=merge_rows, with_all_logps=with_all_logps, width=width, device=device,
                                token_budget=token_budget)


@dataclass
class NestPlan:
    """Rows read off longer rows' passes (:func:`plan_nesting`): the rows that run, and where each row's reply lies."""

    prompts: list[tuple[int, ...]]
    """Each host's prompt: its sequence up to the earliest prompt end among the rows it hosts."""
    completions: list[tuple[int, ...]]
    """Each host's completion: the rest of its sequence (every hosted reply, and what lies between them)."""
    host: list[int]
    """Each row's host (an index into ``prompts``)."""
    offset: list[int]
    """Where each row's completion starts in its host's completion."""


def nests(completions_ids: Sequence[Sequence[int]], allowed: Sequence[Any]) -> bool:
    """Whether rows may be read off longer rows' passes (:func:`plan_nesting`): replies of more than one token, none
    under a decoding mask (those keep the token-tree and shared-prefix plans)."""
    return max((len(c) for c in completions_ids), default=0) > 1 and all(a is None for a in allowed)


def plan_nesting(prompts_ids: Sequence[Sequence[int]], completions_ids: Sequence[Sequence[int]]) -> NestPlan | None:
    """Find rows whose sequence (prompt + completion) begins another row's, to be scored inside it; else None.

    Sorted, a sequence that begins others sits just before them, so each row's host is its
    successor's host when it begins its successor, else itself. The plan is kept when it runs fewer
    padded tokens (hosts x (longest prompt + longest completion)) than the rows do.
    """
    n = len(prompts_ids)
    if n < 2:
        return None
    seqs = [tuple(p) + tuple(c) for p, c in zip(prompts_ids, completions_ids)]
    order = sorted(range(n), key=seqs.__getitem__)
    top = list(range(n))  # each row's host, as a row index
    for a, b in zip(reversed(order[:-1]), reversed(order[1:])):
        if seqs[b][: len(seqs[a])] == seqs[a]:
            top[a] = top[b]
    hosts, host_of = dedupe(top)
    if len(hosts) == n:
        return None
    start = [len(seqs[h]) for h in hosts]
    for i, h in enumerate(host_of):
        start[h] = min(start[h], len(prompts_ids[i]))
    start = [min(s, len(seqs[h]) - 1) for h, s in zip(hosts, start)]  # a host scores one column at least
    if min(start) < 1:
        return None  # an empty prompt: no logit predicts its first token
    width = max(len(c) for c in completions_ids)
    before = n * (max(len(p) for p in prompts_ids) + width)
    after = len(hosts) * (max(start) + max(len(seqs[h]) - s for h, s in zip(hosts, start)))
    if after >= before:
        return None
    return NestPlan([seqs[h][:s] for h, s in zip(hosts, start)], [seqs[h][s:] for h, s in zip(hosts, start)],
                    host_of, [len(prompts_ids[i]) - start[h] for i, h in enumerate(host_of)])


def _nested_logprobs(model: PreTrainedModel, plan: NestPlan, completions_ids: Sequence[Sequence[int]], *,
                     width: int, pad_token_id: int, temperature: float, with_entropy: bool, with_all_logps: bool,
                     token_budget: int | None) -> tuple[torch.Tensor, ...]:
    """Run ``plan``'s hosts (in chunks under ``token_budget``) and score each row's reply off its host's span.

    Only the columns some hosted reply occupies are scored (a conversation's other words, the user's and the
    tools', get no log-softmax): a host's scored positions are about its replies' tokens, not its whole length.
    """
    device = next(model.parameters()).device
    hosted: list[list[int]] = [[] for _ in plan.prompts]
    for i, h in enumerate(plan.host):
        hosted[h].append(i)
    columns = [sorted({plan.offset[i] + j for i in rows for j in range(len(completions_ids[i]))}) for rows in hosted]
    slot = [{c: k for k, c in enumerate(cols)} for cols in columns]  # host column -> its place among the scored
    scored = max(1, max(len(cols) for cols in columns))
    # the passes keep a KV cache for a shared prefix, except where checkpointing drops it (completion_logprobs)
    share = not (model.training and torch.is_grad_enabled() and checkpoints_activations(model))
    chunks = (row_chunks([len(p) + max(map(len, plan.completions)) for p in plan.prompts], token_budget)
              if token_budget is not None else [list(range(len(plan.prompts)))])
    parts: list[tuple[torch.Tensor, ...]] = []
    order: list[int] = []
    for chunk in chunks:
        host_width = max(len(plan.completions[h]) for h in chunk)
        ids, mask = right_pad([plan.completions[h] for h in chunk], pad_token_id, device, width=host_width)
        out, _ = forward_prompts(model, [plan.prompts[h] for h in chunk], pad_token_id, device,
                                 completions=(ids, mask), share_prefix=share, use_cache=False, token_budget=token_budget)
        at = long_tensor([c for h in chunk for c in columns[h] + [0] * (scored - len(columns[h]))], device)
        at = at.view(len(chunk), scored)
        window = out.logits[:, -(host_width + 1):-1, :]  # the logit at position i predicts token i + 1
        logits = window.gather(1, at[:, :, None].expand(-1, -1, window.shape[-1])).float() / temperature
        del out, window
        parts.append(_score_logits(logits, ids.gather(1, at), None, with_entropy))
        order.extend(chunk)
    place = {h: k for k, h in enumerate(order)}
    lengths = torch.tensor([len(c) for c in completions_ids], device=device)
    mask = (torch.arange(width, device=device)[None, :] < lengths[:, None]).long()
    rows = long_tensor([place[h] for h in plan.host], device)[:, None]
    index = long_tensor([[slot[h][plan.offset[i] + j] if j < len(completions_ids[i]) else 0 for j in range(width)]
                         for i, h in enumerate(plan.host)], device)
    per_token_logps, entropy, all_logps = (None if t[0] is None else torch.cat(t) for t in zip(*parts))
    result = [per_token_logps[rows, index] * mask, mask]
    if with_entropy:
        result.append(entropy[rows, index] * mask)
    if with_all_logps:
        result.append(all_logps[rows, index])
    return tuple(result)


def _score_logits(logits: torch.Tensor, tokens: torch.Tensor, allowed: torch.Tensor | None, with_entropy: bool
                  ) -> tuple[torch.Tensor, torch.Tensor | None, torch.Tensor]:
    """Return the log-probs of ``tokens`` under ``logits`` ([rows, width, vocab], tempered), renormalised over
    ``allowed`` where given, their entropies (None without ``with_entropy``) and the full log-prob rows."""
    if allowed is not None:
        logits = logits.masked_fill(~allowed, float("-inf"))
    all_logps = torch.log_softmax(logits, dim=-1)
    per_token_logps = all_logps.gather(2, tokens[:, :, None]).squeeze(2)
    per_token_entropy = None
    if with_entropy:  # p log p with p = 0 on disallowed tokens counts 0, not nan
        finite = torch.isfinite(all_logps)
        safe = torch.where(finite, all_logps, 0.0)  # -inf in the arithmetic would make NaN gradients
        plogp = torch.where(finite, safe.exp() * safe, 0.0)
        per_token_entropy = -plogp.sum(dim=-1)
    return per_token_logps, per_token_entropy, all_logps


def _chunked_logprobs(model: PreTrainedModel, prompts_ids: Sequence[Sequence[int]],
                      completions_ids: Sequence[Sequence[int]], allowed: list[Any], keys: list[tuple],
                      distinct: list[tuple], chunks: list[list[int]], *, width: int, **kwargs: Any,
                      ) -> tuple[torch.Tensor, ...]:
    """Score the rows of ``completion_logprobs`` chunk by chunk (``chunks``: indices into ``distinct``), each
    chunk padded to the batch's completion ``width``; return the outputs in the rows' order."""
    chunk_of = {}
    for c, members in enumerate(chunks):
        for m in members:
            chunk_of[distinct[m]] = c
    rows_of: list[list[int]] = [[] for _ in chunks]
    for i, key in enumerate(keys):
        rows_of[chunk_of[key]].append(i)
    device = next(model.parameters()).device
    parts, order = [], []
    for rows in rows_of:
        parts.append(_completion_logprobs(
            model, [prompts_ids[i] for i in rows], [completions_ids[i] for i in rows], [allowed[i] for i in rows],
            width=width, device=device, **kwargs))
        order.extend(rows)
    inverse = torch.empty(len(order), dtype=torch.long)
    inverse[torch.tensor(order)] = torch.arange(len(order))
    inverse = inverse.to(device)
    return tuple(torch.cat(tensors)[inverse] for tensors in zip(*parts))


def row_chunks(lengths: Sequence[int], token_budget: int) -> list[list[int]]:
    """Split rows (their token counts ``lengths``), in order, into chunks of at most ``token_budget`` padded tokens.

    A chunk costs its row count times its longest row, as a padded pass runs it; a row is added to
    the current chunk while that stays within the budget, else it starts the next chunk. A row
    longer than the budget makes a chunk of its own (its pass then runs in column chunks,
    :func:`forward_in_chunks`). Returns lists of row indices that cover every row once, in order.
    """
    chunks: list[list[int]] = []
    longest = 0
    for i, n in enumerate(lengths):
        if chunks and (len(chunks[-1]) + 1) * max(longest, n) <= token_budget:
            chunks[-1].append(i)
            longest = max(longest, n)
        else:
            chunks.append([i])
            longest = n
    return chunks


def _completion_logprobs(
    model: PreTrainedModel,
    prompts_ids: Sequence[Sequence[int]],
    completions_ids: Sequence[Sequence[int]],
    allowed: list[Any],
    *,
    pad_token_id: int,
    temperature: float,
    with_entropy: bool,
    share_prefix: bool,
    merge_rows: bool,
    with_all_logps: bool,
    width: int,
    device: torch.device,
    token_budget: int | None,
) -> tuple[torch.Tensor, ...]:
    """One chunk of :func:`completion_logprobs` (its arguments checked), completions padded to ``width``.
    ``merge_rows``: score each distinct (prompt, completion, allowed) row once (``share_prefix`` implies it)."""
    tree_logits = one_token_tree_logits(model, prompts_ids, completions_ids, device) if share_prefix else None
    if tree_logits is not None:
        prompts, completions, row_of = list(prompts_ids), list(completions_ids), None
    elif share_prefix or merge_rows:
        keys = zip(map(tuple, prompts_ids), map(tuple, completions_ids),
                   (None if a is None else tuple(map(tuple, a)) for a in allowed))
        triples, row_of = dedupe(keys)
        prompts, completions, allowed = [t[0] for t in triples], [t[1] for t in triples], [t[2] for t in triples]
    else:
        prompts, completions, row_of = list(prompts_ids), list(completions_ids), None
    completion_ids, completion_mask = right_pad(completions, pad_token_id, device, width=width)
    if tree_logits is not None:
        logits = tree_logits.float() / temperature  # [rows, 1, vocab]
    else:
        out, _ = forward_prompts(
            model,
            prompts,
            pad_token_id,
            device,
            completions=(completion_ids, completion_mask),
            share_prefix=share_prefix,
            use_cache=False,
            token_budget=token_budget,
        )
        # The logit at position i predicts token i + 1: the last width + 1 positions minus the final one.
        logits = out.logits[:, -(width + 1) : -1, :].float() / temperature  # [distinct, width, vocab]
    masked = allowed_mask(allowed, width, logits.shape[-1], device) if any(a is not None for a in allowed) else None
    per_token_logps, per_token_entropy, all_logps = _score_logits(logits, completion_ids, masked, with_entropy)
    per_token_logps = per_token_logps * completion_mask
    if per_token_entropy is not None:
        per_token_entropy = per_token_entropy * completion_mask
    if row_of is not None and len(row_of) > len(prompts):
        rows = torch.tensor(row_of, device=device)  # back to one row per input pair
        per_token_logps, completion_mask = per_token_logps[rows], completion_mask[rows]
        per_token_entropy = None if per_token_entropy is None else per_token_entropy[rows]
        all_logps = all_logps[rows]
    result = [per_token_logps, completion_mask]
    if with_entropy:
        result.append(per_token_entropy)
    if with_all_logps:
        result.append(all_logps)
    return tuple(result)


def one_token_tree_logits(
    model: PreTrainedModel,
    prompts_ids: Sequence[Sequence[int]],
    completions_ids: Sequence[Sequence[int]],
    device: torch.device,
) -> torch.Tensor | None:
    """Return each row's next-token logits [rows, 1, vocab] from one token-tree pass, where that pays.

    Only for completions of exactly one token (as the Kuhn main job samples): a one-token
    completion's log-prob is read off its prompt's last logits, so its own token never needs to
    run, and the distinct prompts can share every prefix in one pass (:func:`forward_tree`).
    None when the completions are longer, the model cannot run a tree, or another plan is cheaper.
    (The caller has already ruled out gradient checkpointing.)
    """
    if any(len(c) != 1 for c in completions_ids):
        return None
    distinct, prompt_of = dedupe(map(tuple, prompts_ids))
    tree = plan_tree(model, distinct) if len(distinct) > 1 else None
    if tree is None:
        return None
    last = forward_tree(model, tree, device)  # [distinct prompts, vocab]
    return last[long_tensor(prompt_of, device)][:, None, :]


def allowed_mask(allowed: Sequence[Any], width: int, vocab: int, device: torch.device) -> torch.Tensor:
    """Build [rows, width, vocab] booleans: True where a token is allowed (everywhere, for None rows).

    A batch repeats a few allowed sets (Kuhn's 256 rows hold about 4): one mask row is built per
    distinct set, then one gather gives every row its own."""
    kinds: dict[Any, int] = {}
    kind_of = [kinds.setdefault(None if row is None else tuple(map(tuple, row[:width])), len(kinds))
               for row in allowed]
    distinct = torch.ones(len(kinds), width, vocab, dtype=torch.bool)
    for key, k in kinds.items():
        for t, tokens in enumerate(key or ()):
            if tokens:
                distinct[k, t] = False
                distinct[k, t, list(tokens)] = True
    mask = distinct if len(kinds) == len(kind_of) else distinct[torch.tensor(kind_of)]
    return mask.to(device)


def forward_prompts(
    model: PreTrainedModel,
    prompts: Sequence[Sequence[int]],
    pad_token_id: int,
    device: torch.device,
    *,
    completions: tuple[torch.Tensor, torch.Tensor] | None = None,
    share_prefix: bool,
    use_cache: bool,
    token_budget: int | None = None,
    past: Past | None = None,
) -> tuple[Any, torch.Tensor]:
    """Run left-padded prompts, then ``completions`` (right-padded ids and mask), through ``model``.

    With ``share_prefix``, when :func:`plan_prefixes` finds prefixes worth sharing, a first pass
    runs each shared prefix once and its KV cache is copied out to the prompts of its group; the
    returned pass then runs the rest of each prompt (left-padded) and the completions, on top of
    that cache. With ``past``, the KV of each prompt's first tokens computed before (a policy's kept
    turns), the pass runs on top of that instead. Logits are kept for the last ``1 + completion
    width`` positions. A pass whose rows times new tokens exceed ``token_budget`` runs in column
    chunks (:func:`forward_in_chunks`).

    Returns:
        The model output of the last pass, and its attention mask [batch, cache + new positions].
    """
    cache_arg = cache_argument(model)
    plan = plan_prefixes(prompts) if share_prefix and past is None else None
    kwargs: dict[str, Any] = {}
    shared: list[int] | None = None
    if past is not None:
        kwargs[cache_arg], prefix_mask, shared = past.cache, past.mask, list(past.shared)
    elif plan is not None:
        prefix_ids, prefix_mask = left_pad(plan.prefixes, pad_token_id, device)
        first = forward_in_chunks(
            model, prefix_ids, prefix_mask, position_ids_of(prefix_mask), keep=1, token_budget=token_budget,
            use_cache=True,
        )
        groups = torch.tensor(plan.group_of, device=device)
        cache = getattr(first, cache_arg)
        cache.batch_select_indices(groups)  # a gather of keys and values: gradients flow back
        kwargs[cache_arg], prefix_mask, shared = cache, prefix_mask[groups], plan.shared
    if shared is None:
        input_ids, attention_mask = left_pad(prompts, pad_token_id, device)
    else:
        input_ids, attention_mask = left_pad([p[n:] for p, n in zip(prompts, shared)], pad_token_id, device)
    if completions is not None:
        input_ids = torch.cat([input_ids, completions[0]], dim=1)
        attention_mask = torch.cat([attention_mask, completions[1]], dim=1)
    position_ids = position_ids_of(attention_mask)
    if shared is not None:
        position_ids = position_ids + torch.tensor(shared, device=device)[:, None]
        attention_mask = torch.cat([prefix_mask, attention_mask], dim=1)
    out = forward_in_chunks(
        model, input_ids, attention_mask, position_ids, keep=1 + (0 if completions is None else completions[0].shape[1]),
        token_budget=token_budget, use_cache=use_cache or shared is not None, **kwargs,
    )
    return out, attention_mask


@dataclass
class Past:
    """KV computed before for the first tokens of each prompt of a pass (:func:`forward_prompts`)."""

    cache: Any
    """A KV cache of ``rows x width`` positions, each row's left-padded."""
    mask: torch.Tensor
    """``[rows, width]``: 1 where a row's cache holds a token, 0 on its padding."""
    shared: Sequence[int]
    """How many of each prompt's first tokens the cache holds (a row's pass starts after them)."""


def forward_in_chunks(
    model: PreTrainedModel,
    input_ids: torch.Tensor,
    attention_mask: torch.Tensor,
    position_ids: torch.Tensor,
    *,
    keep: int,
    token_budget: int | None,
    use_cache: bool,
    **kwargs: Any,
) -> Any:
    """Run ``input_ids`` [rows, new] through ``model``, in column chunks of at most ``token_budget`` tokens.

    ``attention_mask`` covers the KV cache passed in ``kwargs`` (if any) and the new tokens;
    ``position_ids`` the new tokens. Each chunk runs on top of the cache of what came before it,
    so every token attends to what it attends to in one pass: a chunk's attention scores are
    rows x chunk x keys instead of rows x new x keys. The output is the last chunk's, its
    ``logits`` those of the last ``keep`` new positions (as ``logits_to_keep=keep`` gives them)
    and its cache (when one was asked for, or chunks ran) the whole sequence's. ``token_budget``
    None, or a pass within it, is one ordinary call.
    """
    rows, new = input_ids.shape
    step = new if token_budget is None else max(1, token_budget // max(1, rows))
    if step >= new:
        return model(input_ids=input_ids, attention_mask=attention_mask, position_ids=position_ids,
                     use_cache=use_cache, **kwargs, **keep_logits_kwargs(model, keep))
    cache_arg = cache_argument(model)
    past = attention_mask.shape[1] - new  # columns of the mask that the cache holds
    pieces: list[torch.Tensor] = []
    out = None
    for start in range(0, new, step):
        end = min(new, start + step)
        wanted = max(0, end - max(start, new - keep))  # this chunk's positions among the last `keep`
        out = model(input_ids=input_ids[:, start:end], attention_mask=attention_mask[:, : past + end],
                    position_ids=position_ids[:, start:end], use_cache=True, **kwargs,
                    **keep_logits_kwargs(model, max(1, wanted)))
        kwargs[cache_arg] = getattr(out, cache_arg)
        if wanted:
            pieces.append(out.logits[:, -wanted:])
    assert out is not None
    out.logits = torch.cat(pieces, dim=1)
    return out


@dataclass
class PrefixPlan:
    """Groups of prompts that share a prefix: what runs once per group and where each prompt resumes."""

    prefixes: list[Sequence[int]]
    """The shared tokens of each group."""
    group_of: list[int]
    """Each prompt's group."""
    shared: list[int]
    """Each prompt's count of tokens inside its group's prefix."""


PASS_COST_TOKENS = 64


"""The fixed cost of an extra forward pass, counted in tokens run: a prefix pass must save more."""


def plan_prefixes(
    prompts: Sequence[Sequence[int]], sorted_common: tuple[Sequence[int], Sequence[int]] | None = None
) -> PrefixPlan | None:
    """Group prompts by shared prefix when running each prefix once saves work; else return None.

    Sorted, prompts that share a prefix sit side by side; the groups are the runs of neighbours
    that share at least ``depth`` tokens, for each depth that occurs. A plan costs the padded
    tokens of both passes (groups x longest prefix, prompts x longest rest) plus
    ``PASS_COST_TOKENS``; the cheapest wins if it beats one pass over the whole prompts. A prefix
    stops at least one token short of each of its prompts, whose last logits the second pass
    computes. A group of one prompt shares nothing, so its prefix just takes the width the prefix
    pass has anyway.

    Prompts compare as sequences of one type (tuples or lists, not mixed). ``sorted_common``, when
    the caller has it, is their sorted order and the leading tokens each shares with the next.
    """
    n = len(prompts)
    lengths = [len(p) for p in prompts]
    if n < 2 or min(lengths) < 2:
        return None
    if sorted_common is None:
        order = sorted(range(n), key=prompts.__getitem__)
        common = [common_length(prompts[a], prompts[b]) for a, b in zip(order, order[1:])]
    else:
        order, common = sorted_common
    best_cost, best = n * max(lengths), None
    for depth in sorted(set(common) - {0}):
        groups: list[list[int]] = []
        shared: list[int | None] = []  # None: a group of one
        start = 0
        for end in [k + 1 for k, c in enumerate(common) if c < depth] + [n]:
            group = order[start:end]
            groups.append(group)
            shared.append(
                min(min(common[start : end - 1]), min(lengths[i] for i in group) - 1)
                if len(group) > 1
                else None
            )
            start = end
        widths = [s for s in shared if s is not None]
        if not widths:
            continue
        width = max(widths)
        resolved = [min(width, lengths[g[0]] - 1) if s is None else s for g, s in zip(groups, shared)]
        rest = max(lengths[i] - s for g, s in zip(groups, resolved) for i in g)
        cost = len(groups) * width + n * rest + PASS_COST_TOKENS
        if cost < best_cost:
            best_cost, best = cost, (groups, resolved)
    if best is None:
        return None
    groups, resolved = best
    group_of, shared_of = [0] * n, [0] * n
    for g, (group, s) in enumerate(zip(groups, resolved)):
        for i in group:
            group_of[i], shared_of[i] = g, s
    return PrefixPlan([prompts[g[0]][:s] for g, s in zip(groups, resolved)], group_of, shared_of)


def common_length(a: Sequence[int], b: Sequence[int]) -> int:
    """Return how many leading tokens ``a`` and ``b`` share (a binary search over slice equality)."""
    low, high = 0, min(len(a), len(b))
    while low < high:
        mid = (low + high + 1) // 2
        if a[:mid] == b[:mid]:
            low = mid
        else:
            high = mid - 1
    return low


@dataclass
class PrefixTree:
    """Distinct prompts as one sequence of their distinct prefixes (a token trie): one token per node."""

    input_ids: list[int]
    """The token of each node, in the order the nodes run."""
    positions: list[int]
    """Each node's position in every prompt that holds it (its depth in the trie)."""
    branches: list[tuple[int, int, int | None]]
    """The nodes of each prompt that no earlier prompt holds, ``start:end``, and the node they hang
    from (None at the root), in node order."""
    last: list[int]
    """Each prompt's last node, in the order the prompts were given (or of the run, see :func:`prefix_tree`)."""


def prefix_tree(
    prompts: Sequence[Sequence[int]], sorted_shared: tuple[Sequence[int], Sequence[int]] | None = None
) -> PrefixTree:
    """Lay distinct, non-empty prompts out as their token trie, each prefix once.

    Prompts compare as sequences of one type (tuples or lists, not mixed). ``sorted_shared``, when
    the caller has it, is a run of the prompts in sorted order (indices into ``prompts``) and the
    leading tokens each shares with the one before it in the run (the first's is not read); the trie
    then holds that run only, and its ``last`` follows the run's order.
    """
    if sorted_shared is None:
        order: Sequence[int] = sorted(range(len(prompts)), key=prompts.__getitem__)
        shared_before = [0] + [common_length(prompts[a], prompts[b]) for a, b in zip(order, order[1:])]
    else:
        order, shared_before = sorted_shared
    input_ids: list[int] = []
    positions: list[int] = []
    branches: list[tuple[int, int, int | None]] = []
    last_in_order: list[int] = []
    path: list[int] = []  # the nodes of the previous prompt
    for k, (i, shared) in enumerate(zip(order, shared_before)):
        prompt = prompts[i]
        # Sorted, a prompt shares the most leading tokens with the one before it; a prompt that is
        # the prefix of another sorts first, so every prompt has at least its last token of its own.
        shared = shared if k else 0
        assert shared < len(prompt), "the prompts of a tree must be distinct"
        start = len(input_ids)
        input_ids.extend(prompt[shared:])
        positions.extend(range(shared, len(prompt)))
        branches.append((start, len(input_ids), path[shared - 1] if shared else None))
        path = path[:shared] + list(range(start, len(input_ids)))
        last_in_order.append(len(input_ids) - 1)
    if sorted_shared is not None:
        return PrefixTree(input_ids, positions, branches, last_in_order)
    last = [0] * len(prompts)
    for i, node in zip(order, last_in_order):
        last[i] = node
    return PrefixTree(input_ids, positions, branches, last)


@dataclass
class TreeRows:
    """Distinct prompts as token tries, one trie per row of a batch (prompts that share little apart)."""

    trees: list[PrefixTree]
    """One trie per row, each over a run of the prompts in sorted order."""
    members: list[list[int]]
    """The prompts of each trie, as indices into the planned prompts, in the order of its ``last``."""

    @property
    def width(self) -> int:
        """The longest trie's node count: every row is padded to it."""
        return max(len(tree.input_ids) for tree in self.trees)


def plan_tree(model: PreTrainedModel, prompts: Sequence[Sequence[int]]) -> TreeRows | None:
    """Return the token tries of distinct ``prompts`` when one pass over them is the cheapest plan; else None.

    Costs count the work of each plan's passes in tokens, where an attention (query, key) pair
    costs :func:`tree_pair_cost` of a token: a trie runs the fewest tokens (each prefix once, in
    one pass), but its attention is one dense masked square over all of its nodes, where one whole
    pass attends within each prompt and :func:`plan_prefixes` within each part. So prompts that
    share only their first few tokens (two seats' system prompts that differ at the seat's name)
    may run as separate tries, one per row (:func:`tree_rows`): a few tokens more, and squares a
    quarter of the size.
    """
    pair_cost = tree_pair_cost(model)
    if pair_cost is None or len(prompts) < 2 or min(len(p) for p in prompts) < 1:
        return None
    n, width = len(prompts), max(len(p) for p in prompts)
    best = n * width + n * width**2 * pair_cost  # one pass over the whole prompts
    order = sorted(range(n), key=prompts.__getitem__)
    common = [common_length(prompts[a], prompts[b]) for a, b in zip(order, order[1:])]
    plan = plan_prefixes(prompts, (order, common))
    if plan is not None:
        groups, prefix = len(plan.prefixes), max(len(p) for p in plan.prefixes)
        rest = max(len(p) - s for p, s in zip(prompts, plan.shared))
        pairs = groups * prefix**2 + n * rest * (prefix + rest)
        best = min(best, groups * prefix + n * rest + PASS_COST_TOKENS + pairs * pair_cost)
    cost, runs = tree_rows(prompts, order, common, pair_cost)
    if cost >= best:
        return None
    trees, start = [], 0  # each run is a stretch of the sorted order: its shared lengths are already known
    for run in runs:
        trees.append(prefix_tree(prompts, (run, [0, *common[start : start + len(run) - 1]])))
        start += len(run)
    return TreeRows(trees, runs)


def tree_rows(
    prompts: Sequence[Sequence[int]], order: Sequence[int], common: Sequence[int], pair_cost: float
) -> tuple[float, list[list[int]]]:
    """Split sorted prompts into the runs whose tries, one per padded row, cost least; return the cost and runs.

    ``order`` sorts the prompts and ``common[k]`` counts the leading tokens that the k-th and
    (k+1)-th sorted prompts share. Cutting wherever neighbours share fewer than ``depth`` tokens
    gives runs that are subtrees of the whole trie; each run's trie holds, past its first prompt,
    each prompt's tokens after those it shares with its neighbour. Depth 0 keeps one trie. A row
    costs its padded width in tokens plus its width squared in attention pairs.
    """
    best: tuple[float, list[list[int]]] | None = None
    for depth in sorted({0} | {c + 1 for c in common}):
        runs, sizes = [[order[0]]], [len(prompts[order[0]])]
        for i, shared in zip(order[1:], common):
            if shared < depth:
                runs.append([i])
                sizes.append(len(prompts[i]))
            else:
                runs[-1].append(i)
                sizes[-1] += len(prompts[i]) - shared
        width = max(sizes)
        cost = len(runs) * width * (1 + width * pair_cost)
        if best is None or cost < best[0]:
            best = (cost, runs)
    assert best is not None
    return best


def tree_pair_cost(model: PreTrainedModel) -> float | None:
    """Return what an attention pair costs, in tokens; None where the model cannot run a token tree.

    Per layer a token costs about ``4h² + 3hm`` multiply-adds in its projections and MLP (``h``
    the hidden size, ``m`` the MLP width) and a (query, key) pair ``2h`` (its score and its share
    of the weighted sum, over all heads). A tree needs position ids and an attention that reads a
    custom 4D mask as given (transformers' sdpa and eager, without sliding windows).
    """
    config = getattr(model, "config", None)
    hidden, mlp = getattr(config, "hidden_size", None), getattr(config, "intermediate_size", None)
    if (
        getattr(config, "_attn_implementation", None) not in ("sdpa", "eager")
        or getattr(config, "sliding_window", None) is not None
        or any(kind != "full_attention" for kind in getattr(config, "layer_types", None) or ())
        or not isinstance(hidden, int)
        or not isinstance(mlp, int)
        or "position_ids" not in forward_params(model)
    ):
        return None
    return 2 * hidden / (4 * hidden**2 + 3 * hidden * mlp)


def forward_tree(model: PreTrainedModel, rows: TreeRows, device: torch.device) -> torch.Tensor:
    """Run token tries, one per row, in one pass; return the logits after each prompt's last token [prompts, vocab].

    Every node attends to itself and its ancestors only, at its position in the prompts, so its
    keys, values and logits are those of a pass over any one prompt that holds it. Rows shorter than
    the longest are padded with nodes that attend to themselves only and are never read.
    """
    # The inputs are built in numpy: torch.tensor reads a Python list an element at a time, and a
    # small tensor's slice assignment costs several times numpy's; at this size both outweigh the
    # arithmetic. The additive mask is float32 there and cast to the model's dtype.
    dtype, count, width = model.dtype, len(rows.trees), rows.width
    blocked = torch.finfo(dtype).min  # sdpa and eager attention both read an additive mask
    longest = max(end - start for tree in rows.trees for start, end, _ in tree.branches)
    causal = np.triu(np.full((longest, longest), blocked, dtype=np.float32), 1)
    mask = np.full((count, width, width), blocked, dtype=np.float32)  # [row, query node, key node]
    input_ids = np.zeros((count, width), dtype=np.int64)
    positions = np.zeros((count, width), dtype=np.int64)
    at_row: list[int] = [0] * sum(map(len, rows.members))  # each prompt's row and last node
    at_node: list[int] = list(at_row)
    for row, (tree, members) in enumerate(zip(rows.trees, rows.members)):
        size, square = len(tree.input_ids), mask[row]
        input_ids[row, :size] = tree.input_ids
        positions[row, :size] = tree.positions
        for start, end, parent in tree.branches:
            # a branch sees what its parent sees and the parent, then itself causally
            if parent is not None:
                square[start:end] = square[parent]
            square[start:end, start:end] = causal[: end - start, : end - start]
        padding = np.arange(size, width)
        square[padding, padding] = 0.0
        for prompt, node in zip(members, tree.last):
            at_row[prompt], at_node[prompt] = row, node
    kwargs: dict[str, Any] = {}
    if keep_logits_kwargs(model, 1):  # logits_to_keep also takes the positions to keep
        kept = sorted(set(at_node))
        column = {node: k for k, node in enumerate(kept)}
        kwargs["logits_to_keep"] = long_tensor(kept, device)
        at_node = [column[node] for node in at_node]
    out = model(
        input_ids=torch.from_numpy(input_ids).to(device),
        attention_mask=torch.from_numpy(mask).to(device=device, dtype=dtype)[:, None],
        position_ids=torch.from_numpy(positions).to(device),
        use_cache=False,
        **kwargs,
    )
    return out.logits[long_tensor(at_row, device), long_tensor(at_node, device)]


def long_tensor(values: Sequence[int], device: torch.device) -> torch.Tensor:
    """Return a list of ints as a 1D long tensor, by way of numpy (several times faster than torch.tensor)."""
    return torch.from_numpy(np.asarray(values, dtype=np.int64)).to(device)


_K = TypeVar("_K", bound=Hashable)


def dedupe(keys: Iterable[_K]) -> tuple[list[_K], list[int]]:
    """Return the distinct keys in first-seen order, and the index of each key among them."""
    index: dict[_K, int] = {}
    positions = [index.setdefault(k, len(index)) for k in keys]
    return list(index), positions


def dedupe_rows(columns: Sequence[Iterable[Any]], key: Callable[[tuple[Any, ...]], Hashable]
                ) -> tuple[list[Hashable], list[int]]:
    """``dedupe(map(key, rows))`` of the rows ``zip(*columns)``, where rows made of the very same objects are keyed once.

    ``columns`` hold the rows' parts (token id lists, say), one column a part, and ``key`` reads a row's values as a
    hashable key. Rows whose parts are the objects of an earlier row are found by their identities, without reading
    their values again: the trainer's samples of one state share their lists (``grpo._samples``), so a step's
    thousand rows cost a dozen keys. Rows of equal values in other objects still meet at their key.
    """
    columns = [list(c) for c in columns]  # held through the call: no part's id is taken by another object
    ids = list(zip(*[map(id, c) for c in columns]))
    first = dict(zip(reversed(ids), range(len(ids) - 1, -1, -1)))  # each distinct identity -> its first row
    index: dict[Hashable, int] = {}
    row_of_ids = {}
    for i in sorted(first.values()):  # in the rows' order, so the keys come first-seen as dedupe gives them
        row_of_ids[ids[i]] = index.setdefault(key(tuple(c[i] for c in columns)), len(index))
    return list(index), list(map(row_of_ids.__getitem__, ids))


def left_pad(
    rows: Sequence[Sequence[int]], pad: int, device: torch.device
) -> tuple[torch.Tensor, torch.Tensor]:
    """Left-pad token id rows into ``ids`` [batch, max_len] and ``mask`` [batch, max_len]."""
    width = max(len(r) for r in rows)
    ids = [[pad] * (width - len(r)) + list(r) for r in rows]
    mask = [[0] * (width - len(r)) + [1] * len(r) for r in rows]
    return torch.tensor(ids, dtype=torch.long, device=device), torch.tensor(
        mask, dtype=torch.long, device=device
    )


def right_pad(
    rows: Sequence[Sequence[int]], pad: int, device: torch.device, *, width: int | None = None
) -> tuple[torch.Tensor, torch.Tensor]:
    """Right-pad token id rows into ``ids`` [batch, width] and ``mask`` [batch, width] (width: the longest row)."""
    width = max(len(r) for r in rows) if width is None else width
    ids = [list(r) + [pad] * (width - len(r)) for r in rows]
    mask = [[1] * len(r) + [0] * (width - len(r)) for r in rows]
    return torch.tensor(ids, dtype=torch.long, device=device), torch.tensor(
        mask, dtype=torch.long, device=device
    )


def position_ids_of(attention_mask: torch.Tensor) -> torch.Tensor:
    """Number real tokens 0, 1, ... from the left; padding gets 0 (it is masked anyway)."""
    return (attention_mask.cumsum(dim=1) - 1).clamp(min=0)


def checkpoints_activations(model: torch.nn.Module) -> bool:
    """Whether a layer recomputes activations in backward (transformers' ``gradient_checkpointing``):
    such layers drop the KV cache in training, so a shared prefix would not reach them."""
    return any(getattr(m, "gradient_checkpointing", False) for m in model.modules())
