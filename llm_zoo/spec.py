"""EnvSpec: the one typed record through which the package knows an env, and the registry of them.

An env tells the rest of llm_zoo what it is by registering an :class:`EnvSpec`: its versioned
name, a factory for the wrapped AEC env, its roles, the roles that learn by default and the
scripted player of each role that does not, its scripted players by name, the text a tiny model's tokenizer is
drawn from, and its headline evaluation. The
trainer, the CLI (``llm-zoo train/play/eval/crossplay``), the evaluators and the baselines read
these fields and nothing else of the env's module. Per-env trainer settings are not here: they
are training configuration (:mod:`llm_zoo.trainers.presets`).

Registering, as PettingZoo's ``register`` and OpenSpiel's ``register_game`` do::

    import llm_zoo
    from llm_zoo.spec import EnvSpec

    llm_zoo.register(EnvSpec(name="my_game_v0", env=my_env, roles=("player",)))
    llm_zoo.make_env("my_game_v0")

A package outside llm_zoo may instead name its spec under the entry-point group ``llm_zoo.envs``
(in its ``pyproject.toml``: ``[project.entry-points."llm_zoo.envs"] my_game_v0 =
"my_pkg.my_game:SPEC"``). The module may also register its spec itself, as above: the two name
the same spec, and registering it twice is a no-op.

The built-in envs and the entry points' envs are registered by name -> ``"module:SPEC"`` when
``llm_zoo`` is imported (so PettingZoo's registry has them at once), and their modules load on
first lookup, so ``import llm_zoo`` stays light.

Headline evaluations
--------------------
An env's ``evaluate`` plays held-out seeds: episode ``i`` of an evaluation is reset with seed
``EVAL_SEED_BASE + i`` (:func:`eval_seeds`). Training draws its env seeds from ``[0, 2**31)``
(``rng.randrange(2**31)`` in the trainer), so no training episode ever plays an evaluation seed.
What ``llm-zoo eval`` reads from the mapping an ``evaluate`` returns (:data:`HEADLINE_KEYS`):

- ``"headline"``: the name of the headline metric, itself a key of the mapping with a float value;
- ``"interval"``: its 95% interval ``[low, high]`` (:func:`wilson_interval` for a rate over
  episodes, :func:`mean_interval` for a mean; an exact metric gives ``[value, value]``);
- ``"interval_method"``: how it was computed (``"wilson"``, ``"normal"``, ``"exact"``, ...);
- ``"episodes"``: how many episodes were played (0 for an exact reading);
- ``"seeds"``: ``[first, last]`` of the seeds played (``[]`` when none were).

Other keys (secondary metrics, with their own ``<name>_interval``) are passed through.
"""

from __future__ import annotations

import functools
import importlib
import math
import re
import sys
import types
import warnings
from collections.abc import Callable, Collection, Mapping, Sequence
from dataclasses import dataclass, field
from importlib import metadata
from typing import Any, Protocol

from pettingzoo import AECEnv

from llm_zoo.episode import Episode
from llm_zoo.seating import scripted_name

__all__ = ["ENTRY_POINT_GROUP", "ENV_ARGUMENT_HELP", "EVAL_SEED_BASE", "HEADLINE_KEYS", "EnvSpec",
           "Play", "env_argument", "env_reference", "env_spec", "eval_seeds", "make_env", "mean_interval",
           "pettingzoo_id", "read_entry_points", "register", "register_lazy", "registered", "wilson_interval"]

EVAL_SEED_BASE = 2**31
"""Evaluation seeds start here; no training seed reaches them (training draws from ``[0, 2**31)``)."""

HEADLINE_KEYS = ("headline", "interval", "interval_method", "episodes", "seeds")
"""The keys ``llm-zoo eval`` reads from a headline evaluation (module docstring), besides the metric itself."""

Z95 = 1.959963984540054
"""The 97.5th percentile of the standard normal: a two-sided 95% interval."""


def eval_seeds(episodes: int, start: int = 0) -> list[int]:
    """Return the held-out seeds of an evaluation's episodes: ``EVAL_SEED_BASE + start + i``."""
    return [EVAL_SEED_BASE + start + i for i in range(episodes)]


def wilson_interval(successes: float, trials: int) -> list[float]:
    """Return the 95% Wilson score interval of a rate (``successes`` of ``trials``); [0, 1] with no trials."""
    if trials <= 0:
        return [0.0, 1.0]
    p = successes / trials
    denominator = 1 + Z95**2 / trials
    centre = (p + Z95**2 / (2 * trials)) / denominator
    half = Z95 * math.sqrt(p * (1 - p) / trials + Z95**2 / (4 * trials**2)) / denominator
    # at p = 0 (p = 1) the bound is exactly 0 (1); the arithmetic would leave a rounding error there
    return [0.0 if p <= 0 else max(0.0, centre - half), 1.0 if p >= 1 else min(1.0, centre + half)]


def mean_interval(values: Sequence[float]) -> list[float]:
    """Return the 95% normal interval of the mean of independent ``values`` (the mean twice with fewer than 2)."""
    n = len(values)
    if n == 0:
        return [math.nan, math.nan]
    mean = sum(values) / n
    if n < 2:
        return [mean, mean]
    std = math.sqrt(sum((v - mean) ** 2 for v in values) / (n - 1))
    return [mean - Z95 * std / math.sqrt(n), mean + Z95 * std / math.sqrt(n)]


ENTRY_POINT_GROUP = "llm_zoo.envs"
"""The entry-point group third-party packages list their specs under (value ``"module:SPEC"``)."""

EVAL_SEED_BASE = 2**31

NAME_PATTERN = re.compile(r"[a-z][a-z0-9_]*_v\d+")
"""A versioned env name: lower-case words, then ``_v`` and the version (``kuhn_poker_v0``)."""


class Play(Protocol):
    """Plays episodes for an evaluation: ``play(policies, seeds, *, options=None, env_kwargs=None, seed=None)``.

    The caller of :attr:`EnvSpec.evaluate` passes one (the trainer passes
    :func:`llm_zoo.trainers.rollout.collect` bound to the env), so an env's evaluation can play
    batched episodes without importing the trainer. ``policies`` maps agents or roles to
    policies (or is a list of such maps, one per episode); the result is one
    :class:`~llm_zoo.episode.Episode` per seed, in order.
    """

    def __call__(self, policies: Any, seeds: Sequence[int], *, options: Any = None,
                 env_kwargs: Mapping[str, Any] | None = None, seed: int | None = None) -> list[Episode]: ...


@dataclass(frozen=True)
class EnvSpec:
    """Everything the package knows about an env; frozen, so a registered spec cannot drift."""

    name: str
    """Versioned name, ``<game>_v<N>`` (``kuhn_poker_v0``); bump N when rules, observations or rewards change."""
    env: Callable[..., AECEnv]
    """Factory of the env with its standard wrappers: ``env(**env_kwargs)``."""
    roles: tuple[str, ...]
    """Every role an agent of the env can have (``raw_env.role_of(agent)``), e.g. ``("solver", "judge")``."""
    learning_roles: tuple[str, ...] = ()
    """Roles the trainer trains unless its config says otherwise; empty = every role."""
    frozen_players: Mapping[str, str] = field(default_factory=dict)
    """Role -> ``"scripted:NAME"`` (``NAME`` one of ``scripted``): who plays the role when it does not learn and
    the trainer's ``policies`` seat no one there. Every role outside ``learning_roles`` needs one."""
    scripted: Mapping[str, Callable[..., Any]] = field(default_factory=dict)
    """Scripted players by name: ``factory(seed=None) -> Policy``; every role should have one."""
    corpus: Callable[[], Sequence[str]] | None = None
    """The text the env shows, for the tokenizer of a tiny model (how it is drawn is the model's choice: the
    trainer's ``model_tokenizer``); None = a byte-level tokenizer."""
    evaluate: Callable[..., Mapping[str, Any]] | None = None
    """The headline evaluation: ``evaluate(policies, *, env_kwargs, play, **options) -> {metric: value}``,
    ``policies`` mapping each agent to its policy and ``play`` a :class:`Play`; None = no headline. The built-in
    envs keep theirs in their folder's ``evaluate.py`` (``evaluate_policies``)."""
    description: str = ""
    """One line on what the env is, for listings."""

    def __post_init__(self) -> None:
        if not isinstance(self.name, str) or not NAME_PATTERN.fullmatch(self.name):
            raise ValueError(f"EnvSpec.name must be a versioned name such as 'my_game_v0' "
                             f"(pattern {NAME_PATTERN.pattern}); got {self.name!r}")
        if not callable(self.env):
            raise TypeError(f"EnvSpec({self.name!r}).env must be a callable returning an AEC env; "
                            f"got {type(self.env).__name__}")
        roles = tuple(self.roles)
        if not roles or not all(isinstance(r, str) and r for r in roles):
            raise ValueError(f"EnvSpec({self.name!r}).roles must name at least one role; got {self.roles!r}")
        learning = tuple(self.learning_roles)
        unknown = sorted(set(learning) - set(roles))
        if unknown:
            raise ValueError(f"EnvSpec({self.name!r}).learning_roles {unknown} are not among its roles {roles}")
        bad = sorted(str(k) for k, v in self.scripted.items() if not isinstance(k, str) or not callable(v))
        if bad:
            raise TypeError(f"EnvSpec({self.name!r}).scripted maps names to factories(seed=None); "
                            f"these entries are not: {bad}")
        self._check_frozen_players(roles, learning or roles)
        for name in ("corpus", "evaluate"):
            value = getattr(self, name)  # a field of this dataclass, not an env module's attribute
            if value is not None and not callable(value):
                raise TypeError(f"EnvSpec({self.name!r}).{name} must be callable or None; got {type(value).__name__}")
        object.__setattr__(self, "roles", roles)
        object.__setattr__(self, "learning_roles", learning or roles)
        object.__setattr__(self, "scripted", types.MappingProxyType(dict(self.scripted)))
        object.__setattr__(self, "frozen_players", types.MappingProxyType(dict(self.frozen_players)))

    def _check_frozen_players(self, roles: tuple[str, ...], learning: tuple[str, ...]) -> None:
        players = dict(self.frozen_players)
        for role, player in players.items():
            if role not in roles:
                raise ValueError(f"EnvSpec({self.name!r}).frozen_players names the role {role!r}, which is not "
                                 f"among its roles {roles}")
            if not isinstance(player, str) or scripted_name(player) not in self.scripted:
                raise ValueError(f"EnvSpec({self.name!r}).frozen_players[{role!r}] must be 'scripted:NAME' with NAME "
                                 f"one of its scripted players {sorted(self.scripted)}; got {player!r:.80}")
        unseated = [r for r in roles if r not in learning and r not in players]
        if unseated:
            raise ValueError(f"EnvSpec({self.name!r}): the roles {unseated} do not learn (learning_roles="
                             f"{learning}) and have no player: name one in frozen_players, e.g. frozen_players="
                             f"{{{unseated[0]!r}: 'scripted:NAME'}}, or add them to learning_roles")

    def seat_frozen_roles(self, policies: Mapping[str, str], roles_of: Mapping[str, str],
                          learn: Collection[str]) -> dict[str, str]:
        """Return ``policies`` (agent or role -> policy name) with :attr:`frozen_players` seated in every role that
        does not learn and that ``policies`` leaves empty.

        ``roles_of`` maps each agent to its role; ``learn`` holds the roles (or agents) that learn.

        Raises:
            ValueError: a role that does not learn has no player, neither in ``policies`` nor in
                :attr:`frozen_players`; the learner would play it without learning from it.
        """
        seated, unseated = dict(policies), []
        for agent, role in roles_of.items():
            if agent in learn or role in learn or agent in seated or role in seated:
                continue
            if role in self.frozen_players:
                seated[role] = self.frozen_players[role]
            elif role not in unseated:
                unseated.append(role)
        if unseated:
            scripted = sorted(self.scripted) or ["(none)"]
            raise ValueError(
                f"{self.name}: the roles {unseated} do not learn (config.learn, else EnvSpec.learning_roles="
                f"{self.learning_roles}) and no one is seated there, so the learner would play them without learning "
                f"from them. Seat a player: --set policies='{{{unseated[0]}: scripted:NAME}}' (NAME one of {scripted}), "
                f"or declare one in the env's EnvSpec(frozen_players={{{unseated[0]!r}: 'scripted:NAME'}}); or let "
                f"them learn (--set learn=[...])")
        return seated

    @property
    def pettingzoo_id(self) -> str:
        """The id under which the env is also registered with PettingZoo (``llm_zoo/kuhn_poker-v0``)."""
        return pettingzoo_id(self.name)


def pettingzoo_id(name: str) -> str:
    """Return the PettingZoo registry id of a versioned name: ``kuhn_poker_v0`` -> ``llm_zoo/kuhn_poker-v0``."""
    head, _, version = name.rpartition("_v")
    return f"llm_zoo/{head}-v{version}"


# ---------------------------------------------------------------------------------------------
# THE REGISTRY
# ---------------------------------------------------------------------------------------------

_specs: dict[str, EnvSpec] = {}
_lazy: dict[str, str] = {}  # name -> "module:attr", loaded on first lookup
_entry_points_read = False
_by_name: set[str] = set()  # names a fresh process finds without importing a module first (built-in, entry point)
_imported_from: dict[str, str] = {}  # name -> the module whose import registered it ("module:name")


def register(spec: EnvSpec, *, replace: bool = False) -> EnvSpec:
    """Register ``spec`` under its name (and with PettingZoo's registry); return it.

    Registering the same spec again, or a spec whose factory is the same function (a module
    imported twice), is a no-op update. Another env under a taken name raises ``ValueError``
    unless ``replace=True``.
    """
    if not isinstance(spec, EnvSpec):
        raise TypeError(f"register() takes an llm_zoo.spec.EnvSpec; got {type(spec).__name__}")
    old = _specs.get(spec.name)
    if old is not None and old != spec and not replace and _origin(old.env) != _origin(spec.env):
        raise ValueError(f"env {spec.name!r} is already registered (factory {_origin(old.env)}); "
                         f"pick another name, bump its version, or pass replace=True")
    if old is None and spec.name in _lazy and not replace and not _is_lazy_target(spec):
        raise ValueError(f"env {spec.name!r} is already registered (spec {_lazy[spec.name]}); "
                         f"pick another name, bump its version, or pass replace=True")
    _specs[spec.name] = spec
    _lazy.pop(spec.name, None)
    _register_with_pettingzoo(spec.name)
    return spec


def register_lazy(name: str, target: str) -> None:
    """Register the spec found at ``target`` (``"module:attr"``) under ``name``; it loads on first lookup."""
    if not NAME_PATTERN.fullmatch(name) or ":" not in target:
        raise ValueError(f"register_lazy expects a versioned name and 'module:attr'; got {name!r}, {target!r}")
    _by_name.add(name)
    if name not in _specs:
        _lazy[name] = target
        _register_with_pettingzoo(name)


def registered() -> list[str]:
    """Return the names of every registered env (built-in, registered, and from entry points), sorted."""
    read_entry_points()
    return sorted(set(_specs) | set(_lazy))


def env_spec(name: str) -> EnvSpec:
    """Return the spec of the env registered as ``name``; ``ValueError`` lists the known names.

    ``"module:name"`` imports ``module`` first (which registers its env), as ``gymnasium.make``
    reads ``"module:EnvName-v0"``: ``env_spec("examples.haggle:haggle_v0")``.
    """
    if name in _specs:
        return _specs[name]
    if ":" in name:
        module, _, name = name.rpartition(":")
        importlib.import_module(module)
        if name in _specs:
            _imported_from.setdefault(name, module)
            return _specs[name]
    if name not in _lazy:
        read_entry_points()
    if name in _lazy:
        target = _lazy[name]
        module, _, attr = target.partition(":")
        spec = vars(importlib.import_module(module)).get(attr)
        if not isinstance(spec, EnvSpec) or spec.name != name:
            raise TypeError(f"{target} should be the EnvSpec of {name!r}; got {spec!r:.120}")
        return register(spec, replace=True)
    raise ValueError(f"unknown env {name!r}; expected one of {registered()}, or MODULE:NAME for an env that a "
                     f"module registers when imported (examples.haggle:haggle_v0); register one with "
                     f"llm_zoo.register(EnvSpec(...)) or the {ENTRY_POINT_GROUP!r} entry-point group")


def env_reference(name: str) -> str:
    """Return the env argument that finds ``name`` from a fresh command: the name itself for a built-in or
    entry-point env, ``MODULE:NAME`` for one that a module registers when imported (as it was given)."""
    if name in _by_name or name not in _imported_from:
        return name
    return f"{_imported_from[name]}:{name}"


ENV_ARGUMENT_HELP = ("a registered env's versioned name (kuhn_poker_v0, ...), or MODULE:NAME to import the module "
                     "that registers it first (examples.haggle:haggle_v0, importable from the current directory)")
"""The help text of the env argument of every ``llm-zoo`` command."""


def env_argument(value: str) -> str:
    """Read a command line's env argument (see :data:`ENV_ARGUMENT_HELP`); return the versioned name.

    For ``MODULE:NAME`` the current directory goes on ``sys.path`` first, as ``python -m`` puts it
    there, so ``llm-zoo train examples.haggle:haggle_v0`` finds ``examples/haggle.py``.
    """
    import argparse
    import os
    import sys

    if ":" in value and os.getcwd() not in sys.path and "" not in sys.path:
        sys.path.insert(0, os.getcwd())
    try:
        return env_spec(value).name
    except (ValueError, ImportError) as err:
        raise argparse.ArgumentTypeError(str(err)) from err


def make_env(name: str, **kwargs: Any) -> AECEnv:
    """Make the env registered as ``name`` (``"kuhn_poker_v0"``), with its standard wrappers."""
    return env_spec(name).env(**kwargs)


def read_entry_points() -> None:
    """Register (lazily) the specs that installed packages name under :data:`ENTRY_POINT_GROUP`; once a process."""
    global _entry_points_read
    if _entry_points_read:
        return
    _entry_points_read = True
    for point in metadata.entry_points(group=ENTRY_POINT_GROUP):
        if point.name in _specs or point.name in _lazy:
            continue
        try:
            register_lazy(point.name, point.value)
        except ValueError as err:  # one package's malformed entry must not stop `import llm_zoo`
            warnings.warn(f"skipped the {ENTRY_POINT_GROUP!r} entry point {point.name} = {point.value!r} of "
                          f"{getattr(point.dist, 'name', '?')}: {err}", stacklevel=2)


def _is_lazy_target(spec: EnvSpec) -> bool:
    """Say whether ``spec`` is the one its name's ``"module:attr"`` points to: that module's attribute, or,
    while the module is being imported (it registers itself before ``attr`` is bound), a spec it registers."""
    module_name, _, attr = _lazy[spec.name].partition(":")
    module = sys.modules.get(module_name)
    if module is None:
        return False
    found = vars(module).get(attr)
    if found is not None:
        return found is spec or found == spec
    # importlib marks a module's spec as initialising for the length of its import
    return bool(getattr(getattr(module, "__spec__", None), "_initializing", False))


def _origin(fn: Callable[..., Any]) -> str:
    return f"{getattr(fn, '__module__', '?')}.{getattr(fn, '__qualname__', repr(fn))}"


def _register_with_pettingzoo(name: str) -> None:
    """Make ``pettingzoo.make("aec", "llm_zoo/<game>-v<N>")`` build the env (through this registry)."""
    import pettingzoo

    if pettingzoo_id(name) not in pettingzoo.aec_registry:
        pettingzoo.register("aec", pettingzoo_id(name), entry_point=functools.partial(make_env, name))
