"""The pure rules of agentic_judge: verdicts, what each is worth, and the rewards at the end.

No I/O and no text: the env runs the tests and reads the judge's reply, then asks these functions
who gets what.
"""

from __future__ import annotations

import enum
from collections.abc import Mapping


class Verdict(str, enum.Enum):
    """The judge's decision on a submission."""

    PASS = "PASS"
    FAIL = "FAIL"
    ABSTAIN = "ABSTAIN"


SCORES: Mapping[Verdict, float] = {Verdict.PASS: 1.0, Verdict.FAIL: 0.0, Verdict.ABSTAIN: 0.0}
"""What a verdict scores for the solver; ABSTAIN's score is the env's ``abstain_score``."""


def score(verdict: Verdict, abstain_score: float = 0.0) -> float:
    """Return the judge's score of the submission: PASS 1, FAIL 0, ABSTAIN ``abstain_score``."""
    return abstain_score if verdict is Verdict.ABSTAIN else SCORES[verdict]


def solver_reward(judge_score: float, visible_pass_rate: float, visible_weight: float) -> float:
    """Return the solver's reward: the judge's score mixed with the visible pass rate by ``visible_weight``."""
    return (1.0 - visible_weight) * judge_score + visible_weight * visible_pass_rate


def agrees(verdict: Verdict, hidden_pass: bool) -> bool:
    """Return True when the verdict matches the hidden tests' truth (an abstention never does)."""
    return (verdict is Verdict.PASS and hidden_pass) or (verdict is Verdict.FAIL and not hidden_pass)


def judge_reward(verdict: Verdict, hidden_pass: bool) -> float:
    """Return the judge's reward: 1 when its verdict agrees with the hidden tests, else 0."""
    return float(agrees(verdict, hidden_pass))
