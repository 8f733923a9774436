"""Smoke test of benchmarks/user_sim_success.py at its smallest setting: it runs and ends with its JSON line."""

from __future__ import annotations

import json

import pytest

from benchmarks import user_sim_success


def test_quick_run_prints_the_tables_and_ends_with_the_json_line(capsys):
    figures = user_sim_success.main(["--quick", "--assistant", "scripted"])
    out = capsys.readouterr().out.strip().splitlines()
    assert json.loads(out[-1]) == figures
    assert figures["scripted_success"] == 1.0 and figures["assistant_success"] == 1.0
    assert 0.0 <= figures["random_success"] < 0.5
    # the do-nothing floor: the no-change templates only; the scripted assistant serves the paraphrasing user too
    assert 0.0 < figures["floor_success"] < 0.5 and figures["floor_tool_calls"] == 0
    assert figures["paraphrase_success"] >= 0.8
    assert figures["episodes"] == figures["scenarios"] >= 30 and figures["seeds"] == 1
    assert figures["scripted_tool_calls"] > 0 and figures["random_tool_calls"] > 0
    assert any(line.startswith("random_tools") for line in out)
    assert any(line.startswith("no change") for line in out)


def test_bad_setting_is_refused():
    with pytest.raises(SystemExit):
        user_sim_success.main(["--seeds", "0"])
