"""Leduc hold'em: the LLM trainer beside CFR+, MaskablePPO and NFSP, and how its cost grows from Kuhn poker.

Every system is scored by one exact exploitability (:func:`llm_zoo.envs.leduc_poker.theory.exploitability`,
checked against OpenSpiel's within 1e-9), on the same machine in one run:

* uniform random (the floor: 2.3736);
* CFR+ through OpenSpiel (:func:`llm_zoo.trainers.baselines.leduc.solve_cfr`), its average policy
  after each of a grid of iteration counts, with the wall-clock of the iterations;
* sb3-contrib MaskablePPO in self-play on the discrete view
  (:func:`llm_zoo.trainers.baselines.leduc.train_maskable_ppo`), given as many learner decisions as
  the LLM run plays episodes: the final network, and the reach-weighted average of its rounds;
* OpenSpiel's PyTorch NFSP, one agent per seat in self-play (:func:`llm_zoo.trainers.baselines.leduc.train_nfsp`,
  OpenSpiel's Leduc example settings), given as many hands as the LLM run plays episodes (or
  ``--nfsp-episodes``): its average policy (the supervised network, NFSP's reported strategy), scored
  at 20 evenly spaced hand counts;
* the LLM trainer, ``llm-zoo train leduc_poker_v0``'s own config (the LEDUC_POKER_V0 preset): the
  reported policy (the average of the weights, as the preset sets it) and the last iterate, both
  read exactly from the models' log-probs at all 288 info sets every ``eval_every`` steps.

The cost ratio to Kuhn poker: the episodes and training seconds the LLM trainer needs to reach a
fraction of uniform's exploitability (50% and 25%: 1.19 and 0.59 on Leduc, 0.229 and 0.115 on Kuhn),
on Leduc against a Kuhn run measured in the same invocation with the same trainer config (the
LEDUC_POKER_V0 preset's values on ``kuhn_poker_v0``: steps, lr and EMA time constants as on Leduc,
so only the game differs; evaluated every 5 steps, Leduc every 20), for the reported policy and for
the last iterate; and the same for CFR+ in iterations. When Leduc's run does not reach a fraction
that Kuhn's does, the ratio is a lower bound (Leduc's whole budget over Kuhn's cost).

Columns: final exploitability, episodes (CFR: iterations, ``it``), training seconds (the trainer's
``perf/step_s``, PPO's ``learn`` calls, NFSP's hands, CFR's iterations; evaluation excluded), and the episodes and
seconds to the first evaluation at or below each fraction. It prints the table, writes it to
``OUT/leduc.md``, plots exploitability against episodes (and CFR+ against iterations) into
``OUT/leduc.png``, and ends with a JSON line: ``rows`` (per system: ``exploitability``, ``work``,
``unit``, ``seconds``, ``to_50%``/``to_25%`` as ``{"work", "seconds"}`` or null), ``kuhn`` (the same
for Kuhn's ``llm``, ``llm_last`` and ``cfr+``), ``ratio`` (per system, ``llm``, ``llm_last`` and
``cfr+``, per fraction: Leduc's ``work`` and ``seconds`` over Kuhn's, and ``lower_bound``),
``load_average`` and ``seconds``.

    python -m benchmarks.leduc                          # the preset's budget: about 40 min on 2 cores (the
                                                        # trainer about 10, MaskablePPO 4, NFSP 12-13 on the
                                                        # preset's 450,560 hands, CFR+ and Kuhn's side 2)
    python -m benchmarks.leduc --nfsp-episodes 100000   # NFSP on fewer hands than the LLM run played
    python -m benchmarks.leduc --trainer-run RUN_DIR    # reuse a finished `llm-zoo train leduc_poker_v0` run
    python -m benchmarks.leduc --steps 300              # a longer LLM run than the preset's (and PPO to match)
    python -m benchmarks.leduc --quick                  # tiny budgets: under a minute
"""

from __future__ import annotations

import json
import os
import sys
import tempfile
import time
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

from benchmarks import _harness as harness

FRACTIONS = (0.5, 0.25)
"""Fractions of uniform's exploitability whose cost (episodes and seconds to reach) the table reports."""
CFR_GRID = (1, 2, 3, 5, 7, 10, 15, 20, 30, 50, 75, 100, 150, 200)
"""Iteration counts at which CFR+'s average policy is scored (Leduc and Kuhn)."""
QUICK_TRAINER: dict[str, Any] = {"steps": 2, "episodes_per_step": 8, "rollout_batch_size": 8, "eval_every": 1,
                                 "model_hidden_size": 32}
"""Trainer overrides of ``--quick`` (a smoke run, not a result)."""
KUHN_EVAL_EVERY = 5
"""Kuhn's run is evaluated this often (an evaluation of Kuhn's 12 info sets costs little)."""


@dataclass
class Curve:
    """One system's run: (work, training seconds, exploitability) at each evaluation, and its labels."""

    key: str
    label: str
    unit: str  # "episodes" or "iterations"
    points: list[tuple[float, float, float]]

    @property
    def final(self) -> tuple[float, float, float]:
        return self.points[-1]


def first_reach(points: list[tuple[float, float, float]], threshold: float) -> dict[str, float] | None:
    """Return the work and seconds at the first point at or below ``threshold``, or None."""
    for work, seconds, value in points:
        if value <= threshold:
            return {"work": work, "seconds": seconds}
    return None


# ---------------------------------------------------------------------------------------------------
# The systems
# ---------------------------------------------------------------------------------------------------


def cfr_curve(game: str, grid: tuple[int, ...]) -> Curve:
    """CFR+ on ``game`` ("leduc" or "kuhn"), its average policy scored at each count of ``grid``."""
    if game == "leduc":
        from llm_zoo.trainers.baselines import leduc

        result = leduc.solve_cfr("cfr+", grid)
        points = [(p.work, p.seconds, p.exploitability) for p in result.curve]
    else:
        from llm_zoo.trainers.baselines import cfr

        points = [(r.iterations, r.seconds, r.exploitability) for r in cfr.solve("cfr+", list(grid))]
    return Curve(f"cfr+_{game}", f"CFR+ (OpenSpiel), {grid[-1]} iterations", "iterations", points)


def ppo_curves(timesteps: int, seed: int) -> list[Curve]:
    """MaskablePPO self-play on Leduc's discrete view: the final network's curve and the average's."""
    from llm_zoo.trainers.baselines import leduc

    result = leduc.train_maskable_ppo(timesteps, seed=seed)
    return [Curve("maskable_ppo", "MaskablePPO self-play, final network", "episodes",
                  [(p.work, p.seconds, p.exploitability) for p in result.curve]),
            Curve("maskable_ppo_average", "MaskablePPO self-play, average of rounds", "episodes",
                  [(p.work, p.seconds, p.exploitability) for p in result.average_curve])]


def nfsp_curve(episodes: int, seed: int, evaluations: int = 20) -> Curve:
    """OpenSpiel's NFSP in self-play on Leduc: its average policy's curve."""
    from llm_zoo.trainers.baselines import leduc

    result = leduc.train_nfsp(episodes, seed=seed, evaluations=evaluations)
    return Curve("nfsp", "NFSP self-play (OpenSpiel), average policy", "episodes",
                 [(p.work, p.seconds, p.exploitability) for p in result.curve])


def trainer_curves(run_dir: Path, label: str) -> list[Curve]:
    """Read a finished trainer run: the reported policy's and the last iterate's curves (training seconds only)."""
    from llm_zoo.trainers.logging import read_metrics

    reported, last, elapsed = [], [], 0.0
    for m in read_metrics(run_dir):
        elapsed += m.get("perf/step_s", 0.0)
        if "eval/exploitability" in m:
            reported.append((m["charts/episodes"], elapsed, m["eval/exploitability"]))
        if "eval/learner/exploitability" in m:
            last.append((m["charts/episodes"], elapsed, m["eval/learner/exploitability"]))
    if not reported:
        raise ValueError(f"the run in {str(run_dir)!r} logged no eval/exploitability; expected a finished "
                         "`llm-zoo train` run of a poker env with eval_every set")
    curves = [Curve("llm", f"{label}, reported (average of the weights)", "episodes", reported)]
    if last:
        curves.append(Curve("llm_last", f"{label}, last iterate", "episodes", last))
    return curves


def train(env: str, overrides: dict[str, Any], run_dir: Path) -> Path:
    """Train ``env`` with its preset and ``overrides`` in this process; return the run folder."""
    from llm_zoo.trainers.grpo import make_config
    from llm_zoo.trainers.grpo import train as run

    run(make_config(env, {**overrides, "run_dir": str(run_dir), "progress": False, "tensorboard": False,
                          "checkpoint_every": 0}), overwrite=True)  # the benchmark owns its --out
    return run_dir


def check_reused(run_dir: Path, overrides: dict[str, Any]) -> None:
    """Refuse a reused run whose config is not ``llm-zoo train leduc_poker_v0``'s (with ``overrides``)."""
    from llm_zoo.trainers.grpo import make_config

    expected = json.loads(json.dumps(asdict(make_config("leduc_poker_v0", overrides)), default=str))
    saved = json.loads((run_dir / "config.json").read_text())
    ignored = {"run_dir", "progress", "tensorboard", "checkpoint_every", "sample_every"}
    differ = sorted(k for k in expected if k not in ignored and saved.get(k) != expected[k])
    if differ:
        raise ValueError(f"--trainer-run {str(run_dir)!r} was trained with another config: {differ} differ from "
                         f"leduc_poker_v0's preset (e.g. {differ[0]}={saved.get(differ[0])!r:.80}, expected "
                         f"{expected[differ[0]]!r:.80}); run it again or drop --trainer-run")


# ---------------------------------------------------------------------------------------------------
# The table, the ratio, the plot
# ---------------------------------------------------------------------------------------------------


def _seconds(x: float) -> str:
    return f"{x:.2g} s" if x < 1 else f"{x:.3g} s" if x < 100 else f"{x:,.0f} s"


def _work(x: float, unit: str) -> str:
    return f"{x:,.0f} it" if unit == "iterations" else f"{x:,.0f}"


def figures(curve: Curve, uniform: float) -> dict[str, Any]:
    """A curve's numbers, as the JSON line holds them."""
    work, seconds, value = curve.final
    out: dict[str, Any] = {"label": curve.label, "unit": curve.unit, "exploitability": value, "work": work,
                           "seconds": seconds}
    for f in FRACTIONS:
        out[f"to_{f:.0%}"] = first_reach(curve.points, f * uniform)
    return out


def ratios(leduc: dict[str, Any], kuhn: dict[str, Any]) -> dict[str, Any]:
    """Leduc's cost over Kuhn's at each fraction (``work`` and ``seconds``), for one kind of curve.

    None where Kuhn's run did not reach the fraction; a lower bound (Leduc's whole budget) where only
    Kuhn's did; None where neither did.
    """
    out = {}
    for f in FRACTIONS:
        key = f"to_{f:.0%}"
        a, b = leduc[key], kuhn[key]
        entry: dict[str, Any] = {"work": None, "seconds": None, "lower_bound": False}
        if b is not None:
            reached = a if a is not None else {"work": leduc["work"], "seconds": leduc["seconds"]}
            entry.update(work=reached["work"] / b["work"], seconds=reached["seconds"] / max(b["seconds"], 1e-9),
                         lower_bound=a is None)
        out[key] = entry
    return out


def ratio_text(ratio: dict[str, dict[str, Any]], leduc_uniform: float, kuhn_uniform: float) -> str:
    """The cost-ratio lines under the table."""
    names = {"llm": "the LLM trainer's reported policy", "llm_last": "its last iterate", "cfr+": "CFR+"}
    lines = []
    for f in FRACTIONS:
        key, parts = f"to_{f:.0%}", []
        for system, name in names.items():
            if system not in ratio:
                continue
            r = ratio[system][key]
            unit = "iterations" if system == "cfr+" else "episodes"
            if r["work"] is None:
                parts.append(f"{name}: Kuhn's run did not reach it, no ratio")
            else:
                bound = "at least " if r["lower_bound"] else ""
                parts.append(f"{name} {bound}{r['work']:.1f}x Kuhn's {unit} and {bound}{r['seconds']:.1f}x its seconds"
                             + (" (not reached on Leduc: its whole budget)" if r["lower_bound"] else ""))
        lines.append(f"- Cost to {f:.0%} of uniform (Leduc {f * leduc_uniform:.3f}, Kuhn {f * kuhn_uniform:.3f}), "
                     f"Leduc over Kuhn: " + "; ".join(parts) + ".")
    return "\n".join(lines)


def _reach_cell(f: dict[str, Any], key: str) -> str:
    hit = f[key]
    return "not reached" if hit is None else f"{_work(hit['work'], f['unit'])}, {_seconds(hit['seconds'])}"


def markdown(rows: list[dict[str, Any]]) -> str:
    """Return the rows as an aligned Markdown table."""
    header = ["system", "exploitability (final)", "episodes", "training seconds",
              *(f"to {f:.0%} of uniform: episodes, seconds" for f in FRACTIONS)]
    lines = [[r["label"], f"{r['exploitability']:.4f}", _work(r["work"], r["unit"]), _seconds(r["seconds"]),
              *(_reach_cell(r, f"to_{f:.0%}") for f in FRACTIONS)] for r in rows]
    return harness.table(header, lines)


def plot(curves: list[Curve], uniform: float, path: Path) -> None:
    """Exploitability against episodes (LLM trainer, PPO) and against iterations (CFR+), log-log."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, (left, right) = plt.subplots(1, 2, figsize=(11, 4.5))
    for i, curve in enumerate(c for c in curves if c.unit == "episodes"):
        xs = [max(w, 1.0) for w, _, _ in curve.points]
        left.plot(xs, [v for *_, v in curve.points], color=f"C{i}", marker="." if len(xs) < 30 else None,
                  label=curve.label)
    for curve in (c for c in curves if c.unit == "iterations"):
        right.plot([w for w, _, _ in curve.points], [v for *_, v in curve.points], marker=".", label=curve.label)
    for ax, xlabel in ((left, "episodes (hands played)"), (right, "CFR+ iterations (full tree walks)")):
        ax.axhline(uniform, color="black", lw=0.8, label="uniform random")
        for f in FRACTIONS:
            ax.axhline(f * uniform, color="grey", ls="--", lw=0.8)
        ax.set_xscale("log")
        ax.set_yscale("log")
        ax.set_xlabel(xlabel)
        ax.set_ylabel("exploitability (exact)")
        ax.legend(fontsize=7, loc="lower left")
    fig.suptitle("Leduc hold'em: exploitability against work, same machine, same run")
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)


def main(argv: list[str] | None = None) -> dict[str, Any]:
    """Run every system, print the table, the ratio and the JSON line; write the Markdown and the plot."""
    started = time.perf_counter()
    load = os.getloadavg()
    parser = harness.parser(__doc__, quick="tiny budgets (a smoke run, not a result)")
    harness.add_out(parser, "folder for the runs, leduc.md and leduc.png (default: a temporary one)")
    parser.add_argument("--trainer-run", default=None, help="reuse this finished `llm-zoo train leduc_poker_v0` run "
                        "(its config must be the preset's) instead of training again")
    parser.add_argument("--kuhn-steps", type=harness.count, default=None, help="steps of the Kuhn run (default: Leduc's)")
    parser.add_argument("--seed", type=int, default=0, help="seed of the trained systems (default 0)")
    parser.add_argument("--steps", type=harness.count, default=None,
                        help="LLM training steps on Leduc (default: the preset's)")
    parser.add_argument("--nfsp-episodes", type=harness.count, default=None,
                        help="hands of NFSP self-play (default: as many as the LLM trainer's run played)")
    args = parser.parse_args(argv)
    from llm_zoo.envs.kuhn_poker import theory as kuhn_theory
    from llm_zoo.envs.leduc_poker import theory
    from llm_zoo.trainers.grpo import make_config

    out = Path(args.out) if args.out else Path(tempfile.mkdtemp(prefix="leduc_"))
    out.mkdir(parents=True, exist_ok=True)
    overrides = {**(QUICK_TRAINER if args.quick else {}), "seed": args.seed}
    if args.steps:
        overrides["steps"] = args.steps
    config = make_config("leduc_poker_v0", overrides)
    uniform, kuhn_uniform = theory.UNIFORM_EXPLOITABILITY, kuhn_theory.UNIFORM_EXPLOITABILITY
    grid = CFR_GRID[:2] if args.quick else CFR_GRID

    def say(text: str) -> None:
        print(f"  [{time.perf_counter() - started:5.0f} s] {text}", file=sys.stderr, flush=True)

    if args.trainer_run:
        run_dir = Path(args.trainer_run)
        check_reused(run_dir, overrides)
        say(f"LLM trainer: reusing {run_dir}")
    else:
        say(f"LLM trainer: {config.steps} steps x {config.episodes_per_step} episodes")
        run_dir = train("leduc_poker_v0", overrides, out / "leduc_trainer")
    curves = trainer_curves(run_dir, f"LLM trainer (leduc_poker_v0 preset{f', {args.steps} steps' if args.steps else ''})")
    episodes = int(curves[0].final[0])
    say("CFR+")
    curves.append(cfr_curve("leduc", grid))
    say(f"MaskablePPO: {episodes} learner decisions")
    curves += ppo_curves(episodes, args.seed)
    nfsp_episodes, nfsp_points = args.nfsp_episodes or episodes, 2 if args.quick else 20
    say(f"NFSP: {nfsp_episodes} hands")
    curves.append(nfsp_curve(nfsp_episodes, args.seed, nfsp_points))
    kuhn_steps = args.kuhn_steps or config.steps
    from llm_zoo.trainers.presets import preset

    same = {k: v for k, v in preset("leduc_poker_v0").items()
            if preset("kuhn_poker_v0").get(k) != v and k not in ("steps", "eval_every", "checkpoint_every")}
    kuhn_overrides = {**same, **overrides, "steps": kuhn_steps, "eval_every": 1 if args.quick else KUHN_EVAL_EVERY}
    say(f"Kuhn's trainer, Leduc's config: {kuhn_steps} steps")
    kuhn_llm = trainer_curves(train("kuhn_poker_v0", kuhn_overrides, out / "kuhn_trainer"), "LLM trainer (Kuhn)")
    kuhn_cfr = cfr_curve("kuhn", grid)

    rows = [{"label": "uniform random", "unit": "episodes", "exploitability": uniform, "work": 0, "seconds": 0.0,
             **{f"to_{f:.0%}": None for f in FRACTIONS}}] + [figures(c, uniform) for c in curves]
    table = markdown(rows)
    kuhn = {c.key: figures(c, kuhn_uniform) for c in kuhn_llm}
    kuhn["cfr+"] = figures(kuhn_cfr, kuhn_uniform)
    leduc = {c.key: r for c, r in zip(curves, rows[1:])}
    leduc["cfr+"] = leduc["cfr+_leduc"]
    ratio = {system: ratios(leduc[system], kuhn[system]) for system in ("llm", "llm_last", "cfr+") if system in kuhn}
    caption = f"Leduc hold'em, every system on the same machine in one run ({'--quick' if args.quick else 'full'} setting)"
    notes = "\n".join([
        f"- Budget{' (--quick: a smoke run, not a result)' if args.quick else ''}: the LLM trainer runs "
        f"{config.steps} steps x {config.episodes_per_step} episodes, evaluated every {config.eval_every} steps "
        f"({'reused run ' + str(run_dir) if args.trainer_run else 'trained here'}); MaskablePPO gets as many learner "
        f"decisions ({episodes:,}: its unit is one decision, not one hand); NFSP gets {nfsp_episodes:,} hands "
        f"({'set by --nfsp-episodes' if args.nfsp_episodes else 'as many as the LLM run played'}), its average "
        f"policy scored at {nfsp_points} hand counts; CFR+ is deterministic; seed {args.seed}; load average at start "
        f"{load[0]:.1f} {load[1]:.1f} {load[2]:.1f} (1, 5, 15 min).",
        f"- Exploitability is exact (uniform random: {uniform:.4f}). Training seconds exclude evaluation.",
        f"- Kuhn's side, measured in this run: the trainer on kuhn_poker_v0 with Leduc's config ({kuhn_steps} steps; "
        f"{', '.join(f'{k}={v!r}' for k, v in same.items())} over KUHN_POKER_V0), evaluated every "
        f"{kuhn_overrides['eval_every']} steps: reported policy {kuhn['llm']['exploitability']:.4f} and last iterate "
        f"{kuhn.get('llm_last', kuhn['llm'])['exploitability']:.4f} after {kuhn['llm']['work']:,.0f} episodes "
        f"({kuhn['llm']['seconds']:.0f} s); CFR+ on the same grid ({kuhn['cfr+']['exploitability']:.4f} after "
        f"{grid[-1]} iterations).",
        ratio_text(ratio, uniform, kuhn_uniform),
    ])
    print(f"\n{caption}\n\n{table}\n\n{notes}\n")
    (out / "leduc.md").write_text(f"{caption}.\n\n{table}\n\n{notes}\n")
    plot(curves, uniform, out / "leduc.png")
    print(f"table: {out / 'leduc.md'}\nplot: {out / 'leduc.png'}")
    line = {"rows": {c.key: r for c, r in zip(curves, rows[1:])}, "uniform": uniform, "kuhn": kuhn, "ratio": ratio,
            "budget": {"steps": config.steps, "episodes_per_step": config.episodes_per_step, "kuhn_steps": kuhn_steps,
                       "ppo_timesteps": episodes, "nfsp_episodes": nfsp_episodes,
                       "cfr_iterations": grid[-1]},
            "quick": args.quick, "load_average": [round(x, 2) for x in load],
            "seconds": round(time.perf_counter() - started, 2)}
    return harness.emit(line)


if __name__ == "__main__":
    main()
