"""Seating: which player plays each seat of an env (agent -> player), written once and read everywhere.

A :class:`Seating` maps an agent name (``player_0``) or a role (``judge``) to a player name. An agent
name wins over its role, and a seat that neither names gets the seating's default (``"main"`` in
``train``, ``sft`` and ``eval``: the learner). It is written in one of two forms, both read by
:meth:`Seating.parse`:

| Form | Example | Where |
|---|---|---|
| a mapping | ``{"judge": "scripted:rule_judge"}`` | ``policies`` of ``train`` / ``sft`` (YAML, ``--set``), a checkpoint's config |
| ``SEAT=PLAYER`` strings | ``["player_0=human", "judge=nash"]`` or ``"player_0=human,judge=nash"`` | ``llm-zoo play --seat`` |

A player name is ``scripted:NAME`` for the env's scripted player NAME (its spec's ``scripted``) in
every command. In ``train``, ``sft`` and ``eval`` any other name is a learner (a model the run
trains, saved under the checkpoint's ``policies/NAME``); in ``play`` and ``crossplay`` it is a
policy spec (:func:`llm_zoo.policies.registry.load_policy`: ``human``, ``random``, a scripted
player's bare name, a model, an endpoint URL).
"""

from __future__ import annotations

from collections.abc import Collection, Iterable, Mapping
from dataclasses import dataclass, field
from types import MappingProxyType
from typing import Any

__all__ = ["SCRIPTED", "Seating", "scripted_name"]

SCRIPTED = "scripted:"
"""The prefix of a player name that seats one of the env's scripted players."""

_FORMS = ("a mapping {SEAT: PLAYER} (YAML: `policies: {judge: 'scripted:rule_judge'}`) or SEAT=PLAYER strings "
          "(`judge=scripted:rule_judge`, several joined by commas or given one by one)")


def scripted_name(player: str) -> str | None:
    """Return NAME for a player written ``scripted:NAME``, else None."""
    return player[len(SCRIPTED):] if player.startswith(SCRIPTED) else None


@dataclass(frozen=True)
class Seating:
    """Agent or role -> player name; an agent name wins over its role, and other seats get ``default``.

    Attributes:
        seats: The named seats, agent or role -> player name.
        default: The player of a seat the mapping does not name; None: such a seat is an error.
    """

    seats: Mapping[str, str] = field(default_factory=dict)
    default: str | None = "main"

    def __post_init__(self) -> None:
        object.__setattr__(self, "seats", MappingProxyType(dict(self.seats)))

    @classmethod
    def parse(cls, value: Any, *, where: str = "config.policies", default: str | None = "main") -> Seating:
        """Read a seating from a mapping, a ``SEAT=PLAYER`` string (several joined by commas), or a list of them.

        Args:
            value: The written seating (None or empty: every seat gets ``default``); a :class:`Seating` is
                taken as it is, with its own default.
            where: The config field or flag it came from, for the error.
            default: The player of the seats ``value`` does not name.

        Raises:
            ValueError: A malformed entry (not ``SEAT=PLAYER``, an empty side, a seat named twice), naming
                ``where`` and the forms it takes.
        """
        if isinstance(value, Seating):
            return value
        if value is None:
            return cls({}, default)
        if isinstance(value, Mapping):
            pairs: Iterable[tuple[Any, Any]] = value.items()
        elif isinstance(value, str):
            pairs = [_split(item, where) for item in value.split(",") if item.strip()]
        elif isinstance(value, (list, tuple)):
            pairs = [_split(item, where) for item in value]
        else:
            raise ValueError(f"{where}: expected {_FORMS}; got a {type(value).__name__}: {repr(value)[:200]}")
        seats: dict[str, str] = {}
        for seat, player in pairs:
            if not isinstance(seat, str) or not isinstance(player, str) or not seat.strip() or not player.strip():
                raise ValueError(f"{where}: each seat and player must be a non-empty string; got "
                                 f"{seat!r}: {player!r}. Expected {_FORMS}")
            seat, player = seat.strip(), player.strip()
            if seat in seats and seats[seat] != player:
                raise ValueError(f"{where}: seat {seat!r} is given two players, {seats[seat]!r} and {player!r}; "
                                 "name each seat once")
            seats[seat] = player
        return cls(seats, default)

    def player(self, agent: str, role: str) -> str:
        """Return the player of ``agent`` (whose role is ``role``): by its name, else by its role, else the default.

        Raises:
            ValueError: Neither is named and there is no default.
        """
        if agent in self.seats:
            return self.seats[agent]
        if role in self.seats:
            return self.seats[role]
        if self.default is None:
            raise ValueError(f"seat {agent!r} (role {role!r}) has no player: the seating names "
                             f"{sorted(self.seats) or 'no seat'}; name it by its agent or its role")
        return self.default

    def assign(self, roles: Mapping[str, str]) -> dict[str, str]:
        """Return agent -> player for every agent of ``roles`` (agent -> role), in their order."""
        return {agent: self.player(agent, role) for agent, role in roles.items()}

    def unknown_seats(self, roles: Mapping[str, str]) -> list[str]:
        """Return the named seats that are neither an agent nor a role of ``roles`` (agent -> role), sorted."""
        return sorted(set(self.seats) - set(roles) - set(roles.values()))

    def check_scripted(self, roles: Mapping[str, str], players: Collection[str], *, env: str,
                       where: str = "config.policies") -> None:
        """Refuse a ``scripted:NAME`` seat whose NAME is not one of the env's scripted ``players``.

        Raises:
            ValueError: Naming the player, ``where`` and the env's players.
        """
        for player in sorted(set(self.assign(roles).values())):
            name = scripted_name(player)
            if name is not None and name not in players:
                raise ValueError(f"{where} names {player!r}, but {env} has no such scripted player; "
                                 f"its players are {sorted(players)}")

    def to_dict(self) -> dict[str, str]:
        """Return the named seats as a plain dict (what a config records)."""
        return dict(self.seats)


def _split(item: Any, where: str) -> tuple[str, str]:
    if not isinstance(item, str) or "=" not in item:
        raise ValueError(f"{where}: expected SEAT=PLAYER (e.g. judge=scripted:rule_judge); got {item!r}")
    seat, _, player = item.partition("=")
    return seat, player
