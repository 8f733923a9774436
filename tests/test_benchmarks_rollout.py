"""Smoke test of benchmarks/rollout_throughput.py at its smallest setting: it runs and ends with its JSON line."""

from __future__ import annotations

import json

import pytest

pytest.importorskip("torch")
pytest.importorskip("transformers")
from benchmarks import rollout_throughput  # noqa: E402


def test_quick_run_prints_the_tables_and_ends_with_the_json_line(capsys):
    figures = rollout_throughput.main(["--quick"])
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
        rollout_throughput.main(["--episodes", "0"])
