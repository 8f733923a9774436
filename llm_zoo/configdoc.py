"""A config dataclass as a command line sees it: field docs for ``--help``, values checked against field types.

Generic over any dataclass whose fields carry a default and a docstring under them (the convention of
:class:`~llm_zoo.trainers.grpo.TrainConfig`), so the surface follows the dataclass as it changes:

* :func:`field_docs` reads each field's docstring from the class source (``ast``; the strings are not
  kept at run time);
* :func:`describe` renders every field with its type, default and docstring, for ``llm-zoo train ENV --help``;
* :func:`coerce` checks one value (from YAML or ``--set``) against its field's type with pydantic's
  ``TypeAdapter`` (lax mode: ``"7"`` reads as ``7`` for an ``int``, ``"false"`` as ``False`` for a
  ``bool``) and raises ``ValueError`` naming the field, the type and the value; a number that is not
  finite (``.inf``, ``.nan``, ``1e999``, anywhere in the value) is refused, since no field means one;
* :func:`check_overrides` does that for a mapping and refuses unknown keys, suggesting the nearest field.
"""

from __future__ import annotations

import ast
import dataclasses
import difflib
import functools
import inspect
import math
import textwrap
import typing
from collections.abc import Mapping
from typing import Any

__all__ = ["check_overrides", "coerce", "describe", "field_docs", "type_name"]


@functools.cache
def field_docs(cls: type) -> dict[str, str]:
    """Return ``{field: docstring}`` for the string literal under each annotated field of ``cls``.

    A docstring spanning lines comes back as one paragraph; a field without one maps to ``""``.
    """
    tree = ast.parse(textwrap.dedent(inspect.getsource(cls)))
    body = next(node for node in tree.body if isinstance(node, ast.ClassDef)).body
    docs = {}
    for node, after in zip(body, [*body[1:], None]):
        if isinstance(node, ast.AnnAssign) and isinstance(node.target, ast.Name):
            text = (after.value.value if isinstance(after, ast.Expr) and isinstance(after.value, ast.Constant)
                    and isinstance(after.value.value, str) else "")
            docs[node.target.id] = " ".join(inspect.cleandoc(text).split())
    return {f.name: docs.get(f.name, "") for f in dataclasses.fields(cls)}


def type_name(hint: Any) -> str:
    """Return a type as a person writes it: ``int``, ``list[str]``, ``dict[str, Any]``."""
    if isinstance(hint, type) and not typing.get_args(hint):
        return hint.__name__
    return str(hint).replace("typing.", "")


@functools.cache
def _hints(cls: type) -> dict[str, Any]:
    return typing.get_type_hints(cls)


@functools.cache
def _adapter(hint: Any) -> Any:
    from pydantic import TypeAdapter

    return TypeAdapter(hint)


def coerce(cls: type, key: str, value: Any) -> Any:
    """Return ``value`` as field ``key`` of ``cls`` holds it, or raise ``ValueError`` naming the field.

    Besides pydantic's lax conversions: a number for a ``str`` field is its text (``model: 123`` in
    YAML is the directory ``"123"``), and a ``str`` for a ``list`` field is split at commas
    (``--set learn=player_0,player_1``).
    """
    from pydantic import ValidationError

    hint = _hints(cls)[key]
    origin = typing.get_origin(hint) or hint
    if origin is str and isinstance(value, (int, float)) and not isinstance(value, bool):
        value = str(value)
    elif origin is list and isinstance(value, str):
        value = [v.strip() for v in value.split(",") if v.strip()]
    if isinstance(value, bool) and origin is not bool:  # pydantic would read True as 1
        raise ValueError(f"config.{key} expects {type_name(hint)}; got {value!r} (a bool; YAML reads yes/no/on/off "
                         f"as bools, quote the value to pass it as text)")
    try:
        checked = _adapter(hint).validate_python(value)
    except ValidationError as exc:
        reason = "; ".join(e["msg"] for e in exc.errors()[:3])
        doc = field_docs(cls)[key]
        raise ValueError(f"config.{key} expects {type_name(hint)}; got {value!r:.120} ({reason}). "
                         f"{key}: {doc[:160]}") from None
    bad = _non_finite(checked)
    if bad is not None:
        where = "" if isinstance(value, float) else f" in {value!r:.120}"
        raise ValueError(f"config.{key} expects finite numbers; got {bad!r}{where} (a run would log NaN beside "
                         f"plausible figures). {key}: {field_docs(cls)[key][:160]}")
    return checked


def _non_finite(value: Any) -> float | None:
    """Return a float in ``value`` (through lists, tuples and dict values, at any depth) that is NaN or infinite."""
    stack = [value]
    while stack:  # a stack, not recursion: any depth YAML can hold
        item = stack.pop()
        if isinstance(item, float) and not math.isfinite(item):
            return item
        if isinstance(item, dict):
            stack.extend(item.values())
        elif isinstance(item, (list, tuple)):
            stack.extend(item)
    return None


def check_overrides(cls: type, overrides: Mapping[str, Any], source: str = "--set") -> dict[str, Any]:
    """Return ``overrides`` with every value coerced to its field's type.

    Raises:
        ValueError: a key is not a field of ``cls`` (the nearest fields are suggested), or a value
            does not fit its field's type.
    """
    known = [f.name for f in dataclasses.fields(cls)]
    out = {}
    for key, value in overrides.items():
        if key not in known:
            near = difflib.get_close_matches(str(key), known, n=3)
            hint = f"did you mean {' or '.join(map(repr, near))}?" if near else f"known fields: {', '.join(sorted(known))}."
            raise ValueError(f"unknown config field {key!r:.80} in {source}; {hint} `llm-zoo train ENV --help` "
                             "lists every field with its type, default and meaning")
        try:
            out[key] = coerce(cls, key, value)
        except ValueError as exc:
            raise ValueError(f"{exc} (from {source})") from None
    return out


def describe(config: Any, width: int = 100) -> str:
    """Render every field of a config instance: ``name: type = default`` and its docstring below.

    The defaults shown are ``config``'s values, so an instance built with an env's presets shows that
    env's defaults.
    """
    cls = type(config)
    docs, hints = field_docs(cls), _hints(cls)
    lines = []
    for f in dataclasses.fields(cls):
        lines.append(f"  {f.name}: {type_name(hints[f.name])} = {getattr(config, f.name)!r}")
        if docs[f.name]:
            lines += textwrap.wrap(docs[f.name].replace("``", "`"), width, initial_indent=" " * 6, subsequent_indent=" " * 6)
    return "\n".join(lines)
