"""Smoke test of benchmarks/learnability.py at its smallest setting: it runs and ends with its JSON line."""

from __future__ import annotations

import json

import pytest

from benchmarks import learnability


@pytest.mark.bwrap
def test_quick_run_prints_the_tables_and_ends_with_the_json_line(capsys, tmp_path):
    figures = learnability.main(["--quick", "--difficulties", "1,6", "--out", str(tmp_path)])
    out = capsys.readouterr().out.strip().splitlines()
    assert json.loads(out[-1]) == figures
    by_difficulty = figures["fixed_mean_learnability_by_difficulty"]
    assert set(by_difficulty) == set(figures["fixed_pass_rate_by_difficulty"]) == {"1", "6"}
    assert figures["fixed_mean_learnability"] == max(by_difficulty.values())
    assert by_difficulty[str(figures["fixed_best_difficulty"])] == figures["fixed_mean_learnability"]
    # scripted tasks are always valid, so every reward is a learnability in [0, 1]
    for key in ("fixed_mean_learnability", "adaptive_mean_learnability", "adaptive_per_mode_mean_learnability",
                "adaptive_pass_rate"):
        assert 0.0 <= figures[key] <= 1.0, key
    assert figures["fixed_pass_rate_by_difficulty"]["1"] > figures["fixed_pass_rate_by_difficulty"]["6"]
    assert figures["invalid_rate"] == 0.0 and figures["failed"] == 0 and figures["episodes"] == 8
    assert figures["window"] == 4 and 1 <= figures["adaptive_difficulty_mean"] <= 9
    assert figures["seconds"] > 0
    rows = [line.split()[0:2] for line in out]
    assert ["fixed", "d=1"] in rows and ["fixed", "d=6"] in rows and ["adaptive", "per"] in rows
    assert any("0/4" in line and "4/4" in line and "invalid" in line for line in out)
    assert (tmp_path / "learnability.png").stat().st_size > 0


def test_bad_settings_are_refused():
    module = learnability
    for argv in (["--episodes", "0"], ["--difficulties", "0,2"], ["--solvers", "proposer"]):
        with pytest.raises(SystemExit):
            module.main(argv)
