"""Smoke test of benchmarks/defaults.py: the command a user types, its cost and its closing evaluation."""

from __future__ import annotations

import json

import pytest

pytest.importorskip("torch")
pytest.importorskip("transformers")
from benchmarks import defaults  # noqa: E402


def test_quick_run_trains_kuhn_and_reports_its_cost_and_evaluation(capsys, tmp_path):
    figures = defaults.main(["--quick", "--runs-dir", str(tmp_path)])
    out = capsys.readouterr().out.strip().splitlines()
    assert json.loads(out[-1]) == figures
    kuhn = figures["kuhn_poker_v0"]
    assert kuhn["model"] == "tiny" and kuhn["metric"] == "exploitability"
    assert 0.0 < kuhn["value"] <= 0.4583  # 5 steps from the uniform start: no worse than uniform random
    written = json.loads((tmp_path / "kuhn_poker_v0-default" / "eval.json").read_text())
    assert kuhn["value"] == round(written["exploitability"], 4)
    assert 0 < kuhn["seconds"] <= figures["seconds"]
    assert 0.1 < kuhn["peak_gib"] < 4.0  # the child's own peak: a Python with torch loaded, under the goal
    assert "| kuhn_poker_v0 " in "\n".join(out)


def test_a_run_that_fails_is_reported_with_its_command_and_output(tmp_path):
    with pytest.raises(RuntimeError, match=r"llm_zoo train kuhn_poker_v0 .*exited with 2(.|\n)*[Ll]earning rate"):
        defaults.run_default("kuhn_poker_v0", tmp_path / "run", ["--set", "lr=-1"])
