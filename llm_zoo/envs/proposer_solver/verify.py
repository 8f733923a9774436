"""Running tasks and answers in the sandbox: validating a proposal, grading the solvers.

Every program runs in :mod:`llm_zoo.sandbox` under :data:`LIMITS`, a memory cap and a wall-clock
timeout (the env's ``sandbox_memory_mb`` and ``sandbox_timeout_s``), inside the harness of
``harness.py``: a supervisor process that runs the program in runner processes of its own and
reports their results as one JSON object, on a channel no runner holds. Only argument values enter
a runner; expected outputs never do, and results are compared here.

A program runs :data:`RUNS` times at once: once under :data:`rules.REFERENCE`, the fixed conditions
its outputs are recorded and answers graded under, and the other times under conditions drawn from
the operating system's entropy (never from the episode's seed) that vary everything that must not
matter: the hash seed, the clock, the heap layout, the recursion limit, the time zone, the memory
headroom and the seed random.Random() takes when given none. It must give the same results every
time. What the program can reach at all is its capabilities (harness.py): curated builtins and
namespaces of the allowed modules, no attribute of which leads to the system, the interpreter or
the import machinery.

Answers that run a program get the same check as validation: in abduction f runs on the solver's
input, in induction the solver's f on every input, each :data:`RUNS` times under the same kinds of
conditions, and an answer is right only if every run gives the recorded outputs. The solvers' checks
run side by side. In integer mode the recorded output is the answer the env reads from the PROBLEM
(:mod:`llm_zoo.envs.proposer_solver.story`), which f() must return (``disagrees`` otherwise), so
grading compares with what the solvers see.
"""

from __future__ import annotations

import json
import secrets
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from importlib import resources

from llm_zoo.envs.proposer_solver.rules import (
    ALLOWED_IMPORTS,
    MIN_RECURSION_LIMIT,
    REFERENCE,
    STARTUP_S,
    Conditions,
    Mode,
    Proposal,
    Run,
    Task,
    TaskInvalid,
    check_outputs,
    check_program,
    check_run,
    harness_job,
    read_report,
)
from llm_zoo.envs.proposer_solver.story import read
from llm_zoo.sandbox import Limits, SandboxPool, SandboxResult

HARNESS = (resources.files(__package__) / "harness.py").read_text()
"""The sandboxed harness's source, run as the sandbox's main program."""
LIMITS = Limits(processes=8, file_mb=1, open_files=64, output_bytes=64 * 1024, tmp_mb=1)
"""Everything but time and memory: the supervisor and its runners need few processes and no files."""
RUNS = 8
"""Runs of a program, the first under :data:`rules.REFERENCE` and each other under conditions of its own; a
program whose results differ is invalid. One that reads one bit of its hash seed, heap layout or
entropy passes all eight with probability 1/128; one that counts the recursion depth left always
differs (every run has another limit)."""
SUPERVISOR_S = STARTUP_S + 2.0
"""Seconds the sandbox gives the supervisor beyond the runners' timeout, to start them and report."""

# the sandbox's reason for stopping the supervisor -> the invalid-task code
_SANDBOX_REASONS = {"timeout": "timeout", "cpu": "timeout", "memory": "memory", "output": "output",
                    "processes": "processes", "file_size": "file_size", "disk_full": "disk_full",
                    "crashed": "crashed", "killed": "killed"}


@dataclass(frozen=True)
class SandboxSettings:
    """Time and memory given to each sandboxed run."""

    timeout_s: float = 1.0
    memory_mb: int = 128

    def __post_init__(self) -> None:
        if not isinstance(self.timeout_s, (int, float)) or not 0 < self.timeout_s <= 60:
            raise ValueError(f"sandbox_timeout_s must be a number of seconds in (0, 60]; got {self.timeout_s!r}")
        if not isinstance(self.memory_mb, int) or isinstance(self.memory_mb, bool) or not 32 <= self.memory_mb <= 4096:
            raise ValueError(f"sandbox_memory_mb must be an integer in [32, 4096]; got {self.memory_mb!r}")


def draw_conditions() -> Conditions:
    """Draw a run's conditions from the operating system's entropy: a hash seed, an instant in 2001-2100,
    a pad, a recursion limit above :data:`rules.MIN_RECURSION_LIMIT`, a time zone off UTC, an entropy seed
    and up to 16 MiB less memory headroom than the reference's."""
    hours, minutes = (1 + secrets.randbelow(12)) * (1 - 2 * secrets.randbelow(2)), 30 * secrets.randbelow(2)
    return Conditions(hash_seed=1 + secrets.randbelow(2**32 - 1),
                      clock=978307200 + secrets.randbelow(3155760000) + secrets.randbelow(10**6) / 10**6,
                      pad=secrets.randbelow(4096),
                      recursion_limit=MIN_RECURSION_LIMIT + 1 + secrets.randbelow(1000),
                      tz=f"VAR{hours:+d}:{minutes:02d}", entropy=1 + secrets.randbelow(2**63),
                      headroom_mb=REFERENCE.headroom_mb - 16 + secrets.randbelow(16))


def checking_conditions() -> list[Conditions]:
    """Return the conditions of a program's :data:`RUNS` runs: :data:`rules.REFERENCE`, then drawn ones whose
    recursion limits all differ (so counting the depth left differs between any two runs)."""
    drawn: list[Conditions] = []
    while len(drawn) < RUNS - 1:
        c = draw_conditions()
        if c.recursion_limit not in {d.recursion_limit for d in drawn}:
            drawn.append(c)
    return [REFERENCE, *drawn]


def run_programs(jobs: Sequence[Sequence[tuple[str, Sequence[str], Conditions]]], settings: SandboxSettings,
                 allowed_imports: Sequence[str] = ALLOWED_IMPORTS, *, capabilities: bool = True
                 ) -> list[list[Run] | TaskInvalid]:
    """Run each job (one sandbox each, all at once; a job is runs of (program, argument sources, conditions)).

    Returns per job its runs, or the :class:`TaskInvalid` that stopped the whole sandbox. Raises
    ``SandboxUnavailable`` when bubblewrap is missing (a setup problem, not the proposer's).
    ``capabilities=False`` runs programs with the real builtins and modules (tests of the run-time
    refusals beneath the capabilities); tasks and answers never run so.
    """
    nonces = [secrets.token_hex(16) for _ in jobs]
    stdins = [json.dumps(harness_job(runs, nonce=nonce, timeout_s=settings.timeout_s, allowed_imports=allowed_imports,
                                     max_output=LIMITS.output_bytes, capabilities=capabilities))
              for runs, nonce in zip(jobs, nonces)]
    with SandboxPool(max_workers=len(stdins)) as pool:
        futures = [pool.submit(HARNESS, stdin=stdin, timeout_s=settings.timeout_s + SUPERVISOR_S,
                               memory_mb=settings.memory_mb, limits=LIMITS) for stdin in stdins]
        return [_read(future.result(), nonce, len(runs)) for future, nonce, runs in zip(futures, nonces, jobs)]


def _read(result: SandboxResult, nonce: str, runs: int) -> list[Run] | TaskInvalid:
    if result.reason in _SANDBOX_REASONS:
        return TaskInvalid(_SANDBOX_REASONS[result.reason], f"the sandbox stopped the harness ({result.reason})")
    try:
        return read_report(result.stdout, nonce, runs)
    except ValueError as exc:
        lines = result.stderr.strip().splitlines()
        return TaskInvalid("error", f"{exc} ({lines[-1][:200] if lines else f'exit status {result.returncode}'})")


def validate(proposal: Proposal, settings: SandboxSettings, allowed_imports: Sequence[str] = ALLOWED_IMPORTS
             ) -> tuple[tuple[str, ...], Conditions]:
    """Check a proposal and run it :data:`RUNS` times; return its canonical outputs (one per input) and
    the conditions they were recorded under (:data:`rules.REFERENCE`). In integer mode the output is the
    answer the env reads from the PROBLEM (:func:`story.read`), which f() must return.

    Raises:
        TaskInvalid: the first rule the proposal breaks, with its code.
        SandboxUnavailable: bubblewrap is missing (a setup problem, not the proposer's).
    """
    check_program(proposal.program, allowed_imports)
    if len(set(proposal.inputs)) != len(proposal.inputs):
        raise TaskInvalid("duplicate_inputs", "give each INPUT only once")
    reading = read(proposal.problem) if proposal.mode is Mode.INTEGER else None  # before the sandbox: it is cheap
    calls = [""] if proposal.mode is Mode.INTEGER else list(proposal.inputs)
    conditions = checking_conditions()
    (runs,) = run_programs([[(proposal.program, calls, c) for c in conditions]], settings, allowed_imports)
    if isinstance(runs, TaskInvalid):
        raise runs
    first = check_run(runs[0], len(calls))
    outputs = check_outputs(first, proposal.mode)
    assert len(runs) == RUNS, "the harness stops after the first run only when that run failed"
    checked = [first, *(check_run(run, len(calls)) for run in runs[1:])]
    for other in checked[1:]:
        for i, (first, second) in enumerate(zip(checked[0], other)):
            if first != second:
                where = "f()" if proposal.mode is Mode.INTEGER else f"input {i + 1}"
                raise TaskInvalid("nondeterministic", f"{where} gave {_shown(first)} in one run and {_shown(second)} "
                                                      "in another; avoid randomness, time, set order, hash(), "
                                                      "object ids and the recursion depth")
    if reading is not None and outputs != (str(reading.answer),):
        steps = " -> ".join(map(str, reading.counts))
        raise TaskInvalid("disagrees", f"f() returned {outputs[0]}, but the PROBLEM reads as {reading.answer} "
                                       f"(the count after each sentence: {_clip(steps)}); make f() compute what the "
                                       "story says, sentence by sentence")
    return outputs, conditions[0]


def _clip(text: str, most: int = 200) -> str:
    return text if len(text) <= most else text[:most - 3] + "..."


def _shown(call: tuple[str, str]) -> str:
    status, text = call
    return text[:60] if status == "ok" else f"{status} ({text[:60]})"


def grade(task: Task, answers: Mapping[str, str | None], settings: SandboxSettings,
          allowed_imports: Sequence[str] = ALLOWED_IMPORTS) -> dict[str, bool]:
    """Return solver -> whether its answer is right; ``answers`` come from ``text.parse_answer`` (None: none).

    Deduction and integer answers are compared exactly with the task's output. Abduction runs f on
    the solver's input; induction runs the solver's f on every input, held-out ones included. Both
    run as validation does, :data:`RUNS` times (under the conditions that recorded the task's
    outputs, then drawn ones), in a sandbox per solver, all at once; an answer is right only if
    every run gives the recorded outputs, so an input on which f is not deterministic is never right.
    """
    mode, p = task.mode, task.proposal
    recorded = task.conditions or REFERENCE
    correct = dict.fromkeys(answers, False)
    jobs: dict[str, tuple[str, list[str]]] = {}
    for solver, answer in answers.items():
        if answer is None:
            continue
        if mode in (Mode.DEDUCTION, Mode.INTEGER):
            correct[solver] = answer == task.outputs[0]
        elif mode is Mode.ABDUCTION:
            jobs[solver] = (p.program, [answer])
        else:
            try:
                check_program(answer, allowed_imports)
            except TaskInvalid:
                continue
            jobs[solver] = (answer, list(p.inputs))
    if jobs:
        wanted = [("ok", out) for out in (task.outputs[:1] if mode is Mode.ABDUCTION else task.outputs)]
        conditions = [recorded, *checking_conditions()[1:]]
        done = run_programs([[(program, calls, c) for c in conditions] for program, calls in jobs.values()],
                            settings, allowed_imports)
        for solver, runs in zip(jobs, done):
            if isinstance(runs, TaskInvalid) or len(runs) != len(conditions):
                continue
            try:
                correct[solver] = all(list(check_run(run, len(wanted))) == wanted for run in runs)
            except TaskInvalid:
                continue
    return correct
