"""Plots of a training run, drawn from its ``metrics.jsonl``."""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

from llm_zoo.trainers.logging import read_metrics

# (title, y-axis label, which metrics): each panel holds figures of one scale, so that none squeezes another
_PANELS: list[tuple[str, str, Callable[[str], bool]]] = [
    ("headline evaluation (exact)", "exploitability / headline",
     lambda k: k in ("eval/exploitability", "eval/headline", "eval/learner/exploitability", "eval/learner/headline")),
    ("payoff against Nash (exact)", "payoff per hand", lambda k: k in ("eval/payoff_vs_nash", "eval/learner/payoff_vs_nash")),
    ("mass on replies outside the menu", "probability", lambda k: k in ("eval/other_mass_mean",
                                                                         "eval/learner/other_mass_mean")),
    ("reward per role (training episodes)", "mean return", lambda k: k.startswith("charts/reward/")),
    ("invalid replies", "share of replies", lambda k: k == "charts/invalid_reply_rate"),
    ("entropy", "nats per token", lambda k: k.startswith("losses/entropy/")),
    ("loss", "loss", lambda k: k.startswith("losses/loss/")),
    ("grad norm", "global norm", lambda k: k.startswith("losses/grad_norm/")),
]


def plot_run(run_dir: str | Path, out: str | Path | None = None) -> Path:
    """Draw a run's curves (headline metric, rewards per role, invalid replies, entropy, loss) into a PNG; return its path."""
    import matplotlib.pyplot as plt

    run_dir = Path(run_dir)
    fig = run_figure(run_dir)
    out = Path(out) if out else run_dir / "curves.png"
    fig.savefig(out, dpi=110)
    plt.close(fig)
    return out


def run_figure(run_dir: str | Path) -> Any:
    """Return the matplotlib figure of a run's curves: one panel per scale, y axes labelled, titled with the run."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    run_dir = Path(run_dir)
    rows = read_metrics(run_dir)
    if not rows:
        raise ValueError(f"{run_dir / 'metrics.jsonl'} has no rows to plot")
    x_key = "charts/episodes" if "charts/episodes" in rows[0] else "step"
    keys = sorted({k for r in rows for k in r})
    panels = [(title, label, [k for k in keys if wanted(k)]) for title, label, wanted in _PANELS]
    panels = [p for p in panels if p[2]]
    height = 2.4 * len(panels) + 0.5
    fig, axes = plt.subplots(len(panels), 1, figsize=(7, height), sharex=True, squeeze=False)
    for ax, (title, label, ks) in zip(axes[:, 0], panels):
        for key in ks:
            pts = [(r[x_key], r[key]) for r in rows if key in r]
            name = key.split("/", 1)[1]
            if name.startswith("learner/"):
                name = name.replace("learner/", "") + " (last iterate)"
            ax.plot([p[0] for p in pts], [p[1] for p in pts], marker="." if len(pts) < 50 else None, label=name)
        if title.startswith("headline"):
            ax.axhline(0.05, color="grey", lw=0.8, ls="--")
        ax.set_title(title, fontsize=9)
        ax.set_ylabel(label, fontsize=8)
        ax.ticklabel_format(axis="y", useOffset=False)
        ax.grid(alpha=0.3)
        ax.legend(fontsize=7, loc="best")
    axes[-1, 0].set_xlabel(x_key.replace("charts/", ""))
    fig.suptitle(_run_name(run_dir, rows), fontsize=10)
    fig.tight_layout(rect=(0, 0, 1, 1 - 0.45 / height))  # the top strip holds the run's name
    return fig


def _run_name(run_dir: Path, rows: list[dict[str, float]]) -> str:
    """Name the run: its directory, env and the weights its evaluations score."""
    try:
        config = json.loads((run_dir / "config.json").read_text())
    except (OSError, ValueError):
        config = {}
    parts = [run_dir.resolve().name]
    if config.get("env"):
        parts.append(str(config["env"]))
    parts.append(f"{int(rows[-1].get('step', len(rows)))} steps")
    average = config.get("average")  # a plug-in section; a run written before them has the flat average_ema
    ema = average.get("ema") if isinstance(average, dict) else config.get("average_ema")
    if ema:
        parts.append(f"evaluations score the weights' average (average.ema={ema})")
    return " · ".join(parts)
