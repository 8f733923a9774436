"""Running tasks and answers in the sandbox: validating a proposal, grading the solvers.

Every program runs in :mod:`llm_zoo.sandbox` under :data:`LIMITS`, a wall-clock timeout and a memory
cap (the env's ``sandbox_timeout_s`` and ``sandbox_memory_mb``). A proposal runs twice at once and
must print the same outputs both times; the solvers' checks run side by side in one batch.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from llm_zoo.envs.proposer_solver.rules import (
    ALLOWED_IMPORTS,
    Mode,
    Proposal,
    Task,
    TaskInvalid,
    check_outputs,
    check_program,
    harness,
    read_harness,
)
from llm_zoo.sandbox import Limits, SandboxResult, run_many

LIMITS = Limits(processes=8, file_mb=1, open_files=64, output_bytes=64 * 1024, tmp_mb=1)
"""Everything but time and memory: a task needs no processes, files or output to speak of."""

# the sandbox's reason for stopping a run -> the invalid-task code
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


def _run(codes: Sequence[str], settings: SandboxSettings) -> list[SandboxResult]:
    return run_many(codes, max_workers=len(codes), timeout_s=settings.timeout_s, memory_mb=settings.memory_mb,
                    limits=LIMITS)


def _results(run: SandboxResult, expected: int) -> list[tuple[str, str]]:
    """Read a run's per-call results, or raise :class:`TaskInvalid` naming why there are none."""
    if run.reason in _SANDBOX_REASONS:
        raise TaskInvalid(_SANDBOX_REASONS[run.reason], f"the sandbox stopped the program ({run.reason})")
    try:
        return read_harness(run.stdout, expected)
    except ValueError:
        lines = run.stderr.strip().splitlines()
        raise TaskInvalid("error", lines[-1][:200] if lines else
                          f"the program ended (exit status {run.returncode}) before f's results were printed") from None


def validate(proposal: Proposal, settings: SandboxSettings, allowed_imports: Sequence[str] = ALLOWED_IMPORTS
             ) -> tuple[str, ...]:
    """Check a proposal and run it twice; return its canonical outputs, one per input (integer: one).

    Raises:
        TaskInvalid: the first rule the proposal breaks, with its code.
        SandboxUnavailable: bubblewrap is missing (a setup problem, not the proposer's).
    """
    check_program(proposal.program, allowed_imports)
    if len(set(proposal.inputs)) != len(proposal.inputs):
        raise TaskInvalid("duplicate_inputs", "give each INPUT only once")
    calls = [""] if proposal.mode is Mode.INTEGER else list(proposal.inputs)
    code = harness(proposal.program, calls)
    first, second = (_results(run, len(calls)) for run in _run([code, code], settings))
    outputs = check_outputs(first, proposal.mode)
    if first != second:
        raise TaskInvalid("nondeterministic", "f gave different results in two runs; avoid randomness, time, "
                                              "set order and object ids")
    return outputs


def grade(task: Task, answers: Mapping[str, str | None], settings: SandboxSettings,
          allowed_imports: Sequence[str] = ALLOWED_IMPORTS) -> dict[str, bool]:
    """Return solver -> whether its answer is right; ``answers`` come from ``text.parse_answer`` (None: none).

    Deduction and integer answers are compared exactly with the task's output. Abduction runs f on
    the solver's input; induction runs the solver's f on every input, held-out ones included. The
    sandboxed checks of all solvers run at once.
    """
    mode, p = task.mode, task.proposal
    correct = dict.fromkeys(answers, False)
    jobs: dict[str, str] = {}
    for solver, answer in answers.items():
        if answer is None:
            continue
        if mode in (Mode.DEDUCTION, Mode.INTEGER):
            correct[solver] = answer == task.outputs[0]
        elif mode is Mode.ABDUCTION:
            jobs[solver] = harness(p.program, [answer])
        else:
            try:
                check_program(answer, allowed_imports)
            except TaskInvalid:
                continue
            jobs[solver] = harness(answer, list(p.inputs))
    if jobs:
        for solver, run in zip(jobs, _run(list(jobs.values()), settings)):
            try:
                results = _results(run, 1 if mode is Mode.ABDUCTION else len(p.inputs))
            except TaskInvalid:
                continue
            wanted = task.outputs[:1] if mode is Mode.ABDUCTION else task.outputs
            correct[solver] = results == [("ok", out) for out in wanted]
    return correct
