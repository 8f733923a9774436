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

The teacher-forced scoring pass that the trainer and the evaluators use, with its shared-prefix
and token-tree planning and the padding helpers, is :mod:`llm_zoo.scoring`; the sampler runs its
prompts through the same plans. Version shims are in :mod:`llm_zoo.policies.compat`.

Bounded memory
--------------
``max_forward_tokens`` bounds what one forward pass runs, whatever the batch: sampling splits the
distinct prompts, in order, into chunks whose rows times (padded prompt + ``max_new_tokens``) stay
within it (:func:`llm_zoo.scoring.row_chunks`), and samples each chunk in turn (its own prefill,
KV cache and decode loop), a prompt longer than the budget prefilling in column chunks; scoring
(:meth:`TransformersPolicy.logprobs_of`) splits the same way. ``max_prompt_tokens`` refuses longer
prompts before any forward pass: :meth:`TransformersPolicy.act` raises
:class:`~llm_zoo.policy.PromptTooLong` naming the rows, and ``collect`` ends those episodes
as failed and plays the rest on.
"""

from __future__ import annotations

import functools
import json
import math
import os
from collections.abc import Hashable, Mapping, Sequence
from typing import Any, NoReturn

import jinja2
import jinja2.ext
import jinja2.nodes
import numpy as np
import torch
from jinja2 import meta
from transformers import PreTrainedModel, PreTrainedTokenizerBase

from llm_zoo.policies.compat import DynamicLayer, cache_argument, keep_logits_kwargs, override
from llm_zoo.policies.constraints import allowed_next, legal_paths
from llm_zoo.policy import Observation, Policy, PromptTooLong, Reply
from llm_zoo.scoring import (
    completion_logprobs,
    dedupe,
    forward_prompts,
    forward_tree,
    left_pad,
    long_tensor,
    plan_tree,
    position_ids_of,
    row_chunks,
)

__all__ = ["TransformersPolicy", "completion_logprobs"]


class TransformersPolicy(Policy):
    """Replies with a transformers causal LM, one batched sampling loop per :meth:`act` call.

    Each observation's ``messages`` go through the tokenizer's chat template with the generation
    prompt; control tokens written inside a message (say a player typing ``<|im_end|>``) are
    encoded as plain text, so only the template opens and closes turns. Where the template takes a
    ``tools`` argument (Qwen's, Llama 3.1's, Hermes'), an env's tools declared at the end of the
    system message in the env's standard form (:func:`llm_zoo.envs.core.tools_prompt`) are given to
    it as JSON schemas instead, so the model reads them in its own convention
    (:func:`split_declared_tools`); a template without one (SmolLM2's, the tiny models') keeps the
    env's text. Prompts are left-padded
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
        max_prompt_tokens: Longest prompt taken, in tokens; :meth:`act` raises
            :class:`~llm_zoo.policy.PromptTooLong` for the observations whose prompt is
            longer. None: no limit.
        max_forward_tokens: The most tokens (rows x padded length) one forward pass runs, in
            sampling and scoring (module docstring); None: the whole batch in one pass.
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
        max_prompt_tokens: int | None = None,
        max_forward_tokens: int | None = None,
    ) -> None:
        if temperature < 0:
            raise ValueError(
                f"TransformersPolicy: temperature must be >= 0 (0 is greedy), got {temperature!r}."
            )
        if not 0 < top_p <= 1:
            raise ValueError(f"TransformersPolicy: top_p must be in (0, 1], got {top_p!r}.")
        if max_new_tokens < 1:
            raise ValueError(f"TransformersPolicy: max_new_tokens must be >= 1, got {max_new_tokens!r}.")
        for label, value in (("max_prompt_tokens", max_prompt_tokens), ("max_forward_tokens", max_forward_tokens)):
            if value is not None and value < 1:
                raise ValueError(f"TransformersPolicy: {label} must be >= 1 or None (no limit), got {value!r}.")
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
        self.max_prompt_tokens = None if max_prompt_tokens is None else int(max_prompt_tokens)
        self.max_forward_tokens = None if max_forward_tokens is None else int(max_forward_tokens)
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
        self.template_takes_tools = template_takes_tools(tokenizer.chat_template)
        """Whether the chat template reads a ``tools`` argument: the env's declared tools then go there."""

    @classmethod
    def from_pretrained(
        cls,
        path: str | os.PathLike[str],
        *,
        device: str | torch.device | None = None,
        dtype: torch.dtype | None = None,
        **kwargs: Any,
    ) -> TransformersPolicy:
        """Load model and tokenizer from a folder written by ``save_pretrained``, a catalogue name (``smollm2-135m``,
        converted once and cached) or a hub name (:func:`llm_zoo.catalogue.model_source`).

        ``dtype`` defaults to bfloat16 on a CUDA device that supports it, else float32. Other
        keyword arguments go to the constructor.

        Raises:
            FileNotFoundError: ``path`` names no model (the message lists what it may be), or a catalogue model
                whose package is not installed (the message names the install command).
        """
        from llm_zoo.catalogue import model_source

        path = model_source(path)
        device = torch.device(device if device is not None else _default_device())
        if dtype is None:
            cuda_bf16 = device.type == "cuda" and torch.cuda.is_bf16_supported()
            dtype = torch.bfloat16 if cuda_bf16 else torch.float32
        from llm_zoo.models import load_pretrained

        # a model directory, or a checkpoint's LoRA adapters, merged into the base model they name
        tokenizer, model = load_pretrained(path, dtype)
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
        PromptTooLong.check(self.name, prompts, self.max_prompt_tokens)
        paths = [self.legal_paths(obs) for obs in observations] if self.constrain else None
        with _eval_mode(self.model), torch.inference_mode():
            completions, logprobs = self._sample_in_chunks(prompts, paths)
        distinct, row_of = dedupe(map(tuple, completions))  # one-token replies repeat a lot
        decoded = self.tokenizer.batch_decode([list(c) for c in distinct], skip_special_tokens=True)
        texts = [decoded[i] for i in row_of]
        # every record is a new list built here (ids from encode_prompts and tensors' tolist(),
        # log-probs from tolist()): Reply need not check or copy them again
        return [
            Reply.unchecked(text, p, c, lp, self.name)
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
            # the template gets copies: a memoised prompt never copies its messages at all
            encoded = self._apply_template([[dict(m) for m in conversations[i]] for i in missing])
            if memo is not None and len(memo) + len(missing) > _PROMPT_MEMO_SIZE:
                memo.clear()
            for i, row in zip(missing, encoded, strict=True):
                row_ids = ids[i] = tuple(map(int, row))  # plain ints, as act's replies take them unchecked
                if memo is not None and keys[i] is not None:
                    memo[keys[i]] = row_ids
        return [list(row) for row in ids]

    def _apply_template(self, conversations: list[list[dict[str, Any]]]) -> list[list[int]]:
        """Return the chat template's token ids of each conversation (copies the caller gave), with tools moved
        from the system message to the template's ``tools`` argument where it takes one."""
        rows: list[list[int] | None] = [None] * len(conversations)
        plain = list(range(len(conversations)))
        if self.template_takes_tools:
            plain = []
            for i, messages in enumerate(conversations):
                split = split_declared_tools(messages[0]["content"]) if messages[0].get("role") == "system" else None
                if split is None:
                    plain.append(i)
                    continue
                messages[0]["content"], tools = split
                rows[i] = self.tokenizer.apply_chat_template(messages, tools=tools, add_generation_prompt=True,
                                                             tokenize=True, return_dict=False,
                                                             sanitize_control_tokens=True)
        if plain:
            # sanitize_control_tokens (transformers >= 5) encodes control tokens typed inside messages
            # as text; older versions hand the flag to the template, which ignores it
            encoded = self.tokenizer.apply_chat_template([conversations[i] for i in plain], add_generation_prompt=True,
                                                         tokenize=True, return_dict=False, sanitize_control_tokens=True)
            for i, row in zip(plain, encoded, strict=True):
                rows[i] = row
        return rows  # type: ignore[return-value]

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
                token_budget=self.max_forward_tokens,
            )
        lengths = mask.sum(dim=1).tolist()
        return [row[:n] for row, n in zip(per_token.float().tolist(), lengths)]

    def next_token_logprobs(self, prompts_ids: Sequence[Sequence[int]], *, chunk: int = 256) -> torch.Tensor:
        """Return the tempered log-probs of the token after each prompt, ``[rows, vocab]`` on the CPU.

        One plain left-padded pass per ``chunk`` prompts (fewer where ``max_forward_tokens`` binds; no prefix sharing), at this policy's
        temperature (1 when greedy): what an exact reading of a model's strategy enumerates from
        (:mod:`llm_zoo.envs.kuhn_poker.evaluate`).
        """
        temperature = self.temperature or 1.0
        if self.max_forward_tokens is not None and prompts_ids:  # fewer rows a pass, within the token budget
            chunk = max(1, min(chunk, self.max_forward_tokens // max(len(p) for p in prompts_ids)))
        out = []
        with torch.inference_mode():
            for start in range(0, len(prompts_ids), chunk):
                ids, mask = left_pad(prompts_ids[start : start + chunk], self.pad_token_id, self.device)
                logits = self.model(input_ids=ids, attention_mask=mask, position_ids=position_ids_of(mask)).logits
                out.append(torch.log_softmax(logits[:, -1, :].float() / temperature, dim=-1).cpu())
        return torch.cat(out)

    # ---- the rest of ScoresTokens (llm_zoo.policy): what an exact reading of the strategy asks ----

    @property
    def vocab_size(self) -> int:
        """How many token ids the tokenizer has, added tokens included (``len(tokenizer)``)."""
        return len(self.tokenizer)

    def encode_reply(self, text: str) -> list[int]:
        """Return the token ids ``text`` is written in as a reply: no special tokens, no end of turn."""
        return list(self.tokenizer.encode(text, add_special_tokens=False))

    def decode_replies(self, completions: Sequence[Sequence[int]]) -> list[str]:
        """Return the reply each completion's token ids make, decoded as :meth:`act` decodes (special tokens dropped)."""
        return self.tokenizer.batch_decode([list(c) for c in completions], skip_special_tokens=True)

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

    def _sample_in_chunks(
        self, prompts: list[list[int]], paths: Sequence[Sequence[tuple[int, ...]] | None] | None = None
    ) -> tuple[list[list[int]], list[list[float]]]:
        """:meth:`_sample` over chunks of the prompts within ``max_forward_tokens`` (module docstring), in order.

        Rows with the same prompt go to the chunk of its first row, so a chunk shares what it can.
        """
        budget = self.max_forward_tokens
        if budget is None:
            return self._sample(prompts, paths)
        distinct, row_of = dedupe(map(tuple, prompts))
        chunks = row_chunks([len(p) + self.max_new_tokens for p in distinct], budget)
        if len(chunks) == 1:
            return self._sample(prompts, paths)
        chunk_of = [0] * len(distinct)
        for c, members in enumerate(chunks):
            for m in members:
                chunk_of[m] = c
        rows_of: list[list[int]] = [[] for _ in chunks]
        for i, d in enumerate(row_of):
            rows_of[chunk_of[d]].append(i)
        completions: list[list[int]] = [[] for _ in prompts]
        logprobs: list[list[float]] = [[] for _ in prompts]
        for rows in rows_of:
            part = self._sample([prompts[i] for i in rows], None if paths is None else [paths[i] for i in rows])
            for i, c, lp in zip(rows, *part, strict=True):
                completions[i], logprobs[i] = c, lp
        return completions, logprobs

    def _sample(
        self, prompts: list[list[int]], paths: Sequence[Sequence[tuple[int, ...]] | None] | None = None
    ) -> tuple[list[list[int]], list[list[float]]]:
        """Sample a completion per prompt (within its legal paths, if given); return ids and log-probs, unpadded."""
        model, device, batch = self.model, self.device, len(prompts)
        cache_arg = cache_argument(model)
        keep_last = keep_logits_kwargs(model, 1)
        distinct, row_of = dedupe(map(tuple, prompts)) if self.share_prefix else (prompts, None)
        # One-token replies need only each prompt's last logits, not a cache laid out per prompt,
        # so the prompts may run as one token tree (module docstring) when that is cheaper.
        one_token = self.share_prefix and self.max_new_tokens == 1 and len(distinct) > 1
        tree = plan_tree(model, distinct) if one_token else None
        if tree is not None:
            last_logits = forward_tree(model, tree, device)
        else:
            out, prefill_mask = forward_prompts(
                model,
                distinct,
                self.pad_token_id,
                device,
                share_prefix=self.share_prefix,
                use_cache=self.max_new_tokens > 1,  # one-token replies need no cache after the prompt
                token_budget=self.max_forward_tokens,
            )
            last_logits = out.logits[:, -1, :]
        # rows -> their distinct prompt; None when every prompt is distinct
        rows = long_tensor(row_of, device) if row_of is not None and len(distinct) < batch else None
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


@functools.lru_cache(maxsize=4096)
def _allowed_tuple(paths: tuple[tuple[int, ...], ...], prefix: tuple[int, ...]) -> tuple[int, ...]:
    return tuple(allowed_next(paths, prefix))


def _allowed_cached(paths: Sequence[tuple[int, ...]], prefix: tuple[int, ...]) -> tuple[int, ...]:
    """Return :func:`allowed_next` for a row, memoised: a batch repeats a few legal-reply sets."""
    return _allowed_tuple(tuple(paths), prefix)


def _lay_out_for_decoding(cache: Any, rows: torch.Tensor | None, room: int) -> None:
    """Give each sampled row its copy of the prefill cache (``rows``: row -> cache row; None: as is).

    Layers that are plain ``DynamicLayer``s are swapped for :class:`_ReservedLayer`s, which hold
    ``room`` more positions, so that decode steps write in place rather than concatenate (which
    copies the whole cache every step).
    """
    layers = getattr(cache, "layers", None)
    if DynamicLayer is not None and layers and all(type(layer) is DynamicLayer for layer in layers):
        layers[:] = [_ReservedLayer(layer, rows, room) for layer in layers]
    elif rows is not None:
        cache.batch_select_indices(rows)


if DynamicLayer is not None:

    class _ReservedLayer(DynamicLayer):
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


def template_takes_tools(template: str | None) -> bool:
    """Return whether a Jinja chat template reads a ``tools`` variable (found by jinja2's own parse of it)."""
    if not template:
        return False
    environment = jinja2.Environment(extensions=["jinja2.ext.loopcontrols", _GenerationBlocks])
    return "tools" in meta.find_undeclared_variables(environment.parse(template))


class _GenerationBlocks(jinja2.ext.Extension):
    """Parse transformers' ``{% generation %}`` blocks (the assistant-token marks), so any template parses."""

    tags = {"generation"}

    def parse(self, parser: Any) -> jinja2.nodes.Node:
        lineno = next(parser.stream).lineno
        body = parser.parse_statements(("name:endgeneration",), drop_needle=True)
        return jinja2.nodes.Scope(body, lineno=lineno)


def split_declared_tools(system: str) -> tuple[str, list[dict[str, Any]]] | None:
    """Return (the system message without its tools, the tools' JSON schemas), or None when it declares none.

    Only the env's standard declaration counts, as :func:`llm_zoo.envs.core.tools_prompt` writes it at the end of
    the system message: the schemas are read from its ``<tools>`` block and the block is accepted only if
    ``tools_prompt`` of those schemas is, byte for byte, how the message ends. Anything else (a compact listing
    of an env's own, a clipped or sanitised message, text that merely looks like a declaration) stays text.
    """
    from llm_zoo.envs.core import Tool, tools_prompt

    start = system.rfind("\n<tools>\n")
    end = system.rfind("\n</tools>\n")
    if start < 0 or end < start:
        return None
    tools = []
    for line in system[start + len("\n<tools>\n"):end].split("\n"):
        try:
            schema = json.loads(line)
            function = schema["function"]
            tools.append(Tool(function["name"], function["description"], function["parameters"], fn=_never_called))
        except (json.JSONDecodeError, KeyError, TypeError):
            return None
    block = tools_prompt(tools)
    if not system.endswith(block):
        return None
    return system[: len(system) - len(block)], [t.schema() for t in tools]


def _never_called(**_: Any) -> None:
    raise AssertionError("a tool read back from a system prompt only declares it")


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
