"""Judge agreement: how well judges grade stored solutions, measured against the hidden tests.

Every (task, stored solution) pair of agentic_judge_v0's task set is one judge-only episode
(`reset(options={"task": ..., "solution": ...})`: the stored solution is the submission). The
hidden tests give the truth. The judges compared, on the same episodes:

- visible tests: PASS exactly when every visible test passes (no judge at all);
- scripted judge: the rule-based judge of `llm_zoo.envs.agentic_judge.scripted` (its tools only,
  never the hidden tests);
- any policy named with `--judge` (a local model directory or an http(s):// endpoint, loaded by
  `llm_zoo.policies.registry.load_policy`).

Figures per judge: agreement (verdict matches the truth; ABSTAIN never does), false-pass rate
(PASS on solutions that fail the hidden tests), false-fail rate (FAIL on solutions that pass them),
abstentions, and agreement on the brittle cases (correct solutions the visible tests reject) and the
weak cases (wrong solutions the visible tests accept). The last line printed is a JSON object:
`{"cases": n, "visible_tests": {...}, "scripted_judge": {...}, "policies": {spec: {...}}, ...}`, each
judge's dict holding `agreement`, `false_pass`, `false_fail`, `abstain`, `brittle_agreement`,
`weak_agreement`.

Usage:
    python -m benchmarks.judge_agreement                 # every task x stored solution
    python -m benchmarks.judge_agreement --quick         # 3 tasks, a few seconds
    python -m benchmarks.judge_agreement --judge http://localhost:8000/v1   # and a served model
"""

from __future__ import annotations

import os
import time
from collections.abc import Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from typing import Any

from benchmarks import _harness as harness
from llm_zoo import agentic_judge_v0
from llm_zoo.envs.agentic_judge.tasks import load_tasks
from llm_zoo.policy import Policy
from llm_zoo.trainers.rollout import collect

QUICK_TASKS = ("mean", "median", "count_vowels")  # one brittle, one weak, one plain
ENV = "agentic_judge_v0"


@dataclass(frozen=True)
class Case:
    """One graded submission: a task's stored solution, what kind of case it is, and the verdicts."""

    task: str
    solution: str
    kind: str  # "brittle", "weak" or "plain"
    hidden_pass: bool
    visible_pass: bool
    verdict: str | None  # the judge's verdict, None when the episode failed


def _cases(task_ids: Sequence[str]) -> list[tuple[str, str, str]]:
    tasks = load_tasks()
    return [(t, name, "brittle" if name in tasks[t].brittle else "weak" if name in tasks[t].weak else "plain")
            for t in task_ids for name in tasks[t].solutions]


def judge_cases(judge: Policy, cases: Sequence[tuple[str, str, str]], *, workers: int = 1,
                batch_size: int = 64) -> list[Case]:
    """Run one judge-only episode per case with ``judge``; return the cases with their verdicts."""
    solver = agentic_judge_v0.SPEC.scripted["reference"]()  # never acts: the episodes start at the judge

    def run(chunk: Sequence[tuple[str, str, str]]) -> list[Case]:
        episodes = collect(agentic_judge_v0.env, {"solver": solver, "judge": judge}, len(chunk),
                           options=[{"task": t, "solution": s} for t, s, _ in chunk], batch_size=batch_size)
        out = []
        for (task, name, kind), episode in zip(chunk, episodes):
            info = episode.infos.get("judge", {})
            out.append(Case(task, name, kind, bool(info.get("hidden_pass")), info.get("visible_pass_rate") == 1.0,
                            None if episode.failed else info.get("verdict")))
        return out

    chunks = [list(cases[i::workers]) for i in range(workers)]
    with ThreadPoolExecutor(workers) as pool:
        results = [c for part in pool.map(run, [c for c in chunks if c]) for c in part]
    order = {(t, s): i for i, (t, s, _) in enumerate(cases)}
    return sorted(results, key=lambda c: order[(c.task, c.solution)])


def figures(verdicts: Sequence[tuple[Case, str | None]]) -> dict[str, float]:
    """Agreement, false-pass, false-fail and abstention rates, overall and on brittle and weak cases."""
    def rate(pairs: Sequence[tuple[Case, str | None]], hit: Any) -> float:
        return sum(bool(hit(c, v)) for c, v in pairs) / len(pairs) if pairs else float("nan")

    def agree(c: Case, v: str | None) -> bool:
        return (v == "PASS" and c.hidden_pass) or (v == "FAIL" and not c.hidden_pass)

    wrong = [(c, v) for c, v in verdicts if not c.hidden_pass]
    right = [(c, v) for c, v in verdicts if c.hidden_pass]
    return {"agreement": rate(verdicts, agree),
            "false_pass": rate(wrong, lambda c, v: v == "PASS"),
            "false_fail": rate(right, lambda c, v: v == "FAIL"),
            "abstain": rate(verdicts, lambda c, v: v not in ("PASS", "FAIL")),
            "brittle_agreement": rate([(c, v) for c, v in verdicts if c.kind == "brittle"], agree),
            "weak_agreement": rate([(c, v) for c, v in verdicts if c.kind == "weak"], agree)}


def table(rows: dict[str, dict[str, float]], counts: dict[str, int]) -> str:
    """Format the judges' figures as a Markdown table."""
    head = (f"| judge | agreement (n={counts['all']}) | false pass (n={counts['wrong']}) | "
            f"false fail (n={counts['right']}) | abstain | brittle cases (n={counts['brittle']}) | "
            f"weak cases (n={counts['weak']}) |")
    lines = [head, "|---|---|---|---|---|---|---|"]
    for name, f in rows.items():
        lines.append(f"| {name} | {f['agreement']:.3f} | {f['false_pass']:.3f} | {f['false_fail']:.3f} | "
                     f"{f['abstain']:.3f} | {f['brittle_agreement']:.3f} | {f['weak_agreement']:.3f} |")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> dict[str, Any]:
    """Judge every case with every judge, print the table and the JSON line, and return the figures."""
    parser = harness.parser(__doc__, quick=f"only the tasks {', '.join(QUICK_TASKS)} (seconds)")
    parser.add_argument("--tasks", nargs="+", default=None, help="task ids to use (default: all)")
    parser.add_argument("--judge", action="append", default=[], metavar="PATH_OR_URL",
                        help="also evaluate this judge policy (a model directory or an http(s):// endpoint); repeatable")
    harness.add_workers(parser, default=min(4, os.cpu_count() or 1),
                        help="episodes run in this many threads for the scripted judge (sandbox runs overlap)")
    parser.add_argument("--policy-workers", type=harness.count, default=1,
                        help="threads for --judge policies (1 unless the policy is safe to call from threads)")
    args = parser.parse_args(argv)
    known = load_tasks()
    task_ids = args.tasks or (list(QUICK_TASKS) if args.quick else list(known))
    unknown = [t for t in task_ids if t not in known]
    if unknown:
        parser.error(f"unknown task ids {unknown}; choose from {sorted(known)}")
    cases = _cases(task_ids)
    start = time.perf_counter()

    scripted = judge_cases(agentic_judge_v0.SPEC.scripted["rule_judge"](), cases, workers=args.workers)
    rows = {"visible tests": figures([(c, "PASS" if c.visible_pass else "FAIL") for c in scripted]),
            "scripted judge": figures([(c, c.verdict) for c in scripted])}
    policies = {}
    for spec in args.judge:
        from llm_zoo.policies.registry import load_policy

        judged = judge_cases(load_policy(spec, ENV), cases, workers=args.policy_workers)
        rows[f"policy {spec}"] = policies[spec] = figures([(c, c.verdict) for c in judged])
    seconds = time.perf_counter() - start

    counts = {"all": len(scripted), "wrong": sum(not c.hidden_pass for c in scripted),
              "right": sum(c.hidden_pass for c in scripted), "brittle": sum(c.kind == "brittle" for c in scripted),
              "weak": sum(c.kind == "weak" for c in scripted)}
    print(f"agentic_judge_v0: {len(task_ids)} tasks, {len(cases)} stored solutions, {seconds:.1f} s")
    print(table(rows, counts))
    misses = [c for c in scripted if not ((c.verdict == "PASS") == c.hidden_pass and c.verdict in ("PASS", "FAIL"))]
    if misses:
        print("scripted judge disagrees on: " + ", ".join(f"{c.task}/{c.solution} ({c.verdict})" for c in misses))
    result = {"cases": len(cases), "tasks": len(task_ids), "visible_tests": rows["visible tests"],
              "scripted_judge": rows["scripted judge"], "policies": policies, "seconds": round(seconds, 2)}
    return harness.emit(result)


if __name__ == "__main__":
    main()
