"""Smoke test of benchmarks/selfplay_speed.py: it races the package against its baseline commit and reports both."""

from __future__ import annotations

import json

import pytest

pytest.importorskip("torch")
pytest.importorskip("transformers")
from benchmarks import selfplay_speed  # noqa: E402


def test_quick_run_races_both_sides_and_ends_with_the_json_line(capsys, tmp_path):
    figures = selfplay_speed.main(["--quick", "--games", "kuhn_poker_v0", "--out", str(tmp_path)])
    out = capsys.readouterr().out.strip().splitlines()
    assert json.loads(out[-1]) == figures
    kuhn = figures["kuhn_poker_v0"]
    before, after = kuhn["episodes_per_s"]
    assert before > 0 and after > 0
    assert kuhn["ratio"] == pytest.approx(after / before, rel=2e-2)
    for key in ("step_s", "rollout_s", "update_s"):
        assert len(kuhn[key]) == 2 and all(v > 0 for v in kuhn[key])
    # both sides train the preset's 1024 hands a step: episodes/s is that over the median step
    assert before == pytest.approx(1024 / kuhn["step_s"][0], rel=2e-2)
    assert kuhn["episodes_per_step"] == [1024, 1024]
    assert figures["baseline"] == selfplay_speed.BASELINE
    assert "kuhn_poker_v0" in (tmp_path / "selfplay_speed.md").read_text()


def test_a_commit_git_cannot_read_is_refused_naming_the_flag(tmp_path):
    with pytest.raises(SystemExit, match="--baseline"):
        selfplay_speed.baseline_tree("0" * 40, tmp_path)


def test_steps_must_outnumber_the_warmup():
    with pytest.raises(SystemExit):
        selfplay_speed.main(["--steps", "2", "--warmup", "2"])
