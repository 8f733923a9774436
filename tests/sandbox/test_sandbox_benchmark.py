"""Smallest-setting run of benchmarks/sandbox_throughput.py."""

from __future__ import annotations

import json
import shutil

import pytest

from benchmarks import sandbox_throughput


@pytest.mark.skipif(
    shutil.which("bwrap") is None,
    reason="bubblewrap is not installed (apt-get install bubblewrap); CI installs it, so this runs there",
)
def test_quick_benchmark_ends_with_positive_json_figures(capsys):
    returned = sandbox_throughput.main(["--quick"])
    lines = capsys.readouterr().out.strip().splitlines()
    assert any(line.startswith("| sandbox ") for line in lines)
    figures = json.loads(lines[-1])
    assert figures == returned
    for key in ("sandbox_runs_per_s", "bare_runs_per_s", "pooled_runs_per_s", "overhead_ratio"):
        assert figures[key] > 0, key
