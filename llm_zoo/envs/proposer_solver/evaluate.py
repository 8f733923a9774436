"""The headline evaluation of proposer_solver_v0: the learnability of the proposer's tasks for a panel of solvers.

:func:`evaluate_policies` is the spec's ``evaluate`` (:attr:`llm_zoo.spec.EnvSpec.evaluate`): it plays
episodes through the ``play`` it is handed against scripted solvers of fixed skill (:data:`PANEL`),
then scores the policies seated as solvers on the scripted proposer's tasks.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from llm_zoo.envs.proposer_solver.scripted import PLAYERS, ScriptedSolver
from llm_zoo.spec import Play, eval_seeds, mean_interval, wilson_interval

__all__ = ["PANEL", "evaluate_policies"]

PANEL: tuple[str, ...] = ("solver_weak", "solver", "solver", "solver_strong")
"""The scripted solvers a proposer is scored against (seat i gets ``PANEL[i % 4]``): step budgets 40, 300, 300
and 5000, a spread of skill, so a task's pass rate says how hard it is."""


def evaluate_policies(policies: Mapping[str, Any], *, play: Play, env_kwargs: Mapping[str, Any] | None = None,
                      episodes: int = 16, seed: int = 0, topics: str | Sequence[str] | None = "held_out",
                      panel: Sequence[str] = PANEL, solver_episodes: int | None = None, batch_size: int = 8,
                      warmup_episodes: int = 0, **_: Any) -> dict[str, Any]:
    """Score the proposer against the panel of scripted solvers on held-out topics and seeds, then the solvers.

    The proposer (``policies["proposer"]``) writes ``episodes`` tasks, on seeds ``EVAL_SEED_BASE +
    seed + i`` (:func:`llm_zoo.spec.eval_seeds`) and on the ``topics`` (default ``"held_out"``: the
    10 topics no training run sees; None keeps ``env_kwargs``'), for the scripted solvers of
    ``panel`` (fixed skill; seat i gets ``panel[i % len(panel)]``, whatever ``policies`` seats there).
    It plays in rounds of ``batch_size`` episodes; a proposer with an ``observe`` method (the adaptive
    controller) is told each round's episodes, as it would be in training, and first plays
    ``warmup_episodes`` unscored episodes on the training topics (seeds past the scored ones), so it
    does not pay its climb from the first difficulty on the scored episodes. The headline is
    ``learnability``: the mean over episodes of 4·p·(1−p) for the task's pass rate p, an invalid
    task (or a failed episode) counting 0, with a normal interval over episodes. Beside it:
    ``proposer_reward`` (the env's reward, an invalid task scoring −``invalid_penalty``),
    ``valid_task_rate`` (Wilson interval), ``invalid_task_rate``, ``mean_pass_rate`` over valid
    tasks, ``pass_hist_K``: the share of valid tasks that K of the solvers got right, and
    ``learnability_per_episode`` (the values the mean is over).

    The solvers (the policies of the ``solver_*`` agents) then answer the scripted proposer's tasks
    on the next ``solver_episodes`` seeds (default ``episodes``; 0, or only scripted solvers, skips it): ``solver_pass_rate``
    is the mean over episodes of the share of right answers, with a normal interval over episodes.
    """
    kwargs = dict(env_kwargs or {})
    if topics is not None:
        kwargs["topics"] = topics
    n_solvers = int(kwargs.get("num_solvers", 4))
    if isinstance(panel, str) or not panel or any(p not in PLAYERS or not p.startswith("solver") for p in panel):
        raise ValueError(f"panel must be a list of scripted solver names {sorted(p for p in PLAYERS if p.startswith('solver'))}; "
                         f"got {panel!r}")
    if batch_size < 1:
        raise ValueError(f"batch_size must be >= 1; got {batch_size!r}")
    proposer = policies["proposer"]
    seats = {f"solver_{i}": PLAYERS[panel[i % len(panel)]](seed=seed + i) for i in range(n_solvers)}
    proposing = eval_seeds(episodes, seed)
    if warmup_episodes and callable(getattr(proposer, "observe", None)):
        warm = eval_seeds(warmup_episodes, seed + 10**6)
        for start in range(0, len(warm), batch_size):
            proposer.observe(play({"proposer": proposer, **seats}, warm[start:start + batch_size],
                                  env_kwargs={**kwargs, "topics": "training"}, seed=seed + 10**6 + start))
    records = []
    for start in range(0, len(proposing), batch_size):
        played = play({"proposer": proposer, **seats}, proposing[start:start + batch_size], env_kwargs=kwargs,
                      seed=seed + start)
        if callable(getattr(proposer, "observe", None)):
            proposer.observe(played)
        records += played
    infos = [{} if r.failed else r.infos.get("proposer", {}) for r in records]
    valid = [bool(i.get("valid")) for i in infos]
    rates = [i.get("pass_rate") for i in infos]
    learn = [4.0 * p * (1.0 - p) if ok and p is not None else 0.0 for ok, p in zip(valid, rates)]
    rewards = [0.0 if r.failed else float(r.returns.get("proposer", 0.0)) for r in records]
    hist = [0] * (n_solvers + 1)
    for ok, p in zip(valid, rates):
        if ok and p is not None:
            hist[round(p * n_solvers)] += 1
    n, n_valid = len(records), sum(valid)
    out: dict[str, Any] = {
        "headline": "learnability", "learnability": sum(learn) / max(1, n), "interval": mean_interval(learn),
        "interval_method": "normal", "episodes": n, "seeds": [proposing[0], proposing[-1]] if episodes else [],
        "valid_task_rate": n_valid / max(1, n), "valid_task_rate_ci95": wilson_interval(n_valid, n),
        "invalid_task_rate": 1.0 - n_valid / max(1, n) if n else 0.0,
        "proposer_reward": sum(rewards) / max(1, n), "proposer_reward_interval": mean_interval(rewards),
        "mean_pass_rate": sum(p for ok, p in zip(valid, rates) if ok and p is not None) / max(1, n_valid),
        **{f"pass_hist_{k}": c / max(1, n_valid) for k, c in enumerate(hist)},
        "learnability_per_episode": learn,
        "failed_episodes": float(sum(r.failed for r in records)),
    }
    # the solvers' half measures the policies seated as solvers; scripted solvers of fixed skill (a proposer's
    # training) have nothing to measure there
    solvers = sorted(a for a in policies if a.startswith("solver_") and not isinstance(policies[a], ScriptedSolver))
    count = episodes if solver_episodes is None else solver_episodes
    if count and solvers:
        solving = eval_seeds(count, seed + episodes)
        answered = play({"proposer": PLAYERS["proposer"](seed=seed), **{a: policies[a] for a in solvers}}, solving,
                        env_kwargs=kwargs, seed=seed + 1)
        shares = []
        for r in answered:
            agents = [a for a in r.infos if a.startswith("solver")]
            right = 0 if r.failed else sum(bool(r.infos[a].get("correct")) for a in agents)
            shares.append(right / max(1, len(agents)))
        out.update({"solver_pass_rate": sum(shares) / max(1, len(shares)), "solver_pass_rate_interval": mean_interval(shares),
                    "episodes": n + len(answered), "seeds": [proposing[0] if episodes else solving[0], solving[-1]],
                    "failed_episodes": out["failed_episodes"] + float(sum(r.failed for r in answered))})
    return out
