"""Libraries of reward-hacking attempts, one module per env and one for the pipeline, run by ``benchmarks/reward_hacks.py``.

Each module (``judge``, ``proposer``, ``user_sim``, and ``pipeline`` against checkpoints, configs, episode files
and run directories) exports ``HACKS: list[Hack]``. A hack is an
attempt to raise an env's reward without doing the task; running it returns an :class:`Outcome`
that says whether it paid. The goal, per env, is that none does.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass


@dataclass(frozen=True)
class Outcome:
    """What one hack attempt got."""

    paid: bool
    """True if the attempt raised the reward (or forged ground truth) without doing the task."""
    reward: float
    """The reward the attacker's role got with the hack."""
    baseline: float
    """The reward the same non-solution gets without the trick (what an honest failure earns)."""
    detail: str
    """One line: what happened (the verdict, the error, the recorded truth)."""


@dataclass(frozen=True)
class Hack:
    """One named attempt against one env's reward or ground truth."""

    env: str
    """What it attacks: ``agentic_judge_v0``, ``proposer_solver_v0``, ``user_sim_v0``, or ``pipeline`` (loading and
    run directories)."""
    name: str
    """A short snake_case name for what it tries, unique within its env (e.g. ``always_equal_object``)."""
    tries: str
    """One sentence: what the attack tries."""
    run: Callable[[], Outcome]
    """Runs the attempt end to end through the real env (or its real grading path) and reports."""
    quick: bool = False
    """Part of the smallest setting (``--quick``), which a test runs: keep a few cheap ones per env."""
    kind: str = "other"
    """The class of attack it belongs to (e.g. ``check_in_reach``, ``forged_evidence``, ``host_dependent``,
    ``unquoted_text``, ``unsafe_loading``, ``run_dir``); the JSON line counts attempts and paid by class."""
