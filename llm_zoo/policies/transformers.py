"""A policy backed by any transformers causal LM: chat template, batched left-padded sampling.

Sampling is a KV-cached loop written here rather than ``model.generate``: it computes each
sampled token's log-prob as it goes (``generate(output_logits=True)`` would keep every step's
full-vocabulary logits until the end), draws from a private ``torch.Generator`` (``generate``
samples from the global RNG), and pins the sampling rule to temperature and top-p alone (a
checkpoint's ``generation_config`` may carry ``top_k``, repetition penalties and the like). The
rule itself (constraint mask, temperature, top-p, the draw) is :mod:`llm_zoo.policies.sampling`,
which ``llm-zoo serve`` draws by too.

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

Shared decoding
---------------
When every row of a call is constrained to its legal replies (``constrain=True`` and observations that list
``legal_actions``: a game's moves) and replies run to several tokens, the decode loop runs one row of the model per
group of rows with the same prompt and the same tokens so far, not one per row: rows of one group have the same
logits. Each row still draws its own token, from its group's logits under its own legal replies, with a uniform of
its own (:func:`~llm_zoo.policies.sampling.draw_shared`), so every reply comes at the same constrained probability
as in the loop over rows. Self-play of a pretrained model, a thousand hands of a dozen information sets a step, then
decodes a few dozen rows a step instead of a thousand, and the cache holds as many. Such calls keep no turns (below):
their prompts are few, and the next call's prefill runs them once each.

Kept turns
----------
A conversation's next prompt begins with its last prompt and the reply sampled to it, so the
policy keeps the KV cache of each row it sampled (prompt and reply, up to ``keep_tokens`` tokens
in all) and runs a later prompt on top of the longest kept beginning it has: a later turn runs only
its new tokens (the other side's message, a tool's output), not the whole conversation again. Rows
that find a kept beginning sample in chunks of their own, apart from those that find none, so a
chunk's pass is no wider than its longest prompt. Over the budget, what no row of the call uses is
dropped first, least recently used first; then the last chunk's own rows go unkept. A call never
drops what its later chunks are about to use, nor what its earlier chunks kept: with more
conversations than the budget holds (an evaluation of many episodes at once), a steady share of
them keeps its turns, where dropping the least recently used would drop each row just before its
next turn.
What is kept belongs to the weights it was computed with: a change to any parameter (an optimiser
step, ``load_state_dict``, a weight push) empties it, as does :meth:`TransformersPolicy.forget_turns`
(a write through ``param.data`` bumps no version counter: call it then). The log-probs agree with
a pass over the whole prompt to float rounding. Only a model whose every layer is plain full
attention keeps anything (one with sliding-window layers keeps nothing), and only for replies
longer than one token.
"""

from __future__ import annotations

import os
import weakref
from collections import OrderedDict
from collections.abc import Sequence
from typing import Any

import torch
from transformers import PreTrainedModel, PreTrainedTokenizerBase

from llm_zoo.policies.chat import ChatTemplatePolicy
from llm_zoo.policies.compat import DynamicLayer, cache_argument, keep_logits_kwargs, override
from llm_zoo.policies.sampling import draw_shared, legal_mask, next_tokens
from llm_zoo.policy import Observation, Reply
from llm_zoo.scoring import (
    Past,
    common_length,
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


class TransformersPolicy(ChatTemplatePolicy):
    """Replies with a transformers causal LM, one batched sampling loop per :meth:`act` call.

    Each observation's ``messages`` go through the tokenizer's chat template with the generation
    prompt, tools included, as :class:`~llm_zoo.policies.chat.ChatTemplatePolicy` says. Prompts are left-padded
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
        keep_tokens: The most tokens of KV cache kept from one call to the next, so that a
            conversation's later turns run only their new tokens (module docstring, "Kept turns").
            None: ``max_forward_tokens``, or 8192 without one; 0 keeps none.
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
        keep_tokens: int | None = None,
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
        if keep_tokens is not None and keep_tokens < 0:
            raise ValueError(f"TransformersPolicy: keep_tokens must be >= 0 (0 keeps none) or None "
                             f"(max_forward_tokens), got {keep_tokens!r}.")
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
        self.keep_tokens = int(keep_tokens if keep_tokens is not None else self.max_forward_tokens or 8192)
        self.device = torch.device(device if device is not None else _default_device())
        self.model = model.to(self.device) if dtype is None else model.to(self.device, dtype=dtype)
        self._set_up_chat(tokenizer)
        self.eos_token_ids = _eos_token_ids(model, tokenizer)
        self.pad_token_id = (
            tokenizer.pad_token_id if tokenizer.pad_token_id is not None else self.eos_token_ids[0]
        )
        self._generator = torch.Generator(device=self.device)
        self.seed(seed)

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
        prompts, paths = self.prompts_and_paths(observations)
        if not prompts:
            return []
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

    def _sample_in_chunks(
        self, prompts: list[list[int]], paths: Sequence[Sequence[tuple[int, ...]] | None] | None = None
    ) -> tuple[list[list[int]], list[list[float]]]:
        """:meth:`_sample` over chunks of the prompts within ``max_forward_tokens`` (module docstring), in order.

        Rows with the same prompt go to the chunk of its first row, so a chunk shares what it can.
        """
        found = self._kept_beginnings(prompts) if self._keeps() else None
        # what this call's rows use, and what its chunks keep, is dropped by no later chunk of it (module docstring)
        self._in_use = {key for key, n in found or () if n}
        try:
            return self._chunked(prompts, paths, found)
        finally:
            self._in_use = None

    def _chunked(
        self, prompts: list[list[int]], paths: Sequence[Sequence[tuple[int, ...]] | None] | None,
        found: list[tuple[tuple[int, ...] | None, int]] | None,
    ) -> tuple[list[list[int]], list[list[float]]]:
        budget = self.max_forward_tokens
        split = found is not None and any(n for _, n in found) and not all(n for _, n in found)
        if budget is None and not split:
            return self._sample(prompts, paths)
        distinct, row_of = dedupe(map(tuple, prompts))
        lengths = [len(p) + self.max_new_tokens for p in distinct]
        if split:  # rows on top of a kept beginning, and the rest, in chunks apart (module docstring)
            assert found is not None
            kept_at = {tuple(prompts[i]): n > 0 for i, (_, n) in enumerate(found)}
            chunks = [[part[i] for i in chunk]
                      for part in ([d for d, p in enumerate(distinct) if not kept_at[p]],
                                   [d for d, p in enumerate(distinct) if kept_at[p]])
                      for chunk in row_chunks([lengths[d] for d in part], budget or sum(lengths))]
        else:
            chunks = row_chunks(lengths, budget)  # type: ignore[arg-type]  (budget is set: not split)
        if len(chunks) == 1:
            return self._sample(prompts, paths, (distinct, row_of))
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
        self, prompts: list[list[int]], paths: Sequence[Sequence[tuple[int, ...]] | None] | None = None,
        deduped: tuple[list[tuple[int, ...]], list[int]] | None = None,
    ) -> tuple[list[list[int]], list[list[float]]]:
        """Sample a completion per prompt (within its legal paths, if given); return ids and log-probs, unpadded.
        ``deduped``: ``dedupe`` of the prompts as tuples, where the caller has it already."""
        model, device, batch = self.model, self.device, len(prompts)
        cache_arg = cache_argument(model)
        keep_last = keep_logits_kwargs(model, 1)
        if not self.share_prefix:
            distinct, row_of = prompts, None
        else:
            distinct, row_of = dedupe(map(tuple, prompts)) if deduped is None else deduped
        # One-token replies need only each prompt's last logits, not a cache laid out per prompt,
        # so the prompts may run as one token tree (module docstring) when that is cheaper.
        if self.share_prefix and self.max_new_tokens == 1:
            last_logits = self._last_logits(distinct)
        else:
            out, prefill_mask = forward_prompts(
                model,
                distinct,
                self.pad_token_id,
                device,
                share_prefix=self.share_prefix,
                use_cache=self.max_new_tokens > 1,  # one-token replies need no cache after the prompt
                token_budget=self.max_forward_tokens,
                past=self._past(distinct) if self._keeps() else None,
            )
            last_logits = out.logits[:, -1, :]
            if self._decodes_shared(paths):
                assert row_of is not None  # share_prefix: the distinct prompts and each row's
                return self._sample_shared(prompts, paths, distinct, row_of, out, prefill_mask)  # type: ignore[arg-type]
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
                generated = torch.stack(step_tokens, dim=1).tolist() if step_tokens else [()] * batch
                mask = legal_mask(paths, generated, logits.shape[-1], device)
            token, logprob = next_tokens(
                logits.float(), temperature=self.temperature, top_p=self.top_p, generator=self._generator, mask=mask
            )
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
        if self._keeps():
            # the cache holds each prompt's real columns, then the replies' tokens fed back: all but the last step's
            self._keep(prompts, completions, cache, prefill_mask, width, len(step_tokens) - 1)
        return completions, completion_logprobs_

    def _decodes_shared(self, paths: Sequence[Sequence[tuple[int, ...]] | None] | None) -> bool:
        """Whether a call decodes each distinct (prompt, tokens so far) once (module docstring, "Shared decoding"):
        replies of several tokens, shared prefixes, and every row constrained to its legal replies."""
        return (self.max_new_tokens > 1 and self.share_prefix and paths is not None
                and all(bool(p) for p in paths))

    def _sample_shared(
        self, prompts: list[list[int]], paths: Sequence[Sequence[tuple[int, ...]]],
        distinct: Sequence[tuple[int, ...]], row_of: Sequence[int], out: Any, prefill_mask: torch.Tensor,
    ) -> tuple[list[list[int]], list[list[float]]]:
        """:meth:`_sample`'s decode loop over groups: the rows with the same prompt and the same tokens so far.

        ``out`` is the prefill of the ``distinct`` prompts (``row_of``: row -> its prompt), with its attention mask.
        A decode step runs one row of the model per group of unfinished rows, its cache rows gathered from the
        groups they grew from; each row then draws its own token from its group's logits under its own legal
        replies (module docstring, "Shared decoding").
        """
        model, device, batch = self.model, self.device, len(prompts)
        cache_arg = cache_argument(model)
        keep_last = keep_logits_kwargs(model, 1)
        eos = set(self.eos_token_ids)
        cache = getattr(out, cache_arg)
        logits = out.logits[:, -1, :].float()  # one row per group; the groups start as the distinct prompts
        group_mask = prefill_mask
        group_tokens: list[tuple[int, ...]] = [() for _ in distinct]  # each group's tokens so far
        group_next = [len(p) for p in distinct]  # the position of each group's next token
        group_of = list(row_of)  # row -> its group; -1 once it has ended
        completions: list[list[int]] = [[] for _ in prompts]
        logprobs: list[list[float]] = [[] for _ in prompts]
        for step in range(self.max_new_tokens):
            live = [row for row in range(batch) if group_of[row] >= 0]
            # one distribution per (group, legal replies): the rows of a group share their logits and tokens so far
            kinds, kind_of = dedupe((group_of[row], id(paths[row])) for row in live)
            representative = {kind: row for row, kind in zip(live, kind_of)}
            rep_rows = [representative[k] for k in range(len(kinds))]
            mask = legal_mask([paths[r] for r in rep_rows], [group_tokens[group_of[r]] for r in rep_rows],
                              logits.shape[-1], device)
            kind_logits = logits[torch.tensor([g for g, _ in kinds], device=device)].masked_fill(~mask, float("-inf"))
            tokens, row_logprobs = draw_shared(kind_logits, kind_of, temperature=self.temperature, top_p=self.top_p,
                                               generator=self._generator)
            grown: dict[tuple[int, int], int] = {}  # (group, token) -> the group it grows into
            for row, token, logprob in zip(live, tokens, row_logprobs):
                completions[row].append(token)
                logprobs[row].append(logprob)
                if token in eos or step + 1 == self.max_new_tokens:
                    group_of[row] = -1
                else:
                    group_of[row] = grown.setdefault((group_of[row], token), len(grown))
            if not grown:
                break
            parents = torch.tensor([g for g, _ in grown], device=device)
            fed = torch.tensor([[t] for _, t in grown], device=device)
            cache.batch_select_indices(parents)
            group_mask = torch.cat([group_mask[parents], group_mask.new_ones(len(grown), 1)], dim=1)
            position_ids = torch.tensor([[group_next[g]] for g, _ in grown], device=device)
            group_tokens = [(*group_tokens[g], t) for g, t in grown]
            group_next = [group_next[g] + 1 for g, _ in grown]
            out = model(input_ids=fed, attention_mask=group_mask, position_ids=position_ids, use_cache=True,
                        **{cache_arg: cache}, **keep_last)
            cache = getattr(out, cache_arg)
            logits = out.logits[:, -1, :].float()
        return completions, logprobs

    # ---- kept turns (module docstring) -------------------------------------------------------

    def _keeps(self) -> bool:
        return self.keep_tokens > 0 and self.max_new_tokens > 1 and _full_attention(self.model)

    def _kept(self) -> OrderedDict[tuple[int, ...], list[tuple[torch.Tensor, torch.Tensor]]]:
        """Token ids -> each layer's kept keys and values ``[heads, tokens, dim]``, least recently used first; emptied
        when the weights are not those it was computed with."""
        stamp = _weights_stamp(self.model)
        kept = self.__dict__.get("_kept_turns")
        if kept is None or not _same_weights(kept[0], stamp):
            kept = self.__dict__["_kept_turns"] = (stamp, OrderedDict())
        return kept[1]

    def _kept_beginnings(self, prompts: Sequence[Sequence[int]]) -> list[tuple[tuple[int, ...] | None, int]]:
        """For each prompt, the kept sequence that shares the most of its first tokens, and how many (at most all
        but its last token, whose logits the pass computes); (None, 0) where none shares any."""
        kept = self._kept()
        found = []
        for prompt in map(tuple, prompts):
            best, most = None, 0
            for key in kept:
                n = min(common_length(key, prompt), len(prompt) - 1)
                if n > most:
                    best, most = key, n
            found.append((best, most))
        return found

    def _past(self, prompts: Sequence[tuple[int, ...]]) -> Past | None:
        """The kept KV of the prompts' first tokens as one left-padded cache, each row cut so that the pass is no
        wider than the longest prompt; None when no row has any."""
        found = self._kept_beginnings(prompts)
        lengths = [len(p) for p in prompts]
        cut = max(lengths) - max(n - m for n, (_, m) in zip(lengths, found))
        use = [min(m, cut) for _, m in found]
        width = max(use)
        if width < 1:
            return None
        kept = self._kept()
        mask = torch.zeros(len(prompts), width, dtype=torch.long, device=self.device)
        layers = []
        sample = kept[next(key for (key, _), n in zip(found, use) if n)]
        for layer, (k0, v0) in enumerate(sample):
            keys = k0.new_zeros(len(prompts), k0.shape[0], width, k0.shape[-1])
            values = v0.new_zeros(len(prompts), v0.shape[0], width, v0.shape[-1])
            for row, ((key, _), n) in enumerate(zip(found, use)):
                if n:
                    keys[row, :, width - n:] = kept[key][layer][0][:, :n]
                    values[row, :, width - n:] = kept[key][layer][1][:, :n]
            layers.append((keys, values))
        for row, ((key, _), n) in enumerate(zip(found, use)):
            if n:
                mask[row, width - n:] = 1
                kept.move_to_end(key)
        return Past(_cache_of(layers), mask, use)

    def _keep(self, prompts: Sequence[Sequence[int]], completions: Sequence[Sequence[int]], cache: Any,
              mask: torch.Tensor, width: int, fed: int) -> None:
        """Keep each row's KV (its prompt's real columns of the first ``width``, then ``fed`` reply tokens at most),
        dropping kept sequences it extends; beyond ``keep_tokens``, those the call does not use, least recently used
        first, then these rows' own (module docstring)."""
        if fed < 1 or not getattr(cache, "layers", None):
            return  # every row ended at its first token: the cache is still the prefill's, laid out per prompt
        kept = self._kept()
        in_use = self.__dict__.get("_in_use")
        in_use = set() if in_use is None else in_use
        added: list[tuple[int, ...]] = []
        steps = torch.arange(fed, device=self.device)
        for row, (prompt, completion) in enumerate(zip(prompts, completions)):
            n = min(len(completion), fed)
            key = (*prompt, *completion[:n])
            if key in kept:
                kept.move_to_end(key)
                continue
            columns = torch.cat([mask[row, :width].nonzero().squeeze(1), width + steps[:n]])
            for old in [k for k in kept if len(k) < len(key) and key[: len(k)] == k]:
                del kept[old]  # what it held is a beginning of this one
            kept[key] = [(layer.keys[row].index_select(1, columns), layer.values[row].index_select(1, columns))
                         for layer in cache.layers]
            added.append(key)
        total = sum(map(len, kept))
        for key in [k for k in kept if k not in in_use and k not in added]:  # least recently used first
            if total <= self.keep_tokens:
                break
            total -= len(key)
            del kept[key]
        while total > self.keep_tokens and added:
            key = added.pop()
            total -= len(key)
            del kept[key]
        in_use.update(added)

    def forget_turns(self) -> None:
        """Drop the KV cache kept from earlier calls (module docstring, "Kept turns"): to free its memory, or after
        writing the weights through ``param.data``."""
        self.__dict__.pop("_kept_turns", None)


    def _last_logits(self, prompts: list[tuple[int, ...]]) -> torch.Tensor:
        """Return the logits after each distinct prompt ([prompts, vocab]), for one-token replies.

        Each prompt runs once while the weights stay as they are: a memo keeps the rows beside the parameter
        objects themselves (held, so a new model's parameters can never pass for them) and their version counters
        (every in-place change through the tensor, an optimiser step, ``load_state_dict``, a weight push, bumps
        them; a write through ``param.data`` does not, and then :meth:`forget_logits` drops the memo), so a
        rollout's later calls (Leduc's refills of 64 slots meet the same openings again) run only prompts not met
        yet. Those run as one token tree (module docstring) where that is cheaper, else as one pass.
        """
        model, device = self.model, self.device
        stamp = _weights_stamp(model)
        memo = self.__dict__.get("_logits_memo")
        if memo is None or not _same_weights(memo[0], stamp) or len(memo[1]) > _LOGITS_MEMO_SIZE:
            memo = self.__dict__["_logits_memo"] = (stamp, {})
        rows = memo[1]
        missing = [p for p in prompts if p not in rows]
        if missing:
            tree = plan_tree(model, missing) if len(missing) > 1 else None
            if tree is not None:
                found = forward_tree(model, tree, device)
            else:
                out, _ = forward_prompts(model, missing, self.pad_token_id, device, share_prefix=True, use_cache=False,
                                         token_budget=self.max_forward_tokens)
                found = out.logits[:, -1, :]
            rows.update(zip(missing, found))
        if len(missing) == len(prompts):
            return found
        return torch.stack([rows[p] for p in prompts])

    def forget_logits(self) -> None:
        """Drop the one-token logits kept for the current weights (after writing them through ``param.data``)."""
        self.__dict__.pop("_logits_memo", None)


_LOGITS_MEMO_SIZE = 8192
"""Most prompts whose next-token logits a policy keeps for weights that have not changed."""


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


def _weights_stamp(model: torch.nn.Module) -> tuple[list[torch.nn.Parameter], list[int]]:
    """The model's parameter objects (held, so a new model's can never pass for them) and their version counters
    (bumped by every in-place change through the tensor)."""
    params = list(model.parameters())
    return params, [p._version for p in params]


def _same_weights(a: tuple[list[torch.nn.Parameter], list[int]], b: tuple[list[torch.nn.Parameter], list[int]]
                  ) -> bool:
    return len(a[0]) == len(b[0]) and all(x is y for x, y in zip(a[0], b[0])) and a[1] == b[1]


def _full_attention(model: PreTrainedModel) -> bool:
    """Whether every layer of the model's cache is a plain full-attention one (no sliding window, no recurrent
    state): what kept turns can be cut and joined from."""
    found = _FULL_ATTENTION.get(model)
    if found is None:
        from transformers import DynamicCache

        try:
            layers = DynamicCache(config=model.config).layers
        except Exception:  # noqa: BLE001 - a config the cache cannot read: keep nothing
            layers = []
        found = _FULL_ATTENTION[model] = bool(layers) and DynamicLayer is not None and all(
            type(layer) is DynamicLayer for layer in layers)
    return found


_FULL_ATTENTION: weakref.WeakKeyDictionary[torch.nn.Module, bool] = weakref.WeakKeyDictionary()


def _cache_of(layers: Sequence[tuple[torch.Tensor, torch.Tensor]]) -> Any:
    """A cache of plain full-attention layers holding ``layers``' keys and values."""
    from transformers import DynamicCache

    return DynamicCache(ddp_cache_data=layers)


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
