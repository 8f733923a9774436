"""Proposer-solver, version 0: ``env()`` with the standard wrappers, ``raw_env``, and its ``SPEC``. Docs: :mod:`llm_zoo.envs.proposer_solver.env`."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from llm_zoo.envs.proposer_solver.env import ENV_ID, TOPICS, env, raw_env
from llm_zoo.envs.proposer_solver.scripted import PLAYERS
from llm_zoo.spec import EnvSpec, Play, eval_seeds, mean_interval, wilson_interval


def evaluate_policies(policies: Mapping[str, Any], *, play: Play, env_kwargs: Mapping[str, Any] | None = None,
                      episodes: int = 8, seed: int = 0, **_: Any) -> dict[str, Any]:
    """Score each trained role against the env's scripted players of the other role, on held-out seeds.

    The proposer (``policies["proposer"]``) poses tasks to the scripted solvers, on seeds
    ``EVAL_SEED_BASE + seed + i`` (:func:`llm_zoo.spec.eval_seeds`): the headline is
    ``valid_task_rate``, the share of those episodes whose proposal is a valid task, with its 95%
    Wilson interval, beside the proposer's mean reward (normal interval). The solvers (the
    policies of the ``solver_*`` agents) then answer the scripted proposer's tasks on the next
    ``episodes`` seeds: ``solver_pass_rate`` is the mean over episodes of the share of right
    answers, with a normal interval over episodes (the answers to one task are not independent).
    A failed episode counts as an invalid task, a reward of 0 and no right answer.
    """
    kwargs = dict(env_kwargs or {})
    solvers = sorted(a for a in policies if a.startswith("solver"))
    proposing = eval_seeds(episodes, seed)
    records = play({"proposer": policies["proposer"], "solver": PLAYERS["solver"](seed=seed)}, proposing,
                   env_kwargs=kwargs, seed=seed)
    infos = [{} if r.failed else r.infos.get("proposer", {}) for r in records]
    valid = sum(bool(i.get("valid")) for i in infos)
    rewards = [0.0 if r.failed else float(r.returns.get("proposer", 0.0)) for r in records]
    solving = eval_seeds(episodes, seed + episodes)
    answered = play({"proposer": PLAYERS["proposer"](seed=seed), **{a: policies[a] for a in solvers}}, solving,
                    env_kwargs=kwargs, seed=seed + 1)
    rates = []
    for r in answered:
        seats = [a for a in r.infos if a.startswith("solver")]
        right = 0 if r.failed else sum(bool(r.infos[a].get("correct")) for a in seats)
        rates.append(right / max(1, len(seats)))
    n = len(records)
    return {"headline": "valid_task_rate", "valid_task_rate": valid / max(1, n),
            "interval": wilson_interval(valid, n), "interval_method": "wilson",
            "episodes": n + len(answered), "seeds": [proposing[0], solving[-1]] if episodes else [],
            "proposer_reward": sum(rewards) / max(1, n), "proposer_reward_interval": mean_interval(rewards),
            "solver_pass_rate": sum(rates) / max(1, len(rates)), "solver_pass_rate_interval": mean_interval(rates),
            "failed_episodes": float(sum(r.failed for r in records) + sum(r.failed for r in answered))}


SPEC = EnvSpec(
    name=ENV_ID,
    env=env,
    roles=("proposer", "solver"),
    learning_roles=("proposer", "solver"),  # `learn=[solver]` in the trainer's config freezes the proposer
    scripted=PLAYERS,
    evaluate=evaluate_policies,
    description="one agent proposes verifiable programming tasks, several solvers attempt them",
)

__all__ = ["ENV_ID", "SPEC", "TOPICS", "env", "evaluate_policies", "raw_env"]
