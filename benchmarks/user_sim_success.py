"""User simulation success: how often an assistant leaves the shop's world exactly as the customer wanted.

Every assistant plays every scenario template of ``user_sim_v0`` on the same seeds against the same
scripted user (``llm_zoo.envs.user_sim.scripted``), through :func:`llm_zoo.trainers.rollout.collect`.
An episode succeeds when the final database equals the goal database (reward 1). Compared:

* ``scripted``: the scripted assistant, which follows the policies and asks before it acts (the
  ceiling the env is built to allow: it should succeed everywhere);
* ``scripted/paraphrase user``: the scripted assistant against the paraphrasing user
  (``ParaphrasedUser``: the same goals in other words), which it was not written against;
* ``no_tools``: the do-nothing assistant, which never calls a tool (the floor: exactly the templates
  whose goal is that nothing changes);
* ``random_tools``: a random tool-caller, a random tool with arguments drawn from ids seen in the
  chat half of the time, a stock support line otherwise (about the floor: it succeeds where the
  goal is that nothing changes, and almost nowhere else);
* any policy named with ``--assistant``: a model directory, an ``http(s)://`` OpenAI-compatible
  endpoint, or any name ``llm_zoo.policies.registry.load_policy`` knows (``random``, ``scripted``).

Per assistant it prints the success rate, the turns (messages between user and assistant) and
tool calls per episode, then the success rate by scenario group: the kind of the first task, and
``no change`` for the scenarios whose policies forbid the request.

    python -m benchmarks.user_sim_success                      # every scenario x 3 seeds
    python -m benchmarks.user_sim_success --quick              # every scenario x 1 seed: seconds
    python -m benchmarks.user_sim_success --assistant http://localhost:8000/v1 --seeds 1

The last line printed is a JSON object: ``scripted_success``, ``paraphrase_success``, ``random_success``,
``floor_success`` (success rates; also ``_turns`` and ``_tool_calls`` of each),
``scripted_turns``, ``scripted_tool_calls``, ``random_turns``, ``random_tool_calls`` (means per
episode), ``episodes`` (per assistant), and for ``--assistant`` the same figures under
``assistant_*`` with the spec in ``assistant``.
"""

from __future__ import annotations

import functools
import sys
import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

from benchmarks import _harness as harness


@dataclass
class Result:
    """What one assistant did over all episodes."""

    name: str
    episodes: int = 0
    successes: int = 0
    turns: int = 0
    tool_calls: int = 0
    invalid: int = 0
    failed: int = 0
    seconds: float = 0.0
    by_group: dict[str, list[int]] = field(default_factory=dict)  # group -> [successes, episodes]

    @property
    def success(self) -> float:
        return self.successes / max(1, self.episodes)

    def per_episode(self, count: int) -> float:
        return count / max(1, self.episodes)


def group_of(name: str) -> str:
    """The scenario group of a template: ``no change`` when its policies forbid the request, else its first kind."""
    from llm_zoo.envs.user_sim import scenarios, world

    rng = __import__("random").Random(0)
    scenario = scenarios.instantiate(scenarios.TEMPLATES[name], world.generate(rng), rng)
    if not scenario.actions:
        return "no change"
    kinds = [t.kind for t in scenario.tasks]
    return "two tasks" if len(kinds) > 1 else kinds[0]


def run(name: str, assistant: Any, seeds: Sequence[int], batch_size: int, user: str = "scripted") -> Result:
    """Play every scenario on every seed with ``assistant`` against the scripted user (or the paraphrasing one)."""
    from llm_zoo import user_sim_v0
    from llm_zoo.envs.user_sim.scripted import ScriptedPolicy
    from llm_zoo.trainers.rollout import collect

    scripted_user = functools.partial(ScriptedPolicy, "none", user)

    names = [n for n in user_sim_v0.SCENARIOS for _ in seeds]
    start = time.perf_counter()
    episodes = collect(user_sim_v0.env, {"user": scripted_user(), "assistant": assistant},
                       [s for _ in user_sim_v0.SCENARIOS for s in seeds],
                       options=[{"scenario": n} for n in names], batch_size=batch_size, seed=0)
    result = Result(name, seconds=time.perf_counter() - start)
    groups = {n: group_of(n) for n in user_sim_v0.SCENARIOS}
    for scenario, episode in zip(names, episodes):
        info = episode.infos.get("assistant", {})
        ok = not episode.failed and bool(info.get("success"))
        result.episodes += 1
        result.successes += ok
        result.failed += episode.failed
        result.turns += sum(info.get("turns", {}).values())
        result.tool_calls += info.get("tool_calls", 0)
        result.invalid += info.get("invalid_replies", 0)
        tally = result.by_group.setdefault(groups[scenario], [0, 0])
        tally[0] += ok
        tally[1] += 1
    return result


def print_tables(results: Sequence[Result], seeds: Sequence[int]) -> None:
    """Print the headline table, then success by scenario group."""
    from llm_zoo import user_sim_v0

    print(f"user_sim_v0: {len(user_sim_v0.SCENARIOS)} scenarios x {len(seeds)} seed(s) against the scripted user\n")
    print(f"{'assistant':<22} {'episodes':>8} {'success':>8} {'turns/ep':>9} {'tool calls/ep':>14} "
          f"{'invalid/ep':>11} {'failed':>7} {'seconds':>8}")
    for r in results:
        print(f"{r.name:<22} {r.episodes:>8} {r.success:>8.1%} {r.per_episode(r.turns):>9.1f} "
              f"{r.per_episode(r.tool_calls):>14.1f} {r.per_episode(r.invalid):>11.2f} {r.failed:>7} {r.seconds:>8.1f}")
    groups = sorted({g for r in results for g in r.by_group})
    print("\nsuccess by scenario group (episodes)")
    print(f"{'group':<16}" + "".join(f" {r.name[:22]:>22}" for r in results))
    for g in groups:
        cells = []
        for r in results:
            won, n = r.by_group.get(g, [0, 0])
            cells.append(f" {f'{won / max(1, n):.0%} ({n})':>22}")
        print(f"{g:<16}" + "".join(cells))


def main(argv: Sequence[str] | None = None) -> dict[str, Any]:
    """Run the benchmark; print the tables and the JSON line; return the figures."""
    started = time.perf_counter()  # the JSON line's wall-clock "seconds"
    parser = harness.parser(__doc__, quick="one seed per scenario: seconds")
    harness.add_seeds(parser, default=3, help="env seeds per scenario (default 3)")
    parser.add_argument("--assistant", default=None, help="another assistant: a model directory, an http(s):// "
                        "endpoint, or a policy name load_policy knows (random, scripted)")
    parser.add_argument("--batch-size", type=harness.count, default=64, help="envs run side by side (default 64)")
    args = parser.parse_args(argv)
    seeds = list(range(1 if args.quick else args.seeds))

    from llm_zoo import user_sim_v0
    from llm_zoo.policies.registry import load_policy

    assistants: list[tuple[str, str, Any, str]] = [
        ("scripted", "scripted", user_sim_v0.SPEC.scripted["scripted"](seed=0), "scripted"),
        ("paraphrase", "scripted/paraphrase user", user_sim_v0.SPEC.scripted["scripted"](seed=0), "paraphrase"),
        ("random", "random_tools", user_sim_v0.SPEC.scripted["random_tools"](seed=0), "scripted"),
        ("floor", "no_tools", user_sim_v0.SPEC.scripted["no_tools"](seed=0), "scripted"),
    ]
    if args.assistant:
        assistants.append(("assistant", args.assistant, load_policy(args.assistant, "user_sim_v0", seed=0),
                           "scripted"))
    results = [run(label, policy, seeds, args.batch_size, user) for _, label, policy, user in assistants]
    print_tables(results, seeds)

    figures: dict[str, Any] = {"episodes": results[0].episodes, "seeds": len(seeds),
                               "scenarios": len(user_sim_v0.SCENARIOS)}
    for (key, label, _, _), r in zip(assistants, results):
        figures.update({f"{key}_success": round(r.success, 4), f"{key}_turns": round(r.per_episode(r.turns), 2),
                        f"{key}_tool_calls": round(r.per_episode(r.tool_calls), 2)})
        if key == "assistant":
            figures["assistant"] = label
            figures["assistant_failed"] = r.failed
    figures["seconds"] = round(time.perf_counter() - started, 2)
    return harness.emit(figures)


if __name__ == "__main__":
    main(sys.argv[1:])
