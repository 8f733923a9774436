"""Env workers on Ray: episodes per second of agentic_judge_v0 in-process and on 1 and 2 Ray actors.

agentic_judge_v0's turns run sandboxed code (the solver's tests, the judge's checks), so its envs,
not the policies, bound a rollout. Here both seats are scripted players (the ``alternative``
stored solver and the ``rule_judge``), and the same episodes (the same seeds, ``seed``,
``batch_size``) are collected three ways, side by side in one run:

* in-process: ``collect(..., executor=None)``, every env stepped in this process;
* Ray, 1 worker and 2 workers: ``collect(..., executor=RayExecutor(n))``, the envs and the scripted
  players in n actors of a local Ray cluster this script starts (``num_cpus`` = the most workers)
  and stops.

Each executor is warmed up first with a short collection (its actors import the env and start
their sandboxes), untimed; then one collection of ``--episodes`` is timed. The episodes of every
setting are compared with the in-process ones (``Episode.to_dict`` without timings): ``same_episodes``.
On a machine with 2 cores, shared with this process's own tick loop, 2 workers cannot reach 2x.

    python -m benchmarks.ray_envs              # 24 episodes, 8 envs side by side
    python -m benchmarks.ray_envs --quick      # 2 episodes (the test's setting)

The last line printed is a JSON object: ``local_eps_per_s``, ``ray1_eps_per_s``, ``ray2_eps_per_s``
(episodes per second), ``speedup_ray2_vs_ray1``, ``speedup_ray2_vs_local``, ``same_episodes``,
``episodes``, ``batch_size``, ``cpus`` (the machine's) and ``seconds`` (the wall-clock).
"""

from __future__ import annotations

import os
import time
from collections.abc import Sequence

from benchmarks import _harness as harness

ENV = "agentic_judge_v0"


def _policies():
    import llm_zoo

    spec = llm_zoo.env_spec(ENV)
    return {"solver": spec.scripted["alternative"](seed=1), "judge": spec.scripted["rule_judge"](seed=2)}


def _plain(episodes) -> list[dict]:
    out = []
    for episode in episodes:
        record = episode.to_dict()
        record.pop("wall_time")
        out.append(record)
    return out


def _timed(seeds: list[int], batch_size: int, executor) -> tuple[float, list]:
    from llm_zoo.trainers.rollout import collect

    collect(ENV, _policies(), [10_000, 10_001], batch_size=2, seed=0, executor=executor)  # warm-up, untimed
    t0 = time.perf_counter()
    episodes = collect(ENV, _policies(), seeds, batch_size=batch_size, seed=7, executor=executor)
    return time.perf_counter() - t0, episodes


def main(argv: Sequence[str] | None = None) -> dict[str, object]:
    parser = harness.parser(__doc__, quick="2 episodes, 2 side by side (the test's setting)")
    parser.add_argument("--episodes", type=harness.count, default=24, help="episodes per setting (default 24)")
    parser.add_argument("--batch-size", type=harness.count, default=8, help="envs side by side (default 8)")
    args = parser.parse_args(argv)
    if args.quick:
        args.episodes, args.batch_size = 2, 2
    try:
        import ray
    except ImportError:
        parser.error("Ray is not installed: pip install 'llm_zoo[ray]'")
    from llm_zoo.trainers.executors import RayExecutor

    start = time.perf_counter()
    seeds = list(range(args.episodes))
    rows: list[tuple[str, int, float, bool]] = []
    local_s, expected = _timed(seeds, args.batch_size, None)
    rows.append(("in-process", 0, local_s, True))
    ray.init(num_cpus=2, include_dashboard=False, object_store_memory=100 * 2**20, log_to_driver=False,
             runtime_env={"env_vars": {"OMP_NUM_THREADS": "1"}})
    try:
        for workers in (1, 2):
            with RayExecutor(workers) as executor:
                seconds, episodes = _timed(seeds, args.batch_size, executor)
            rows.append((f"ray, {workers} worker{'s' * (workers > 1)}", workers, seconds,
                         _plain(episodes) == _plain(expected)))
    finally:
        ray.shutdown()
    failed = sum(e.failed for e in expected)
    print(f"{ENV}: scripted solver (alternative) and rule judge, {args.episodes} episodes, "
          f"{args.batch_size} envs side by side, {os.cpu_count()} CPUs; {failed} failed episodes in-process")
    print(f"{'setting':<18} {'seconds':>8} {'episodes/s':>11} {'vs in-process':>14} {'same episodes':>14}")
    for name, _, seconds, same in rows:
        print(f"{name:<18} {seconds:>8.2f} {args.episodes / seconds:>11.2f} {local_s / seconds:>13.2f}x "
              f"{str(same):>14}")
    rate = {workers: args.episodes / seconds for _, workers, seconds, _ in rows}
    figures = {"local_eps_per_s": round(rate[0], 3), "ray1_eps_per_s": round(rate[1], 3),
               "ray2_eps_per_s": round(rate[2], 3), "speedup_ray2_vs_ray1": round(rate[2] / rate[1], 3),
               "speedup_ray2_vs_local": round(rate[2] / rate[0], 3),
               "same_episodes": all(same for *_, same in rows), "episodes": args.episodes,
               "batch_size": args.batch_size, "cpus": os.cpu_count(),
               "seconds": round(time.perf_counter() - start, 1)}
    return harness.emit(figures)


if __name__ == "__main__":
    main()
