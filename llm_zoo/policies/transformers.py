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
"""

from __future__ import annotations

import inspect
import os
import sys
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import torch
from transformers import AutoModelForCausalLM, AutoTokenizer, PreTrainedModel, PreTrainedTokenizerBase

from llm_zoo.policies.base import Observation, Policy, Reply

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
        self.device = torch.device(device if device is not None else _default_device())
        self.model = model.to(self.device) if dtype is None else model.to(self.device, dtype=dtype)
        self.tokenizer = tokenizer
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
        with _eval_mode(self.model), torch.inference_mode():
            completions, logprobs = self._sample(prompts)
        texts = self.tokenizer.batch_decode(completions, skip_special_tokens=True)
        return [
            Reply(text, prompt_ids=p, completion_ids=c, logprobs=lp, policy=self.name)
            for text, p, c, lp in zip(texts, prompts, completions, logprobs, strict=True)
        ]

    def encode_prompts(self, observations: Sequence[Observation]) -> list[list[int]]:
        """Return the chat-template token ids of each observation's messages, with the generation prompt."""
        conversations = [[dict(m) for m in _messages(obs, i)] for i, obs in enumerate(observations)]
        # sanitize_control_tokens (transformers >= 5) encodes control tokens typed inside messages as
        # text; older versions hand the flag to the template, which ignores it.
        ids = self.tokenizer.apply_chat_template(
            conversations,
            add_generation_prompt=True,
            tokenize=True,
            return_dict=False,
            sanitize_control_tokens=True,
        )
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

    def _sample(self, prompts: list[list[int]]) -> tuple[list[list[int]], list[list[float]]]:
        """Sample a completion per prompt; return the token ids and their log-probs, unpadded."""
        input_ids, attention_mask = _left_pad(prompts, self.pad_token_id, self.device)
        position_ids = _position_ids(attention_mask)
        eos = torch.tensor(self.eos_token_ids, device=self.device)
        keep_last = _keep_logits_kwargs(self.model, 1)
        cache_arg = _cache_arg(self.model)
        batch = len(prompts)
        finished = torch.zeros(batch, dtype=torch.bool, device=self.device)
        step_tokens: list[torch.Tensor] = []  # max_new_tokens x [batch]
        step_logprobs: list[torch.Tensor] = []
        cache = None
        for _ in range(self.max_new_tokens):
            out = self.model(
                input_ids=input_ids,
                attention_mask=attention_mask,
                position_ids=position_ids,
                use_cache=True,
                **{cache_arg: cache},
                **keep_last,
            )
            cache = getattr(out, cache_arg)
            token, logprob = self._next_token(out.logits[:, -1, :].float())
            token = token.masked_fill(finished, self.pad_token_id)
            step_tokens.append(token)
            step_logprobs.append(logprob)
            finished |= torch.isin(token, eos)
            if bool(finished.all()):
                break
            # Finished rows keep feeding padding; their outputs are never read.
            input_ids = token[:, None]
            position_ids = position_ids[:, -1:] + 1
            attention_mask = torch.cat([attention_mask, attention_mask.new_ones(batch, 1)], dim=1)
        tokens = torch.stack(step_tokens, dim=1).tolist()  # [batch, steps]
        logprobs = torch.stack(step_logprobs, dim=1).tolist()
        eos_set = set(self.eos_token_ids)
        completions, completion_logprobs_ = [], []
        for row_tokens, row_logprobs in zip(tokens, logprobs):
            end = next((t + 1 for t, tok in enumerate(row_tokens) if tok in eos_set), len(row_tokens))
            completions.append(row_tokens[:end])
            completion_logprobs_.append(row_logprobs[:end])
        return completions, completion_logprobs_

    def _next_token(self, logits: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """Pick a token per row from float32 ``logits`` [batch, vocab]; return it and its log-prob."""
        if self.temperature == 0:
            logprobs = torch.log_softmax(logits, dim=-1)
            token = logits.argmax(dim=-1)
        else:
            logprobs = torch.log_softmax(logits / self.temperature, dim=-1)
            probs = logprobs.exp()
            if self.top_p < 1:
                probs = _top_p_filter(probs, self.top_p)
            token = torch.multinomial(probs, 1, generator=self._generator).squeeze(1)
        return token, logprobs.gather(1, token[:, None]).squeeze(1)


def completion_logprobs(
    model: PreTrainedModel,
    prompts_ids: Sequence[Sequence[int]],
    completions_ids: Sequence[Sequence[int]],
    *,
    pad_token_id: int,
    temperature: float = 1.0,
    with_entropy: bool = False,
) -> tuple[torch.Tensor, ...]:
    """Score completions given prompts with one teacher-forced forward pass.

    The batch is laid out as sampling lays it out: prompts left-padded to a common length, then
    completions right-padded, with an attention mask over real tokens and position ids counting
    real tokens only. Only the logits that predict completion tokens are computed. Gradients flow
    when called outside ``torch.no_grad``, so the trainer can use it for the policy loss.

    Args:
        model: The causal LM (on its device).
        prompts_ids: Token ids of each prompt, unpadded.
        completions_ids: Token ids of each completion, unpadded; may be empty.
        pad_token_id: Filler for padding (never attended to).
        temperature: Divides the logits before the log-softmax; must be > 0.

        with_entropy: Also return the entropy of the tempered next-token distribution at each
            completion position (``per_token_entropy``, same shape, 0 on padding).

    Returns:
        ``per_token_logps`` [batch, max_completion_len], float32, and ``completion_mask`` of the
        same shape (1 on real completion tokens, 0 on padding, whose log-probs are 0); then
        ``per_token_entropy`` when ``with_entropy``.
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
        return (empty, empty.long(), empty) if with_entropy else (empty, empty.long())
    prompt_ids, prompt_mask = _left_pad(prompts_ids, pad_token_id, device)
    completion_ids, completion_mask = _right_pad(completions_ids, pad_token_id, device)
    input_ids = torch.cat([prompt_ids, completion_ids], dim=1)  # [batch, prompt_len + width]
    attention_mask = torch.cat([prompt_mask, completion_mask], dim=1)
    out = model(
        input_ids=input_ids,
        attention_mask=attention_mask,
        position_ids=_position_ids(attention_mask),
        use_cache=False,
        **_keep_logits_kwargs(model, width + 1),
    )
    # The logit at position i predicts token i + 1: the last width + 1 positions minus the final one.
    logits = out.logits[:, -(width + 1) : -1, :].float() / temperature  # [batch, width, vocab]
    all_logps = torch.log_softmax(logits, dim=-1)
    per_token_logps = all_logps.gather(2, completion_ids[:, :, None]).squeeze(2)
    if not with_entropy:
        return per_token_logps * completion_mask, completion_mask
    per_token_entropy = -(all_logps.exp() * all_logps).sum(dim=-1)
    return per_token_logps * completion_mask, completion_mask, per_token_entropy * completion_mask


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
    if isinstance(messages, (str, bytes)) or not isinstance(messages, Sequence) or not messages:
        raise ValueError(
            f"observation {index}: 'messages' should be a non-empty sequence of {{'role', 'content'}} "
            f"dicts, got {type(messages).__name__}: {repr(messages)[:200]}."
        )
    return messages


def _left_pad(
    rows: Sequence[Sequence[int]], pad: int, device: torch.device
) -> tuple[torch.Tensor, torch.Tensor]:
    """Left-pad token id rows into ``ids`` [batch, max_len] and ``mask`` [batch, max_len]."""
    width = max(len(r) for r in rows)
    ids = torch.full((len(rows), width), pad, dtype=torch.long)
    mask = torch.zeros((len(rows), width), dtype=torch.long)
    for i, row in enumerate(rows):
        if row:
            ids[i, width - len(row) :] = torch.tensor(row, dtype=torch.long)
            mask[i, width - len(row) :] = 1
    return ids.to(device), mask.to(device)


def _right_pad(
    rows: Sequence[Sequence[int]], pad: int, device: torch.device
) -> tuple[torch.Tensor, torch.Tensor]:
    """Right-pad token id rows into ``ids`` [batch, max_len] and ``mask`` [batch, max_len]."""
    width = max(len(r) for r in rows)
    ids = torch.full((len(rows), width), pad, dtype=torch.long)
    mask = torch.zeros((len(rows), width), dtype=torch.long)
    for i, row in enumerate(rows):
        if row:
            ids[i, : len(row)] = torch.tensor(row, dtype=torch.long)
            mask[i, : len(row)] = 1
    return ids.to(device), mask.to(device)


def _position_ids(attention_mask: torch.Tensor) -> torch.Tensor:
    """Number real tokens 0, 1, ... from the left; padding gets 0 (it is masked anyway)."""
    return (attention_mask.cumsum(dim=1) - 1).clamp(min=0)


def _top_p_filter(probs: torch.Tensor, top_p: float) -> torch.Tensor:
    """Zero every token outside the smallest most-probable set whose mass reaches ``top_p``."""
    sorted_probs, order = probs.sort(dim=-1, descending=True)
    mass_before = sorted_probs.cumsum(dim=-1) - sorted_probs
    sorted_probs = sorted_probs.masked_fill(mass_before >= top_p, 0.0)  # the top token always stays
    return torch.zeros_like(probs).scatter(-1, order, sorted_probs)


def _forward_params(model: PreTrainedModel) -> Mapping[str, inspect.Parameter]:
    try:
        return inspect.signature(model.forward).parameters
    except (TypeError, ValueError):
        return {}


def _keep_logits_kwargs(model: PreTrainedModel, n: int) -> dict[str, int]:
    """Ask the model for the last ``n`` logits only, where its forward takes ``logits_to_keep``."""
    return {"logits_to_keep": n} if "logits_to_keep" in _forward_params(model) else {}


def _cache_arg(model: PreTrainedModel) -> str:
    """Name the KV-cache argument and output field: ``cache`` in recent transformers 5.x (which deprecates
    ``past_key_values``, to be removed in 5.40), ``past_key_values`` before that."""
    return "cache" if "cache" in _forward_params(model) else "past_key_values"


class _eval_mode:
    """Put a model in eval mode for a block and restore its training flag after."""

    def __init__(self, model: torch.nn.Module) -> None:
        self.model = model

    def __enter__(self) -> None:
        self.was_training = self.model.training
        self.model.eval()

    def __exit__(self, *exc: object) -> None:
        self.model.train(self.was_training)
