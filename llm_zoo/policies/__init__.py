"""Who acts: policies map a batch of observations to a batch of replies.

The contract and the model-free policies are :mod:`llm_zoo.policy`'s, re-exported here; the
model-backed ones (``TransformersPolicy``) are loaded on first access, so ``import llm_zoo.policies``
needs neither torch nor transformers.
"""

from __future__ import annotations

import importlib
from typing import Any

from llm_zoo.policy import (
    FunctionPolicy,
    Observation,
    Policy,
    PromptTooLong,
    RandomPolicy,
    Reply,
    ScoresTokens,
    SeededPolicy,
    TabularPolicy,
)

# name -> module that defines it; these need the `llm` extra (torch, transformers).
_LAZY = {
    "TransformersPolicy": "llm_zoo.policies.transformers",
    "VLLMPolicy": "llm_zoo.policies.vllm",
}

__all__ = ["FunctionPolicy", "Observation", "Policy", "PromptTooLong", "RandomPolicy", "Reply", "ScoresTokens",
           "SeededPolicy", "TabularPolicy", *_LAZY]


def __getattr__(name: str) -> Any:
    if name in _LAZY:
        try:
            module = importlib.import_module(_LAZY[name])
        except ImportError as err:
            raise ImportError(
                f"llm_zoo.policies.{name} needs torch and transformers ({err}); "
                "install them with `pip install 'llm_zoo[llm]'`."
            ) from err
        value = getattr(module, name)
        globals()[name] = value
        return value
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


def __dir__() -> list[str]:
    return sorted(set(globals()) | set(__all__))
