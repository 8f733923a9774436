"""Evaluate trained policies: the env's exact headline metric, and games against scripted players."""

from __future__ import annotations

import functools
import json
import math
import statistics
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

import llm_zoo
from llm_zoo.policies.base import Policy
from llm_zoo.spec import EnvSpec
from llm_zoo.trainers.rollout import collect

_Z95 = statistics.NormalDist().inv_cdf(0.975)


def headline_evaluator(env: str | EnvSpec) -> Callable[..., dict[str, Any]] | None:
    """Return the env's headline evaluation, ``evaluate(policies, **options)``, with episodes played by
    :func:`~llm_zoo.trainers.rollout.collect`; None when the env's spec has none.

    ``env`` is a registered name or the spec itself.
    """
    spec = env if isinstance(env, EnvSpec) else llm_zoo.env_spec(env)
    evaluate = spec.evaluate
    if evaluate is None:
        return None
    play = functools.partial(collect, spec.name)

    def run(policies: Mapping[str, Any], **options: Any) -> dict[str, Any]:
        return dict(evaluate(policies, play=play, **options))

    return run


def headline(env: str, policies: Mapping[str, Any], **options: Any) -> dict[str, Any]:
    """Run the env's headline evaluation of ``policies`` (agent -> policy); {} when it has none."""
    evaluate = headline_evaluator(env)
    return {} if evaluate is None else evaluate(policies, **options)


def play_against(env: str, policies: Mapping[str, Policy], opponent: Policy, *, episodes: int, seed: int,
                 env_kwargs: Mapping[str, Any] | None = None) -> dict[str, float]:
    """Play the seats' policies against ``opponent``, each seat in turn; return the learner's averages.

    Half of the episodes put ``opponent`` in every seat but one (the first seat, then the next...),
    so a learner is measured from each position. Returns mean payoff (with the half-width of its 95%
    interval, ``mean_payoff_ci95``: the figures are sampled), win rate and invalid-reply rate of the
    non-opponent seats.
    """
    probe = llm_zoo.make_env(env, **(env_kwargs or {})).unwrapped
    agents = list(probe.possible_agents)
    maps, seats = [], []
    for i in range(episodes):
        seat = agents[i % len(agents)]
        maps.append({a: (policies[a] if a == seat else opponent) for a in agents})
        seats.append(seat)
    results = collect(env, maps, [seed + i for i in range(episodes)], env_kwargs=env_kwargs, seed=seed)
    wins = invalid = replies = failed = 0
    payoffs = []
    for episode, seat in zip(results, seats):
        if episode.failed:
            failed += 1
            continue
        mine = episode.returns.get(seat, 0.0)
        payoffs.append(mine)
        wins += int(mine > max(v for a, v in episode.returns.items() if a != seat))
        invalid += int(episode.infos.get(seat, {}).get("invalid_replies", 0))
        replies += sum(1 for t in episode.turns if t.agent == seat)
    done = max(1, episodes - failed)
    mean = statistics.fmean(payoffs) if payoffs else 0.0
    # 95% normal interval over episodes (their payoffs are independent draws)
    half = _Z95 * statistics.stdev(payoffs) / math.sqrt(len(payoffs)) if len(payoffs) > 1 else math.nan
    return {"mean_payoff": mean, "mean_payoff_ci95": half, "win_rate": wins / done,
            "invalid_reply_rate": invalid / max(1, replies), "episodes": episodes, "failed": failed}


def load_run_policies(checkpoint: str | Path, *, seed: int = 0) -> tuple[dict[str, Any], dict[str, Policy]]:
    """Load a checkpoint's policies with the sampling settings of its run; return (run config, name -> policy)."""
    from llm_zoo.policies.transformers import TransformersPolicy

    checkpoint = Path(checkpoint)
    if not (checkpoint / "policies").is_dir():
        raise FileNotFoundError(f"{checkpoint} is not a checkpoint directory (no policies/ inside); expected "
                                "runs/<run>/checkpoints/step_N")
    config_path = checkpoint.parent.parent / "config.json"
    config = json.loads(config_path.read_text()) if config_path.exists() else {}
    policies = {}
    for i, path in enumerate(sorted(p for p in (checkpoint / "policies").iterdir() if p.is_dir())):
        policies[path.name] = TransformersPolicy.from_pretrained(
            path, name=path.name, temperature=config.get("temperature", 1.0), top_p=config.get("top_p", 1.0),
            max_new_tokens=config.get("max_new_tokens", 64), seed=seed + i,
            constrain=config.get("constrain_to_legal", False))
    return config, policies


def evaluate_checkpoint(env: str, checkpoint: str | Path, *, episodes: int = 500, method: str = "exact",
                        seed: int = 0) -> dict[str, Any]:
    """Evaluate a checkpoint: the env's exact metric (when it has one) and play against its scripted players."""
    config, by_name = load_run_policies(checkpoint, seed=seed)
    if config.get("env", env) != env:
        raise ValueError(f"the checkpoint was trained on {config['env']!r}, not {env!r}")
    env_kwargs = config.get("env_kwargs", {})
    probe = llm_zoo.make_env(env, **env_kwargs).unwrapped
    mapping = config.get("policies", {})
    seat_policy = {}
    for agent in probe.possible_agents:
        name = mapping.get(agent, mapping.get(probe.role_of(agent), "main"))
        seat_policy[agent] = by_name.get(name) or next(iter(by_name.values()))
    spec = llm_zoo.env_spec(env)
    result: dict[str, Any] = {"env": env, "checkpoint": str(checkpoint)}
    # which weights a checkpoint's policies/ holds (grpo.save_checkpoint): the average when the run kept one
    result["weights"] = (f"the average of the learner's weights (average_ema={config['average_ema']})"
                         if config.get("average_ema") else "the last iterate (the learner's own weights)")
    evaluate = headline_evaluator(env)
    if evaluate is not None:
        result.update(evaluate(seat_policy, method=method, env_kwargs=env_kwargs))
        if method != "exact":
            result["method"] = "sampled estimate"
    versus = {}
    for name, factory in sorted(spec.scripted.items()):
        versus[name] = play_against(env, seat_policy, factory(seed=seed), episodes=episodes, seed=seed,
                                    env_kwargs=env_kwargs)
    result["versus"] = versus
    if versus:
        result["note"] = (f"versus: sampled, the mean payoff of {episodes} games against each scripted player "
                          "± mean_payoff_ci95 (the half-width of its 95% interval); the figures above it are "
                          + ("exact (computed from the policy's log-probs over every legal reply)"
                             if method == "exact" else "a sampled estimate too") + ".")
        result["invalid_reply_rate"] = sum(v["invalid_reply_rate"] for v in versus.values()) / len(versus)
    return result
