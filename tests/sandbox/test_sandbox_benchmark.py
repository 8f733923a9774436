"""Smallest-setting run of benchmarks/sandbox_throughput.py."""

from __future__ import annotations

import importlib.util
import json
import shutil
from pathlib import Path

import pytest

SCRIPT = Path(__file__).resolve().parents[2] / "benchmarks" / "sandbox_throughput.py"


@pytest.mark.skipif(
    shutil.which("bwrap") is None,
    reason="bubblewrap is not installed (apt-get install bubblewrap); CI installs it, so this runs there",
)
def test_quick_benchmark_ends_with_positive_json_figures(capsys):
    spec = importlib.util.spec_from_file_location("sandbox_throughput", SCRIPT)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    returned = module.main(["--quick"])
    lines = capsys.readouterr().out.strip().splitlines()
    assert any(line.startswith("| sandbox ") for line in lines)
    figures = json.loads(lines[-1])
    assert figures == returned
    for key in ("sandbox_runs_per_s", "bare_runs_per_s", "pooled_runs_per_s", "overhead_ratio"):
        assert figures[key] > 0, key
