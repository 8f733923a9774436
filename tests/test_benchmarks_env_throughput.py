"""Smoke test of benchmarks/env_throughput.py at its smallest setting: it runs and ends with its JSON line."""

from __future__ import annotations

import importlib.util
import json

import pytest

from benchmarks import env_throughput


def test_quick_run_prints_the_table_and_ends_with_the_json_line(capsys):
    pytest.importorskip("pygame", reason="PettingZoo's tictactoe_v3 imports pygame; pip install 'pygame-ce>=2.3'")
    figures = env_throughput.main(["--quick"])
    out = capsys.readouterr().out.strip().splitlines()
    assert json.loads(out[-1]) == figures
    assert any(line.startswith("kuhn_poker_v0 (1 hand)") for line in out)
    for key in ("kuhn_steps_per_s", "tictactoe_steps_per_s", "ratio"):
        assert figures[key] > 0
    assert figures["ratio"] == pytest.approx(figures["kuhn_steps_per_s"] / figures["tictactoe_steps_per_s"], rel=1e-2)
    if importlib.util.find_spec("textarena") is not None:
        assert figures["textarena_steps_per_s"] > 0 and figures["ratio_textarena"] > 0
    else:
        assert "textarena_steps_per_s" not in figures
        assert any("not installed" in line for line in out)


def test_bad_budget_is_refused():
    with pytest.raises(SystemExit):
        env_throughput.main(["--seconds", "0"])
