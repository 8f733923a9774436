"""CFR+, MaskablePPO and NFSP self-play on Leduc hold'em, each strategy read into the tabular form of
`llm_zoo.envs.leduc_poker.theory` and scored by its exact exploitability.

* `solve_cfr`: OpenSpiel's CFR or CFR+ (`open_spiel.python.algorithms.cfr`) on its own `leduc_poker`;
  the average policy, keyed by card with suits, is read back to ranks with `theory.from_openspiel`
  (the solver treats the two suits of a rank alike, which that function checks).
* `train_maskable_ppo`: sb3-contrib `MaskablePPO` on `SingleAgent(DiscreteActions(leduc_poker_v0.env()))`,
  one network for both seats (the features carry the seat), the other seat a frozen snapshot of the
  learner refreshed every round, as `llm_zoo.trainers.baselines.ppo` does on Kuhn poker; besides the
  final network it reports the reach-weighted average of the strategies after each round.
* `train_nfsp`: OpenSpiel's PyTorch NFSP (`open_spiel.python.pytorch.nfsp`), one agent per seat, on
  ``leduc_poker`` with ``suit_isomorphism`` (cards seen by rank, as our env and theory see them, so the
  average network's strategy is a rank-level table, read exactly at the 288 info sets).

Nothing here prints; every result carries its wall-clock (training only, scoring excluded).
"""

from __future__ import annotations

import math
import random
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from llm_zoo import leduc_poker_v0
from llm_zoo.adapters import DiscreteActions, SingleAgent
from llm_zoo.envs.leduc_poker import theory
from llm_zoo.envs.leduc_poker.env import MENU
from llm_zoo.envs.leduc_poker.rules import RANKS, SUITS
from llm_zoo.trainers.baselines.cfr import SOLVERS
from llm_zoo.trainers.baselines.ppo import (
    DEFAULTS,
    _EpisodeCounter,
    _Opponent,
    _policy_probabilities,
    _Snapshots,
)

__all__ = ["NFSP_DEFAULTS", "CurvePoint", "LeducResult", "average_policy", "info_set_inputs", "nfsp_strategy",
           "solve_cfr", "tabular_strategy", "train_maskable_ppo", "train_nfsp"]

GAME = "leduc_poker"
_MENU_MOVE = tuple(reply.strip("[]") for reply in MENU)


@dataclass(frozen=True)
class CurvePoint:
    """One point of a training curve: work done so far, its training seconds, and the exact exploitability."""

    work: int
    """Iterations (CFR) or episodes (PPO, NFSP: hands played)."""
    seconds: float
    exploitability: float


@dataclass
class LeducResult:
    """What a baseline run returns: its final strategy, its score, and its curve."""

    name: str
    policy: dict[str, dict[str, float]]
    exploitability: float
    work: int
    seconds: float
    curve: list[CurvePoint] = field(default_factory=list)
    average_policy: dict[str, dict[str, float]] | None = None
    average_exploitability: float | None = None
    average_curve: list[CurvePoint] = field(default_factory=list)
    agents: list[Any] = field(default_factory=list)
    """The trained OpenSpiel agents (NFSP: one per seat); empty for the others."""


def solve_cfr(solver: str = "cfr+", checkpoints: Sequence[int] = (1, 10, 100)) -> LeducResult:
    """Run OpenSpiel's CFR or CFR+ on Leduc; score the average policy at each of the increasing ``checkpoints``.

    Raises:
        ValueError: An unknown solver or counts that are not increasing positive integers.
        ImportError: OpenSpiel is missing (the `baselines` extra).
    """
    if solver not in SOLVERS:
        raise ValueError(f"unknown solver {solver!r}; expected one of {sorted(SOLVERS)}")
    counts = list(checkpoints)
    if not counts or any(not isinstance(n, int) or isinstance(n, bool) or n < 1 for n in counts) or any(
            a >= b for a, b in zip(counts, counts[1:])):
        raise ValueError(f"checkpoints must be increasing positive ints; got {checkpoints!r}")
    try:
        import pyspiel
        from open_spiel.python.algorithms import cfr
    except ImportError as exc:
        raise ImportError("CFR baselines need OpenSpiel: pip install 'llm_zoo[baselines]'") from exc
    start = time.perf_counter()
    engine = getattr(cfr, SOLVERS[solver])(pyspiel.load_game(GAME))
    elapsed, done, curve, table = time.perf_counter() - start, 0, [], {}
    for count in counts:
        start = time.perf_counter()
        for _ in range(count - done):
            engine.evaluate_and_update_policy()
        average = engine.average_policy()
        elapsed += time.perf_counter() - start
        done = count
        table = theory.from_openspiel(average)
        curve.append(CurvePoint(count, elapsed, theory.exploitability(table)))
    return LeducResult(solver, table, curve[-1].exploitability, done, elapsed, curve)


# ---------------------------------------------------------------------------------------------------
# MaskablePPO self-play on the discrete view
# ---------------------------------------------------------------------------------------------------


def _deal_for(info_set: str) -> tuple[tuple[str, str, str], int]:
    cards, _ = info_set.split(":")
    player = theory.player_of(info_set)
    own = cards[0]
    public = cards[1] if len(cards) == 2 else next(r for r in RANKS if r != own)
    other = next(r for r in reversed(RANKS) if [own, public].count(r) < SUITS)
    return ((own, other, public) if player == 0 else (other, own, public)), player


def info_set_inputs(env_kwargs: Mapping[str, Any] | None = None) -> tuple[np.ndarray, np.ndarray]:
    """Return the discrete view's (features [288, F], masks [288, 5] bool) at each info set, in `theory.INFO_SETS` order."""
    env = DiscreteActions(leduc_poker_v0.raw_env(**(env_kwargs or {})))
    features, masks = [], []
    for info_set in theory.INFO_SETS:
        deal, player = _deal_for(info_set)
        env.reset(seed=0, options={"deal": [deal] * env.unwrapped.num_hands})
        for move in (m for r in info_set.split(":")[1].split("/") for m in r.split(",") if m):
            env.step(_MENU_MOVE.index(move))
        agent = env.agent_selection
        assert env.unwrapped.observe(agent)["info_set"] == info_set and agent == f"player_{player}", info_set
        obs = env.observe(agent)
        features.append(obs["observation"])
        masks.append(obs["action_mask"].astype(bool))
    env.close()
    return np.stack(features), np.stack(masks)


_INPUTS: tuple[np.ndarray, np.ndarray] | None = None


def tabular_strategy(model: Any) -> dict[str, dict[str, float]]:
    """Return the strategy `model` (MaskablePPO) samples from at each of the 288 info sets, masked."""
    global _INPUTS
    if _INPUTS is None:
        _INPUTS = info_set_inputs()
    features, masks = _INPUTS
    probs = np.asarray(_policy_probabilities(model.policy)(features, masks), dtype=np.float64)
    table = {}
    for info_set, row, mask in zip(theory.INFO_SETS, probs, masks):
        legal = {_MENU_MOVE[i]: float(row[i]) for i in np.flatnonzero(mask)}
        mass = sum(legal.values())
        table[info_set] = {m: p / mass for m, p in legal.items()} if mass > 0 else {m: 1 / len(legal) for m in legal}
    return theory.validate_policy(table)


def average_policy(tables: Sequence[Mapping[str, Mapping[str, float]]]) -> dict[str, dict[str, float]]:
    """Return the behaviour strategy of playing one of `tables`, drawn uniformly per hand (reach-weighted mean)."""
    if not tables:
        raise ValueError("average_policy needs at least one table; got none")
    out = {}
    for info_set in theory.INFO_SETS:
        cards, line = info_set.split(":")
        player = theory.player_of(info_set)
        rounds = [[m for m in r.split(",") if m] for r in line.split("/")]
        own_steps = []  # (info set, move) of the player's own earlier decisions on this line
        for r, moves in enumerate(rounds):
            for depth, move in enumerate(moves):
                if depth % 2 == player:
                    prefix = "/".join(",".join(x) for x in [*rounds[:r], moves[:depth]])
                    own_steps.append((f"{cards[: 1 + (r > 0)]}:{prefix}", move))
        weights = [float(np.prod([t[i][m] for i, m in own_steps])) for t in tables]
        total = sum(weights)
        if total <= 0:
            weights, total = [1.0] * len(tables), float(len(tables))
        out[info_set] = {m: sum(w * t[info_set][m] for w, t in zip(weights, tables)) / total
                         for m in theory.legal_moves(info_set)}
    return theory.validate_policy(out)


def train_maskable_ppo(timesteps: int = 100_000, *, seed: int = 0, n_envs: int = 8,
                       model_kwargs: Mapping[str, Any] | None = None) -> LeducResult:
    """Train `MaskablePPO` in self-play on Leduc's discrete view for `timesteps` learner decisions.

    The opponent is the learner's snapshot after the previous round (one round = one rollout of
    `n_steps * n_envs` decisions and its update); `model_kwargs` override `ppo.DEFAULTS`.
    """
    import torch
    from sb3_contrib import MaskablePPO
    from stable_baselines3.common.vec_env import DummyVecEnv

    if not isinstance(timesteps, int) or isinstance(timesteps, bool) or timesteps < 1:
        raise ValueError(f"timesteps must be an integer >= 1; got {timesteps!r}")
    threads = torch.get_num_threads()
    torch.set_num_threads(1)  # a small MLP loses to thread synchronisation (see ppo._self_play)
    try:
        kwargs = {**DEFAULTS, **(model_kwargs or {})}
        snapshots = _Snapshots(1)
        envs = [_EpisodeCounter(SingleAgent(DiscreteActions(leduc_poker_v0.env()), "random", _Opponent(snapshots)))
                for _ in range(n_envs)]
        model = MaskablePPO("MlpPolicy", DummyVecEnv([lambda e=e: e for e in envs]), seed=seed, device="cpu",
                            **kwargs)
        snapshots.add(model.policy)
        seconds, tables, curve, average_curve = 0.0, [], [], []
        while model.num_timesteps < timesteps:
            start = time.perf_counter()
            model.learn(kwargs["n_steps"] * n_envs, reset_num_timesteps=False)
            snapshots.add(model.policy)
            seconds += time.perf_counter() - start
            tables.append(tabular_strategy(model))
            episodes = sum(e.episodes for e in envs)
            curve.append(CurvePoint(episodes, seconds, theory.exploitability(tables[-1])))
            average = average_policy(tables)
            average_curve.append(CurvePoint(episodes, seconds, theory.exploitability(average)))
        return LeducResult("maskable_ppo", tables[-1], curve[-1].exploitability, curve[-1].work, seconds, curve,
                           average, average_curve[-1].exploitability, average_curve)
    finally:
        torch.set_num_threads(threads)


# ---------------------------------------------------------------------------------------------------
# NFSP (OpenSpiel's PyTorch agents) in self-play
# ---------------------------------------------------------------------------------------------------

NFSP_DEFAULTS: dict[str, Any] = {
    "hidden_layers_sizes": [128], "replay_buffer_capacity": 200_000, "reservoir_buffer_capacity": 2_000_000,
    "min_buffer_size_to_learn": 1000, "anticipatory_param": 0.1, "batch_size": 128, "learn_every": 64,
    "rl_learning_rate": 0.01, "sl_learning_rate": 0.01, "optimizer_str": "sgd", "loss_str": "mse",
    "update_target_network_every": 19_200, "discount_factor": 1.0, "epsilon_decay_duration": 20_000_000,
    "epsilon_start": 0.06, "epsilon_end": 0.001,
}
"""NFSP's hyper-parameters: OpenSpiel's Leduc example settings (``open_spiel/python/examples/nfsp_leduc_pytorch.py``)."""
NFSP_GAME = {"suit_isomorphism": True}
"""OpenSpiel's ``leduc_poker`` parameters for NFSP: suits are strategically irrelevant, and the agents see ranks."""

_NFSP_INPUTS: tuple[np.ndarray, np.ndarray] | None = None


def _nfsp_inputs() -> tuple[np.ndarray, np.ndarray]:
    """Return OpenSpiel's (information-state tensors [288, 24], legal masks [288, 3]) in `theory.INFO_SETS` order."""
    global _NFSP_INPUTS
    if _NFSP_INPUTS is None:
        import pyspiel

        game = pyspiel.load_game(GAME, NFSP_GAME)
        tensors, masks = [], []
        for info_set in theory.INFO_SETS:
            (own_0, own_1, public), player = _deal_for(info_set)
            state = game.new_initial_state()
            state.apply_action(RANKS.index(own_0))
            state.apply_action(RANKS.index(own_1))
            for move in (m for r in info_set.split(":")[1].split("/") for m in r.split(",") if m):
                state.apply_action(theory.OPENSPIEL_ACTION[move])
                if state.is_chance_node():  # the first round is over: the public card
                    state.apply_action(RANKS.index(public))
            legal = sorted(theory.OPENSPIEL_ACTION[m] for m in theory.legal_moves(info_set))
            if state.current_player() != player or state.legal_actions() != legal:
                raise RuntimeError(f"OpenSpiel's leduc_poker replayed info set {info_set!r} to a state where player "
                                   f"{state.current_player()} acts with actions {state.legal_actions()}; expected "
                                   f"player {player} with {legal} (state: {state})")
            tensors.append(np.asarray(state.information_state_tensor(player), dtype=np.float32))
            masks.append(np.isin(np.arange(game.num_distinct_actions()), legal))
        _NFSP_INPUTS = np.stack(tensors), np.stack(masks)
    return _NFSP_INPUTS


def nfsp_strategy(agents: Sequence[Any]) -> dict[str, dict[str, float]]:
    """Return the average policy (the supervised network) of NFSP `agents` (one per seat) at the 288 info sets.

    Each row is what ``agent.step(..., is_evaluation=True)`` reports in ``MODE.AVERAGE_POLICY``; numpy's
    global random state, which that call draws an action from, is restored after, so reading the strategy
    does not change the training that follows.
    """
    from open_spiel.python import rl_environment
    from open_spiel.python.pytorch.nfsp import MODE

    tensors, masks = _nfsp_inputs()
    rng_state = np.random.get_state()
    table = {}
    try:
        for info_set, tensor, mask in zip(theory.INFO_SETS, tensors, masks):
            player = theory.player_of(info_set)
            legal = np.flatnonzero(mask).tolist()
            observations = {"info_state": [tensor] * len(agents), "legal_actions": [legal] * len(agents),
                            "current_player": player}
            with agents[player].temp_mode_as(MODE.AVERAGE_POLICY):
                probs = agents[player].step(rl_environment.TimeStep(observations, None, None, None),
                                            is_evaluation=True).probs
            row = {m: float(probs[theory.OPENSPIEL_ACTION[m]]) for m in theory.legal_moves(info_set)}
            mass = math.fsum(row.values())
            table[info_set] = {m: p / mass for m, p in row.items()}
    finally:
        np.random.set_state(rng_state)
    return theory.validate_policy(table)


def train_nfsp(episodes: int = 100_000, *, seed: int = 0, evaluations: int = 20,
               model_kwargs: Mapping[str, Any] | None = None) -> LeducResult:
    """Train two OpenSpiel NFSP agents in self-play on Leduc for `episodes` hands; score their average policy.

    The average policy is read and scored exactly at `evaluations` evenly spaced episode counts (the
    last at `episodes`); training seconds exclude that. `model_kwargs` override `NFSP_DEFAULTS`.

    Raises:
        ValueError: `episodes` or `evaluations` is not an int >= 1, `seed` not an int >= 0, or an unknown
            key in `model_kwargs`.
        ImportError: OpenSpiel or torch is missing (the `baselines` extra).
    """
    for name, value, least in (("episodes", episodes, 1), ("evaluations", evaluations, 1), ("seed", seed, 0)):
        if not isinstance(value, int) or isinstance(value, bool) or value < least:
            raise ValueError(f"train_nfsp: {name} must be an integer >= {least}; got {value!r}")
    unknown = sorted(set(model_kwargs or {}) - set(NFSP_DEFAULTS))
    if unknown:
        raise ValueError(f"train_nfsp: unknown model_kwargs {unknown}; expected keys of NFSP_DEFAULTS: "
                         f"{sorted(NFSP_DEFAULTS)}")
    try:
        import pyspiel
        import torch
        from open_spiel.python import rl_environment
        from open_spiel.python.pytorch import nfsp
    except ImportError as exc:
        raise ImportError("NFSP needs OpenSpiel and torch: pip install 'llm_zoo[baselines]'") from exc
    kwargs = {**NFSP_DEFAULTS, **(model_kwargs or {})}
    checkpoints = sorted({max(1, round(episodes * k / evaluations)) for k in range(1, evaluations + 1)})
    threads = torch.get_num_threads()
    torch.set_num_threads(1)  # a small MLP loses to thread synchronisation (see ppo._self_play)
    try:
        random.seed(seed)
        np.random.seed(seed)
        torch.manual_seed(seed)
        env = rl_environment.Environment(pyspiel.load_game(GAME, NFSP_GAME))
        env.seed(seed)
        size, actions = env.observation_spec()["info_state"][0], env.action_spec()["num_actions"]
        # NFSP seeds its networks with seed, seed + 1 and the global RNGs with seed + 2: keep the seats apart
        agents = [nfsp.NFSP(player, size, actions, seed=3 * (2 * seed + player), **kwargs) for player in (0, 1)]
        done, seconds, curve, table = 0, 0.0, [], {}
        for checkpoint in checkpoints:
            start = time.perf_counter()
            for _ in range(checkpoint - done):
                time_step = env.reset()
                while not time_step.last():
                    player = time_step.observations["current_player"]
                    time_step = env.step([agents[player].step(time_step).action])
                for agent in agents:  # each agent sees the end of the hand
                    agent.step(time_step)
            seconds += time.perf_counter() - start
            done = checkpoint
            table = nfsp_strategy(agents)
            curve.append(CurvePoint(done, seconds, theory.exploitability(table)))
        return LeducResult("nfsp", table, curve[-1].exploitability, done, seconds, curve, agents=agents)
    finally:
        torch.set_num_threads(threads)
