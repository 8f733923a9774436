"""Sandbox throughput: runs per second of `print(1)` through llm_zoo.sandbox beside a bare subprocess.

All systems run in the same process, interleaved round by round, so the machine's noise cancels in
the ratios. The systems:

- bare: `subprocess.run([sys.executable, "-c", "print(1)"])`, the usual way to run a snippet.
- bare -S -s: the base interpreter with the sandbox's own flags (no site-packages), which isolates
  what bubblewrap, the rlimit wrapper and the workspace cost.
- sandbox: `run_python("print(1)")` one after another, each in a fresh workspace.
- sandbox, one workspace: the same, reusing one workspace (an episode's tool calls).
- sandbox pooled: `SandboxPool().run_many(...)` with one worker per CPU.

The last line printed is a JSON object with the headline figures.

Usage:
    python -m benchmarks.sandbox_throughput            # 200 runs per system
    python -m benchmarks.sandbox_throughput --quick    # 12 runs per system, a few seconds
"""

from __future__ import annotations

import os
import subprocess
import sys
import time
from collections.abc import Callable

from benchmarks import _harness as harness
from llm_zoo.sandbox import SandboxPool, Workspace, run_python, sandbox_info
from llm_zoo.sandbox._bwrap import discover_runtime

PROGRAM = "print(1)"


def _check(stdout: str | bytes) -> None:
    if stdout not in ("1\n", b"1\n"):
        raise RuntimeError(
            f"a benchmarked run printed {stdout!r:.200}, expected '1\\n'; the timing would be meaningless"
        )


def main(argv: list[str] | None = None) -> dict[str, float]:
    """Measure every system, print the table and the JSON line, and return the headline figures."""
    started = time.perf_counter()  # the JSON line's wall-clock "seconds"
    parser = harness.parser(__doc__, quick="12 runs per system instead of 200 (a few seconds)")
    parser.add_argument("--runs", type=harness.count, default=None, help="runs per system (overrides --quick)")
    parser.add_argument("--rounds", type=int, default=4, help="interleaved rounds the runs are split into")
    args = parser.parse_args(argv)
    runs = args.runs if args.runs is not None else (12 if args.quick else 200)
    rounds = max(1, min(args.rounds, runs))
    info = sandbox_info()
    if not info.available:
        raise SystemExit(f"the sandbox is unavailable here: {info.problem}")
    base_python = discover_runtime().python
    workers = os.cpu_count() or 1

    def bare(n: int) -> None:
        for _ in range(n):
            _check(subprocess.run([sys.executable, "-c", PROGRAM], capture_output=True, check=True).stdout)

    def bare_same_flags(n: int) -> None:
        for _ in range(n):
            _check(
                subprocess.run(
                    [base_python, "-S", "-s", "-c", PROGRAM], capture_output=True, check=True
                ).stdout
            )

    def sandbox(n: int) -> None:
        for _ in range(n):
            _check(run_python(PROGRAM).stdout)

    workspace = Workspace()

    def sandbox_one_workspace(n: int) -> None:
        for _ in range(n):
            _check(run_python(PROGRAM, workspace=workspace).stdout)

    pool = SandboxPool(workers)

    def pooled(n: int) -> None:
        for result in pool.run_many([PROGRAM] * n):
            _check(result.stdout)

    systems: dict[str, Callable[[int], None]] = {
        "bare": bare,
        "bare -S -s": bare_same_flags,
        "sandbox": sandbox,
        "sandbox, one workspace": sandbox_one_workspace,
        f"sandbox pooled ({workers} workers)": pooled,
    }
    seconds = dict.fromkeys(systems, 0.0)
    try:
        sandbox(1)  # the one-time probe is not part of the steady state
        for r in range(rounds):
            share = runs // rounds + (1 if r < runs % rounds else 0)
            for name, system in systems.items():
                start = time.perf_counter()
                system(share)
                seconds[name] += time.perf_counter() - start
    finally:
        pool.close()
        workspace.close()

    rate = {name: runs / max(s, 1e-9) for name, s in seconds.items()}
    bare_rate = rate["bare"]
    print(
        f"sandbox throughput: {runs} runs of {PROGRAM!r} per system, {rounds} interleaved rounds, {workers} CPUs"
    )
    print(
        f"sandbox: {info.version}; {' '.join(info.namespaces)}; per-workspace uid: {info.per_workspace_uid}"
    )
    print()
    print(harness.table(["system", "runs/s", "ms/run", "bare / this"],
                        [[name, f"{r:.1f}", f"{1000 / r:.2f}", f"{bare_rate / r:.2f}"] for name, r in rate.items()]))
    print()
    pooled_name = next(name for name in systems if name.startswith("sandbox pooled"))
    headline = {
        "sandbox_runs_per_s": round(rate["sandbox"], 2),
        "sandbox_one_workspace_runs_per_s": round(rate["sandbox, one workspace"], 2),
        "pooled_runs_per_s": round(rate[pooled_name], 2),
        "bare_runs_per_s": round(bare_rate, 2),
        "bare_same_flags_runs_per_s": round(rate["bare -S -s"], 2),
        "overhead_ratio": round(bare_rate / rate["sandbox"], 3),
        "overhead_ratio_same_flags": round(rate["bare -S -s"] / rate["sandbox"], 3),
        "pooled_speedup": round(rate[pooled_name] / rate["sandbox"], 3),
        "runs": runs,
        "workers": workers,
    }
    headline["seconds"] = round(time.perf_counter() - started, 2)
    return harness.emit(headline)


if __name__ == "__main__":
    main()
