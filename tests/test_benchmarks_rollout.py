"""Smoke test of benchmarks/rollout_throughput.py at its smallest setting: it runs and ends with its JSON line."""

from __future__ import annotations

import importlib.util
import json
import sys
from pathlib import Path

import pytest

pytest.importorskip("torch")
pytest.importorskip("transformers")

SCRIPT = Path(__file__).resolve().parents[1] / "benchmarks" / "rollout_throughput.py"


def _load():
    spec = importlib.util.spec_from_file_location("rollout_throughput", SCRIPT)
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # dataclasses look their module up there
    spec.loader.exec_module(module)
    return module


def test_quick_run_prints_the_tables_and_ends_with_the_json_line(capsys):
    figures = _load().main(["--quick"])
    out = capsys.readouterr().out.strip().splitlines()
    assert json.loads(out[-1]) == figures
    for key in ("episodes_per_s_b1", "episodes_per_s_b64", "ratio", "tokens_per_s_b1", "tokens_per_s_b64"):
        assert figures[key] > 0
    assert figures["ratio"] == pytest.approx(figures["episodes_per_s_b64"] / figures["episodes_per_s_b1"], rel=1e-2)
    assert figures["threads"] == 1 and figures["episodes"] == [4, 64]
    assert any("where the time goes" in line for line in out)
    assert any(line.startswith("sampling") for line in out)


def test_bad_setting_is_refused():
    with pytest.raises(SystemExit):
        _load().main(["--episodes", "0"])
