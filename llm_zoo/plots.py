"""Plots of a training run, drawn from its ``metrics.jsonl``."""

from __future__ import annotations

from pathlib import Path

from llm_zoo.trainers.logging import read_metrics


def plot_run(run_dir: str | Path, out: str | Path | None = None) -> Path:
    """Draw a run's curves (headline metric, rewards per role, invalid replies, entropy, loss) into a PNG."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    run_dir = Path(run_dir)
    rows = read_metrics(run_dir)
    if not rows:
        raise ValueError(f"{run_dir / 'metrics.jsonl'} has no rows to plot")
    x_key = "charts/episodes" if "charts/episodes" in rows[0] else "step"
    keys = sorted({k for r in rows for k in r})
    panels = [
        ("eval: headline", [k for k in keys if k.startswith("eval/") and k.split("/")[1] in
                            ("exploitability", "headline", "payoff_vs_nash", "other_mass_mean")]
         + [k for k in keys if k in ("eval/learner/exploitability", "eval/learner/headline")]),
        ("reward per role", [k for k in keys if k.startswith("charts/reward/")]),
        ("invalid replies", ["charts/invalid_reply_rate"]),
        ("entropy", [k for k in keys if k.startswith("losses/entropy/")]),
        ("loss", [k for k in keys if k.startswith("losses/loss/")]),
        ("grad norm", [k for k in keys if k.startswith("losses/grad_norm/")]),
    ]
    panels = [(title, ks) for title, ks in panels if ks]
    fig, axes = plt.subplots(len(panels), 1, figsize=(7, 2.4 * len(panels)), sharex=True, squeeze=False)
    for ax, (title, ks) in zip(axes[:, 0], panels):
        for key in ks:
            pts = [(r[x_key], r[key]) for r in rows if key in r]
            ax.plot([p[0] for p in pts], [p[1] for p in pts], marker="." if len(pts) < 50 else None,
                    label=key.split("/", 1)[1])
        if title == "eval: headline":
            ax.axhline(0.05, color="grey", lw=0.8, ls="--")
        ax.set_title(title, fontsize=9)
        ax.grid(alpha=0.3)
        ax.legend(fontsize=7, loc="best")
    axes[-1, 0].set_xlabel(x_key.replace("charts/", ""))
    fig.tight_layout()
    out = Path(out) if out else run_dir / "curves.png"
    fig.savefig(out, dpi=110)
    plt.close(fig)
    return out
