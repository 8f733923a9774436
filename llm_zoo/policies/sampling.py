"""Next-token sampling: the one rule that :class:`~llm_zoo.policies.transformers.TransformersPolicy` and
``llm-zoo serve``'s decoder (:mod:`llm_zoo.serve.engine`) both draw by.

The rule, for one row of float32 logits ``[vocab]``:

1. **Constrain.** Where a mask is given (:func:`legal_mask`: the tokens that continue one of the
   row's legal replies, :mod:`llm_zoo.policies.constraints`), every other token's logit is ``-inf``.
2. **Temper.** ``log_softmax(logits / temperature)`` (:func:`tempered_logprobs`), computed in
   float32. Temperature ``0`` is greedy: the argmax of the logits, with the log-probs taken at
   temperature 1. These log-probs are what a reply records (``Reply.logprobs``, the server's
   ``logprobs``): taken *before* top-p, so the trainer recomputes them with one teacher-forced pass
   and top-p never turns one into ``-inf``.
3. **Truncate.** Top-p (nucleus) keeps the smallest most-probable set of tokens whose mass reaches
   ``top_p`` (:func:`top_p_filter`); the most probable token always stays; ``top_p=1`` keeps all.
4. **Draw.** One uniform in [0, 1), float64, from the caller's ``torch.Generator``, picks the token
   whose share of the kept mass holds it, tokens in vocabulary order (:func:`invert_cdf`). So the
   same generator state gives the same token wherever the rule runs.

There is no top-k: neither the policies nor the server take one. The policy passes its settings
as numbers and one generator for the batch (:func:`next_tokens`); the server passes a temperature,
a top-p and a generator per row, since its rows are different requests (:func:`tempered_logprobs`
and :func:`draw_tokens` take per-row tensors).
"""

from __future__ import annotations

import functools
import math
from collections.abc import Sequence
from typing import NoReturn

import numpy as np
import torch

from llm_zoo.policies.constraints import allowed_next

__all__ = ["draw_shared", "draw_tokens", "invert_cdf", "legal_mask", "next_tokens", "tempered_logprobs", "top_p_filter"]


def next_tokens(
    logits: torch.Tensor,
    *,
    temperature: float,
    top_p: float,
    generator: torch.Generator,
    mask: torch.Tensor | None = None,
) -> tuple[torch.Tensor, torch.Tensor]:
    """Pick a token per row of float32 ``logits`` [rows, vocab] by the module's rule; return them [rows] and their log-probs [rows].

    One ``generator`` draws one uniform a row (none when greedy); ``mask`` [rows, vocab] marks the allowed tokens.
    """
    if mask is not None:
        logits = logits.masked_fill(~mask, float("-inf"))
    logprobs = tempered_logprobs(logits, temperature)
    if temperature == 0:
        token = logits.argmax(dim=-1)
    else:
        uniform = torch.rand(len(logits), 1, generator=generator, dtype=torch.float64, device=logits.device)
        token = draw_tokens(logprobs, top_p, uniform)
    return token, logprobs.gather(1, token[:, None]).squeeze(1)


def draw_shared(
    logits: torch.Tensor,
    kind_of: Sequence[int],
    *,
    temperature: float,
    top_p: float,
    generator: torch.Generator,
) -> tuple[list[int], list[float]]:
    """Pick a token per row, each row drawing from the distribution of its kind; return the tokens and their log-probs.

    ``logits`` [kinds, vocab] are float32, already constrained (``-inf`` off the legal tokens); ``kind_of`` gives each
    row's kind. The module's rule, with each kind's tempered log-probs, top-p and cumulative mass computed once however
    many rows draw from it: row ``i`` gets what :func:`next_tokens` would give it from ``logits[kind_of[i]]`` with the
    same uniform (one a row from ``generator``, none when greedy).
    """
    logprobs = tempered_logprobs(logits, temperature)
    kinds = torch.tensor(list(kind_of), dtype=torch.long, device=logits.device)
    if temperature == 0:
        tokens = logits.argmax(dim=-1)[kinds]
    else:
        uniform = torch.rand(len(kinds), generator=generator, dtype=torch.float64, device=logits.device)
        probs = logprobs.exp()
        if top_p < 1:
            probs = top_p_filter(probs, top_p)
        cdf = probs.double().cumsum(dim=-1)
        total = cdf[:, -1]
        if not bool(((total > 0) & (total < math.inf)).all()):
            _no_mass(total.tolist())
        point = uniform * total[kinds]
        tokens = torch.empty(len(kinds), dtype=torch.long, device=logits.device)
        for kind in range(len(cdf)):
            rows = (kinds == kind).nonzero().squeeze(1)
            # the first token whose cumulative mass passes the point, as invert_cdf counts it
            tokens[rows] = torch.searchsorted(cdf[kind], point[rows], right=True)
        # a point that rounds up to the row's total would pass every token: the last token with mass
        last = probs.shape[-1] - 1 - (probs.flip(-1) > 0).int().argmax(dim=-1)
        tokens = torch.minimum(tokens, last[kinds])
    return tokens.tolist(), logprobs[kinds, tokens].tolist()


def tempered_logprobs(logits: torch.Tensor, temperature: float | torch.Tensor) -> torch.Tensor:
    """Return ``log_softmax(logits / temperature)`` [rows, vocab]; temperature ``0`` (greedy) counts as 1.

    ``temperature`` is one number for every row, or a float32 tensor [rows] of one per row.
    """
    if isinstance(temperature, torch.Tensor):
        temperature = torch.where(temperature == 0, 1.0, temperature)[:, None]
        return torch.log_softmax(logits / temperature, dim=-1)
    if temperature == 0:
        return torch.log_softmax(logits, dim=-1)
    return torch.log_softmax(logits / temperature, dim=-1)


def draw_tokens(logprobs: torch.Tensor, top_p: float | torch.Tensor, uniform: torch.Tensor) -> torch.Tensor:
    """Return the token [rows] that each row's ``uniform`` [rows, 1] (float64, in [0, 1)) picks from ``logprobs`` [rows, vocab] after top-p.

    ``top_p`` is one number for every row, or a tensor [rows] of one per row.
    """
    probs = logprobs.exp()
    if isinstance(top_p, torch.Tensor):
        # the comparison runs in the probabilities' dtype, as a number's does; rows at 1 keep every token
        top_p = top_p.to(probs.dtype)
        if bool((top_p < 1).any()):
            probs = top_p_filter(probs, torch.where(top_p >= 1, math.inf, top_p)[:, None])
    elif top_p < 1:
        probs = top_p_filter(probs, top_p)
    return invert_cdf(probs, uniform)


def top_p_filter(probs: torch.Tensor, top_p: float | torch.Tensor) -> torch.Tensor:
    """Zero every token outside the smallest most-probable set whose mass reaches ``top_p`` (a number, or [rows, 1])."""
    sorted_probs, order = probs.sort(dim=-1, descending=True)
    mass_before = sorted_probs.cumsum(dim=-1) - sorted_probs
    drop = mass_before >= top_p
    drop[..., 0] = False  # the top token always stays, even for a top_p that rounds to 0 in float32
    sorted_probs = sorted_probs.masked_fill(drop, 0.0)
    return torch.zeros_like(probs).scatter(-1, order, sorted_probs)


def invert_cdf(probs: torch.Tensor, uniform: torch.Tensor) -> torch.Tensor:
    """Return, per row of ``probs`` [rows, vocab], the token whose share of the row's cumulative mass holds ``uniform`` [rows, 1].

    ``probs`` are non-negative, with some mass in every row, and need not sum to 1 (top-p leaves
    them unnormalised); ``uniform`` is drawn from [0, 1). A token is drawn with probability its
    share of the row's mass, and a token without mass never. One uniform a row: for a single
    sample ``torch.multinomial`` draws an exponential per vocabulary entry (the argmax of
    ``probs / Exp(1)``), 0.14 ms for 64 rows of a 111-word vocabulary on one CPU core. On the CPU
    the arithmetic runs in numpy, whose calls on arrays this small cost a fifth of torch's: 0.01 ms
    for one row or 64 (``multinomial``: 0.014 ms for one row).

    Raises:
        ValueError: a row's mass is not finite and positive (the model's logits are NaN or infinite there).
    """
    if probs.device.type == "cpu":
        return torch.from_numpy(_invert_cdf_numpy(probs.float().numpy(), uniform.numpy()[:, 0]))
    return _invert_cdf_torch(probs, uniform)


def _invert_cdf_torch(probs: torch.Tensor, uniform: torch.Tensor) -> torch.Tensor:
    """:func:`invert_cdf` in torch, on any device."""
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
    """:func:`invert_cdf` in numpy: ``probs`` [rows, vocab], ``uniform`` [rows]; int64 tokens [rows]."""
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


# ---- constrained decoding ------------------------------------------------------------------------


def legal_mask(
    paths: Sequence[Sequence[tuple[int, ...]] | None],
    generated: Sequence[Sequence[int]],
    vocab_size: int,
    device: torch.device,
) -> torch.Tensor:
    """Return the allowed tokens [rows, vocab] of each row: those continuing one of its legal ``paths`` after ``generated``.

    A row without paths (None or empty), or whose path is complete, is unconstrained. A batch
    repeats a few (legal replies, tokens so far) pairs: a mask row is built for each distinct pair
    (row 0: unconstrained), then one gather of a row per batch row, in numpy (torch's indexing with
    Python lists costs several times as much).
    """
    kinds: dict[tuple[int, tuple[int, ...]], int] = {}
    allowed_of: list[tuple[int, ...]] = [()]
    kind_of = []
    for row_paths, so_far in zip(paths, generated):
        if not row_paths:
            kind_of.append(0)
            continue
        key = (id(row_paths), tuple(so_far))  # rows with one set of legal replies share one paths object
        kind = kinds.get(key)
        if kind is None:
            kind = kinds[key] = len(allowed_of)
            allowed_of.append(_allowed_cached(row_paths, key[1]))
        kind_of.append(kind)
    table = np.ones((len(allowed_of), vocab_size), dtype=bool)
    for kind, allowed in enumerate(allowed_of):
        if allowed:  # else unconstrained: the row or its path is done
            table[kind] = False
            table[kind, list(allowed)] = True
    return torch.from_numpy(table[kind_of]).to(device)


@functools.lru_cache(maxsize=4096)
def _allowed_tuple(paths: tuple[tuple[int, ...], ...], prefix: tuple[int, ...]) -> tuple[int, ...]:
    return tuple(allowed_next(paths, prefix))


def _allowed_cached(paths: Sequence[tuple[int, ...]], prefix: tuple[int, ...]) -> tuple[int, ...]:
    """Return :func:`allowed_next` for a row, memoised: a batch repeats a few legal-reply sets."""
    return _allowed_tuple(tuple(paths), prefix)

