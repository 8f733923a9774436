"""A policy backed by any transformers causal LM: chat template, batched left-padded sampling.

Sampling is a KV-cached loop written here rather than ``model.generate``: it computes each
sampled token's log-prob as it goes (``generate(output_logits=True)`` would keep every step's
full-vocabulary logits until the end), draws from a private ``torch.Generator`` (``generate``
samples from the global RNG), and pins the sampling rule to temperature and top-p alone (a
checkpoint's ``generation_config`` may carry ``top_k``, repetition penalties and the like).

Log-probability definition
--------------------------
``Reply.logprobs[t]`` is ``log_softmax(logits_t / temperature)[token_t]``: the tempered model
distribution at step ``t``, computed in float32, *before* top-p truncation. So the trainer can
recompute exactly the same quantity with one teacher-forced forward pass
(:func:`completion_logprobs`), and top-p never turns a log-prob into ``-inf``. With
``temperature=0`` decoding is greedy and the log-probs are taken at temperature 1.

Shared prompt prefixes
----------------------
Prompts of one batch often start alike: the same system prompt in every seat, the same game state
in many envs. Sampling and :func:`completion_logprobs` therefore run each distinct prompt once (rows
with the same prompt share its logits and KV cache) and run a prefix shared by several prompts
once: a first forward pass computes the KV cache of each shared prefix (one row per group of
prompts, :func:`_plan_prefixes` picks the groups), the cache is copied out to the group's prompts,
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
give each node its depth (:func:`_prefix_tree`, :func:`_forward_tree`; tree attention as in
SpecInfer and Medusa). That runs the fewest tokens of any plan, in one pass; its attention is one
dense square over all the nodes, so prompts that part early (two seats whose system prompts differ
at the seat's name) may run as separate tries, one per row of the pass, each square a quarter the
size. :func:`_plan_tree` picks the tries, and picks them only when their cost, counted in tokens
and attention pairs, is below both the whole pass and the shared-prefix plan. It needs an
attention that reads a custom 4D mask as given (transformers' sdpa and eager, no sliding window).
"""

from __future__ import annotations

import functools
import inspect
import math
import os
import sys
from collections.abc import Hashable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, NoReturn, TypeVar

import numpy as np
import torch
from transformers import AutoModelForCausalLM, AutoTokenizer, PreTrainedModel, PreTrainedTokenizerBase

from llm_zoo.policies.base import Observation, Policy, Reply
from llm_zoo.policies.constraints import allowed_next, legal_paths

try:
    from transformers.cache_utils import DynamicLayer as _DynamicLayer
except ImportError:  # transformers from before per-layer caches: decode steps concatenate
    _DynamicLayer = None

if sys.version_info >= (3, 12):
    from typing import override
else:
    from typing_extensions import override


class TransformersPolicy(Policy):
    """Replies with a transformers causal LM, one batched sampling loop per :meth:`act` call.

    Each observation's ``messages`` go through the tokenizer's chat template with the generation
    prompt; control tokens written inside a message (say a player typing ``<|im_end|>``) are
    encoded as plain text, so only the template opens and closes turns. Prompts are left-padded
    into one batch and sampled together; each sequence stops at its first end-of-turn token (the
    tokenizer's ``eos_token`` and any ``eos_token_id`` of the model's generation config), or after
    ``max_new_tokens``. Every :class:`Reply` carries ``prompt_ids`` (unpadded), ``completion_ids``
    (ending with the end-of-turn token when one came), ``logprobs`` (see the module docstring) and
    the completion decoded without special tokens.

    Args:
        model: A causal LM; moved to ``device`` (in place). Its dtype is kept unless ``dtype`` is
            given.
        tokenizer: Its tokenizer, with a chat template.
        name: Shown in ``Reply.policy``.
        temperature: Softmax temperature; ``0`` decodes greedily.
        top_p: Nucleus sampling: sample from the smallest set of tokens holding this much
            probability; ``1`` keeps them all.
        max_new_tokens: Longest completion, in tokens.
        seed: Seed of the private sampling generator; ``None`` draws fresh entropy.
        device: Where to run; defaults to ``"cuda"`` when available, else ``"cpu"``.
        dtype: Cast the model to this dtype (e.g. ``torch.bfloat16``); ``None`` keeps it.
        share_prefix: Run each distinct prompt, and each prefix shared by several prompts, once
            per batch (module docstring); ``False`` runs every prompt whole.
        constrain: Sample only the replies an observation lists in ``legal_actions``
            (:mod:`llm_zoo.policies.constraints`); observations without them are unconstrained.
            The reported log-probs are then those of the constrained distribution.
    """

    def __init__(
        self,
        model: PreTrainedModel,
        tokenizer: PreTrainedTokenizerBase,
        *,
        name: str = "transformers",
        temperature: float = 1.0,
        top_p: float = 1.0,
        max_new_tokens: int = 64,
        seed: int | None = None,
        device: str | torch.device | None = None,
        dtype: torch.dtype | None = None,
        share_prefix: bool = True,
        constrain: bool = False,
    ) -> None:
        if temperature < 0:
            raise ValueError(
                f"TransformersPolicy: temperature must be >= 0 (0 is greedy), got {temperature!r}."
            )
        if not 0 < top_p <= 1:
            raise ValueError(f"TransformersPolicy: top_p must be in (0, 1], got {top_p!r}.")
        if max_new_tokens < 1:
            raise ValueError(f"TransformersPolicy: max_new_tokens must be >= 1, got {max_new_tokens!r}.")
        if getattr(tokenizer, "chat_template", None) is None:
            raise ValueError(
                "TransformersPolicy needs a tokenizer with a chat template (tokenizer.chat_template is None); "
                "set one, or build the tokenizer with llm_zoo.models.build_byte_tokenizer()."
            )
        self.name = name
        self.temperature = float(temperature)
        self.top_p = float(top_p)
        self.max_new_tokens = int(max_new_tokens)
        self.share_prefix = bool(share_prefix)
        self.constrain = bool(constrain)
        self.device = torch.device(device if device is not None else _default_device())
        self.model = model.to(self.device) if dtype is None else model.to(self.device, dtype=dtype)
        self.tokenizer = tokenizer
        self.eos_token_ids = _eos_token_ids(model, tokenizer)
        self.pad_token_id = (
            tokenizer.pad_token_id if tokenizer.pad_token_id is not None else self.eos_token_ids[0]
        )
        self._generator = torch.Generator(device=self.device)
        self.seed(seed)
        # Chat-template token ids by conversation. Rendering and tokenising cost more than a small
        # model's forward pass, and env prompts repeat (a game state recurs across episodes). A
        # template that reads the clock (strftime_now) renders differently over time: not memoised.
        self._prompt_memo: dict[Hashable, tuple[int, ...]] | None = (
            None if "strftime_now" in str(tokenizer.chat_template) else {}
        )

    @classmethod
    def from_pretrained(
        cls,
        path: str | os.PathLike[str],
        *,
        device: str | torch.device | None = None,
        dtype: torch.dtype | None = None,
        **kwargs: Any,
    ) -> TransformersPolicy:
        """Load model and tokenizer from a local folder written by ``save_pretrained``.

        ``dtype`` defaults to bfloat16 on a CUDA device that supports it, else float32. Other
        keyword arguments go to the constructor.
        """
        path = Path(path)
        if not path.is_dir():
            raise FileNotFoundError(
                f"TransformersPolicy.from_pretrained expects a local folder written by save_pretrained, "
                f"got {str(path)!r}, which is not a directory; download hub models first "
                "(huggingface_hub.snapshot_download) or make one with llm_zoo.models.make_tiny_model."
            )
        device = torch.device(device if device is not None else _default_device())
        if dtype is None:
            cuda_bf16 = device.type == "cuda" and torch.cuda.is_bf16_supported()
            dtype = torch.bfloat16 if cuda_bf16 else torch.float32
        tokenizer = AutoTokenizer.from_pretrained(path)
        model = AutoModelForCausalLM.from_pretrained(path, dtype=dtype)
        return cls(model, tokenizer, device=device, **kwargs)

    @override
    def seed(self, seed: int | None) -> None:
        if seed is None:
            self._generator.seed()
        else:
            self._generator.manual_seed(seed)

    @override
    def act(self, observations: Sequence[Observation]) -> list[Reply]:
        self.check_batch(observations, key="messages")
        if not observations:
            return []
        prompts = self.encode_prompts(observations)
        paths = [self.legal_paths(obs) for obs in observations] if self.constrain else None
        with _eval_mode(self.model), torch.inference_mode():
            completions, logprobs = self._sample(prompts, paths)
        distinct, row_of = _distinct(map(tuple, completions))  # one-token replies repeat a lot
        decoded = self.tokenizer.batch_decode([list(c) for c in distinct], skip_special_tokens=True)
        texts = [decoded[i] for i in row_of]
        # every record is a new list built here (ids from encode_prompts and tensors' tolist(),
        # log-probs from tolist()): Reply need not check or copy them again
        return [
            Reply._from_clean(text, p, c, lp, self.name)
            for text, p, c, lp in zip(texts, prompts, completions, logprobs, strict=True)
        ]

    def encode_prompts(self, observations: Sequence[Observation]) -> list[list[int]]:
        """Return the chat-template token ids of each observation's messages, with the generation prompt.

        Results are memoised by conversation (up to ``_PROMPT_MEMO_SIZE`` of them), which assumes
        the tokenizer and its chat template are not changed after the policy is built.
        """
        memo = self._prompt_memo
        conversations: list[Sequence[Mapping[str, Any]]] = []
        keys: list[Hashable | None] = []
        ids: list[Sequence[int] | None] = []
        for i, obs in enumerate(observations):
            messages = _messages(obs, i)
            key = row = None
            if memo is not None:
                try:  # the key is the conversation's (role, content, ...) items; the memo hashes it
                    key = tuple([tuple(m.items()) for m in messages])
                    row = memo.get(key)
                except (AttributeError, TypeError):  # not mappings, or unhashable content
                    key = None
            if key is None:
                # other mappings are read as dicts (and a non-mapping fails here, as dict() says)
                messages = [dict(m) for m in messages]
            conversations.append(messages)
            keys.append(key)
            ids.append(row)
        missing = [i for i, row in enumerate(ids) if row is None]
        if missing:
            # sanitize_control_tokens (transformers >= 5) encodes control tokens typed inside messages
            # as text; older versions hand the flag to the template, which ignores it. The template
            # gets copies: a memoised prompt never copies its messages at all.
            encoded = self.tokenizer.apply_chat_template(
                [[dict(m) for m in conversations[i]] for i in missing],
                add_generation_prompt=True,
                tokenize=True,
                return_dict=False,
                sanitize_control_tokens=True,
            )
            if memo is not None and len(memo) + len(missing) > _PROMPT_MEMO_SIZE:
                memo.clear()
            for i, row in zip(missing, encoded, strict=True):
                row_ids = ids[i] = tuple(map(int, row))  # plain ints, as act's replies take them unchecked
                if memo is not None and keys[i] is not None:
                    memo[keys[i]] = row_ids
        return [list(row) for row in ids]

    def logprobs_of(
        self, prompts_ids: Sequence[Sequence[int]], completions_ids: Sequence[Sequence[int]]
    ) -> list[list[float]]:
        """Return the log-prob of every completion token under the model, by one teacher-forced pass.

        Uses the same definition as sampling (module docstring), at this policy's temperature
        (1 when greedy), so for a reply ``r``:
        ``logprobs_of([r.prompt_ids], [r.completion_ids])[0] ≈ r.logprobs``.
        """
        with _eval_mode(self.model), torch.inference_mode():
            per_token, mask = completion_logprobs(
                self.model,
                prompts_ids,
                completions_ids,
                pad_token_id=self.pad_token_id,
                temperature=self.temperature or 1.0,
            )
        lengths = mask.sum(dim=1).tolist()
        return [row[:n] for row, n in zip(per_token.float().tolist(), lengths)]

    def __repr__(self) -> str:
        return (
            f"{type(self).__name__}(name={self.name!r}, model={type(self.model).__name__}, "
            f"temperature={self.temperature}, top_p={self.top_p}, max_new_tokens={self.max_new_tokens}, "
            f"device={str(self.device)!r})"
        )

    # ---- sampling --------------------------------------------------------------------------

    def legal_paths(self, observation: Observation) -> tuple[tuple[int, ...], ...] | None:
        """Return the token paths of the observation's legal replies, or None when it lists none.

        Memoised: observations with the same legal replies get the same tuple.
        """
        replies = observation.get("legal_actions")
        if not replies:
            return None
        key = (tuple(replies), self.max_new_tokens)
        cache = self.__dict__.setdefault("_paths_memo", {})  # a batch repeats a few legal-reply sets
        if key not in cache:
            if len(cache) > 4096:
                cache.clear()
            cache[key] = tuple(legal_paths(self.tokenizer, replies, self.eos_token_ids[0], self.max_new_tokens))
        return cache[key]

    def _sample(
        self, prompts: list[list[int]], paths: Sequence[Sequence[tuple[int, ...]] | None] | None = None
    ) -> tuple[list[list[int]], list[list[float]]]:
        """Sample a completion per prompt (within its legal paths, if given); return ids and log-probs, unpadded."""
        model, device, batch = self.model, self.device, len(prompts)
        cache_arg = _cache_arg(model)
        keep_last = _keep_logits_kwargs(model, 1)
        distinct, row_of = _distinct(map(tuple, prompts)) if self.share_prefix else (prompts, None)
        # One-token replies need only each prompt's last logits, not a cache laid out per prompt,
        # so the prompts may run as one token tree (module docstring) when that is cheaper.
        one_token = self.share_prefix and self.max_new_tokens == 1 and len(distinct) > 1
        tree = _plan_tree(model, distinct) if one_token else None
        if tree is not None:
            last_logits = _forward_tree(model, tree, device)
        else:
            out, prefill_mask = _forward_prompts(
                model,
                distinct,
                self.pad_token_id,
                device,
                share_prefix=self.share_prefix,
                use_cache=self.max_new_tokens > 1,  # one-token replies need no cache after the prompt
            )
            last_logits = out.logits[:, -1, :]
        # rows -> their distinct prompt; None when every prompt is distinct
        rows = _long_tensor(row_of, device) if row_of is not None and len(distinct) < batch else None
        logits = last_logits if rows is None else last_logits[rows]
        eos = torch.tensor(self.eos_token_ids, device=device)
        finished = torch.zeros(batch, dtype=torch.bool, device=device)
        step_tokens: list[torch.Tensor] = []  # max_new_tokens x [batch]
        step_logprobs: list[torch.Tensor] = []
        for step in range(self.max_new_tokens):
            if step == 1:
                # Lay the prefill's cache out per row, and preallocate the mask and positions of
                # every decode step: the mask grows by a column of ones a step, positions by one.
                cache = getattr(out, cache_arg)
                _lay_out_for_decoding(cache, rows, self.max_new_tokens - 1)
                if rows is not None:
                    prefill_mask = prefill_mask[rows]
                width = prefill_mask.shape[1]
                attention_mask = prefill_mask.new_ones(batch, width + self.max_new_tokens - 1)
                attention_mask[:, :width] = prefill_mask
                lengths = torch.tensor([len(p) for p in prompts], device=device)
                position_ids = lengths[:, None] + torch.arange(self.max_new_tokens - 1, device=device)
            if step:
                # Finished rows keep feeding padding; their outputs are never read.
                out = model(
                    input_ids=step_tokens[-1][:, None],
                    attention_mask=attention_mask[:, : width + step],
                    position_ids=position_ids[:, step - 1 : step],
                    use_cache=True,
                    **{cache_arg: cache},
                    **keep_last,
                )
                cache = getattr(out, cache_arg)
                logits = out.logits[:, -1, :]
            mask = None
            if paths is not None and any(p is not None for p in paths):
                # A batch repeats a few (legal replies, tokens so far) pairs: a mask row for each
                # distinct pair (row 0: unconstrained), then one gather of a row per batch row, in
                # numpy (torch's indexing with Python lists costs several times as much).
                generated = torch.stack(step_tokens, dim=1).tolist() if step_tokens else [()] * batch
                kinds: dict[tuple[int, tuple[int, ...]], int] = {}
                allowed_of: list[tuple[int, ...]] = [()]
                kind_of = []
                for row_paths, so_far in zip(paths, generated):
                    if not row_paths:
                        kind_of.append(0)
                        continue
                    key = (id(row_paths), tuple(so_far))  # legal_paths hands rows of one set one object
                    kind = kinds.get(key)
                    if kind is None:
                        kind = kinds[key] = len(allowed_of)
                        allowed_of.append(_allowed_cached(row_paths, key[1]))
                    kind_of.append(kind)
                table = np.ones((len(allowed_of), logits.shape[-1]), dtype=bool)
                for kind, allowed in enumerate(allowed_of):
                    if allowed:  # else unconstrained: the row or its path is done
                        table[kind] = False
                        table[kind, list(allowed)] = True
                mask = torch.from_numpy(table[kind_of]).to(device)
            token, logprob = self._next_token(logits.float(), mask)
            token = token.masked_fill(finished, self.pad_token_id)
            step_tokens.append(token)
            step_logprobs.append(logprob)
            finished |= torch.isin(token, eos)
            if bool(finished.all()):
                break
        tokens = torch.stack(step_tokens, dim=1).tolist()  # [batch, steps]
        logprobs = torch.stack(step_logprobs, dim=1).tolist()
        if len(step_tokens) == 1:  # one token a row, end of turn or not: nothing to cut
            return tokens, logprobs
        eos_set = set(self.eos_token_ids)
        completions, completion_logprobs_ = [], []
        for row_tokens, row_logprobs in zip(tokens, logprobs):
            end = next((t + 1 for t, tok in enumerate(row_tokens) if tok in eos_set), len(row_tokens))
            completions.append(row_tokens[:end])
            completion_logprobs_.append(row_logprobs[:end])
        return completions, completion_logprobs_

    def _next_token(self, logits: torch.Tensor, mask: torch.Tensor | None = None) -> tuple[torch.Tensor, torch.Tensor]:
        """Pick a token per row from float32 ``logits`` [batch, vocab] (only where ``mask``); return it and its log-prob."""
        if mask is not None:
            logits = logits.masked_fill(~mask, float("-inf"))
        if self.temperature == 0:
            logprobs = torch.log_softmax(logits, dim=-1)
            token = logits.argmax(dim=-1)
        else:
            logprobs = torch.log_softmax(logits / self.temperature, dim=-1)
            probs = logprobs.exp()
            if self.top_p < 1:
                probs = _top_p_filter(probs, self.top_p)
            uniform = torch.rand(len(probs), 1, generator=self._generator, dtype=torch.float64, device=probs.device)
            token = _invert_cdf(probs, uniform)
        return token, logprobs.gather(1, token[:, None]).squeeze(1)


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
) -> tuple[torch.Tensor, ...]:
    """Score completions given prompts by teacher forcing.

    The batch is laid out as sampling lays it out: prompts left-padded to a common length, then
    completions right-padded, with an attention mask over real tokens and position ids counting
    real tokens only. Only the logits that predict completion tokens are computed. Gradients flow
    when called outside ``torch.no_grad``, so the trainer can use it for the policy loss.

    With ``share_prefix`` (the default), each distinct (prompt, completion) pair is scored once and
    a prompt prefix shared by several rows runs once, in a first pass whose KV cache the second pass
    reads (module docstring): the same log-probs and gradients, to float rounding, for less work.
    It falls back to one pass when the model uses gradient checkpointing, which drops the cache.
    When every completion is one token, the distinct prompts run instead as one token tree (each
    shared prefix once; :func:`_forward_tree`), where that is the cheaper plan.

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
    if share_prefix and model.training and torch.is_grad_enabled() and _checkpoints_activations(model):
        share_prefix = False
    allowed = list(allowed) if allowed is not None else [None] * len(prompts_ids)
    tree_logits = _one_token_tree_logits(model, prompts_ids, completions_ids, device) if share_prefix else None
    if tree_logits is not None:
        prompts, completions, row_of = list(prompts_ids), list(completions_ids), None
    elif share_prefix:
        keys = zip(map(tuple, prompts_ids), map(tuple, completions_ids),
                   (None if a is None else tuple(map(tuple, a)) for a in allowed))
        triples, row_of = _distinct(keys)
        prompts, completions, allowed = [t[0] for t in triples], [t[1] for t in triples], [t[2] for t in triples]
    else:
        prompts, completions, row_of = list(prompts_ids), list(completions_ids), None
    completion_ids, completion_mask = _right_pad(completions, pad_token_id, device, width=width)
    if tree_logits is not None:
        logits = tree_logits.float() / temperature  # [rows, 1, vocab]
    else:
        out, _ = _forward_prompts(
            model,
            prompts,
            pad_token_id,
            device,
            completions=(completion_ids, completion_mask),
            share_prefix=share_prefix,
            use_cache=False,
        )
        # The logit at position i predicts token i + 1: the last width + 1 positions minus the final one.
        logits = out.logits[:, -(width + 1) : -1, :].float() / temperature  # [distinct, width, vocab]
    if any(a is not None for a in allowed):
        logits = logits.masked_fill(~_allowed_mask(allowed, width, logits.shape[-1], device), float("-inf"))
    all_logps = torch.log_softmax(logits, dim=-1)
    per_token_logps = all_logps.gather(2, completion_ids[:, :, None]).squeeze(2) * completion_mask
    per_token_entropy = None
    if with_entropy:  # p log p with p = 0 on disallowed tokens counts 0, not nan
        finite = torch.isfinite(all_logps)
        safe = torch.where(finite, all_logps, 0.0)  # -inf in the arithmetic would make NaN gradients
        plogp = torch.where(finite, safe.exp() * safe, 0.0)
        per_token_entropy = -plogp.sum(dim=-1) * completion_mask
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


def _one_token_tree_logits(
    model: PreTrainedModel,
    prompts_ids: Sequence[Sequence[int]],
    completions_ids: Sequence[Sequence[int]],
    device: torch.device,
) -> torch.Tensor | None:
    """Return each row's next-token logits [rows, 1, vocab] from one token-tree pass, where that pays.

    Only for completions of exactly one token (as the Kuhn main job samples): a one-token
    completion's log-prob is read off its prompt's last logits, so its own token never needs to
    run, and the distinct prompts can share every prefix in one pass (:func:`_forward_tree`).
    None when the completions are longer, the model cannot run a tree, or another plan is cheaper.
    (The caller has already ruled out gradient checkpointing.)
    """
    if any(len(c) != 1 for c in completions_ids):
        return None
    distinct, prompt_of = _distinct(map(tuple, prompts_ids))
    tree = _plan_tree(model, distinct) if len(distinct) > 1 else None
    if tree is None:
        return None
    last = _forward_tree(model, tree, device)  # [distinct prompts, vocab]
    return last[_long_tensor(prompt_of, device)][:, None, :]


@functools.lru_cache(maxsize=4096)
def _allowed_tuple(paths: tuple[tuple[int, ...], ...], prefix: tuple[int, ...]) -> tuple[int, ...]:
    return tuple(allowed_next(paths, prefix))


def _allowed_cached(paths: Sequence[tuple[int, ...]], prefix: tuple[int, ...]) -> tuple[int, ...]:
    """Return :func:`allowed_next` for a row, memoised: a batch repeats a few legal-reply sets."""
    return _allowed_tuple(tuple(paths), prefix)


def _allowed_mask(allowed: Sequence[Any], width: int, vocab: int, device: torch.device) -> torch.Tensor:
    """Build [rows, width, vocab] booleans: True where a token is allowed (everywhere, for None rows)."""
    mask = torch.ones(len(allowed), width, vocab, dtype=torch.bool)
    for i, row in enumerate(allowed):
        if row is None:
            continue
        for t, tokens in enumerate(row[:width]):
            if tokens:
                mask[i, t] = False
                mask[i, t, list(tokens)] = True
    return mask.to(device)


def _forward_prompts(
    model: PreTrainedModel,
    prompts: Sequence[Sequence[int]],
    pad_token_id: int,
    device: torch.device,
    *,
    completions: tuple[torch.Tensor, torch.Tensor] | None = None,
    share_prefix: bool,
    use_cache: bool,
) -> tuple[Any, torch.Tensor]:
    """Run left-padded prompts, then ``completions`` (right-padded ids and mask), through ``model``.

    With ``share_prefix``, when :func:`_plan_prefixes` finds prefixes worth sharing, a first pass
    runs each shared prefix once and its KV cache is copied out to the prompts of its group; the
    returned pass then runs the rest of each prompt (left-padded) and the completions, on top of
    that cache. Logits are kept for the last ``1 + completion width`` positions.

    Returns:
        The model output of the last pass, and its attention mask [batch, cache + new positions].
    """
    cache_arg = _cache_arg(model)
    plan = _plan_prefixes(prompts) if share_prefix else None
    kwargs: dict[str, Any] = {}
    if plan is None:
        input_ids, attention_mask = _left_pad(prompts, pad_token_id, device)
    else:
        prefix_ids, prefix_mask = _left_pad(plan.prefixes, pad_token_id, device)
        first = model(
            input_ids=prefix_ids,
            attention_mask=prefix_mask,
            position_ids=_position_ids(prefix_mask),
            use_cache=True,
            **_keep_logits_kwargs(model, 1),
        )
        groups = torch.tensor(plan.group_of, device=device)
        cache = getattr(first, cache_arg)
        cache.batch_select_indices(groups)  # a gather of keys and values: gradients flow back
        kwargs[cache_arg] = cache
        input_ids, attention_mask = _left_pad(
            [p[n:] for p, n in zip(prompts, plan.shared)], pad_token_id, device
        )
    if completions is not None:
        input_ids = torch.cat([input_ids, completions[0]], dim=1)
        attention_mask = torch.cat([attention_mask, completions[1]], dim=1)
    position_ids = _position_ids(attention_mask)
    if plan is not None:
        position_ids = position_ids + torch.tensor(plan.shared, device=device)[:, None]
        attention_mask = torch.cat([prefix_mask[groups], attention_mask], dim=1)
    out = model(
        input_ids=input_ids,
        attention_mask=attention_mask,
        position_ids=position_ids,
        use_cache=use_cache or plan is not None,
        **kwargs,
        **_keep_logits_kwargs(model, 1 + (0 if completions is None else completions[0].shape[1])),
    )
    return out, attention_mask


def _lay_out_for_decoding(cache: Any, rows: torch.Tensor | None, room: int) -> None:
    """Give each sampled row its copy of the prefill cache (``rows``: row -> cache row; None: as is).

    Layers that are plain ``DynamicLayer``s are swapped for :class:`_ReservedLayer`s, which hold
    ``room`` more positions, so that decode steps write in place rather than concatenate (which
    copies the whole cache every step).
    """
    layers = getattr(cache, "layers", None)
    if _DynamicLayer is not None and layers and all(type(layer) is _DynamicLayer for layer in layers):
        layers[:] = [_ReservedLayer(layer, rows, room) for layer in layers]
    elif rows is not None:
        cache.batch_select_indices(rows)


if _DynamicLayer is not None:

    class _ReservedLayer(_DynamicLayer):
        """A ``DynamicLayer`` with room reserved for ``room`` more positions: ``update`` writes in place."""

        def __init__(self, layer: Any, rows: torch.Tensor | None, room: int) -> None:
            super().__init__()
            keys, values = layer.keys, layer.values
            if rows is not None:
                keys, values = keys.index_select(0, rows), values.index_select(0, rows)
            batch, heads, self._length, dim = keys.shape
            self._keys = keys.new_empty(batch, heads, self._length + room, dim)
            self._values = values.new_empty(batch, heads, self._length + room, values.shape[-1])
            self._keys[:, :, : self._length] = keys
            self._values[:, :, : self._length] = values
            self.keys, self.values = self._keys[:, :, : self._length], self._values[:, :, : self._length]
            self.device = keys.device
            self.is_initialized = True

        def update(
            self, key_states: torch.Tensor, value_states: torch.Tensor, *args: Any, **kwargs: Any
        ) -> tuple[torch.Tensor, torch.Tensor]:
            end = self._length + key_states.shape[-2]
            assert end <= self._keys.shape[-2], "decoded past the room reserved in the cache"
            self._keys[:, :, self._length : end] = key_states
            self._values[:, :, self._length : end] = value_states
            self._length = end
            self.keys, self.values = self._keys[:, :, :end], self._values[:, :, :end]
            return self.keys, self.values


@dataclass
class _PrefixPlan:
    """Groups of prompts that share a prefix: what runs once per group and where each prompt resumes."""

    prefixes: list[Sequence[int]]
    """The shared tokens of each group."""
    group_of: list[int]
    """Each prompt's group."""
    shared: list[int]
    """Each prompt's count of tokens inside its group's prefix."""


_PASS_COST_TOKENS = 64
"""The fixed cost of an extra forward pass, counted in tokens run: a prefix pass must save more."""


def _plan_prefixes(
    prompts: Sequence[Sequence[int]], sorted_common: tuple[Sequence[int], Sequence[int]] | None = None
) -> _PrefixPlan | None:
    """Group prompts by shared prefix when running each prefix once saves work; else return None.

    Sorted, prompts that share a prefix sit side by side; the groups are the runs of neighbours
    that share at least ``depth`` tokens, for each depth that occurs. A plan costs the padded
    tokens of both passes (groups x longest prefix, prompts x longest rest) plus
    ``_PASS_COST_TOKENS``; the cheapest wins if it beats one pass over the whole prompts. A prefix
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
        common = [_common_length(prompts[a], prompts[b]) for a, b in zip(order, order[1:])]
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
        cost = len(groups) * width + n * rest + _PASS_COST_TOKENS
        if cost < best_cost:
            best_cost, best = cost, (groups, resolved)
    if best is None:
        return None
    groups, resolved = best
    group_of, shared_of = [0] * n, [0] * n
    for g, (group, s) in enumerate(zip(groups, resolved)):
        for i in group:
            group_of[i], shared_of[i] = g, s
    return _PrefixPlan([prompts[g[0]][:s] for g, s in zip(groups, resolved)], group_of, shared_of)


def _common_length(a: Sequence[int], b: Sequence[int]) -> int:
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
class _PrefixTree:
    """Distinct prompts as one sequence of their distinct prefixes (a token trie): one token per node."""

    input_ids: list[int]
    """The token of each node, in the order the nodes run."""
    positions: list[int]
    """Each node's position in every prompt that holds it (its depth in the trie)."""
    branches: list[tuple[int, int, int | None]]
    """The nodes of each prompt that no earlier prompt holds, ``start:end``, and the node they hang
    from (None at the root), in node order."""
    last: list[int]
    """Each prompt's last node, in the order the prompts were given (or of the run, see :func:`_prefix_tree`)."""


def _prefix_tree(
    prompts: Sequence[Sequence[int]], sorted_shared: tuple[Sequence[int], Sequence[int]] | None = None
) -> _PrefixTree:
    """Lay distinct, non-empty prompts out as their token trie, each prefix once.

    Prompts compare as sequences of one type (tuples or lists, not mixed). ``sorted_shared``, when
    the caller has it, is a run of the prompts in sorted order (indices into ``prompts``) and the
    leading tokens each shares with the one before it in the run (the first's is not read); the trie
    then holds that run only, and its ``last`` follows the run's order.
    """
    if sorted_shared is None:
        order: Sequence[int] = sorted(range(len(prompts)), key=prompts.__getitem__)
        shared_before = [0] + [_common_length(prompts[a], prompts[b]) for a, b in zip(order, order[1:])]
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
        return _PrefixTree(input_ids, positions, branches, last_in_order)
    last = [0] * len(prompts)
    for i, node in zip(order, last_in_order):
        last[i] = node
    return _PrefixTree(input_ids, positions, branches, last)


@dataclass
class _TreeRows:
    """Distinct prompts as token tries, one trie per row of a batch (prompts that share little apart)."""

    trees: list[_PrefixTree]
    """One trie per row, each over a run of the prompts in sorted order."""
    members: list[list[int]]
    """The prompts of each trie, as indices into the planned prompts, in the order of its ``last``."""

    @property
    def width(self) -> int:
        """The longest trie's node count: every row is padded to it."""
        return max(len(tree.input_ids) for tree in self.trees)


def _plan_tree(model: PreTrainedModel, prompts: Sequence[Sequence[int]]) -> _TreeRows | None:
    """Return the token tries of distinct ``prompts`` when one pass over them is the cheapest plan; else None.

    Costs count the work of each plan's passes in tokens, where an attention (query, key) pair
    costs :func:`_tree_pair_cost` of a token: a trie runs the fewest tokens (each prefix once, in
    one pass), but its attention is one dense masked square over all of its nodes, where one whole
    pass attends within each prompt and :func:`_plan_prefixes` within each part. So prompts that
    share only their first few tokens (two seats' system prompts that differ at the seat's name)
    may run as separate tries, one per row (:func:`_tree_rows`): a few tokens more, and squares a
    quarter of the size.
    """
    pair_cost = _tree_pair_cost(model)
    if pair_cost is None or len(prompts) < 2 or min(len(p) for p in prompts) < 1:
        return None
    n, width = len(prompts), max(len(p) for p in prompts)
    best = n * width + n * width**2 * pair_cost  # one pass over the whole prompts
    order = sorted(range(n), key=prompts.__getitem__)
    common = [_common_length(prompts[a], prompts[b]) for a, b in zip(order, order[1:])]
    plan = _plan_prefixes(prompts, (order, common))
    if plan is not None:
        groups, prefix = len(plan.prefixes), max(len(p) for p in plan.prefixes)
        rest = max(len(p) - s for p, s in zip(prompts, plan.shared))
        pairs = groups * prefix**2 + n * rest * (prefix + rest)
        best = min(best, groups * prefix + n * rest + _PASS_COST_TOKENS + pairs * pair_cost)
    cost, runs = _tree_rows(prompts, order, common, pair_cost)
    if cost >= best:
        return None
    trees, start = [], 0  # each run is a stretch of the sorted order: its shared lengths are already known
    for run in runs:
        trees.append(_prefix_tree(prompts, (run, [0, *common[start : start + len(run) - 1]])))
        start += len(run)
    return _TreeRows(trees, runs)


def _tree_rows(
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


def _tree_pair_cost(model: PreTrainedModel) -> float | None:
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
        or "position_ids" not in _forward_params(model)
    ):
        return None
    return 2 * hidden / (4 * hidden**2 + 3 * hidden * mlp)


def _forward_tree(model: PreTrainedModel, rows: _TreeRows, device: torch.device) -> torch.Tensor:
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
    if _keep_logits_kwargs(model, 1):  # logits_to_keep also takes the positions to keep
        kept = sorted(set(at_node))
        column = {node: k for k, node in enumerate(kept)}
        kwargs["logits_to_keep"] = _long_tensor(kept, device)
        at_node = [column[node] for node in at_node]
    out = model(
        input_ids=torch.from_numpy(input_ids).to(device),
        attention_mask=torch.from_numpy(mask).to(device=device, dtype=dtype)[:, None],
        position_ids=torch.from_numpy(positions).to(device),
        use_cache=False,
        **kwargs,
    )
    return out.logits[_long_tensor(at_row, device), _long_tensor(at_node, device)]


def _long_tensor(values: Sequence[int], device: torch.device) -> torch.Tensor:
    """Return a list of ints as a 1D long tensor, by way of numpy (several times faster than torch.tensor)."""
    return torch.from_numpy(np.asarray(values, dtype=np.int64)).to(device)


_K = TypeVar("_K", bound=Hashable)


def _distinct(keys: Iterable[_K]) -> tuple[list[_K], list[int]]:
    """Return the distinct keys in first-seen order, and the index of each key among them."""
    index: dict[_K, int] = {}
    positions = [index.setdefault(k, len(index)) for k in keys]
    return list(index), positions


# ---- helpers ---------------------------------------------------------------------------------


def _default_device() -> str:
    return "cuda" if torch.cuda.is_available() else "cpu"


def _eos_token_ids(model: PreTrainedModel, tokenizer: PreTrainedTokenizerBase) -> list[int]:
    """Collect the end-of-turn ids: the tokenizer's eos plus the generation config's (int or list)."""
    ids: list[int] = []
    if tokenizer.eos_token_id is not None:
        ids.append(tokenizer.eos_token_id)
    config_eos = getattr(getattr(model, "generation_config", None), "eos_token_id", None)
    if isinstance(config_eos, int):
        config_eos = [config_eos]
    ids.extend(i for i in config_eos or () if i not in ids)
    if not ids:
        raise ValueError(
            "TransformersPolicy needs an end-of-turn token: neither tokenizer.eos_token nor "
            "model.generation_config.eos_token_id is set; set tokenizer.eos_token."
        )
    return ids


def _messages(obs: Observation, index: int) -> Sequence[Mapping[str, Any]]:
    messages = obs["messages"]
    if type(messages) is tuple and messages:  # what TextEnv.observe gives: skip the ABC checks
        return messages
    if isinstance(messages, (str, bytes)) or not isinstance(messages, Sequence) or not messages:
        raise ValueError(
            f"observation {index}: 'messages' should be a non-empty sequence of {{'role', 'content'}} "
            f"dicts, got {type(messages).__name__}: {repr(messages)[:200]}."
        )
    return messages


_PROMPT_MEMO_SIZE = 4096
"""Most conversations whose token ids a policy remembers; the memo starts over when full."""


def _left_pad(
    rows: Sequence[Sequence[int]], pad: int, device: torch.device
) -> tuple[torch.Tensor, torch.Tensor]:
    """Left-pad token id rows into ``ids`` [batch, max_len] and ``mask`` [batch, max_len]."""
    width = max(len(r) for r in rows)
    ids = [[pad] * (width - len(r)) + list(r) for r in rows]
    mask = [[0] * (width - len(r)) + [1] * len(r) for r in rows]
    return torch.tensor(ids, dtype=torch.long, device=device), torch.tensor(
        mask, dtype=torch.long, device=device
    )


def _right_pad(
    rows: Sequence[Sequence[int]], pad: int, device: torch.device, *, width: int | None = None
) -> tuple[torch.Tensor, torch.Tensor]:
    """Right-pad token id rows into ``ids`` [batch, width] and ``mask`` [batch, width] (width: the longest row)."""
    width = max(len(r) for r in rows) if width is None else width
    ids = [list(r) + [pad] * (width - len(r)) for r in rows]
    mask = [[1] * len(r) + [0] * (width - len(r)) for r in rows]
    return torch.tensor(ids, dtype=torch.long, device=device), torch.tensor(
        mask, dtype=torch.long, device=device
    )


def _position_ids(attention_mask: torch.Tensor) -> torch.Tensor:
    """Number real tokens 0, 1, ... from the left; padding gets 0 (it is masked anyway)."""
    return (attention_mask.cumsum(dim=1) - 1).clamp(min=0)


def _invert_cdf(probs: torch.Tensor, uniform: torch.Tensor) -> torch.Tensor:
    """Return, per row of ``probs`` [rows, vocab], the token whose share of the row's cumulative mass holds ``uniform`` [rows, 1].

    ``probs`` are non-negative, with some mass in every row, and need not sum to 1 (top-p leaves
    them unnormalised); ``uniform`` is drawn from [0, 1). A token is drawn with probability its
    share of the row's mass, and a token without mass never. One uniform a row: for a single
    sample ``torch.multinomial`` draws an exponential per vocabulary entry (the argmax of
    ``probs / Exp(1)``), 0.14 ms for 64 rows of a 111-word vocabulary on one CPU core. On the CPU
    the arithmetic runs in numpy, whose calls on arrays this small cost a fifth of torch's: 0.01 ms
    for one row or 64 (``multinomial``: 0.014 ms for one row).
    """
    if probs.device.type == "cpu":
        return torch.from_numpy(_invert_cdf_numpy(probs.float().numpy(), uniform.numpy()[:, 0]))
    return _invert_cdf_torch(probs, uniform)


def _invert_cdf_torch(probs: torch.Tensor, uniform: torch.Tensor) -> torch.Tensor:
    """:func:`_invert_cdf` in torch, on any device."""
    cdf = probs.double().cumsum(dim=-1)
    total = cdf[:, -1:]
    if not bool(((total > 0) & (total < math.inf)).all()):
        _no_mass(total[:, 0].tolist())
    # the first token whose cumulative mass passes the point: entries without mass add nothing, so
    # they never pass it first
    token = (cdf <= uniform * total).sum(dim=-1)
    # a point that rounds up to the row's total would pass every token: the last token with mass
    last = probs.shape[-1] - 1 - (probs.flip(-1) > 0).int().argmax(dim=-1)
    return torch.minimum(token, last)


def _invert_cdf_numpy(probs: np.ndarray, uniform: np.ndarray) -> np.ndarray:
    """:func:`_invert_cdf` in numpy: ``probs`` [rows, vocab], ``uniform`` [rows]; int64 tokens [rows]."""
    cdf = np.cumsum(probs, axis=1, dtype=np.float64)
    total = cdf[:, -1]
    if not ((total > 0) & (total < math.inf)).all():
        _no_mass(total.tolist())
    token = (cdf <= (uniform * total)[:, None]).sum(axis=1)
    over = token >= probs.shape[1]
    if over.any():  # the point rounded up to the total: the last token with mass
        token[over] = probs.shape[1] - 1 - np.argmax(probs[over, ::-1] > 0, axis=1)
    return token.astype(np.int64, copy=False)


def _no_mass(totals: list[float]) -> NoReturn:
    """Raise ``ValueError`` naming the rows whose total mass (``totals``) is not finite and positive."""
    rows = [i for i, t in enumerate(totals) if not 0 < t < math.inf]
    raise ValueError(
        f"cannot sample: the next-token distribution of row(s) {rows[:10]} has no finite positive mass "
        f"(total {totals[rows[0]]}); the model's logits are NaN or infinite there."
    )


def _top_p_filter(probs: torch.Tensor, top_p: float) -> torch.Tensor:
    """Zero every token outside the smallest most-probable set whose mass reaches ``top_p``."""
    sorted_probs, order = probs.sort(dim=-1, descending=True)
    mass_before = sorted_probs.cumsum(dim=-1) - sorted_probs
    sorted_probs = sorted_probs.masked_fill(mass_before >= top_p, 0.0)  # the top token always stays
    return torch.zeros_like(probs).scatter(-1, order, sorted_probs)


def _forward_params(model: PreTrainedModel) -> Mapping[str, inspect.Parameter]:
    if "forward" in vars(model):  # a forward patched onto the instance (e.g. by a hook library)
        return _signature_params(model.forward)
    return _class_forward_params(type(model))


@functools.cache
def _class_forward_params(cls: type) -> Mapping[str, inspect.Parameter]:
    # inspect.signature costs about as much as a tiny model's decode step: once per class.
    return _signature_params(cls.forward)


def _signature_params(fn: Any) -> Mapping[str, inspect.Parameter]:
    try:
        return inspect.signature(fn).parameters
    except (TypeError, ValueError):
        return {}


def _keep_logits_kwargs(model: PreTrainedModel, n: int) -> dict[str, int]:
    """Ask the model for the last ``n`` logits only, where its forward takes ``logits_to_keep``."""
    return {"logits_to_keep": n} if "logits_to_keep" in _forward_params(model) else {}


def _cache_arg(model: PreTrainedModel) -> str:
    """Name the KV-cache argument and output field: ``cache`` in recent transformers 5.x (which deprecates
    ``past_key_values``, to be removed in 5.40), ``past_key_values`` before that."""
    return "cache" if "cache" in _forward_params(model) else "past_key_values"


def _checkpoints_activations(model: torch.nn.Module) -> bool:
    """Whether a layer recomputes activations in backward (transformers' ``gradient_checkpointing``):
    such layers drop the KV cache in training, so a shared prefix would not reach them."""
    return any(getattr(m, "gradient_checkpointing", False) for m in model.modules())


class _eval_mode:
    """Put a model in eval mode for a block and restore its training flag after."""

    def __init__(self, model: torch.nn.Module) -> None:
        self.model = model

    def __enter__(self) -> None:
        # Switching walks every submodule, which costs as much as a tiny model's forward: only when
        # the model is training (a model in eval mode is taken to be in eval mode throughout).
        self.was_training = self.model.training
        if self.was_training:
            self.model.eval()

    def __exit__(self, *exc: object) -> None:
        if self.was_training:
            self.model.train()
