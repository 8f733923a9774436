"""Constrained decoding: sample only the replies an env lists as legal.

An env that offers ``obs["legal_actions"]`` (a tuple of replies, each always valid) lets a policy
restrict sampling to those replies, the way action masking restricts a classic learner to legal
moves (sb3-contrib's MaskablePPO). Each legal reply becomes a token path (its tokens, then
end-of-turn when the token budget leaves room); at every step only tokens that continue some path
are allowed. The trainer recomputes the same allowed sets from the recorded observation, so the
log-probs it trains on are those of the constrained distribution that sampled the reply.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any


def legal_paths(tokenizer: Any, replies: Sequence[str], eos_token_id: int, max_new_tokens: int) -> list[tuple[int, ...]]:
    """Return the token path of each legal reply: its tokens, plus end-of-turn if the budget allows.

    Raises:
        ValueError: a legal reply is longer than ``max_new_tokens`` tokens. Cut short, it would no longer be the
            reply (a pretrained tokenizer spells ``[check]`` in 3 tokens: with one, every move is ``[``), so the
            mask would sample text the env cannot read, and an evaluation would read the same mass for every move.
    """
    paths = []
    for reply in replies:
        ids = list(tokenizer.encode(reply, add_special_tokens=False))
        if len(ids) > max_new_tokens:
            raise ValueError(f"the legal reply {reply!r:.80} is {len(ids)} tokens of this tokenizer, more than "
                             f"max_new_tokens={max_new_tokens}, so the decoding mask cannot write it; raise "
                             f"max_new_tokens (config.max_new_tokens, --max-new-tokens) to at least {len(ids)}, or "
                             f"{len(ids) + 1} to end the turn after it")
        if len(ids) < max_new_tokens:
            ids.append(eos_token_id)
        if ids:
            paths.append(tuple(ids))
    if not paths:
        raise ValueError(f"no legal reply encodes to a token path; replies were {list(replies)!r}")
    return paths


def allowed_next(paths: Sequence[tuple[int, ...]], prefix: Sequence[int]) -> list[int]:
    """Return the tokens that continue some path after ``prefix`` (empty once a path is complete)."""
    n = len(prefix)
    prefix = tuple(prefix)
    return sorted({p[n] for p in paths if len(p) > n and p[:n] == prefix})


def allowed_per_position(paths: Sequence[tuple[int, ...]], completion: Sequence[int]) -> list[list[int]]:
    """Return, for each position of a sampled completion, the tokens that were allowed there."""
    return [allowed_next(paths, completion[:t]) for t in range(len(completion))]
