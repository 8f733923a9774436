"""The headline evaluation of user_sim_v0: the assistant's success rate against a scripted user, held-in and held-out.

:func:`evaluate_policies` is the spec's ``evaluate`` (:attr:`llm_zoo.spec.EnvSpec.evaluate`): it plays
every scenario template through the ``play`` it is handed, the user seat always a scripted simulator.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from typing import Any

from llm_zoo.envs.user_sim.env import SCENARIOS, WARM_START_SCENARIOS
from llm_zoo.envs.user_sim.scripted import USERS, ScriptedPolicy
from llm_zoo.spec import EVAL_SEED_BASE, Play, wilson_interval

__all__ = ["evaluate_policies", "wilson_interval"]


def _rate(flags: Sequence[bool]) -> dict[str, Any]:
    low, high = wilson_interval(sum(flags), len(flags))
    return {"rate": sum(flags) / max(1, len(flags)), "ci95": [low, high], "episodes": len(flags)}


def evaluate_policies(policies: Mapping[str, Any], *, play: Play, env_kwargs: Mapping[str, Any] | None = None,
                      seeds: int = 1, user: str = "scripted", held_in: Sequence[str] = WARM_START_SCENARIOS,
                      episodes: int | None = None, **_: Any) -> dict[str, Any]:
    """Success rate of ``policies["assistant"]`` against a scripted user, over every template x ``seeds``.

    The user seat is always a scripted user simulator, ``user`` (a name in ``USERS``:
    ``"scripted"``, the one the trainer uses, or ``"scripted_paraphrase"``, the same goals in other
    words), whatever ``policies["user"]`` is, so the figure measures the assistant alone. The
    templates are those the env draws from (``env_kwargs["scenarios"]``, default all), each played
    ``seeds`` times (at least ``episodes`` in all, when given); episode ``i`` runs on the evaluation
    seed ``EVAL_SEED_BASE + i``, never a training seed.

    Returns ``success_rate`` (the headline, all templates) with its 95% Wilson interval
    (``success_ci95``), the same for the ``held_in`` templates (the warm start's) and the
    ``held_out`` ones (``held_in_success``, ``held_out_success`` and their ``_ci95``),
    ``turns`` and ``tool_calls`` (means per finished episode), ``episodes``, ``failed`` (a failed
    episode counts as a failure), ``user`` and the ``eval_seeds`` used.
    """
    if user not in USERS:
        raise ValueError(f"user must be one of {sorted(USERS)} (the user simulator to evaluate against); got {user!r}")
    kwargs = dict(env_kwargs or {})
    names = list(kwargs.get("scenarios") or SCENARIOS)
    if episodes is not None:  # `llm-zoo eval --headline-episodes N`: at least N episodes, every template alike
        seeds = max(1, math.ceil(episodes / len(names)))
    # episode i runs on the evaluation seed EVAL_SEED_BASE + i (the contract `llm-zoo eval` reports):
    # every template ``seeds`` times, each time in a world of its own
    eval_seeds = [EVAL_SEED_BASE + i for i in range(seeds * len(names))]
    simulator = ScriptedPolicy("none", "scripted" if user == "scripted" else "paraphrase", name=user)
    order = list(zip((n for n in names for _ in range(seeds)), eval_seeds))
    episodes = play({"user": simulator, "assistant": policies["assistant"]}, [s for _, s in order],
                    options=[{"scenario": n} for n, _ in order], env_kwargs=kwargs)
    # a failed episode counts as no success, never leaves the mean: an assistant that makes its env
    # raise must not lift its own success rate
    success = [not e.failed and bool(e.infos.get("assistant", {}).get("success")) for e in episodes]
    infos = [e.infos.get("assistant", {}) for e in episodes if not e.failed]
    done = max(1, len(infos))
    held = set(held_in)
    split = {"held_in": [ok for (n, _), ok in zip(order, success) if n in held],
             "held_out": [ok for (n, _), ok in zip(order, success) if n not in held]}
    result: dict[str, Any] = {}
    for key, flags in (("success", success), *((f"{k}_success", v) for k, v in split.items())):
        rate = _rate(flags)
        result["success_rate" if key == "success" else key] = rate["rate"]
        result[f"{key}_ci95"] = rate["ci95"]
        result[f"{key.removesuffix('_success')}_episodes" if key != "success" else "episodes"] = rate["episodes"]
    result.update({"turns": sum(sum(i.get("turns", {}).values()) for i in infos) / done,
                   "tool_calls": sum(i.get("tool_calls", 0) for i in infos) / done,
                   "failed": len(episodes) - len(infos), "user": user, "eval_seeds": eval_seeds,
                   "held_in_templates": sorted(held & set(names))})
    # the headline in the keys `llm-zoo eval` reads (llm_zoo.spec.HEADLINE_KEYS)
    result.update({"headline": "success_rate", "interval": result["success_ci95"], "interval_method": "wilson",
                   "seeds": [eval_seeds[0], eval_seeds[-1]]})
    return result
