"""Cross-play: every player against every other on one env, both seats, with confidence intervals.

::

    llm-zoo crossplay kuhn_poker_v0 --players nash random card cfr:100 cfr+:1000 ppo:20000 \\
        runs/x/checkpoints/step_000200 --episodes 2000 --seed 0 --out crossplay/

Self-play numbers say how a learner does against itself; cross-play says whether that survives
against opponents it never trained with: other checkpoints (steps, seeds), the classic baselines,
the equilibrium, random play.

## Players
A player is named by a spec, optionally prefixed with a display name (`late=runs/a/checkpoints/step_000200`):

| Spec                  | Player                                                                         |
|-----------------------|--------------------------------------------------------------------------------|
| a scripted name       | the env's scripted player (its spec's `scripted`; Kuhn: `nash`, `random`, `card`), bare or as `scripted:NAME` |
| `random`              | the env's scripted `random` if it has one, else uniform over `legal_actions`   |
| `cfr:N`, `cfr+:N`     | OpenSpiel CFR / CFR+ average strategy after N iterations (Kuhn poker)           |
| `ppo:STEPS`           | MaskablePPO trained in self-play for STEPS decisions, seeded; its final network (Kuhn poker) |
| `ppo:PATH`            | a saved MaskablePPO or PPO model (`model.save(PATH)`) (Kuhn poker)               |
| a checkpoint directory| `runs/<run>/checkpoints/step_N`: the run's policies, each in the seat its config gives it |
| a model directory, a catalogue name (`smollm2-135m`), an `http(s)://` URL | as `llm-zoo play` loads them |

## The matrix
The env must have two seats of one role (Kuhn poker's `player_0`, `player_1`), since every player
takes both. Each unordered pair (i, j), i against itself included, plays `episodes // 2` deals, each deal
twice with the seats swapped (env seeds `seed, seed + 1, ...`, the same deals for every pair), so
the luck of the cards largely cancels. Entry (i, j) is i's mean payoff per episode against j over
both seats, and entry (j, i) is its negative. The 95% interval is
`1.96 * sd(u) / sqrt(n)` over the n deal units `u = (i's payoff as player_0 + i's payoff as player_1) / 2`.
A player against itself (one object in both seats, its own random draws) scores 0 in
expectation, so its diagonal entry checks the harness: it should hold 0 within its interval.
(Measured over 40 seeds at 1000 episodes: nash's diagonal held 0 in 39, and nash against random
held its exact value 5/36 in 37, as 95% intervals should.)
An episode that fails (a policy or the env raised) drops its deal from both orientations; the
counts are in the JSON.

Where the env has an exact theory (Kuhn poker) and both players are tables (scripted, CFR,
PPO), the exact expected payoff is given beside the estimate, and each tabular player's
exploitability. `run` returns figures and wall-clock; `write` writes `crossplay.md`,
`crossplay.json` and the heat map `crossplay.png`. Library functions print nothing.
"""

from __future__ import annotations

import argparse
import json
import math
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

import llm_zoo
from llm_zoo.catalogue import CATALOGUE
from llm_zoo.policy import Policy, RandomPolicy
from llm_zoo.seating import scripted_name
from llm_zoo.spec import ENV_ARGUMENT_HELP, env_argument
from llm_zoo.trainers.baselines import scripted

__all__ = ["CrossplayResult", "Player", "add_parser", "resolve", "run", "write"]

Z_95 = 1.959963984540054
"""Two-sided 95% quantile of the standard normal: the intervals are normal approximations over deals."""

KUHN = "kuhn_poker_v0"
_PAIR_SEED_STRIDE = 1_000_003  # policy seeds of pair k derive from seed + k * stride: pairs do not share draws


@dataclass
class Player:
    """One entrant: who plays each seat, and its strategy table where the env has an exact theory.

    Attributes:
        name: Shown in the tables.
        spec: What it was built from.
        seats: Agent -> the policy that plays that seat.
        table: Its Kuhn strategy when it is tabular, else None.
        build_seconds: Wall-clock to build it (CFR iterations, PPO training, model loading).
        env_kwargs: The env kwargs its run was trained with (checkpoints only), else None.
    """

    name: str
    spec: str
    seats: dict[str, Policy]
    table: dict[str, dict[str, float]] | None = None
    build_seconds: float = 0.0
    env_kwargs: dict[str, Any] | None = None


@dataclass
class CrossplayResult:
    """The payoff matrix and what stands behind it; `mean[i][j]` is player i's payoff per episode against j."""

    env: str
    env_kwargs: dict[str, Any]
    players: list[str]
    specs: list[str]
    episodes: int
    """Episodes per pair: deals x 2 seat orders."""
    seed: int
    mean: list[list[float]]
    half_width: list[list[float]]
    """Half-width of the 95% interval of `mean`."""
    exact: list[list[float | None]]
    """Exact expected payoff where both players are tabular and the env has a theory, else None."""
    deals: list[list[int]]
    """Deals counted (both orientations finished) per pair."""
    failed: list[list[int]]
    """Failed episodes per pair."""
    exploitability: list[float | None]
    invalid_reply_rate: list[float]
    build_seconds: list[float]
    play_seconds: list[list[float]]
    seconds: float
    """Wall-clock of the whole run: building the players and playing every pair."""

    def mean_vs_others(self, i: int) -> float:
        """Player i's mean payoff over its opponents (its own diagonal left out)."""
        others = [self.mean[i][j] for j in range(len(self.players)) if j != i]
        return sum(others) / len(others) if others else float("nan")

    def to_json(self) -> dict[str, Any]:
        """Return the result as JSON-ready data (NaN written as null)."""
        data = asdict(self)
        data["mean_vs_others"] = [self.mean_vs_others(i) for i in range(len(self.players))]
        return _json_ready(data)

    def to_markdown(self) -> str:
        """Return the matrix, the exact values (where any) and the per-player summary as Markdown tables."""
        n, names = len(self.players), self.players
        lines = [
            f"### Cross-play on `{self.env}`",
            "",
            f"Row player's mean payoff per episode against the column player, both seats, "
            f"{self.episodes} episodes per pair ({self.episodes // 2} deals x 2 seat orders), seed {self.seed}; "
            "± is the half-width of the 95% interval.",
            "",
            "| row \\ column | " + " | ".join(names) + " |",
            "|---|" + "---:|" * n,
        ]
        for i in range(n):
            cells = [f"{_signed(self.mean[i][j])} ± {self.half_width[i][j]:.3f}" for j in range(n)]
            lines.append(f"| **{names[i]}** | " + " | ".join(cells) + " |")
        tabular = [i for i in range(n) if any(v is not None for v in self.exact[i])]
        if tabular:
            lines += ["", "Exact expected payoffs (both players tabular):", "",
                      "| row \\ column | " + " | ".join(names[j] for j in tabular) + " |",
                      "|---|" + "---:|" * len(tabular)]
            for i in tabular:
                cells = [_signed(self.exact[i][j]) if self.exact[i][j] is not None else "—" for j in tabular]
                lines.append(f"| **{names[i]}** | " + " | ".join(cells) + " |")
        lines += ["", "| player | spec | mean vs others | exploitability | invalid replies | build s |",
                  "|---|---|---:|---:|---:|---:|"]
        for i in range(n):
            expl = "—" if self.exploitability[i] is None else f"{self.exploitability[i]:.4f}"
            lines.append(f"| {names[i]} | `{self.specs[i]}` | {_signed(self.mean_vs_others(i))} | {expl} | "
                         f"{self.invalid_reply_rate[i]:.3f} | {self.build_seconds[i]:.1f} |")
        lines += ["", f"Wall-clock {self.seconds:.1f} s."]
        return "\n".join(lines) + "\n"


# ---------------------------------------------------------------------------------------------------
# Players
# ---------------------------------------------------------------------------------------------------


def resolve(spec: str, env: str, *, seed: int = 0) -> Player:
    """Build the player a spec names (see the module docstring's table).

    Raises:
        ValueError: An unknown spec, a malformed count, or a Kuhn-only baseline on another env.
        FileNotFoundError: A path that does not exist.
    """
    env = llm_zoo.env_spec(env).name  # an unknown env fails here, listing the registered ones
    name, sep, body = spec.partition("=")
    if not sep or not name or "/" in name or ":" in name:  # a path or URL may hold "="; a name holds neither
        name, body = "", spec
    start = time.perf_counter()
    player = _build(body, env, seed)
    player.build_seconds = time.perf_counter() - start
    player.name = name or player.name
    player.spec = spec
    return player


def _build(spec: str, env: str, seed: int) -> Player:
    kind, sep, arg = spec.partition(":")
    if sep and kind in _PREFIXED:
        if env != KUHN:
            raise ValueError(f"{spec!r}: {kind} baselines exist for {KUHN} only, not {env!r}")
        return _PREFIXED[kind](arg, seed)
    players = scripted.players(env)
    agents = _agents(env)
    if (scripted_name(spec) or spec) in players:  # a seating's scripted:NAME, or the bare name
        policy = players[scripted_name(spec) or spec](seed=seed)
        return Player(spec, spec, dict.fromkeys(agents, policy), scripted.table_of(policy))
    if spec == "random":
        return Player(spec, spec, dict.fromkeys(agents, RandomPolicy(seed=seed)))
    path = Path(spec)
    if (path / "policies").is_dir():
        return _checkpoint_player(path, env, seed)
    if spec.startswith(("http://", "https://")) or path.is_dir() or spec in CATALOGUE:
        from llm_zoo.policies.registry import load_policy

        return Player(path.name or spec, spec, dict.fromkeys(agents, load_policy(spec, env, seed=seed)))
    if "/" in spec and not path.exists():
        raise FileNotFoundError(f"player {spec!r}: no such directory; expected a checkpoint directory "
                                "(runs/<run>/checkpoints/step_N) or a model directory")
    raise ValueError(
        f"unknown player {spec!r} for {env}; expected one of {sorted(players) or ['random']} (or scripted:NAME), "
        f"'cfr:N', 'cfr+:N' or 'ppo:STEPS_OR_PATH' ({KUHN}), a checkpoint directory "
        f"(runs/<run>/checkpoints/step_N), a model directory, a catalogue model ({', '.join(sorted(CATALOGUE))}), "
        "or an http(s):// URL"
    )


def _count(kind: str, arg: str) -> int:
    if not arg.isdigit() or int(arg) < 1:
        raise ValueError(f"'{kind}:{arg}': expected a positive integer count after '{kind}:', e.g. '{kind}:100'")
    return int(arg)


def _cfr_player(solver: str) -> Callable[[str, int], Player]:
    def build(arg: str, seed: int) -> Player:
        from llm_zoo.trainers.baselines import cfr

        policy = cfr.player(solver, _count(solver, arg), seed=seed)
        return Player(f"{solver}:{arg}", "", dict.fromkeys(_agents(KUHN), policy), scripted.table_of(policy))

    return build


def _ppo_player(arg: str, seed: int) -> Player:
    from llm_zoo.trainers.baselines import ppo

    if arg.isdigit():
        model = ppo.train_maskable_ppo(_count("ppo", arg), seed=seed).model
        name = f"ppo:{arg}"
    elif arg:
        model = _load_saved_ppo(ppo, arg)
        name = f"ppo:{Path(arg).stem}"
    else:
        raise ValueError("'ppo:': expected a number of training steps or a saved model's path after 'ppo:'")
    policy = ppo.player(model, seed=seed, name=name)
    return Player(name, "", dict.fromkeys(_agents(KUHN), policy), scripted.table_of(policy))


def _load_saved_ppo(ppo: Any, arg: str) -> Any:
    """Load a saved PPO model for crossplay (``ppo.load``, which refuses a crafted or damaged file); a refusal
    is a ``ValueError`` naming the player and the file."""
    try:
        return ppo.load(arg)
    except ppo.SavedModelError as exc:
        raise ValueError(f"ppo:{arg}: {exc}") from None


_PREFIXED: dict[str, Callable[[str, int], Player]] = {
    "cfr": _cfr_player("cfr"),
    "cfr+": _cfr_player("cfr+"),
    "ppo": _ppo_player,
}
"""Spec prefix -> builder(argument, seed); each a Kuhn poker baseline."""


def _checkpoint_player(path: Path, env: str, seed: int) -> Player:
    from llm_zoo.trainers.checkpoint import verify_checkpoint
    from llm_zoo.trainers.evaluation import load_run_policies, seat_run_policies

    verify_checkpoint(path)  # a damaged file is refused by name (CheckpointError) before anything loads it
    config, by_name = load_run_policies(path, seed=seed)
    if config.get("env", env) != env:
        raise ValueError(f"{str(path)!r} was trained on {config['env']!r}, not {env!r}")
    seats = seat_run_policies(env, config, by_name, seed=seed)
    run = path.parent.parent.name if path.parent.name == "checkpoints" else path.parent.name
    return Player(f"{run}/{path.name}", "", seats, env_kwargs=dict(config.get("env_kwargs", {})))


def _agents(env: str) -> list[str]:
    return list(llm_zoo.make_env(env).unwrapped.possible_agents)


# ---------------------------------------------------------------------------------------------------
# Exact theory, where an env has one
# ---------------------------------------------------------------------------------------------------


def _kuhn_exact(a: Mapping, b: Mapping, env_kwargs: Mapping[str, Any]) -> float:
    """A's exact mean payoff per match against B over both seats: each hand's seats alternate, so n hands pay n x one."""
    from llm_zoo.envs.kuhn_poker import theory

    hands = int(env_kwargs.get("num_hands", 1))
    return hands * (theory.game_value(a, b) - theory.game_value(b, a)) / 2


def _kuhn_exploitability(table: Mapping) -> float:
    from llm_zoo.envs.kuhn_poker import theory

    return theory.exploitability(table)


_EXACT: dict[str, Callable[[Mapping, Mapping, Mapping[str, Any]], float]] = {KUHN: _kuhn_exact}
_EXPLOITABILITY: dict[str, Callable[[Mapping], float]] = {KUHN: _kuhn_exploitability}


# ---------------------------------------------------------------------------------------------------
# The round robin
# ---------------------------------------------------------------------------------------------------


def run(env: str, players: Sequence[str | Player], *, episodes: int = 2000, seed: int = 0,
        env_kwargs: Mapping[str, Any] | None = None, batch_size: int = 64) -> CrossplayResult:
    """Play every pair of `players` (specs or built `Player`s), both seats; return the matrix.

    Args:
        env: Versioned env name, e.g. `"kuhn_poker_v0"`.
        players: Specs (see the module docstring) or `Player`s; at least one, names distinct.
        episodes: Episodes per pair, split into `episodes // 2` deals played in both seat orders.
        seed: Seeds the deals (env seeds `seed + k`), the players' builds and their random draws.
        env_kwargs: The env's keyword arguments. Default: those of the checkpoints among the players
            (which must agree, since the prompt a model sees depends on them), else the env's defaults.
        batch_size: Envs played side by side (model players answer a batch per call).

    Raises:
        ValueError: Fewer than 2 episodes, no players, duplicate names, or checkpoints trained with
            different env kwargs and no `env_kwargs` given.
    """
    if not isinstance(episodes, int) or episodes < 2:
        raise ValueError(f"episodes must be an integer >= 2 (each deal is played in both seat orders); got {episodes!r}")
    if not players:
        raise ValueError("crossplay needs at least one player; pass --players")
    probe = llm_zoo.make_env(env, **(env_kwargs or {})).unwrapped
    roles = sorted({probe.role_of(a) for a in probe.possible_agents})
    if len(probe.possible_agents) != 2 or len(roles) != 1:
        raise ValueError(f"crossplay swaps two players between two seats of one role; {env} has seats "
                         f"{probe.possible_agents} with roles {roles}")
    start = time.perf_counter()
    built = [p if isinstance(p, Player) else resolve(p, env, seed=seed) for p in players]
    names = [p.name for p in built]
    if len(set(names)) != len(names):
        dup = sorted({n for n in names if names.count(n) > 1})
        raise ValueError(f"players need distinct names; {dup} appear twice. Name them NAME=SPEC, e.g. a={dup[0]}")
    kwargs = dict(env_kwargs) if env_kwargs is not None else _shared_env_kwargs(built)
    agents = list(llm_zoo.make_env(env, **kwargs).unwrapped.possible_agents)
    n, deals = len(built), episodes // 2
    mean = [[math.nan] * n for _ in range(n)]
    half = [[math.nan] * n for _ in range(n)]
    counted = [[0] * n for _ in range(n)]
    failed = [[0] * n for _ in range(n)]
    play_seconds = [[0.0] * n for _ in range(n)]
    invalid = [[0, 0] for _ in range(n)]  # per player: invalid replies, replies
    pairs = [(i, j) for i in range(n) for j in range(i, n)]
    for index, (i, j) in enumerate(pairs):
        t0 = time.perf_counter()
        outcome = _play_pair(env, built[i], built[j], agents, deals, seed, seed + index * _PAIR_SEED_STRIDE,
                             kwargs, batch_size)
        play_seconds[i][j] = play_seconds[j][i] = time.perf_counter() - t0
        m, h = _mean_interval(outcome.units)
        mean[i][j], half[i][j], counted[i][j], failed[i][j] = m, h, len(outcome.units), outcome.failed
        if i != j:
            mean[j][i], half[j][i], counted[j][i], failed[j][i] = -m, h, len(outcome.units), outcome.failed
        for owner, (bad, replies) in ((i, outcome.invalid_a), (j, outcome.invalid_b)):
            invalid[owner][0] += bad
            invalid[owner][1] += replies
    exact: list[list[float | None]] = [[None] * n for _ in range(n)]
    if env in _EXACT:
        for i in range(n):
            for j in range(n):
                if built[i].table is not None and built[j].table is not None:
                    exact[i][j] = _EXACT[env](built[i].table, built[j].table, kwargs)
    exploitability = [_EXPLOITABILITY[env](p.table) if env in _EXPLOITABILITY and p.table is not None else None
                      for p in built]
    return CrossplayResult(
        env=env, env_kwargs=kwargs, players=names, specs=[p.spec or p.name for p in built],
        episodes=2 * deals, seed=seed, mean=mean, half_width=half, exact=exact, deals=counted, failed=failed,
        exploitability=exploitability, invalid_reply_rate=[r / max(1, t) for r, t in invalid],
        build_seconds=[p.build_seconds for p in built], play_seconds=play_seconds,
        seconds=time.perf_counter() - start)


@dataclass
class _PairOutcome:
    units: list[float]
    """Per counted deal: A's mean payoff over its two seats."""
    failed: int
    invalid_a: tuple[int, int]
    """A's invalid replies and replies; `invalid_b` likewise for B."""
    invalid_b: tuple[int, int]


def _play_pair(env: str, a: Player, b: Player, agents: Sequence[str], deals: int, first_seed: int,
               policy_seed: int, env_kwargs: Mapping[str, Any], batch_size: int) -> _PairOutcome:
    """Play each deal twice, A first then B first, on env seeds `first_seed + k`; return A's units."""
    from llm_zoo.trainers.rollout import collect

    first, second = agents
    maps, seeds = [], []
    for k in range(deals):
        maps += [{first: a.seats[first], second: b.seats[second]}, {first: b.seats[first], second: a.seats[second]}]
        seeds += [first_seed + k, first_seed + k]
    episodes = collect(env, maps, seeds, env_kwargs=env_kwargs, seed=policy_seed, batch_size=batch_size)
    units, failed = [], 0
    invalid = {"a": [0, 0], "b": [0, 0]}
    for k in range(deals):
        a_first, a_second = episodes[2 * k], episodes[2 * k + 1]
        for episode, seat_of_a in ((a_first, first), (a_second, second)):
            for agent in agents:
                tally = invalid["a" if agent == seat_of_a else "b"]
                tally[0] += int(episode.infos.get(agent, {}).get("invalid_replies", 0))
                tally[1] += sum(1 for turn in episode.turns if turn.agent == agent)
        if a_first.failed or a_second.failed:
            failed += int(a_first.failed) + int(a_second.failed)
            continue
        units.append((a_first.returns.get(first, 0.0) + a_second.returns.get(second, 0.0)) / 2)
    return _PairOutcome(units, failed, tuple(invalid["a"]), tuple(invalid["b"]))


def _shared_env_kwargs(players: Sequence[Player]) -> dict[str, Any]:
    found = {p.name: p.env_kwargs for p in players if p.env_kwargs is not None}
    distinct = {json.dumps(v, sort_keys=True) for v in found.values()}
    if len(distinct) > 1:
        raise ValueError(f"the checkpoints were trained with different env kwargs {found!r}; choose the ones to "
                         "play with, e.g. --env-arg rules_in_prompt=false")
    return dict(next(iter(found.values()))) if found else {}


def _mean_interval(units: Sequence[float]) -> tuple[float, float]:
    """Return the mean and the 95% half-width (NaN with fewer than 2 units)."""
    count = len(units)
    if count == 0:
        return math.nan, math.nan
    mean = math.fsum(units) / count
    if count < 2:
        return mean, math.nan
    variance = math.fsum((u - mean) ** 2 for u in units) / (count - 1)
    return mean, Z_95 * math.sqrt(variance / count)


# ---------------------------------------------------------------------------------------------------
# Output
# ---------------------------------------------------------------------------------------------------


def write(result: CrossplayResult, out_dir: str | Path) -> dict[str, Path]:
    """Write `crossplay.md`, `crossplay.json` and the heat map `crossplay.png` into `out_dir`; return their paths."""
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    paths = {"markdown": out / "crossplay.md", "json": out / "crossplay.json", "png": out / "crossplay.png"}
    paths["markdown"].write_text(result.to_markdown())
    paths["json"].write_text(json.dumps(result.to_json(), indent=2) + "\n")
    heat_map(result, paths["png"])
    return paths


def heat_map(result: CrossplayResult, path: str | Path) -> Path:
    """Draw the payoff matrix as a heat map (red: row loses, blue: row wins), each cell with its interval."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    import numpy as np

    values = np.array(result.mean, dtype=float)
    n = len(result.players)
    finite = np.abs(values[np.isfinite(values)])
    limit = float(finite.max()) if finite.size and finite.max() > 0 else 1.0
    size = 1.6 + 1.05 * n
    fig, ax = plt.subplots(figsize=(size + 1.2, size))
    image = ax.imshow(values, cmap="RdBu", vmin=-limit, vmax=limit)
    for i in range(n):
        for j in range(n):
            text = f"{_signed(result.mean[i][j], 2)}\n±{result.half_width[i][j]:.2f}"
            strong = math.isfinite(values[i, j]) and abs(values[i, j]) > 0.6 * limit
            ax.text(j, i, text, ha="center", va="center", fontsize=8, color="white" if strong else "black")
    ax.set_xticks(range(n), result.players, rotation=40, ha="right", fontsize=8)
    ax.set_yticks(range(n), result.players, fontsize=8)
    ax.set_xlabel("column player")
    ax.set_ylabel("row player")
    ax.set_title(f"{result.env}: row's mean payoff per episode\n({result.episodes} episodes per pair, both seats, "
                 "95% interval)", fontsize=9)
    fig.colorbar(image, ax=ax, fraction=0.046, pad=0.04)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return Path(path)


def _signed(value: float | None, digits: int = 3) -> str:
    if value is None or not math.isfinite(value):
        return "nan"
    return f"{value:+.{digits}f}"


def _json_ready(value: Any) -> Any:
    if isinstance(value, float):
        return value if math.isfinite(value) else None
    if isinstance(value, dict):
        return {k: _json_ready(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_json_ready(v) for v in value]
    return value


# ---------------------------------------------------------------------------------------------------
# Command line
# ---------------------------------------------------------------------------------------------------


def add_parser(subparsers: argparse._SubParsersAction) -> argparse.ArgumentParser:
    """Register the `crossplay` subcommand on `llm-zoo`'s subparsers; return its parser."""
    parser = subparsers.add_parser(
        "crossplay", help="round-robin of checkpoints and baselines, both seats: payoff matrix with intervals")
    parser.add_argument("env", type=env_argument, help=ENV_ARGUMENT_HELP)
    parser.add_argument("--players", nargs="+", required=True, metavar="SPEC",
                        help="[NAME=]SPEC each: a scripted name (kuhn: nash, random, card), cfr:N, cfr+:N, "
                             "ppo:STEPS, ppo:PATH, a checkpoint dir (runs/<run>/checkpoints/step_N), a model "
                             "dir or an http(s):// URL")
    parser.add_argument("--episodes", type=int, default=2000,
                        help="episodes per pair, half in each seat order on the same deals (default: 2000)")
    parser.add_argument("--seed", type=int, default=0, help="seed of the deals, builds and draws (default: 0)")
    parser.add_argument("--out", default="crossplay", help="output directory (default: ./crossplay)")
    parser.add_argument("--batch-size", type=int, default=64, help="envs played side by side (default: 64)")
    parser.add_argument("--env-arg", action="append", default=[], metavar="KEY=VALUE",
                        help="an env keyword argument, JSON-read (e.g. num_hands=3); default: the "
                             "checkpoints' own, else the env's defaults (repeatable)")
    parser.set_defaults(func=_command)
    return parser


def _command(args: argparse.Namespace) -> int:
    env_kwargs = _parse_env_args(args.env_arg) if args.env_arg else None
    result = run(args.env, args.players, episodes=args.episodes, seed=args.seed, env_kwargs=env_kwargs,
                 batch_size=args.batch_size)
    paths = write(result, args.out)
    print(result.to_markdown())
    print("wrote " + ", ".join(str(p) for p in paths.values()))
    return 0


def _parse_env_args(pairs: Sequence[str]) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for pair in pairs:
        key, sep, value = pair.partition("=")
        if not sep or not key.strip():
            raise ValueError(f"--env-arg expects KEY=VALUE; got {pair!r}")
        try:
            out[key.strip()] = json.loads(value, parse_constant=_refuse_non_finite)
        except json.JSONDecodeError:
            out[key.strip()] = value
        except (ValueError, RecursionError) as exc:
            raise ValueError(f"--env-arg {key.strip()}=...: {exc or 'nested too deep'}; give a finite JSON value "
                             f"or plain text") from None
    return out


def _refuse_non_finite(name: str) -> Any:
    raise ValueError(f"{name} is not a finite number")
