"""The policy contract under the name it has inside :mod:`llm_zoo.policies`: the objects of :mod:`llm_zoo.policy`.

The contract sits in the bottom layer, beside the envs whose scripted players implement it; this
module only re-exports it, so ``from llm_zoo.policies.base import Policy`` and ``from llm_zoo.policy
import Policy`` give the same class. Code inside the package imports :mod:`llm_zoo.policy`.
"""

from __future__ import annotations

from llm_zoo.policy import (
    FunctionPolicy,
    Observation,
    Policy,
    PromptTooLong,
    RandomPolicy,
    Reply,
    ScoresTokens,
    SeededPolicy,
)

__all__ = ["FunctionPolicy", "Observation", "Policy", "PromptTooLong", "RandomPolicy", "Reply", "ScoresTokens",
           "SeededPolicy"]
