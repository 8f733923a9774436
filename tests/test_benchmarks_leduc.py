"""Smoke test of benchmarks/leduc.py at its smallest setting: every system runs, the table and JSON line agree."""

from __future__ import annotations

import json

from benchmarks import leduc as bench


def test_quick_run_prints_the_table_and_ends_with_the_json_line(capsys, tmp_path):
    figures = bench.main(["--quick", "--out", str(tmp_path)])
    out = capsys.readouterr().out.strip().splitlines()
    assert json.loads(out[-1]) == figures
    rows = figures["rows"]
    assert set(rows) == {"llm", "llm_last", "cfr+_leduc", "maskable_ppo", "maskable_ppo_average", "nfsp"}
    uniform = figures["uniform"]
    assert abs(uniform - 2.373611111111111) < 1e-12
    for key, row in rows.items():
        assert 0 <= row["exploitability"] <= 13, key
        assert row["seconds"] > 0 and row["work"] > 0, key
    assert rows["llm"]["work"] == 2 * 8  # the quick budget: 2 steps x 8 episodes
    assert rows["cfr+_leduc"]["work"] == 2 and rows["cfr+_leduc"]["exploitability"] < uniform
    assert rows["nfsp"]["work"] == rows["llm"]["work"] == figures["budget"]["nfsp_episodes"]  # NFSP: as many hands
    assert figures["kuhn"]["llm"]["work"] == 16 and figures["budget"]["kuhn_steps"] == 2
    assert set(figures["ratio"]) == {"llm", "llm_last", "cfr+"}
    table = (tmp_path / "leduc.md").read_text()
    assert all(row["label"] in table for row in rows.values()) and (tmp_path / "leduc.png").stat().st_size > 0
    # the reused-run path refuses a run trained with another config
    import pytest

    with pytest.raises(ValueError, match="another config"):
        bench.check_reused(tmp_path / "leduc_trainer", {})


def test_ratio_is_a_lower_bound_when_leduc_never_reaches_the_fraction():
    kuhn = {"to_50%": {"work": 100, "seconds": 2.0}, "to_25%": {"work": 400, "seconds": 8.0}}
    leduc = {"work": 10_000, "seconds": 50.0, "to_50%": {"work": 1_000, "seconds": 10.0}, "to_25%": None}
    ratio = bench.ratios(leduc, kuhn)
    assert ratio["to_50%"] == {"work": 10.0, "seconds": 5.0, "lower_bound": False}
    assert ratio["to_25%"] == {"work": 25.0, "seconds": 6.25, "lower_bound": True}
    assert bench.ratios(leduc, {**kuhn, "to_25%": None})["to_25%"]["work"] is None  # Kuhn's run never got there
    assert "at least 25.0x" in bench.ratio_text({"llm": ratio}, 2.0, 0.5)
    assert bench.first_reach([(1, 0.1, 3.0), (2, 0.2, 1.0), (3, 0.3, 0.5)], 1.0) == {"work": 2, "seconds": 0.2}
