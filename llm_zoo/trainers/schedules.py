"""Learning-rate schedules shared by the RL trainer and the SFT stage: linear warm-up, then a decay."""

from __future__ import annotations

import math
from collections.abc import Callable

__all__ = ["LR_SCHEDULES", "check_schedule", "lr_factor"]

LR_SCHEDULES: dict[str, Callable[[float, float], float]] = {
    "constant": lambda progress, low: 1.0,
    "linear": lambda progress, low: 1.0 - (1.0 - low) * progress,
    "cosine": lambda progress, low: low + (1.0 - low) * 0.5 * (1.0 + math.cos(math.pi * progress)),
}
"""Schedule name -> (progress in [0, 1] after warm-up, final ratio) -> multiplier of the peak learning rate."""


def lr_factor(step: int, steps: int, warmup_steps: int, schedule: str, low: float) -> float:
    """Return the multiplier of the peak rate at ``step`` (0-based) of ``steps``: warm-up, then ``schedule`` to ``low``."""
    if step < warmup_steps:
        return (step + 1) / warmup_steps
    span = max(1, steps - warmup_steps)
    return LR_SCHEDULES[schedule](min(1.0, (step - warmup_steps) / span), low)


def check_schedule(schedule: str, min_ratio: float, where: str = "config") -> None:
    """Raise ValueError, naming ``where``'s field, unless ``schedule`` is known and ``min_ratio`` in [0, 1].

    A floor below 0 would turn the decayed rate negative, one above 1 make the decay a climb.
    """
    if schedule not in LR_SCHEDULES:
        raise ValueError(f"{where}.lr_schedule must be one of {tuple(LR_SCHEDULES)}; got {schedule!r}")
    if not 0.0 <= min_ratio <= 1.0:
        raise ValueError(f"{where}.lr_min_ratio must be in [0, 1] (the floor of lr_schedule's decay, as a share of "
                         f"lr); got {min_ratio!r}")
