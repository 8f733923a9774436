"""The ``llm-zoo`` command: play, and (as they land) train, eval, serve, bench."""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Sequence

import llm_zoo
from llm_zoo.spec import ENV_ARGUMENT_HELP, env_argument


def _play(args: argparse.Namespace) -> int:
    from llm_zoo.policies.registry import load_policy

    env = llm_zoo.make_env(args.env, **({"num_hands": args.hands} if args.hands else {}))
    agents = env.possible_agents
    specs = {agents[0]: args.p0, agents[1]: args.p1}
    policies = {a: load_policy(s, args.env, seed=None if args.seed is None else args.seed + i)
                for i, (a, s) in enumerate(specs.items())}
    human = "human" in specs.values()
    episodes = 1 if human else args.episodes
    stats = {a: {"payoff": 0.0, "wins": 0, "invalid_replies": 0, "replies": 0, "forfeits": 0} for a in agents}
    for episode in range(episodes):
        env.reset(seed=None if args.seed is None else args.seed + episode)
        returns = dict.fromkeys(agents, 0.0)
        for agent in env.agent_iter():
            obs, reward, term, trunc, info = env.last()
            returns[agent] += reward
            if term or trunc:
                stats[agent]["invalid_replies"] += info.get("invalid_replies", 0)
                stats[agent]["forfeits"] += int(info.get("forfeit", False))
                if human and specs[agent] == "human":
                    print("\n" + obs["messages"][-1]["content"])
                env.step(None)
                continue
            stats[agent]["replies"] += 1
            try:
                env.step(policies[agent](obs))
            except EOFError:
                print("\nbye")
                return 0
        for a in agents:
            stats[a]["payoff"] += returns[a]
            stats[a]["wins"] += int(returns[a] > max(returns[b] for b in agents if b != a))
        if args.verbose and not human:
            print(env.unwrapped.render() if env.unwrapped.render_mode else "")
    summary = {a: {"policy": specs[a], "mean_payoff": s["payoff"] / episodes, "win_rate": s["wins"] / episodes,
                   "invalid_reply_rate": s["invalid_replies"] / max(1, s["replies"]),
                   "forfeit_rate": s["forfeits"] / episodes}
               for a, s in stats.items()}
    print(json.dumps({"env": args.env, "episodes": episodes, "players": summary}, indent=None if human else 2))
    return 0


def _parse_sets(pairs: Sequence[str]) -> dict[str, object]:
    import yaml

    out = {}
    for pair in pairs:
        key, sep, value = pair.partition("=")
        if not sep or not key:
            raise ValueError(f"--set expects key=value; got {pair!r}")
        out[key.strip()] = yaml.safe_load(value) if value.strip() else ""
    return out


def _train(args: argparse.Namespace) -> int:
    import yaml

    from llm_zoo.trainers.grpo import make_config, train

    overrides: dict[str, object] = {}
    if args.config:
        loaded = yaml.safe_load(open(args.config)) or {}
        if not isinstance(loaded, dict):
            raise ValueError(f"{args.config} must hold a mapping of config fields; got {type(loaded).__name__}")
        overrides.update(loaded)
    overrides.update(_parse_sets(args.set))
    if args.run_dir:
        overrides["run_dir"] = args.run_dir
    config = make_config(args.env, overrides)
    result = train(config, resume=args.resume)
    print(json.dumps({k: v for k, v in result.items() if k != "strategy"}, indent=2, default=str))
    return 0


def _eval(args: argparse.Namespace) -> int:
    from llm_zoo.trainers.evaluation import evaluate_checkpoint

    result = evaluate_checkpoint(args.env, args.checkpoint, episodes=args.episodes, method=args.method,
                                 seed=args.seed)
    print(json.dumps(result, indent=2, default=str))
    return 0


def _plot(args: argparse.Namespace) -> int:
    from llm_zoo.plots import plot_run

    print(plot_run(args.run_dir, args.out))
    return 0


def build_parser() -> argparse.ArgumentParser:
    """Return the argument parser of ``llm-zoo``."""
    parser = argparse.ArgumentParser(prog="llm-zoo", description=__doc__)
    sub = parser.add_subparsers(dest="command", required=True)

    play = sub.add_parser("play", help="play an env: a person or any policy against any policy")
    play.add_argument("env", type=env_argument, help=ENV_ARGUMENT_HELP)
    play.add_argument("--p0", default="human", help="first seat: human, random, a scripted player "
                      "(kuhn: nash, card), a model directory or an endpoint URL (default: human)")
    play.add_argument("--p1", default="nash", help="second seat, same choices (default: nash)")
    play.add_argument("--hands", type=int, default=None, help="hands per match (Kuhn poker's num_hands)")
    play.add_argument("--episodes", type=int, default=100, help="episodes when no human plays (default: 100)")
    play.add_argument("--seed", type=int, default=None, help="seed for deals and policies")
    play.add_argument("--verbose", action="store_true", help="print each episode's transcript")
    play.set_defaults(func=_play)

    train = sub.add_parser("train", help="train LLM policies on an env (GRPO / RAE, self-play)")
    train.add_argument("env", type=env_argument, help=ENV_ARGUMENT_HELP)
    train.add_argument("--config", help="YAML file of config fields (see llm_zoo.trainers.grpo.TrainConfig)")
    train.add_argument("--set", action="append", default=[], metavar="KEY=VALUE",
                       help="override a config field, e.g. --set algorithm=grpo --set steps=50 (repeatable)")
    train.add_argument("--run-dir", help="where the run writes (default runs/<env>-<time>)")
    train.add_argument("--resume", action="store_true", help="continue from the run dir's latest checkpoint")
    train.set_defaults(func=_train)

    evaluate = sub.add_parser("eval", help="evaluate a checkpoint: the env's exact metric and play against baselines")
    evaluate.add_argument("env", type=env_argument, help=ENV_ARGUMENT_HELP)
    evaluate.add_argument("--checkpoint", required=True, help="a checkpoint directory (runs/.../checkpoints/step_N)")
    evaluate.add_argument("--episodes", type=int, default=500, help="episodes played against each baseline")
    evaluate.add_argument("--method", choices=("exact", "sampled"), default="exact",
                          help="exact: strategy from log-probs; sampled: an estimate, for models that reason first")
    evaluate.add_argument("--seed", type=int, default=0, help="seed of the evaluation games")
    evaluate.set_defaults(func=_eval)

    plot = sub.add_parser("plot", help="draw a run's curves into a PNG")
    plot.add_argument("run_dir", help="a run directory (holding metrics.jsonl)")
    plot.add_argument("--out", help="PNG path (default RUN_DIR/curves.png)")
    plot.set_defaults(func=_plot)

    from llm_zoo.serve import add_parser as add_serve

    add_serve(sub)

    from llm_zoo.crossplay import add_parser as add_crossplay

    add_crossplay(sub)

    from llm_zoo.bench import add_parser as add_bench

    add_bench(sub)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    """Run ``llm-zoo``; return the exit code."""
    args = build_parser().parse_args(argv)
    try:
        return args.func(args)
    except (ValueError, FileNotFoundError) as exc:
        print(f"llm-zoo: error: {exc}", file=sys.stderr)
        return 2


if __name__ == "__main__":
    sys.exit(main())
