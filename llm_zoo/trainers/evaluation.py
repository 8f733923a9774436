"""Evaluate trained policies: the env's headline metric on held-out seeds with its interval, and games against scripted players."""

from __future__ import annotations

import functools
import json
import math
import statistics
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

import llm_zoo
from llm_zoo.policy import Policy
from llm_zoo.seating import Seating, scripted_name
from llm_zoo.spec import EVAL_SEED_BASE, EnvSpec, wilson_interval
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
    # every policy is reseeded from EVAL_SEED_BASE before the episodes (unless the evaluation passes its own seed),
    # so the same weights give the same figure in training and from `llm-zoo eval`, whatever sampled before
    play = functools.partial(collect, spec.name, seed=EVAL_SEED_BASE)

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


SAMPLING = ("temperature", "top_p", "max_new_tokens", "constrain_to_legal")
"""The config fields a policy samples with, which ``llm-zoo eval`` and ``play`` may set (``--temperature``, ...)."""


def load_run_policies(checkpoint: str | Path, *, seed: int = 0,
                      sampling: Mapping[str, Any] | None = None) -> tuple[dict[str, Any], dict[str, Policy]]:
    """Load a checkpoint's policies with the sampling settings of its run; return (run config, name -> policy).

    ``sampling`` overrides the run's values of :data:`SAMPLING` (a None value keeps the run's).
    """
    from llm_zoo.policies.transformers import TransformersPolicy

    checkpoint = Path(checkpoint)
    if not (checkpoint / "policies").is_dir():
        raise FileNotFoundError(f"{checkpoint} is not a checkpoint directory (no policies/ inside); expected "
                                "runs/<run>/checkpoints/step_N, or name a model with --model")
    config_path = checkpoint.parent.parent / "config.json"
    config = json.loads(config_path.read_text()) if config_path.exists() else {}
    config.update(_sampling(sampling))
    policies = {}
    for i, path in enumerate(sorted(p for p in (checkpoint / "policies").iterdir() if p.is_dir())):
        policies[path.name] = TransformersPolicy.from_pretrained(
            path, name=path.name, temperature=config.get("temperature", 1.0), top_p=config.get("top_p", 1.0),
            max_new_tokens=config.get("max_new_tokens", 64), seed=seed + i,
            constrain=config.get("constrain_to_legal", False), max_prompt_tokens=config.get("max_prompt_tokens"),
            max_forward_tokens=config.get("max_rollout_tokens") or config.get("max_forward_tokens"))
    return config, policies


HEADLINE_PREFERENCE = ("exploitability", "success_rate", "hidden_pass_rate", "valid_task_rate", "win_rate",
                       "mean_payoff")
"""The metric ``llm-zoo eval`` reports when an env's evaluate does not name its ``headline``: the first of these it returns."""


def headline_summary(figures: Mapping[str, Any], *, method: str = "exact") -> dict[str, Any]:
    """Read the headline of an env's evaluation: ``metric``, ``value``, ``interval``, ``interval_method``,
    ``episodes``, ``seeds`` (the keys of :data:`llm_zoo.spec.HEADLINE_KEYS`, where the env gives them).

    Tolerant of evaluations that give less: without ``headline`` the metric is the first of
    :data:`HEADLINE_PREFERENCE` present (else the first float); without ``interval`` it is read from
    ``<metric>_interval`` or ``<metric>_ci95``, else an exact reading (``method`` "exact" and no
    episodes) gets ``[value, value]``, a rate in [0, 1] over ``episodes`` its Wilson interval, and
    anything else None, with ``interval_method`` saying so. ``seeds`` is None when the env does not say.
    """
    metric = figures.get("headline")
    if not isinstance(metric, str) or not isinstance(figures.get(metric), (int, float)):
        metric = next((k for k in HEADLINE_PREFERENCE if isinstance(figures.get(k), (int, float))), None)
    if metric is None:
        metric = next((k for k, v in figures.items() if isinstance(v, float)), None)
    if metric is None:
        raise ValueError(f"the env's evaluation returned no numeric metric to report; its keys: {sorted(figures)[:20]}")
    value = float(figures[metric])
    episodes = figures.get("episodes")
    episodes = int(episodes) if isinstance(episodes, (int, float)) else None
    interval = figures.get("interval") if figures.get("headline") == metric else None
    kind = figures.get("interval_method") if interval is not None else None
    for key in (f"{metric}_interval", f"{metric}_ci95"):
        if interval is None and figures.get(key) is not None:
            interval = figures[key]
            kind = "normal" if key.endswith("_interval") else "95% interval given by the env (sampled estimate)"
    if interval is None:
        if figures.get("method", method) == "exact" and not episodes:
            interval, kind = [value, value], "exact (computed, not sampled: zero width)"
        elif episodes and 0.0 <= value <= 1.0:
            interval, kind = wilson_interval(value * episodes, episodes), "wilson (from the rate and the episode count)"
        else:
            kind = "none (the env's evaluation gives no interval)"
    seeds = figures.get("seeds")
    if seeds is None and figures.get("method", method) == "exact" and not episodes:
        seeds = []
    return {"metric": metric, "value": value, "interval": None if interval is None else [float(x) for x in interval],
            "interval_method": kind, "episodes": 0 if episodes is None and seeds == [] else episodes, "seeds": seeds}


def scored_weights(config: Mapping[str, Any]) -> str:
    """Say which weights a checkpoint's ``policies/`` hold: the average of the learner's (``average.ema`` > 0) or its own.

    ``config`` is a run's config.json: plug-in sections (``{"average": {"ema": ...}}``), or the flat names
    (``average_ema``) of a run written before them."""
    def saved(section: str, key: str) -> float:
        part = config.get(section)
        value = part.get(key) if isinstance(part, Mapping) else config.get(f"{section}_{key}")
        return float(value or 0.0)

    ema, power = saved("average", "ema"), saved("average", "power")  # power: step ** power in place of the EMA's decay
    if ema > 0 and power > 0:
        which = f"average (average.ema={ema:g}, average.power={power:g})"
    else:
        which = f"average (average.ema={ema:g})" if ema > 0 else "last iterate"
    unmask = int(saved("unmask", "steps"))  # the delivered weights, fitted after the last step
    return which + (f", then fitted without the decoding mask (unmask.steps={unmask})" if unmask else "")


def _sampling(sampling: Mapping[str, Any] | None) -> dict[str, Any]:
    """Return the set values of ``sampling``; ``ValueError`` for a key outside :data:`SAMPLING`."""
    values = {k: v for k, v in (sampling or {}).items() if v is not None}
    unknown = sorted(set(values) - set(SAMPLING))
    if unknown:
        raise ValueError(f"sampling takes {SAMPLING}; got {unknown}")
    return values


def evaluate_model(env: str, model: str, *, episodes: int = 500, method: str = "exact", seed: int = 0,
                   headline_episodes: int | None = None, sampling: Mapping[str, Any] | None = None,
                   env_kwargs: Mapping[str, Any] | None = None) -> dict[str, Any]:
    """Evaluate a model as it is, untrained: a catalogue name, a model directory or a hub name
    (:func:`llm_zoo.catalogue.model_source`), as :func:`evaluate_checkpoint` evaluates a checkpoint.

    The env's training preset for the model's kind (:mod:`~llm_zoo.trainers.presets`) gives the sampling settings,
    ``env_kwargs`` and the frozen seats (user_sim's scripted user, agentic_judge's rule judge) that training would
    use; ``sampling`` and ``env_kwargs`` override them. The model plays every other seat.

    Raises:
        ValueError: ``max_new_tokens`` of 1 on a pretrained model (its tokenizer spells a move in several tokens,
            so an evaluation would read the truncated replies, not the model).
    """
    from llm_zoo.catalogue import is_pretrained
    from llm_zoo.policies.transformers import TransformersPolicy
    from llm_zoo.trainers import presets

    defaults = presets.preset(env, model=model)
    config: dict[str, Any] = {"env": env, "env_kwargs": dict(env_kwargs if env_kwargs is not None
                                                            else defaults.get("env_kwargs", {})),
                              "policies": {k: v for k, v in defaults.get("policies", {}).items()
                                           if scripted_name(str(v)) is not None},
                              "temperature": 1.0, "top_p": 1.0, "max_new_tokens": 64, "constrain_to_legal": False}
    spec, probe = llm_zoo.env_spec(env), llm_zoo.make_env(env, **config["env_kwargs"]).unwrapped
    roles = {agent: probe.role_of(agent) for agent in probe.possible_agents}
    # a role that does not learn keeps its frozen player, as in training
    config["policies"] = spec.seat_frozen_roles(config["policies"], roles, spec.learning_roles)
    config.update({k: defaults[k] for k in SAMPLING if k in defaults})
    config.update(_sampling(sampling))
    if is_pretrained(model) and int(config["max_new_tokens"]) <= 1:
        raise ValueError(f"--max-new-tokens {config['max_new_tokens']} is a setting for the tiny model (one token a "
                         f"move); {model!r} spells a move in several tokens, so the evaluation would score truncated "
                         "replies; raise --max-new-tokens (the env's pretrained preset: "
                         f"{defaults.get('max_new_tokens', 64)})")
    policy = TransformersPolicy.from_pretrained(
        model, name="main", temperature=config["temperature"], top_p=config["top_p"],
        max_new_tokens=config["max_new_tokens"], seed=seed, constrain=config["constrain_to_legal"])
    result: dict[str, Any] = {"env": env, "model": str(model), "weights": "the model as loaded (untrained)",
                              "sampling": {k: config[k] for k in SAMPLING}}
    return _evaluate(env, config, {"main": policy}, result, episodes=episodes, method=method, seed=seed,
                     headline_episodes=headline_episodes)


def evaluate_checkpoint(env: str, checkpoint: str | Path, *, episodes: int = 500, method: str = "exact",
                        seed: int = 0, headline_episodes: int | None = None,
                        sampling: Mapping[str, Any] | None = None) -> dict[str, Any]:
    """Evaluate a checkpoint: the env's headline metric on held-out seeds, with its 95% interval, as a dict.

    The result names the metric (``metric``, ``value``, ``interval``, ``interval_method``), the
    ``episodes`` and ``seeds`` it played (from :data:`llm_zoo.spec.EVAL_SEED_BASE` on; none for an
    exact reading), and the ``weights`` scored (the weights' average, or the last iterate); the env's
    own figures follow under their names. ``headline_episodes`` sets the env evaluation's episode
    count (its default when None). In a symmetric game (one role for every seat) each seat also plays
    ``episodes`` games against each scripted player (``versus``, seeds ``EVAL_SEED_BASE + seed`` on).
    ``sampling`` overrides the run's sampling settings (:data:`SAMPLING`; None values keep the run's).
    """
    config, by_name = load_run_policies(checkpoint, seed=seed, sampling=sampling)
    if config.get("env", env) != env:
        raise ValueError(f"the checkpoint was trained on {config['env']!r}, not {env!r}")
    result: dict[str, Any] = {"env": env, "checkpoint": str(checkpoint), "weights": scored_weights(config)}
    if _sampling(sampling):
        result["sampling"] = {k: config[k] for k in SAMPLING if k in config}
    return _evaluate(env, config, by_name, result, episodes=episodes, method=method, seed=seed,
                     headline_episodes=headline_episodes)


def seat_run_policies(env: str, config: Mapping[str, Any], by_name: Mapping[str, Policy], *, seed: int,
                      roles: Mapping[str, str] | None = None) -> dict[str, Policy]:
    """Return agent -> policy as a run's ``config["policies"]`` (a :class:`~llm_zoo.seating.Seating`) seats them.

    A ``scripted:NAME`` seat gets the env's scripted player NAME (a frozen seat of the run, seeded with
    ``seed``); a seat of a learner gets its policy from ``by_name`` (name -> policy, a checkpoint's
    ``policies/``), or the first of them when the run trained one under another name. ``roles`` (agent -> role)
    saves building the env to read them.
    """
    if roles is None:
        probe = llm_zoo.make_env(env, **config.get("env_kwargs", {})).unwrapped
        roles = {a: probe.role_of(a) for a in probe.possible_agents}
    players = llm_zoo.env_spec(env).scripted
    seating = Seating.parse(config.get("policies", {}), where=f"the run's policies ({env})")
    out: dict[str, Policy] = {}
    for agent, name in seating.assign(roles).items():
        scripted = scripted_name(name)
        if scripted is not None and scripted in players:
            out[agent] = players[scripted](seed=seed)
        else:
            out[agent] = by_name.get(name) or next(iter(by_name.values()))
    return out


def _evaluate(env: str, config: Mapping[str, Any], by_name: Mapping[str, Any], result: dict[str, Any], *,
              episodes: int, method: str, seed: int, headline_episodes: int | None) -> dict[str, Any]:
    """Seat ``by_name``'s policies as ``config["policies"]`` says, score them, and add the figures to ``result``."""
    env_kwargs = config.get("env_kwargs", {})
    probe = llm_zoo.make_env(env, **env_kwargs).unwrapped
    players = llm_zoo.env_spec(env).scripted
    seat_policy = seat_run_policies(env, config, by_name, seed=seed,
                                    roles={a: probe.role_of(a) for a in probe.possible_agents})
    evaluate = headline_evaluator(env)
    if evaluate is not None:
        options: dict[str, Any] = {"method": method, "env_kwargs": env_kwargs}
        if headline_episodes is not None:
            options["episodes"] = headline_episodes
        figures = evaluate(seat_policy, **options)
        result.update(headline_summary(figures, method=method))
        result.update({k: v for k, v in figures.items() if k not in result and k != "headline"})
        if method != "exact":
            result["method"] = "sampled estimate"
    versus = {}
    if len({probe.role_of(a) for a in probe.possible_agents}) == 1:
        for name, factory in sorted(players.items()):
            versus[name] = play_against(env, seat_policy, factory(seed=seed), episodes=episodes,
                                        seed=EVAL_SEED_BASE + seed, env_kwargs=env_kwargs)
    result["versus"] = versus
    if versus:
        result["note"] = (f"versus: sampled, the mean payoff of {episodes} games against each scripted player "
                          "± mean_payoff_ci95 (the half-width of its 95% interval); the figures above it are "
                          + ("exact (computed from the policy's log-probs over every legal reply)"
                             if method == "exact" else "a sampled estimate too") + ".")
        result["invalid_reply_rate"] = sum(v["invalid_reply_rate"] for v in versus.values()) / len(versus)
    return result
