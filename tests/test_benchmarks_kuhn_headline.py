"""benchmarks/kuhn_headline.py's ``--systems``: only the rows named are run, and the JSON line says which."""

from __future__ import annotations

import json

import pytest

from benchmarks import kuhn_headline


def test_systems_runs_only_the_rows_named(capsys, tmp_path):
    pytest.importorskip("torch")
    bench = kuhn_headline
    figures = bench.main(["--quick", "--out", str(tmp_path), "--workers", "1", "--systems", "random", "per_seat"])
    out = capsys.readouterr().out.strip().splitlines()
    assert json.loads(out[-1]) == figures
    assert set(figures["rows"]) == {"random", "llm_per_seat"}  # no CFR, PPO or other LLM method ran
    assert figures["systems"] == ["random", "per_seat"]
    assert sorted(p.name for p in tmp_path.iterdir() if p.is_dir()) == ["per_seat-seed0"]
    row = figures["rows"]["llm_per_seat"]
    assert row["episodes"] == 2 * 8 and 0 <= row["exploitability"] <= 0.5  # the quick budget: 2 steps x 8 hands
    table = (tmp_path / "kuhn_headline.md").read_text()
    assert "per-seat policies" in table and "MaskablePPO" not in table and "CFR" not in table
    with pytest.raises(SystemExit):
        bench.main(["--quick", "--systems", "cfr", "maskable"])


def test_a_row_that_lost_seeds_says_on_how_many_its_figure_stands():
    bench = kuhn_headline
    row = bench.Row("llm_per_seat", "per-seat", runs=[bench.Run(0.0046, -0.0004, 2048000, 1504.0, [(51200, 16.0, 0.09)])],
                    failed=["seed 1: RuntimeError: boom", "seed 2: RuntimeError: boom"])
    text = bench.markdown([row], {row.key: bench.figures(row)})
    assert "0.0046 (1 of 3 seeds)" in text
    whole = bench.Row("llm_per_seat", "per-seat", runs=[bench.Run(0.0046, -0.0004, 2048000, 1504.0, None)] * 3)
    assert "seeds)" not in bench.markdown([whole], {whole.key: bench.figures(whole)})
