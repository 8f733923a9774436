"""The table policy under the name it has inside :mod:`llm_zoo.policies`: :class:`llm_zoo.policy.TabularPolicy`.

Only a re-export, so ``from llm_zoo.policies.tabular import TabularPolicy`` and ``from llm_zoo.policy
import TabularPolicy`` give the same class. Code inside the package imports :mod:`llm_zoo.policy`.
"""

from __future__ import annotations

from llm_zoo.policy import TabularPolicy

__all__ = ["TabularPolicy"]
