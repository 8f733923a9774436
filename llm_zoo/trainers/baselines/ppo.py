"""PPO in self-play on Kuhn poker's discrete view, with the learned strategy read out as a table.

Two learners drive the same env through llm_zoo's adapters:

* `train_maskable_ppo`: sb3-contrib's `MaskablePPO` on `SingleAgent(DiscreteActions(kuhn_poker_v0.env()))`,
  which offers `action_masks()`, so illegal moves are never sampled;
* `train_ppo`: plain Stable-Baselines3 `PPO` on the same view, unmasked: an illegal move goes to the
  env's invalid-move policy (a retry, then a forfeit at -1), which is the signal it learns from.

## Self-play
One network plays both seats: the feature vector carries the seat, and `SingleAgent(agent="random")`
draws the learner's seat at every deal. The other seat is played by a frozen snapshot of the
learner, taken every `refresh_every` rollouts; with `pool_size > 1` the opponent of each deal is
drawn from the last `pool_size` snapshots (a small opponent pool damps the cycling that pure
latest-copy self-play shows in Kuhn poker). Only the learner's own decisions count as timesteps.

Policy-gradient self-play circles the equilibrium rather than settling on it: on Kuhn poker the
final network's exploitability wanders between about 0.1 and 0.4 from round to round. The
result therefore also reports the reach-weighted average of the strategies after each round
(`average_policy`), the mixture that fictitious play and CFR report, which settles lower.

## Why not SuperSuit
SuperSuit's `pettingzoo_env_to_vec_env_v1` takes a parallel env, in which every live agent acts at
every step, and `pettingzoo.utils.conversions.aec_to_parallel` makes one only of an AEC env whose
`metadata["is_parallelizable"]` is True, i.e. whose agents act once each, in a fixed cycle, with
deaths only at the end of a cycle. Kuhn poker is not such a game: after check-bet the first player
acts twice in a row, a hand can end in the middle of a cycle (check, bet, fold), and with
`num_hands > 1` the first player alternates; the non-acting seat would have to send an action with
an all-zero mask. So `kuhn_poker_v0` declares `is_parallelizable: False` and `aec_to_parallel`
refuses it (forced, it fails with "Parallel environment wrapper expects all agent death ... to
happen only at the end of a cycle"). `supersuit_vec_env` builds the SuperSuit vector env for the
envs that qualify and says why for those that do not; the PPO here uses the single-agent adapter.

## Reading the strategy
`tabular_strategy(model)` feeds the network the discrete observation of each of the 12 info sets
(built by playing the info set's moves in the env itself, so the features are the env's own) and
reads the action distribution the policy samples from, masked for `MaskablePPO`. It returns the
table over the legal moves, which `theory.exploitability` scores, and the mass an unmasked policy
puts on illegal moves. Nothing here prints; every result carries its wall-clock.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

import gymnasium
import numpy as np

from llm_zoo import kuhn_poker_v0
from llm_zoo.adapters import DiscreteActions, SingleAgent
from llm_zoo.envs.kuhn_poker import theory
from llm_zoo.envs.kuhn_poker.env import MENU
from llm_zoo.policy import TabularPolicy

if TYPE_CHECKING:
    from pettingzoo import AECEnv
    from stable_baselines3.common.base_class import BaseAlgorithm

__all__ = [
    "DEFAULTS",
    "SAVED_PPO_GLOBALS",
    "SavedModelError",
    "SelfPlayResult",
    "action_probabilities",
    "average_policy",
    "info_set_inputs",
    "load",
    "player",
    "supersuit_vec_env",
    "tabular_from_probabilities",
    "tabular_strategy",
    "train_maskable_ppo",
    "train_ppo",
]

Probabilities = Callable[[np.ndarray, np.ndarray], np.ndarray]
"""(features [batch, F] float32, masks [batch, A] bool) -> action probabilities [batch, A]."""

# The move each menu entry sends ("[check]" -> "check"): the menu is the env's canonical replies.
_MENU_MOVE = tuple(reply.strip("[]") for reply in MENU)

DEFAULTS: dict[str, Any] = {
    "n_steps": 64,  # per env: 8 envs make a rollout of 512 decisions
    "batch_size": 128,
    "learning_rate": 1e-3,
    "gamma": 1.0,  # one hand is one short episode; its payoff is the return
    "ent_coef": 0.01,
    "policy_kwargs": {"net_arch": [64, 64]},
}
"""PPO keyword arguments of both learners unless `model_kwargs` overrides them (chosen on Kuhn poker)."""


# ---------------------------------------------------------------------------------------------------
# Reading a strategy
# ---------------------------------------------------------------------------------------------------


def info_set_inputs(env_kwargs: Mapping[str, Any] | None = None) -> tuple[np.ndarray, np.ndarray]:
    """Return the discrete view's (features [12, F], masks [12, A] bool) at each info set, in `theory.INFO_SETS` order.

    Each row is what `DiscreteActions(kuhn_poker_v0.env(**env_kwargs))` shows the acting player
    after the info set's moves were played in the first hand.
    """
    env = DiscreteActions(kuhn_poker_v0.raw_env(**(env_kwargs or {})))
    num_hands = env.unwrapped.num_hands
    features, masks = [], []
    for info_set in theory.INFO_SETS:
        card, history = info_set.split(":")
        moves = [m for m in history.split(",") if m]
        acting = theory.player_of(info_set)
        other = next(c for c in theory.CARDS if c != card)
        deal = (card, other) if acting == 0 else (other, card)
        env.reset(seed=0, options={"deal": [deal] + [("J", "Q")] * (num_hands - 1)})
        for move in moves:
            env.step(_MENU_MOVE.index(move))
        agent = env.agent_selection
        assert env.unwrapped.observe(agent)["info_set"] == info_set, (info_set, agent)
        obs = env.observe(agent)
        features.append(obs["observation"])
        masks.append(obs["action_mask"].astype(bool))
    env.close()
    return np.stack(features), np.stack(masks)


def tabular_from_probabilities(
    probabilities: Probabilities, env_kwargs: Mapping[str, Any] | None = None
) -> tuple[dict[str, dict[str, float]], dict[str, float]]:
    """Return (the strategy over legal moves at each info set, the mass on illegal moves per info set).

    `probabilities` is called once with all 12 info sets' inputs (see `info_set_inputs`). A row is
    renormalised over its legal moves; a row with no mass on them becomes uniform over them.
    """
    features, masks = info_set_inputs(env_kwargs)
    probs = np.asarray(probabilities(features, masks), dtype=np.float64)
    if probs.shape != masks.shape:
        raise ValueError(f"probabilities returned shape {probs.shape}; expected {masks.shape} (one row per info "
                         f"set, one column per menu entry {MENU!r})")
    table, illegal = {}, {}
    for info_set, row, mask in zip(theory.INFO_SETS, probs, masks):
        legal = {_MENU_MOVE[i]: float(row[i]) for i in np.flatnonzero(mask)}
        mass = sum(legal.values())
        illegal[info_set] = float(row[~mask].sum())
        table[info_set] = ({m: p / mass for m, p in legal.items()} if mass > 0
                           else {m: 1 / len(legal) for m in legal})
    return theory.validate_policy(table), illegal


def action_probabilities(model: BaseAlgorithm) -> Probabilities:
    """Return the distribution `model` samples from, as a function of (features, masks); masked for MaskablePPO."""
    return _policy_probabilities(model.policy)


def _policy_probabilities(policy: Any) -> Probabilities:
    import torch

    masked = _is_maskable(policy)

    def probabilities(features: np.ndarray, masks: np.ndarray) -> np.ndarray:
        obs = torch.as_tensor(np.asarray(features, dtype=np.float32), device=policy.device)
        with torch.no_grad():
            dist = policy.get_distribution(obs, action_masks=masks) if masked else policy.get_distribution(obs)
            return dist.distribution.probs.cpu().numpy().astype(np.float64)

    return probabilities


def tabular_strategy(
    model: BaseAlgorithm, env_kwargs: Mapping[str, Any] | None = None
) -> tuple[dict[str, dict[str, float]], dict[str, float]]:
    """Return `model`'s Kuhn strategy in our tabular form and its illegal-move mass per info set.

    For `MaskablePPO` the illegal mass is 0 and the table is exactly the distribution `predict`
    samples from; for plain `PPO` it is that distribution conditioned on a legal move.
    """
    return tabular_from_probabilities(action_probabilities(model), env_kwargs)


def player(model: BaseAlgorithm, *, seed: int | None = None, name: str = "ppo") -> TabularPolicy:
    """Return a text-env Kuhn poker player of `model`'s strategy (see `tabular_strategy`)."""
    return TabularPolicy(tabular_strategy(model)[0], seed=seed, name=name)


SAVED_PPO_GLOBALS = frozenset({
    ("collections", "deque"), ("gymnasium.spaces.box", "Box"), ("gymnasium.spaces.discrete", "Discrete"),
    ("numpy", "dtype"), ("numpy", "ndarray"), ("numpy._core.multiarray", "scalar"),
    ("numpy._core.multiarray", "_reconstruct"), ("numpy._core.numeric", "_frombuffer"),
    ("numpy.core.multiarray", "scalar"), ("numpy.core.multiarray", "_reconstruct"), ("numpy.core.numeric", "_frombuffer"),
    ("numpy.random._pcg64", "PCG64"), ("numpy.random._pickle", "__bit_generator_ctor"),
    ("numpy.random._pickle", "__generator_ctor"), ("numpy.random.bit_generator", "SeedSequence"),
    ("numpy.random.bit_generator", "__pyx_unpickle_SeedSequence"),
    ("sb3_contrib.common.maskable.buffers", "MaskableRolloutBuffer"),
    ("sb3_contrib.common.maskable.policies", "MaskableActorCriticPolicy"),
    ("stable_baselines3.common.buffers", "RolloutBuffer"), ("stable_baselines3.common.policies", "ActorCriticPolicy"),
    ("stable_baselines3.common.utils", "ConstantSchedule"), ("stable_baselines3.common.utils", "FloatSchedule"),
    ("torch.nn.modules.activation", "Tanh"), ("torch.nn.modules.activation", "ReLU"),
})
"""What the pickled parameters of a saved PPO model (its zip's ``data``) may name: those of the models
``train_maskable_ppo`` saves. stable-baselines3 unpickles them with cloudpickle, which would run whatever
a crafted file names (``os.system``), so they are read first by an unpickler that resolves these alone."""



class SavedModelError(ValueError):
    """A saved PPO model that `load` refuses: crafted (it pickles something a saved model never holds) or
    damaged (stable-baselines3 cannot read it). The message names the file."""


def load(path: str | Path) -> BaseAlgorithm:
    """Load a model saved with `model.save(path)`: `MaskablePPO` or `PPO`, read from the file's policy class.

    stable-baselines3 unpickles the saved parameters with cloudpickle, which runs whatever a file names;
    here every pickled parameter is first read by an unpickler that resolves only :data:`SAVED_PPO_GLOBALS`,
    and the weights are read with ``weights_only=True``.

    Raises:
        FileNotFoundError: no file at ``path`` (nor at ``path`` + ``.zip``).
        SavedModelError: the file pickles anything outside :data:`SAVED_PPO_GLOBALS`, or is not a model that
            stable-baselines3 can read (truncated, corrupt, another kind of zip).
    """
    path = Path(path)
    if not path.exists() and path.with_suffix(".zip").exists():
        path = path.with_suffix(".zip")
    if not path.is_file():
        raise FileNotFoundError(f"no saved PPO model at {str(path)!r}; expected a .zip written by model.save()")
    try:
        saved = path.read_bytes()  # read once: what is checked is what loads
        _check_pickles(saved)
        return _load_checked(saved)
    except Exception as exc:  # noqa: BLE001 - whatever a damaged or crafted file raises is refused by name
        raise SavedModelError(f"refused {path} ({type(exc).__name__}: {' '.join(str(exc).split())[:200]}); "
                              "expected a model saved by stable-baselines3's model.save()") from None


def _check_pickles(saved: bytes) -> None:
    """Raise ``pickle.UnpicklingError`` if a pickled parameter in the zip's ``data`` names a global outside
    :data:`SAVED_PPO_GLOBALS` (nothing it names is imported or called)."""
    import base64
    import io
    import json
    import pickle
    import zipfile

    class Restricted(pickle.Unpickler):
        def find_class(self, module: str, name: str) -> Any:
            if (module, name) not in SAVED_PPO_GLOBALS:
                raise pickle.UnpicklingError(f"it pickles {module}.{name}, which a saved PPO model never holds")
            return super().find_class(module, name)

    with zipfile.ZipFile(io.BytesIO(saved)) as archive:
        data = json.loads(archive.read("data").decode("utf-8"))
    if not isinstance(data, dict):
        raise ValueError(f"its 'data' is a JSON {type(data).__name__}, not an object")
    for key, item in data.items():
        if isinstance(item, dict) and ":serialized:" in item:
            try:
                Restricted(io.BytesIO(base64.b64decode(str(item[":serialized:"])))).load()
            except pickle.UnpicklingError as exc:
                raise pickle.UnpicklingError(f"data[{key!r:.40}]: {exc}") from None


def _load_checked(saved: bytes) -> BaseAlgorithm:
    import io

    from sb3_contrib import MaskablePPO
    from sb3_contrib.common.maskable.policies import MaskableActorCriticPolicy
    from stable_baselines3 import PPO
    from stable_baselines3.common.save_util import load_from_zip_file

    data, _, _ = load_from_zip_file(io.BytesIO(saved), device="cpu")
    policy_class = (data or {}).get("policy_class")
    masked = isinstance(policy_class, type) and issubclass(policy_class, MaskableActorCriticPolicy)
    return (MaskablePPO if masked else PPO).load(io.BytesIO(saved), device="cpu")


# ---------------------------------------------------------------------------------------------------
# Self-play training
# ---------------------------------------------------------------------------------------------------


@dataclass
class SelfPlayResult:
    """What a self-play run returns.

    Attributes:
        model: The trained SB3 model (`model.save(path)` keeps it; `load(path)` reads it back).
        policy: Its final strategy in our tabular form (`tabular_strategy`).
        exploitability: `theory.exploitability(policy)`.
        illegal_mass: Mean illegal-move mass over the 12 info sets (0 for MaskablePPO).
        timesteps: The learner's decisions trained on.
        episodes: Deals played to get them.
        seconds: Wall-clock of the `learn` calls (rollouts and updates); read-outs and scoring excluded.
        average_policy: The reach-weighted average of the strategies after each round (`average_policy`),
            i.e. the mixture "draw one round's snapshot per deal", as fictitious play and CFR report.
        average_exploitability: `theory.exploitability(average_policy)`.
        history: After each round (opponent refresh): timesteps, episodes, seconds, exploitability.
    """

    model: Any
    policy: dict[str, dict[str, float]]
    exploitability: float
    illegal_mass: float
    timesteps: int
    episodes: int
    seconds: float
    average_policy: dict[str, dict[str, float]] = field(default_factory=dict)
    average_exploitability: float = float("nan")
    history: list[dict[str, float]] = field(default_factory=list)


def train_maskable_ppo(timesteps: int = 100_000, *, seed: int = 0, n_envs: int = 8, refresh_every: int = 1,
                       pool_size: int = 1, model_kwargs: Mapping[str, Any] | None = None) -> SelfPlayResult:
    """Train sb3-contrib `MaskablePPO` in self-play on Kuhn poker's discrete view; see the module docstring.

    Args:
        timesteps: The learner's decisions to train on (rounded up to whole refresh rounds).
        seed: Seeds the model, the deals and the opponents.
        n_envs: Envs stepped side by side (one batched forward pass per step for all of them).
        refresh_every: Rollouts (`n_steps * n_envs` decisions each) between snapshots of the opponent.
        pool_size: How many recent snapshots the opponent of each deal is drawn from.
        model_kwargs: `MaskablePPO` keyword arguments over `DEFAULTS` (e.g. `n_steps`, `learning_rate`).
    """
    from sb3_contrib import MaskablePPO

    return _self_play(MaskablePPO, timesteps, seed, n_envs, refresh_every, pool_size, model_kwargs)


def train_ppo(timesteps: int = 100_000, *, seed: int = 0, n_envs: int = 8, refresh_every: int = 1,
              pool_size: int = 1, model_kwargs: Mapping[str, Any] | None = None) -> SelfPlayResult:
    """Train plain Stable-Baselines3 `PPO` (no action mask) in self-play; arguments as `train_maskable_ppo`.

    Illegal moves reach the env, which asks again once and then forfeits the hand at -1.
    """
    from stable_baselines3 import PPO

    return _self_play(PPO, timesteps, seed, n_envs, refresh_every, pool_size, model_kwargs)


def _self_play(algorithm: type, timesteps: int, seed: int, n_envs: int, refresh_every: int, pool_size: int,
               model_kwargs: Mapping[str, Any] | None) -> SelfPlayResult:
    import torch

    # A 64x64 MLP gains nothing from intra-op threads, only their synchronisation: measured 7-12x slower
    # with 2 threads than with 1 on a busy 2-core machine. The caller's setting is restored afterwards.
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        return _self_play_one_thread(algorithm, timesteps, seed, n_envs, refresh_every, pool_size, model_kwargs)
    finally:
        torch.set_num_threads(threads)


def _self_play_one_thread(algorithm: type, timesteps: int, seed: int, n_envs: int, refresh_every: int,
                          pool_size: int, model_kwargs: Mapping[str, Any] | None) -> SelfPlayResult:
    from stable_baselines3.common.vec_env import DummyVecEnv

    for name, value in (("timesteps", timesteps), ("n_envs", n_envs), ("refresh_every", refresh_every),
                        ("pool_size", pool_size)):
        if not isinstance(value, int) or isinstance(value, bool) or value < 1:
            raise ValueError(f"{name} must be an integer >= 1; got {value!r}")
    kwargs = {**DEFAULTS, **(model_kwargs or {})}
    snapshots = _Snapshots(pool_size)
    envs = [_EpisodeCounter(SingleAgent(DiscreteActions(kuhn_poker_v0.env()), "random", _Opponent(snapshots)))
            for _ in range(n_envs)]
    vec_env = DummyVecEnv([lambda e=e: e for e in envs])
    model = algorithm("MlpPolicy", vec_env, seed=seed, device="cpu", **kwargs)
    snapshots.add(model.policy)
    round_steps = kwargs["n_steps"] * n_envs * refresh_every
    history: list[dict[str, float]] = []
    tables: list[dict[str, dict[str, float]]] = []
    seconds = 0.0
    while model.num_timesteps < timesteps:
        start = time.perf_counter()
        model.learn(round_steps, reset_num_timesteps=False)
        snapshots.add(model.policy)
        seconds += time.perf_counter() - start
        table, _ = tabular_strategy(model)
        tables.append(table)
        history.append({"timesteps": model.num_timesteps, "episodes": sum(e.episodes for e in envs),
                        "seconds": seconds, "exploitability": theory.exploitability(table)})
    table, illegal = tabular_strategy(model)
    average = average_policy(tables)
    return SelfPlayResult(model=model, policy=table, exploitability=theory.exploitability(table),
                          average_policy=average, average_exploitability=theory.exploitability(average),
                          illegal_mass=sum(illegal.values()) / len(illegal), timesteps=model.num_timesteps,
                          episodes=sum(e.episodes for e in envs), seconds=seconds, history=history)


def average_policy(tables: Sequence[Mapping[str, Mapping[str, float]]]) -> dict[str, dict[str, float]]:
    """Return the behaviour strategy equivalent to playing one of `tables`, drawn uniformly per deal.

    At each info set the tables' move probabilities are averaged with weights equal to the acting
    player's own probability of reaching it under each table (the reach-weighted average that CFR
    and fictitious play report); an info set no table reaches gets the plain mean.
    """
    if not tables:
        raise ValueError("average_policy needs at least one table; got none")
    average = {}
    for info_set in theory.INFO_SETS:
        card, history = info_set.split(":")
        moves = [m for m in history.split(",") if m]
        player = theory.player_of(info_set)
        weights = []
        for table in tables:
            reach = 1.0
            for depth, move in enumerate(moves):
                if depth % 2 == player:  # the player's own earlier decision in this hand
                    reach *= table[f"{card}:{','.join(moves[:depth])}"][move]
            weights.append(reach)
        total = sum(weights)
        if total <= 0:
            weights, total = [1.0] * len(tables), float(len(tables))
        average[info_set] = {m: sum(w * t[info_set][m] for w, t in zip(weights, tables)) / total
                             for m in theory.legal_moves(info_set)}
    return theory.validate_policy(average)


class _Snapshots:
    """Frozen copies of the learner's policy, the last `size` of them, as probability functions with caches.

    A snapshot caches its distribution per observation, so an opponent move costs no forward pass
    once its info set was seen (12 in Kuhn poker).
    """

    def __init__(self, size: int) -> None:
        self.size = size
        self.items: list[tuple[Probabilities, dict[bytes, np.ndarray]]] = []

    def add(self, policy: Any) -> None:
        # a fresh policy holding a copy of the weights (SB3 policies refuse deepcopy); later updates leave it alone
        frozen = type(policy)(**policy._get_constructor_parameters()).to(policy.device)
        frozen.load_state_dict(policy.state_dict())
        frozen.set_training_mode(False)
        self.items = (self.items + [(_policy_probabilities(frozen), {})])[-self.size:]


class _Opponent:
    """The other seat: at each deal one snapshot is drawn, then each move is sampled from it.

    `SingleAgent` calls `seed` at every reset (with a seed from its own RNG), which is where the
    deal's snapshot is drawn.
    """

    def __init__(self, snapshots: _Snapshots) -> None:
        self.snapshots = snapshots
        self.rng = np.random.default_rng(0)
        self.current = -1

    def seed(self, seed: int | None) -> None:
        self.rng = np.random.default_rng(seed)
        self.current = int(self.rng.integers(len(self.snapshots.items)))

    def __call__(self, obs: Mapping[str, np.ndarray]) -> int:
        probabilities, cache = self.snapshots.items[self.current]
        features, mask = obs["observation"], np.asarray(obs["action_mask"], dtype=bool)
        key = features.tobytes() + mask.tobytes()
        probs = cache.get(key)
        if probs is None:
            probs = cache[key] = probabilities(features[None], mask[None])[0]
        return int(self.rng.choice(len(probs), p=probs / probs.sum()))


class _EpisodeCounter(gymnasium.Wrapper):
    """Count finished episodes and forward `action_masks()` (which MaskablePPO looks up on the env)."""

    def __init__(self, env: SingleAgent) -> None:
        super().__init__(env)
        self.episodes = 0

    def step(self, action: Any) -> tuple[Any, float, bool, bool, dict[str, Any]]:
        obs, reward, terminated, truncated, info = self.env.step(action)
        self.episodes += int(terminated or truncated)
        return obs, reward, terminated, truncated, info

    def action_masks(self) -> np.ndarray:
        return self.env.action_masks()


def _is_maskable(policy: Any) -> bool:
    try:
        from sb3_contrib.common.maskable.policies import MaskableActorCriticPolicy
    except ImportError:
        return False
    return isinstance(policy, MaskableActorCriticPolicy)


# ---------------------------------------------------------------------------------------------------
# SuperSuit, where the env's shape allows it
# ---------------------------------------------------------------------------------------------------


def supersuit_vec_env(aec_env: AECEnv, num_envs: int = 1) -> Any:
    """Return an SB3 vector env of `aec_env` through SuperSuit: one slot per agent, parameters shared.

    The route is `aec_to_parallel` -> `supersuit.pettingzoo_env_to_vec_env_v1` ->
    `supersuit.concat_vec_envs_v1`, wrapped for SB3, for plain `PPO("MlpPolicy", vec_env)`. It needs
    an env whose agents all act at every step (see the module docstring).

    Raises:
        ValueError: The env is not parallelizable (`metadata["is_parallelizable"]` is not True),
            with the reason and the fallback (`SingleAgent`, as `train_ppo` uses).
    """
    import supersuit
    from pettingzoo.utils.conversions import aec_to_parallel

    if not aec_env.metadata.get("is_parallelizable", False):
        name = aec_env.metadata.get("name", type(aec_env.unwrapped).__name__)
        raise ValueError(
            f"{name} is turn-based with no fixed cycle of moves (metadata['is_parallelizable'] is not True), so "
            "aec_to_parallel cannot make the parallel env SuperSuit's pettingzoo_env_to_vec_env_v1 needs; use "
            "llm_zoo.adapters.SingleAgent on it instead (as llm_zoo.trainers.baselines.ppo.train_ppo does)"
        )
    markov = supersuit.pettingzoo_env_to_vec_env_v1(aec_to_parallel(aec_env))
    return _seeded_sb3_vec_env(supersuit.concat_vec_envs_v1(markov, num_envs, num_cpus=0, base_class="gymnasium"))


def _seeded_sb3_vec_env(venv: Any) -> Any:
    """Wrap SuperSuit's concatenated vector env for SB3, with the `seed()` SB3 2 calls.

    SuperSuit 3.11's own SB3 wrapper forwards `seed()` to its `ConcatVecEnv`, which has none, so
    `PPO(..., seed=s)` fails with AttributeError; here the seed is kept for the next reset instead.
    """
    from supersuit.vector.sb3_vector_wrapper import SB3VecEnvWrapper

    class SeededSB3VecEnv(SB3VecEnvWrapper):
        _next_seed: int | None = None

        def seed(self, seed: int | None = None) -> list[int | None]:
            self._next_seed = seed
            return [None if seed is None else seed + i for i in range(self.num_envs)]

        def reset(self, seed: int | None = None, options: dict | None = None) -> Any:
            seed, self._next_seed = (self._next_seed if seed is None else seed), None
            observations, self.reset_infos = self.venv.reset(seed=seed, options=options)
            return observations

    return SeededSB3VecEnv(venv)
