"""A policy read from a table: information state -> probabilities of moves.

Used for game-theoretic players (Kuhn poker's Nash equilibria, CFR's average strategy) and for
anything a classic learner exposes as a table. The env must put the acting agent's information
state in ``obs["info_set"]``.
"""

from __future__ import annotations

import sys
from collections.abc import Mapping, Sequence

from llm_zoo.policies.base import Observation, Reply, SeededPolicy

if sys.version_info >= (3, 12):
    from typing import override
else:
    from typing_extensions import override


class TabularPolicy(SeededPolicy):
    """Sample each reply from ``table[obs["info_set"]]``, a mapping ``move -> probability``.

    Args:
        table: information state -> {move: probability}; e.g. ``theory.nash_policy(0.0)``.
        reply_format: how a move is written as a reply (``"[{}]"`` gives ``"[bet]"``).
        seed: seed of the policy's own RNG.
        name: shown in ``Reply.policy``.
    """

    remote_ok = True  # plain Python state, no model: it may act in a Ray actor beside the envs

    def __init__(self, table: Mapping[str, Mapping[str, float]], *, reply_format: str = "[{}]",
                 seed: int | None = None, name: str = "tabular") -> None:
        self.table = {k: dict(v) for k, v in table.items()}
        self.reply_format = reply_format
        self.name = name
        super().__init__(seed)

    @override
    def act(self, observations: Sequence[Observation]) -> list[Reply]:
        self.check_batch(observations, key="info_set")
        replies = []
        for obs in observations:
            info_set = obs["info_set"]
            if info_set not in self.table:
                raise ValueError(f"{self.name}: no entry for info set {info_set!r}; the table has "
                                 f"{len(self.table)} entries, e.g. {sorted(self.table)[:3]}")
            row = self.table[info_set]
            move = self._rng.choices(list(row), weights=list(row.values()))[0]
            replies.append(Reply(self.reply_format.format(move), policy=self.name))
        return replies
