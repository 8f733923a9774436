"""The ``llm-zoo`` command: play, and (as they land) train, eval, serve, bench."""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Sequence

import llm_zoo


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


def build_parser() -> argparse.ArgumentParser:
    """Return the argument parser of ``llm-zoo``."""
    parser = argparse.ArgumentParser(prog="llm-zoo", description=__doc__)
    sub = parser.add_subparsers(dest="command", required=True)

    play = sub.add_parser("play", help="play an env: a person or any policy against any policy")
    play.add_argument("env", choices=sorted(llm_zoo.ENVS), help="versioned env name")
    play.add_argument("--p0", default="human", help="first seat: human, random, a scripted player "
                      "(kuhn: nash, card), a model directory or an endpoint URL (default: human)")
    play.add_argument("--p1", default="nash", help="second seat, same choices (default: nash)")
    play.add_argument("--hands", type=int, default=None, help="hands per match (Kuhn poker's num_hands)")
    play.add_argument("--episodes", type=int, default=100, help="episodes when no human plays (default: 100)")
    play.add_argument("--seed", type=int, default=None, help="seed for deals and policies")
    play.add_argument("--verbose", action="store_true", help="print each episode's transcript")
    play.set_defaults(func=_play)

    from llm_zoo.serve import add_parser as add_serve

    add_serve(sub)
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
