"""The benchmarks: one module per measurement, run from a source checkout as ``python -m benchmarks.NAME``.

``llm-zoo bench`` runs them all and writes ``docs/results.md`` (:mod:`llm_zoo.bench`). What every module shares,
its common options, its Markdown table and its JSON line, lives in :mod:`benchmarks._harness`; the reward-hack
libraries are the subpackage :mod:`benchmarks.hacks`, one exploit suite per env, which the tests import as
``from benchmarks.hacks import judge``. The package is not installed with ``llm_zoo``: it is importable from the
checkout's root (pytest puts it on the path, ``pythonpath`` in pyproject.toml).
"""
