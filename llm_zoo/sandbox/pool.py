"""Many sandboxed runs at once: a thread pool sized to the machine.

Threads suffice: each run spends its time waiting on its own sandbox, not holding the GIL.
"""

from __future__ import annotations

import os
from collections.abc import Iterable
from concurrent.futures import Future, ThreadPoolExecutor
from typing import Any, Literal, overload

from .runner import SandboxResult, run_python


class SandboxPool:
    """Run many programs through `run_python` concurrently; results keep the order of the inputs.

    Each run has its own sandbox (and its own workspace unless one is passed), so one program that
    crashes, times out or floods its output changes nothing for the others.

    Args:
        max_workers: Runs at once; None uses `os.cpu_count()`.

    Example:
        >>> with SandboxPool() as pool:
        ...     [r.stdout for r in pool.run_many(["print(1)", "print(2)"])]
        ['1\\n', '2\\n']
    """

    def __init__(self, max_workers: int | None = None) -> None:
        if max_workers is not None and (not isinstance(max_workers, int) or max_workers <= 0):
            raise ValueError(
                f"max_workers must be a positive int or None (os.cpu_count()), got {max_workers!r}"
            )
        self.max_workers = max_workers or os.cpu_count() or 1
        self._executor = ThreadPoolExecutor(self.max_workers, thread_name_prefix="llm_zoo_sandbox")

    def submit(self, code: str, **kwargs: Any) -> Future[SandboxResult]:
        """Start `run_python(code, **kwargs)` and return its future."""
        return self._executor.submit(run_python, code, **kwargs)

    @overload
    def run_many(
        self, codes: Iterable[str], *, return_exceptions: Literal[False] = False, **kwargs: Any
    ) -> list[SandboxResult]: ...
    @overload
    def run_many(
        self, codes: Iterable[str], *, return_exceptions: bool, **kwargs: Any
    ) -> list[SandboxResult | BaseException]: ...
    def run_many(
        self, codes: Iterable[str], *, return_exceptions: bool = False, **kwargs: Any
    ) -> list[SandboxResult] | list[SandboxResult | BaseException]:
        """Run each program with the same keyword arguments; wait for all; return results in order.

        Args:
            codes: Python sources.
            return_exceptions: Put an exception raised for one item (a bad argument, a missing
                sandbox) in its slot instead of raising it. Either way every other item runs to the end.
            **kwargs: Passed to `run_python` (timeout_s, memory_mb, workspace, stdin, limits, ...).

        Raises:
            Exception: The first item's exception, in input order, when return_exceptions is False.
        """
        futures = [self.submit(code, **kwargs) for code in codes]
        outcomes: list[SandboxResult | BaseException] = []
        for future in futures:
            error = future.exception()
            outcomes.append(future.result() if error is None else error)
        if not return_exceptions:
            for outcome in outcomes:
                if isinstance(outcome, BaseException):
                    raise outcome
        return outcomes

    def close(self) -> None:
        """Wait for the runs in flight and stop the worker threads."""
        self._executor.shutdown(wait=True)

    def __enter__(self) -> SandboxPool:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


@overload
def run_many(
    codes: Iterable[str],
    *,
    max_workers: int | None = None,
    return_exceptions: Literal[False] = False,
    **kwargs: Any,
) -> list[SandboxResult]: ...
@overload
def run_many(
    codes: Iterable[str], *, max_workers: int | None = None, return_exceptions: bool, **kwargs: Any
) -> list[SandboxResult | BaseException]: ...
def run_many(
    codes: Iterable[str], *, max_workers: int | None = None, return_exceptions: bool = False, **kwargs: Any
) -> list[SandboxResult] | list[SandboxResult | BaseException]:
    """Run programs concurrently in a temporary `SandboxPool`; see `SandboxPool.run_many`."""
    with SandboxPool(max_workers) as pool:
        return pool.run_many(codes, return_exceptions=return_exceptions, **kwargs)
