"""One seat of an AEC env as a ``gymnasium.Env``, the other seats played by fixed opponents.

:class:`SingleAgent` turns a multi-agent env into the single-agent loop that gymnasium learners
(stable-baselines3, sb3-contrib, CleanRL) expect. It works on both views of an llm_zoo env:

* the text env: ``Text`` actions (the reply) and the env's ``Dict`` observation, unchanged;
* a :class:`~llm_zoo.adapters.discrete.DiscreteActions` env: ``Discrete`` actions and the ``Box``
  feature vector as the observation. The action mask is in ``info["action_mask"]`` and returned by
  :meth:`SingleAgent.action_masks`, the method sb3-contrib's ``MaskablePPO`` calls (the layout of
  PettingZoo's SB3 action-mask tutorial).

The loop:

* ``reset(seed=...)`` resets the AEC env and plays the opponents until it is the agent's turn;
* ``step(action)`` applies the agent's action, then plays the opponents until it is the agent's
  turn again or the agent is terminated or truncated. The reward is the agent's cumulative reward
  since its last action (``env.last()``'s reward, PettingZoo's bookkeeping), so a reward that lands
  while an opponent moves is not lost; ``terminated``/``truncated`` and ``info`` are the AEC env's.

Seeding: ``reset(seed=s)`` resets the AEC env with ``s``; ``reset()`` draws the AEC seed from the
gymnasium RNG that the last seeded reset fixed, so a seeded reset followed by unseeded ones replays
exactly. Opponents that have a ``seed(int)`` method (llm_zoo ``Policy`` objects do) are reseeded from
that RNG at every reset, so random opponents replay too.

    >>> from llm_zoo import kuhn_poker_v0
    >>> from llm_zoo.adapters import DiscreteActions, SingleAgent
    >>> def first_legal(obs):
    ...     return int(obs["action_mask"].argmax())
    >>> env = SingleAgent(DiscreteActions(kuhn_poker_v0.env()), "player_0", {"player_1": first_legal})
    >>> obs, info = env.reset(seed=0)
    >>> env.action_masks()
    array([ True,  True, False, False])
"""

from __future__ import annotations

import copy
import sys
from collections.abc import Callable, Mapping
from typing import Any

import gymnasium
import numpy as np
from gymnasium import spaces
from pettingzoo import AECEnv

if sys.version_info >= (3, 12):
    from typing import override
else:  # typing_extensions comes with gymnasium, a core dependency
    from typing_extensions import override

__all__ = ["OpponentPolicy", "SingleAgent"]

OpponentPolicy = Callable[[Any], Any]
"""Anything that maps an observation of its seat to an action: a function, an llm_zoo ``Policy``."""

_MAX_RESETS = 100  # episodes that end before the agent's first turn are re-dealt at most this often
_SEED_BOUND = 2**31 - 1


class SingleAgent(gymnasium.Env):
    """A ``gymnasium.Env`` view of one seat of an AEC env; the other seats are played by ``opponents``.

    Args:
        env: The AEC env (a text env, or a :class:`~llm_zoo.adapters.discrete.DiscreteActions` view).
        agent: The seat the learner plays, one of ``env.possible_agents``, or ``"random"`` to draw
            the seat at every reset from the env's RNG (``self.agent`` then names the current seat).
        opponents: The policy of every other seat, as a mapping agent -> policy, or one policy for
            all of them. A policy is called with that seat's AEC observation and returns its action.

    Raises:
        ValueError: an unknown ``agent``, an opponent missing for some seat, or (with
            ``agent="random"``) seats whose spaces differ.
        TypeError: ``env`` is not an AEC env or a policy is not callable.

    An episode that ends before the agent's first turn (an opponent forfeits at once) is re-dealt
    with a fresh seed drawn from the RNG, up to 100 times; ``info["redealt"]`` counts them.
    """

    def __init__(self, env: AECEnv, agent: str, opponents: Mapping[str, OpponentPolicy] | OpponentPolicy) -> None:
        if not isinstance(env, AECEnv):
            raise TypeError(f"SingleAgent wraps a PettingZoo AEC env; got {type(env).__name__}. "
                            "For a parallel env, convert it first with pettingzoo.utils.parallel_to_aec.")
        self.env = env
        seats = list(env.possible_agents)
        if agent != "random" and agent not in seats:
            raise ValueError(f"agent must be one of {seats} or 'random'; got {agent!r}")
        self.random_seat = agent == "random"
        self.agent: str = seats[0] if self.random_seat else agent
        self._opponents = _read_opponents(opponents, seats, None if self.random_seat else agent)

        learner_seats = seats if self.random_seat else [agent]
        obs_space, act_space = env.observation_space(learner_seats[0]), env.action_space(learner_seats[0])
        for seat in learner_seats[1:]:
            if env.observation_space(seat) != obs_space or env.action_space(seat) != act_space:
                raise ValueError(f"agent='random' needs every seat to share its spaces; {seat} differs from "
                                 f"{learner_seats[0]}. Pick one seat with agent=...")
        # The discrete view's Dict(observation, action_mask) becomes a Box observation plus a mask
        # beside it, the layout sb3-contrib's MaskablePPO reads.
        self.masked = isinstance(obs_space, spaces.Dict) and set(obs_space.spaces) == {"observation", "action_mask"}
        self.observation_space = obs_space["observation"] if self.masked else obs_space
        self.action_space = act_space
        self.render_mode = getattr(env, "render_mode", None)
        self.metadata = {"render_modes": list(getattr(env, "metadata", {}).get("render_modes", []))}
        self._mask: np.ndarray | None = None
        self._started = False
        self._done = False

    @override
    def reset(self, *, seed: int | None = None, options: dict[str, Any] | None = None) -> tuple[Any, dict[str, Any]]:
        super().reset(seed=seed)
        if self.random_seat:
            self.agent = self.env.possible_agents[int(self.np_random.integers(len(self.env.possible_agents)))]
        for redealt in range(_MAX_RESETS):
            env_seed = seed if seed is not None and redealt == 0 else int(self.np_random.integers(_SEED_BOUND))
            for opponent in {id(p): p for p in self._opponents.values()}.values():
                if callable(getattr(opponent, "seed", None)):
                    opponent.seed(int(self.np_random.integers(_SEED_BOUND)))
            self.env.reset(seed=env_seed, options=options)
            obs, _, terminated, truncated, info = self._play_opponents()
            if not (terminated or truncated):
                self._started, self._done = True, False
                info["redealt"] = redealt
                return obs, info
        raise RuntimeError(f"{_MAX_RESETS} episodes in a row ended before {self.agent}'s first turn; "
                           "check the opponents (do they forfeit at once?)")

    @override
    def step(self, action: Any) -> tuple[Any, float, bool, bool, dict[str, Any]]:
        if not self._started:
            raise RuntimeError("reset() must come before step()")
        if self._done:
            raise RuntimeError("step() called after the episode ended; call reset() first")
        self.env.step(action)
        obs, reward, terminated, truncated, info = self._play_opponents()
        self._done = terminated or truncated
        return obs, reward, terminated, truncated, info

    def action_masks(self) -> np.ndarray:
        """Return the legal actions of the current observation as booleans (for ``MaskablePPO``)."""
        if not self.masked:
            raise ValueError(f"{self.env} has no action mask (its observations are not "
                             "{'observation', 'action_mask'} dicts); wrap it in DiscreteActions first")
        if self._mask is None:
            raise RuntimeError("reset() must come before action_masks()")
        return self._mask.astype(bool)

    @override
    def render(self) -> Any:
        return self.env.render()

    @override
    def close(self) -> None:
        self.env.close()

    def _play_opponents(self) -> tuple[Any, float, bool, bool, dict[str, Any]]:
        """Step the opponents until the agent is selected; return its ``last()`` in gymnasium form."""
        env, me = self.env, self.agent
        while env.agents:
            current = env.agent_selection
            obs, reward, terminated, truncated, info = env.last()
            if current == me:
                # infos are the env's own dicts, updated in place; a copy is the caller's to keep
                info = copy.deepcopy(info)
                if self.masked:
                    self._mask = np.array(obs["action_mask"], dtype=np.int8)
                    info["action_mask"] = self._mask.copy()
                    obs = obs["observation"]
                return obs, float(reward), bool(terminated), bool(truncated), info
            env.step(None if terminated or truncated else self._opponents[current](obs))
        raise RuntimeError(f"{env} removed {me} without selecting it once it was done; SingleAgent needs "
                           "envs that give every finished agent a turn (PettingZoo's _deads_step_first)")


def _read_opponents(
    opponents: Mapping[str, OpponentPolicy] | OpponentPolicy, seats: list[str], agent: str | None
) -> dict[str, OpponentPolicy]:
    """Check ``opponents`` against the seats and return it as a mapping agent -> policy."""
    others = [s for s in seats if s != agent]
    if not isinstance(opponents, Mapping):
        if not callable(opponents):
            raise TypeError(f"opponents must be a mapping agent -> policy or one callable policy; "
                            f"got {type(opponents).__name__} {opponents!r:.80}")
        return dict.fromkeys(others, opponents)
    unknown = sorted(set(opponents) - set(seats))
    missing = [s for s in others if s not in opponents]
    if unknown or missing:
        need = "every seat (agent='random' may draw any of them)" if agent is None else f"the seats {others}"
        raise ValueError(f"opponents must give a policy for {need}; missing {missing}, unknown {unknown}")
    for seat, policy in opponents.items():
        if not callable(policy):
            raise TypeError(f"opponents[{seat!r}] must be callable observation -> action; "
                            f"got {type(policy).__name__} {policy!r:.80}")
    return {s: opponents[s] for s in others}
