"""A discrete view of a text env whose moves form a finite menu, for classic learners.

:class:`DiscreteActions` numbers the env's :meth:`~llm_zoo.envs.core.TextEnv.action_menu` and turns
the text env into the shape of PettingZoo's classic envs (tictactoe, leduc holdem):

* action: ``Discrete(len(menu))``; action ``i`` sends the reply ``menu[i]``;
* observation: ``{"observation": float32 vector from features(agent),
  "action_mask": int8 vector over the menu}``, the mask read from ``obs["legal_actions"]`` of the
  text observation (all zeros while another agent is to move; all ones once this agent is done,
  see below);
* infos: numbers, as classic envs keep them (below).

Turn order, rewards, terminations and render are the text env's own.

## Numeric infos
By default (``infos="numeric"``) each agent's ``infos`` is a dict of floats with the same keys from
``reset`` to the end: the facts every text env keeps (:data:`NUMERIC_INFOS`: ``invalid_replies``,
``tool_calls``, ``truncated_replies``, ``forfeit`` as 0/1), any further numeric facts named by
``info_keys`` (Kuhn poker: ``("seat", "total")``), each 0 until the env sets it, and ``return``, the
agent's rewards so far this episode. Libraries that turn infos into tensors (TorchRL's
``PettingZooWrapper``) take them as they are; text facts (a card, a role, an info set) stay in the
text env's ``env.unwrapped.infos``, and ``infos="text"`` shows those dicts here instead.

## Finished agents
A terminated or truncated agent's mask marks every index: each is then a no-op, and ``step`` with
any in-range index (or ``None``) takes the agent's dead step. A sampler that draws from the mask of
whoever is selected (TorchRL does, through the dead steps of an AEC env) thus never meets an empty
distribution.

    >>> from llm_zoo import kuhn_poker_v0
    >>> env = DiscreteActions(kuhn_poker_v0.env())
    >>> env.reset(seed=0)
    >>> obs, *_ = env.last()
    >>> obs["action_mask"]          # [check] and [bet] are legal, [call] and [fold] are not
    array([1, 1, 0, 0], dtype=int8)
    >>> env.step(1)                 # player_0 replies "[bet]"

## Masked actions
An in-range action that the mask forbids is sent to the env as its menu reply, so the env's own
invalid-move policy applies, exactly as for a text reply: feedback and a retry by the same agent, a
forfeit after ``max_retries`` (Kuhn poker: one retry, then -1). This keeps unmasked learners (plain
PPO, DQN) running and gives them the env's penalty to learn from, where PettingZoo's classic envs
would need a ``TerminateIllegalWrapper``; masked learners (MaskablePPO) never send one. The discrete
observation does not show the feedback, so a retry looks like the turn before it.

An action that is not an integer in ``0..len(menu) - 1`` is a programming error and raises
``ValueError``/``TypeError`` (the role PettingZoo's ``AssertOutOfBoundsWrapper`` plays), as does
``None`` for an agent that is still live.
"""

from __future__ import annotations

import copy
import numbers
import operator
import sys
from collections.abc import Sequence
from typing import Any

import numpy as np
from gymnasium import spaces
from pettingzoo import AECEnv
from pettingzoo.utils.wrappers import BaseWrapper

if sys.version_info >= (3, 12):
    from typing import override
else:  # typing_extensions comes with gymnasium, a core dependency
    from typing_extensions import override

__all__ = ["NUMERIC_INFOS", "DiscreteActions"]

NUMERIC_INFOS = ("invalid_replies", "tool_calls", "truncated_replies", "forfeit")
"""The facts every text env keeps per agent (counts, and the forfeit flag as 0/1): the numeric infos' keys."""


class DiscreteActions(BaseWrapper):
    """View a text AEC env with a finite move menu as a ``Discrete``-action, masked-vector env.

    Args:
        env: A text env (an llm_zoo env, wrapped or raw) whose ``unwrapped.action_menu()`` is not None
            and whose observation holds ``"legal_actions"``.
        infos: ``"numeric"`` (floats under fixed keys, see the module docstring) or ``"text"`` (the
            text env's own dicts).
        info_keys: Numeric facts of the env to show besides :data:`NUMERIC_INFOS` and ``return``.

    Raises:
        ValueError: ``env`` has free-text replies (``action_menu()`` returns None) or a bad menu, or
            ``infos`` is neither mode; later, an ``info_keys`` fact that is not a number.
    """

    def __init__(self, env: AECEnv, *, infos: str = "numeric", info_keys: Sequence[str] = ()) -> None:
        super().__init__(env)
        if infos not in ("numeric", "text"):
            raise ValueError(f"infos must be 'numeric' (a fixed set of float facts) or 'text' (the text env's own "
                             f"dicts); got {infos!r:.80}")
        self._info_mode = infos
        self.info_keys: tuple[str, ...] = tuple(dict.fromkeys([*NUMERIC_INFOS, *info_keys]))
        self._returns: dict[str, float] = {}
        base = env.unwrapped
        menu_fn = getattr(base, "action_menu", None)
        menu = menu_fn() if callable(menu_fn) else None
        if menu is None:
            raise ValueError(
                f"{base} has free-text replies and no discrete view: its action_menu() returned None. "
                "DiscreteActions needs an env whose moves form a finite menu, such as kuhn_poker_v0."
            )
        menu = tuple(menu)
        if not menu or not all(isinstance(r, str) for r in menu) or len(set(menu)) != len(menu):
            raise ValueError(f"{base}.action_menu() must return distinct str replies, at least one; got {menu!r:.300}")
        self.menu: tuple[str, ...] = menu
        self._index = {reply: i for i, reply in enumerate(menu)}
        box = _feature_space(base)
        # One space object per agent: seed_test seeds each agent's spaces separately.
        self.observation_spaces = {
            a: spaces.Dict({
                "observation": spaces.Box(box.low, box.high, box.shape, np.float32),
                "action_mask": spaces.Box(0, 1, (len(menu),), np.int8),
            })
            for a in base.possible_agents
        }
        self.action_spaces = {a: spaces.Discrete(len(menu)) for a in base.possible_agents}

    @override
    def observation_space(self, agent: str) -> spaces.Space:
        return self.observation_spaces[agent]

    @override
    def action_space(self, agent: str) -> spaces.Space:
        return self.action_spaces[agent]

    @property
    def infos(self) -> dict[str, dict[str, Any]]:
        """Each agent's facts: under ``infos="numeric"`` the floats named by ``info_keys`` and its return."""
        facts = self.env.infos
        if self._info_mode == "text":
            return facts
        return {agent: self._numeric(agent, info) for agent, info in facts.items()}

    def _numeric(self, agent: str, info: dict[str, Any]) -> dict[str, float]:
        out = {}
        for key in self.info_keys:
            value = info.get(key, 0.0)
            if not isinstance(value, (numbers.Real, np.bool_)):
                raise ValueError(f"{agent}'s info {key!r} is {type(value).__name__} {value!r:.80}, not a number; "
                                 "info_keys may name numeric facts only (infos='text' gives the text env's own dicts)")
            out[key] = float(value)
        out["return"] = self._returns.get(agent, 0.0)
        return out

    @override
    def reset(self, seed: int | None = None, options: dict[str, Any] | None = None) -> None:
        self.env.reset(seed=seed, options=options)
        self._returns = dict.fromkeys(self.env.possible_agents, 0.0)

    @override
    def observe(self, agent: str) -> dict[str, np.ndarray]:
        text_obs = self.env.observe(agent)  # first, so that call-order errors come from the env's wrappers
        legal = text_obs.get("legal_actions") if isinstance(text_obs, dict) else None
        if legal is None:
            raise ValueError(f"{self.env.unwrapped}'s observation has no 'legal_actions'; DiscreteActions "
                             "reads the action mask from it")
        if agent not in self.env.agents or self.env.terminations[agent] or self.env.truncations[agent]:
            return {"observation": np.array(self.env.unwrapped.features(agent), dtype=np.float32),
                    "action_mask": np.ones(len(self.menu), dtype=np.int8)}
        mask = np.zeros(len(self.menu), dtype=np.int8)
        for reply in legal:
            index = self._index.get(reply)
            if index is None:
                raise ValueError(f"legal reply {reply!r:.80} of {self.env.unwrapped} is not in its action_menu() "
                                 f"{self.menu!r}; every legal reply must be a menu entry")
            mask[index] = 1
        vector = np.array(self.env.unwrapped.features(agent), dtype=np.float32)  # a copy, never the env's buffer
        return {"observation": vector, "action_mask": mask}

    @override
    def step(self, action: Any) -> None:
        agent = self.env.agent_selection
        # a finished agent is absent from terminations once its dead step is taken; the env warns then
        finished = self.env.terminations.get(agent, True) or self.env.truncations.get(agent, True)
        if finished and (action is None or self._is_index(action)):
            self.env.step(None)  # any menu index of a finished agent is its no-op, as its mask says
        else:
            self.env.step(self.menu[self._read_action(agent, action)])
        for a, reward in self.env.rewards.items():
            self._returns[a] = self._returns.get(a, 0.0) + reward

    def _is_index(self, action: Any) -> bool:
        try:
            return 0 <= self._read_action(self.env.agent_selection, action) < len(self.menu)
        except (TypeError, ValueError):
            return False

    def _read_action(self, agent: str, action: Any) -> int:
        """Read ``action`` as a menu index; raise for anything but an integer in range."""
        expected = f"an int in 0..{len(self.menu) - 1} indexing the menu {self.menu!r}"
        if isinstance(action, np.ndarray) and action.shape == () and action.dtype.kind in "iu":
            action = action.item()
        try:
            if isinstance(action, (bool, np.bool_)):
                raise TypeError
            index = operator.index(action)
        except TypeError:
            hint = "; None is only for terminated or truncated agents" if action is None else ""
            raise TypeError(f"{agent}'s action must be {expected}; got {type(action).__name__} "
                            f"{action!r:.80}{hint}") from None
        if not 0 <= index < len(self.menu):
            legal = np.flatnonzero(self.observe(agent)["action_mask"]).tolist()
            raise ValueError(f"{agent}'s action must be {expected}; got {index!r}. Legal now: {legal}")
        return index


def _feature_space(base: AECEnv) -> spaces.Box:
    """Return the space of ``base.features(agent)``: the env's ``feature_space()`` if it declares one, else probed.

    The probe resets a deep copy of the (not yet reset) env once and measures one feature vector; with
    no declared bounds the space is unbounded.
    """
    declared = getattr(base, "feature_space", None)
    box = declared() if callable(declared) else None
    if box is not None:
        if not isinstance(box, spaces.Box):
            raise ValueError(f"{base}.feature_space() must return a gymnasium Box or None; got {box!r:.200}")
        return box
    probe = copy.deepcopy(base)
    try:
        probe.reset(seed=0)
        shape = np.asarray(probe.features(probe.possible_agents[0]), dtype=np.float32).shape
    finally:
        probe.close()
    if len(shape) != 1 or shape[0] == 0:
        raise ValueError(f"{base}.features(agent) must return a non-empty 1-D vector; got shape {shape}")
    return spaces.Box(-np.inf, np.inf, shape, np.float32)
