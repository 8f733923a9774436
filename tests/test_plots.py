"""curves.png: one panel per scale, every y axis labelled, the run named in the title."""

from __future__ import annotations

import json

from llm_zoo.plots import plot_run, run_figure


def _write_run(run_dir, rows, config):
    run_dir.mkdir()
    (run_dir / "metrics.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    (run_dir / "config.json").write_text(json.dumps(config))


def test_axes_are_labelled_and_the_run_is_named(tmp_path):
    run = tmp_path / "kuhn-run"
    rows = [{"step": s, "charts/episodes": 64 * s, "eval/exploitability": 0.3 / s, "eval/learner/exploitability": 0.4 / s,
             "eval/payoff_vs_nash": -0.1 / s, "eval/other_mass_mean": 0.95, "charts/reward/player": 0.0,
             "charts/invalid_reply_rate": 0.01, "losses/entropy/main": 0.6, "losses/loss/main": 0.1,
             "losses/grad_norm/main": 1.0} for s in range(1, 6)]
    _write_run(run, rows, {"env": "kuhn_poker_v0", "average": {"ema": 0.99}})
    fig = run_figure(run)
    axes = fig.axes
    assert all(ax.get_ylabel() for ax in axes), [ax.get_title() for ax in axes if not ax.get_ylabel()]
    title = fig._suptitle.get_text()
    assert "kuhn-run" in title and "kuhn_poker_v0" in title and "5 steps" in title and "average.ema=0.99" in title
    by_title = {ax.get_title(): ax for ax in axes}
    headline = next(ax for t, ax in by_title.items() if t.startswith("headline"))
    labels = [line.get_label() for line in headline.get_lines() if not line.get_label().startswith("_")]
    assert labels == ["exploitability", "exploitability (last iterate)"]
    # other_mass_mean (near 0.95) has a panel of its own: the headline's y range stays that of exploitability
    assert headline.get_ylim()[1] < 0.5
    assert any("other_mass_mean" in line.get_label() for ax in axes for line in ax.get_lines())
    assert axes[-1].get_xlabel() == "episodes"
    out = plot_run(run)
    assert out == run / "curves.png" and out.read_bytes()[:4] == b"\x89PNG"


def test_panels_without_metrics_are_left_out(tmp_path):
    run = tmp_path / "bare"
    _write_run(run, [{"step": 1, "charts/invalid_reply_rate": 0.5}, {"step": 2, "charts/invalid_reply_rate": 0.2}], {})
    fig = run_figure(run)
    assert [ax.get_title() for ax in fig.axes] == ["invalid replies"]
    assert fig._suptitle.get_text() == "bare · 2 steps" and fig.axes[0].get_xlabel() == "step"
