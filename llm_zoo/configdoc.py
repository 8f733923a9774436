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
* :func:`check_overrides` does that for a mapping and refuses unknown keys, suggesting the nearest field
  (or, for a former field the class lists in ``RENAMED``, the field that holds it now);
* :func:`nest` turns checked values into keyword arguments of the class.

A field whose type is itself a dataclass is a *section* (the trainer's plug-ins: ``magnet``, ``average``, ...):
its fields are set one by one as ``SECTION.FIELD`` (``--set magnet.ema=0.95``) or together as a mapping
(``--set magnet={ema: 0.95}``, or ``magnet: {ema: 0.95}`` in a config file), and either way only the fields
named change. :func:`check_overrides` returns every section field under its dotted name, so that layers of
values (a preset, a config file, ``--set``) merge field by field.
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

__all__ = ["check_overrides", "coerce", "describe", "field_docs", "nest", "sections", "type_name"]


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


@functools.cache
def sections(cls: type) -> dict[str, type]:
    """Return ``{field: its dataclass}`` for each field of ``cls`` whose type is a dataclass (a section)."""
    return {name: hint for name, hint in _hints(cls).items()
            if isinstance(hint, type) and dataclasses.is_dataclass(hint)}


def coerce(cls: type, key: str, value: Any, prefix: str = "") -> Any:
    """Return ``value`` as field ``key`` of ``cls`` holds it, or raise ``ValueError`` naming the field.

    ``key`` may be a section's field, ``SECTION.FIELD``. Besides pydantic's lax conversions: a number for a
    ``str`` field is its text (``model: 123`` in YAML is the directory ``"123"``), and a ``str`` for a ``list``
    field is split at commas (``--set learn=player_0,player_1``). ``prefix`` is the section's name and a dot,
    for the messages.
    """
    from pydantic import ValidationError

    section, dot, sub = key.partition(".")
    if dot and section in sections(cls):
        return coerce(sections(cls)[section], sub, value, prefix=f"{prefix}{section}.")
    if key in sections(cls):
        raise ValueError(f"config.{prefix}{key} is a section of fields ({', '.join(field_docs(sections(cls)[key]))}); "
                         f"set one as {key}.FIELD=VALUE, or several as {key}={{FIELD: VALUE, ...}}; got {value!r:.120}")
    hint = _hints(cls)[key]
    origin = typing.get_origin(hint) or hint
    if origin is str and isinstance(value, (int, float)) and not isinstance(value, bool):
        value = str(value)
    elif origin is list and isinstance(value, str):
        value = [v.strip() for v in value.split(",") if v.strip()]
    if isinstance(value, bool) and origin is not bool:  # pydantic would read True as 1
        raise ValueError(f"config.{prefix}{key} expects {type_name(hint)}; got {value!r} (a bool; YAML reads yes/no/on/off "
                         f"as bools, quote the value to pass it as text)")
    try:
        checked = _adapter(hint).validate_python(value)
    except ValidationError as exc:
        reason = "; ".join(e["msg"] for e in exc.errors()[:3])
        doc = field_docs(cls)[key]
        raise ValueError(f"config.{prefix}{key} expects {type_name(hint)}; got {value!r:.120} ({reason}). "
                         f"{key}: {doc[:160]}") from None
    bad = _non_finite(checked)
    if bad is not None:
        where = "" if isinstance(value, float) else f" in {value!r:.120}"
        raise ValueError(f"config.{prefix}{key} expects finite numbers; got {bad!r}{where} (a run would log NaN beside "
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


def _flatten(cls: type, overrides: Mapping[str, Any]) -> dict[str, Any]:
    """Return ``overrides`` with each section given whole (a mapping or an instance) spread into ``SECTION.FIELD`` keys."""
    out: dict[str, Any] = {}
    for key, value in overrides.items():
        if key in sections(cls) and dataclasses.is_dataclass(value) and not isinstance(value, type):
            value = {f.name: getattr(value, f.name) for f in dataclasses.fields(value)}
        if key in sections(cls) and isinstance(value, Mapping):
            out.update({f"{key}.{sub}": v for sub, v in value.items()})
        else:
            out[key] = value
    return out


def _known(cls: type) -> list[str]:
    """Every name a value may be set under: the fields of ``cls``, a section's as ``SECTION.FIELD``."""
    names = []
    for f in dataclasses.fields(cls):
        names += ([f"{f.name}.{sub.name}" for sub in dataclasses.fields(sections(cls)[f.name])]
                  if f.name in sections(cls) else [f.name])
    return names


def check_overrides(cls: type, overrides: Mapping[str, Any], source: str = "--set") -> dict[str, Any]:
    """Return ``overrides`` with every value coerced to its field's type, a section's fields as ``SECTION.FIELD``.

    Raises:
        ValueError: a key is not a field of ``cls`` (the nearest fields are suggested; a former field that
            ``cls.RENAMED`` lists is named with the field that holds it now), or a value does not fit its
            field's type.
    """
    known = _known(cls)
    renamed: Mapping[str, str] = getattr(cls, "RENAMED", {})
    out = {}
    for key, value in _flatten(cls, overrides).items():
        if key in renamed:
            new = renamed[key]
            section, _, sub = new.partition(".")
            raise ValueError(f"config field {key!r} in {source} is now {new!r}: write --set {new}={value!r:.40} or, "
                             f"in a YAML file, {section}: {{{sub}: {value!r:.40}}} (a run directory's config.yaml "
                             f"from before {new} keeps the old name: rename it there)")
        if key not in known and key not in sections(cls):  # a section given a plain value: coerce says so
            near = difflib.get_close_matches(str(key), known, n=3)
            hint = f"did you mean {' or '.join(map(repr, near))}?" if near else f"known fields: {', '.join(sorted(known))}."
            raise ValueError(f"unknown config field {key!r:.80} in {source}; {hint} `llm-zoo train ENV --help` "
                             "lists every field with its type, default and meaning")
        try:
            out[key] = coerce(cls, key, value)
        except ValueError as exc:
            raise ValueError(f"{exc} (from {source})") from None
    return out


def nest(cls: type, values: Mapping[str, Any]) -> dict[str, Any]:
    """Return checked values (:func:`check_overrides`) as keyword arguments of ``cls``: each section built from its
    ``SECTION.FIELD`` values over its defaults (and its own checks run)."""
    out: dict[str, Any] = {}
    parts: dict[str, dict[str, Any]] = {}
    for key, value in values.items():
        section, dot, sub = key.partition(".")
        if dot:
            parts.setdefault(section, {})[sub] = value
        else:
            out[key] = value
    for section, fields in parts.items():
        out[section] = sections(cls)[section](**fields)
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
        value = getattr(config, f.name)
        if f.name not in sections(cls):
            lines += _entry(f.name, hints[f.name], value, docs[f.name], width)
            continue
        lines += _entry(f.name, None, None, docs[f.name], width)  # the section's doc, then its fields
        part = type(value)
        lines += [line for sub in dataclasses.fields(part) for line in
                  _entry(f"{f.name}.{sub.name}", _hints(part)[sub.name], getattr(value, sub.name),
                         field_docs(part)[sub.name], width)]
    return "\n".join(lines)


def _entry(name: str, hint: Any, value: Any, doc: str, width: int) -> list[str]:
    """``name: type = value`` (a section: ``name: section, set as name.FIELD=VALUE``) and its doc wrapped below."""
    head = f"  {name}: {type_name(hint)} = {value!r}" if hint is not None else \
        f"  {name}: section, set as {name}.FIELD=VALUE"
    return [head] + textwrap.wrap(doc.replace("``", "`"), width, initial_indent=" " * 6, subsequent_indent=" " * 6)
