"""The headline evaluation of agentic_judge_v0: the solver's hidden-test pass rate on held-out seeds, per split.

:func:`evaluate_policies` is the spec's ``evaluate`` (:attr:`llm_zoo.spec.EnvSpec.evaluate`): it plays
episodes through the ``play`` it is handed, seats a scripted judge, and reads the facts the env puts in
``infos``.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from llm_zoo.envs.agentic_judge.env import ENV_ID
from llm_zoo.envs.agentic_judge.scripted import PLAYERS
from llm_zoo.envs.agentic_judge.tasks import load_tasks
from llm_zoo.spec import Play, eval_seeds, mean_interval, wilson_interval

__all__ = ["SPLITS", "evaluate_policies", "split_of"]

SPLITS = ("brittle", "weak", "other")
"""The kinds of task the evaluation reports apart: with a brittle visible test (a correct alternative fails it),
with a weak one (a wrong solution passes it), neither. A task with both counts in both."""


def split_of(task_id: str) -> tuple[str, ...]:
    """Return the splits of a task: ``brittle`` and/or ``weak``, or ``other``."""
    task = load_tasks()[task_id]
    return tuple(s for s, on in (("brittle", bool(task.brittle)), ("weak", bool(task.weak))) if on) or ("other",)


def evaluate_policies(policies: Mapping[str, Any], *, play: Play, env_kwargs: Mapping[str, Any] | None = None,
                      episodes: int = 8, seed: int = 0, per_task: int = 0, judge: str | None = None,
                      **_: Any) -> dict[str, Any]:
    """Play ``episodes`` episodes on held-out seeds with the given agent -> policy mapping; return the headline rates.

    Episode ``i`` plays seed ``EVAL_SEED_BASE + seed + i`` (:func:`llm_zoo.spec.eval_seeds`). With
    ``per_task`` > 0, ``episodes`` is ignored and each task of ``env_kwargs["tasks"]`` (default: all) is
    played ``per_task`` times, so every task counts alike. ``judge`` seats the env's scripted player of that
    name as the judge (default: ``policies["judge"]``, else ``rule_judge``). The headline is ``hidden_pass_rate``,
    the share of episodes whose submission passes the hidden tests, with its 95% Wilson interval; beside it
    the mean solver reward (normal interval), the judge's agreement with the hidden tests (Wilson), the share
    the judge passed (``judge_pass_rate``) and the share passing every visible test (``visible_all_pass_rate``),
    the hidden pass rate per split (``brittle_hidden_pass``, ``brittle_episodes``, ...: :data:`SPLITS`), and
    ``blind_spots``: the submissions the judge passed that the hidden tests fail, as ``[task_id, solution]``
    (the stored solution's name, or ``unstored``).
    """
    kwargs = dict(env_kwargs or {})
    seats = dict(policies)
    if judge is not None:
        if judge not in PLAYERS:
            raise ValueError(f"judge must name a scripted player of {ENV_ID}, one of {sorted(PLAYERS)}; got {judge!r}")
        seats["judge"] = PLAYERS[judge](seed=seed)
    seats.setdefault("judge", PLAYERS["rule_judge"](seed=seed))
    options = None
    if per_task:
        tasks = list(kwargs.get("tasks") or load_tasks())
        options = [{"task": t} for t in tasks for _ in range(per_task)]
        episodes = len(options)
    seeds = eval_seeds(episodes, seed)
    records = play(seats, seeds, options=options, env_kwargs=kwargs, seed=seed)
    # a failed episode counts as a failure (reward 0, not passed), never leaves the mean: a solver
    # that makes its env raise must not lift its own figures
    infos = [{} if r.failed else r.infos.get("judge", {}) for r in records]
    rewards = [0.0 if r.failed else float(r.returns.get("solver", 0.0)) for r in records]
    passed = sum(bool(i.get("hidden_pass")) for i in infos)
    agrees = sum(bool(i.get("judge_agrees")) for i in infos)
    n = len(records)
    out: dict[str, Any] = {
        "headline": "hidden_pass_rate", "hidden_pass_rate": passed / max(1, n),
        "interval": wilson_interval(passed, n), "interval_method": "wilson",
        "episodes": n, "seeds": [seeds[0], seeds[-1]] if seeds else [],
        "solver_reward": sum(rewards) / max(1, n), "solver_reward_interval": mean_interval(rewards),
        "judge_agreement": agrees / max(1, n), "judge_agreement_interval": wilson_interval(agrees, n),
        "judge_pass_rate": sum(i.get("verdict") == "PASS" for i in infos) / max(1, n),
        "visible_all_pass_rate": sum(i.get("visible_pass_rate") == 1.0 for i in infos) / max(1, n),
        "failed_episodes": float(sum(r.failed for r in records)),
        "blind_spots": [[i["task_id"], i.get("solution_name") or "unstored"] for i in infos
                        if i.get("verdict") == "PASS" and i.get("hidden_pass") is False],
        "solutions": [[i.get("task_id"), i.get("solution_name") or "unstored", bool(i.get("hidden_pass"))] for i in infos],
    }
    # a failed episode counts against its task's splits too (its task is known when it was fixed by per_task)
    task_ids = [o["task"] for o in options] if options else [i.get("task_id") for i in infos]
    for split in SPLITS:
        mine = [i for t, i in zip(task_ids, infos) if t and split in split_of(t)]
        hits = sum(bool(i.get("hidden_pass")) for i in mine)
        out[f"{split}_hidden_pass"] = hits / max(1, len(mine))
        out[f"{split}_episodes"] = len(mine)
    return out
