"""vLLM's side of constrained decoding: a logits processor that keeps each request on its legal paths.

Imported by the engine (by the name ``LEGAL_REPLIES``), never by ``import llm_zoo``: it needs
vLLM. A request that carries ``SamplingParams(extra_args={EXTRA_ARG: paths})`` — the token paths of
its observation's legal replies, as :meth:`TransformersPolicy.legal_paths` builds them — may only
sample tokens that continue one of those paths (:func:`llm_zoo.policies.constraints.allowed_next`);
other requests are left alone. The processor masks logits before temperature and sampling, and it
is not argmax-invariant, so with ``logprobs_mode="processed_logprobs"`` the recorded log-prob is
that of the renormalised, constrained distribution: what TransformersPolicy records and what the
trainer recomputes from the observation.
"""

from __future__ import annotations

import sys
from collections.abc import Sequence

import torch
from vllm import SamplingParams
from vllm.v1.sample.logits_processor import AdapterLogitsProcessor

from llm_zoo.policies.constraints import allowed_next
from llm_zoo.policies.vllm import EXTRA_ARG, LEGAL_REPLIES

if sys.version_info >= (3, 12):
    from typing import override
else:
    from typing_extensions import override

__all__ = ["EXTRA_ARG", "LEGAL_REPLIES", "LegalReplies"]


class LegalReplies(AdapterLogitsProcessor):
    """Mask every token that continues none of the request's legal paths to ``-inf``."""

    @override
    def is_argmax_invariant(self) -> bool:
        return False  # it changes which token greedy decoding picks

    @override
    def new_req_logits_processor(self, params: SamplingParams):  # type: ignore[override]
        paths = (params.extra_args or {}).get(EXTRA_ARG)
        if not paths:
            return None
        paths = [tuple(map(int, p)) for p in paths]

        def keep_legal(output_ids: Sequence[int], logits: torch.Tensor) -> torch.Tensor:
            allowed = allowed_next(paths, output_ids)
            if not allowed:  # a path is complete: its end-of-turn token (or the length limit) stops it
                return logits
            masked = torch.full_like(logits, float("-inf"))
            index = torch.tensor(allowed, device=logits.device)
            masked[index] = logits[index]
            return masked

        return keep_legal
