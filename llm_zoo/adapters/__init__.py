"""The same env seen through other APIs: a discrete masked view and a single-agent gymnasium view."""

from __future__ import annotations

from llm_zoo.adapters.discrete import DiscreteActions
from llm_zoo.adapters.single_agent import SingleAgent

__all__ = ["DiscreteActions", "SingleAgent"]
