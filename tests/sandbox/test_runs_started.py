"""`llm_zoo.sandbox.runs_started()`: the process-wide count of programs started, a cost the trainer logs."""

from __future__ import annotations

import shutil

import pytest

from llm_zoo import sandbox
from llm_zoo.sandbox import SandboxPool, Workspace, run_command, run_pytest, run_python, runs_started

pytestmark = pytest.mark.skipif(
    shutil.which("bwrap") is None,
    reason="bubblewrap is not installed (apt-get install bubblewrap); CI installs it, so these run there",
)


def test_every_started_program_counts_once_whatever_its_outcome():
    before = runs_started()
    assert run_python("print(1)").ok
    assert run_python("while True:\n    pass", timeout_s=0.5).reason == "timeout"
    assert run_python("import sys; sys.exit(3)").returncode == 3
    assert run_command(["python", "-c", "pass"]).ok
    with Workspace() as ws:
        ws.write_file("test_one.py", "def test_one():\n    assert True\n")
        assert run_pytest(ws, ["-q"]).ok
    assert runs_started() - before == 5


def test_calls_refused_before_the_start_do_not_count():
    before = runs_started()
    with pytest.raises(ValueError):
        run_python("pass", timeout_s=0)
    with pytest.raises(TypeError):
        run_python(b"pass")  # type: ignore[arg-type]
    assert runs_started() == before


def test_pool_threads_count_into_the_same_total():
    before = runs_started()
    with SandboxPool(max_workers=4) as pool:
        results = pool.run_many([f"print({i})" for i in range(8)])
    assert [r.stdout for r in results] == [f"{i}\n" for i in range(8)]
    assert runs_started() - before == 8
    assert sandbox.runs_started is runs_started  # the package exports the one counter
