"""harness.capabilities: what a task's program can reach at all, walked attribute by attribute.

The program's builtins and modules are curated namespaces (harness.py). From every one of them and
everything they hold, a walk follows every attribute name the source check allows (any name that
:data:`rules.DENIED_ATTRIBUTES` does not match), container items and ``type()``, to a fixed depth;
nothing it reaches may be a module (``sys``, ``os``, ``builtins``, ``importlib``), a module's dict,
a frame, code or traceback object, or a function the program must not have (``eval``, the real
``getattr``, ``__import__``, ``operator.attrgetter``, ...). The same walk from the real modules
finds them, so the walk is able to.
"""

from __future__ import annotations

import builtins
import functools
import importlib
import operator
import re
import string
import sys
import types
import typing
from collections.abc import Iterable
from typing import Any

import pytest

from llm_zoo.envs.proposer_solver import harness
from llm_zoo.envs.proposer_solver.rules import ALLOWED_IMPORTS, DENIED_ATTRIBUTES

DEPTH = 6
NAMES = [*ALLOWED_IMPORTS, "collections.abc"]
DENIED = re.compile(DENIED_ATTRIBUTES).fullmatch
OUT_OF_REACH_TYPES = (types.ModuleType, types.FrameType, types.CodeType, types.TracebackType)


@pytest.fixture(scope="module")
def program_builtins() -> dict[str, Any]:
    for name in NAMES:
        importlib.import_module(name)
    made = harness.capabilities(sys.modules, NAMES, ALLOWED_IMPORTS, DENIED_ATTRIBUTES, [])
    assert set(made.pop("__guarded__")) >= {"__import__", "attrgetter", "methodcaller"}
    return made


def out_of_reach() -> dict[int, Any]:
    """Id -> what a program must never hold: module dicts, and the functions it gets no capability for.

    The objects are held, not only their ids: a pseudo-module's ``vars()`` (``typing.io`` on 3.11) is a fresh
    dict, whose id a value the walk reaches later could reuse once it is freed.
    """
    held = [vars(m) for m in list(sys.modules.values()) if m is not None]
    held += [getattr(builtins, n) for n in harness.HIDDEN_BUILTINS if hasattr(builtins, n)]
    held += [builtins.__import__, operator.attrgetter, operator.methodcaller, functools.update_wrapper,
             functools.wraps, functools.singledispatch, string.Formatter, typing.get_type_hints, typing.ForwardRef,
             importlib.import_module]
    return {id(obj): obj for obj in held}


def children(obj: Any) -> Iterable[tuple[str, Any]]:
    """What a program holding ``obj`` can get from it without a call: ``type(obj)``, items, allowed attributes."""
    yield "<type>", type(obj)
    if isinstance(obj, (dict, types.MappingProxyType)):
        for key, value in list(obj.items())[:300]:
            yield f"[{key!r:.30}]", value
            yield f"<key {key!r:.30}>", key
    elif isinstance(obj, (list, tuple, set, frozenset)):
        yield from ((f"[{i}]", v) for i, v in enumerate(list(obj)[:300]))
    try:
        names = dir(obj)
    except Exception:  # noqa: BLE001 - an object whose dir() fails shows no names
        names = []
    for name in names:
        if DENIED(name):
            continue
        try:
            yield f".{name}", getattr(obj, name)
        except Exception:  # noqa: BLE001,S112 - an attribute that raises hands out nothing
            continue


def walk(roots: dict[str, Any], depth: int) -> tuple[list[str], int]:
    """Return (what the walk from ``roots`` reached that is out of reach, how many objects it reached)."""
    bad_ids = out_of_reach()
    seen = {id(v) for v in roots.values()}
    frontier, found = list(roots.items()), []
    for _ in range(depth):
        reached = []
        for path, obj in frontier:
            for step, value in children(obj):
                if id(value) in seen:
                    continue
                seen.add(id(value))
                reached.append((path + step, value))
                if isinstance(value, OUT_OF_REACH_TYPES) or id(value) in bad_ids:
                    found.append(f"{path}{step}: {type(value).__name__}")
        frontier = reached
    return found, len(seen)


def test_no_attribute_chain_from_the_capabilities_reaches_the_system_or_the_interpreter(program_builtins):
    roots = {f"builtins.{name}": value for name, value in program_builtins.items()}
    roots |= {name: program_builtins["__import__"](name, fromlist=("*",)) for name in NAMES}
    found, reached = walk(roots, DEPTH)
    assert not found, found[:20]
    assert reached > 2000  # the walk went everywhere the namespaces lead: every class, method and constant


def test_the_same_walk_from_the_real_modules_finds_what_the_capabilities_hide():
    found, _ = walk({name: importlib.import_module(name) for name in ("typing", "statistics", "collections")}
                    | {"builtins": vars(builtins)}, 2)
    assert {"typing.sys: module", "statistics.random: module", "builtins['eval']: builtin_function_or_method"} \
        <= set(found), found[:20]


def test_namespaces_hold_the_public_names_less_the_hidden_ones(program_builtins):
    space = program_builtins["__import__"]
    assert space("math", fromlist=("*",)).gcd(12, 8) == 4
    assert space("collections.abc").abc.Sized is space("collections.abc", fromlist=("Sized",)).Sized
    for module, name in [("collections", "_sys"), ("statistics", "random"), ("string", "Formatter"),
                         ("typing", "get_type_hints"), ("typing", "sys"), ("functools", "singledispatch"),
                         ("calendar", "LocaleTextCalendar"), ("dataclasses", "sys"), ("re", "_cache")]:
        assert not hasattr(space(module, fromlist=("*",)), name), (module, name)
    for name in ("eval", "exec", "open", "getattr", "vars", "globals", "__loader__", "__spec__"):
        assert name not in program_builtins


@pytest.mark.parametrize("name", ["os", "sys", "importlib", "builtins", "random", "collections._sys", ".x"])
def test_import_gives_namespaces_of_the_allowed_modules_only(program_builtins, name):
    with pytest.raises(ImportError, match="is not allowed"):
        program_builtins["__import__"](name, fromlist=())


@pytest.mark.parametrize("attribute", ["__globals__", "real.__class__", "gi_frame", "f_back", "_sys", "mro",
                                       "format", "format_map"])
def test_attribute_getters_refuse_the_denied_names_and_hide_the_real_getter(program_builtins, attribute):
    operator_space = program_builtins["__import__"]("operator", fromlist=("*",))
    with pytest.raises(AttributeError, match="is not available"):
        operator_space.attrgetter("real", attribute)
    with pytest.raises(AttributeError, match="is not available"):
        operator_space.methodcaller(attribute)
    getter = operator_space.attrgetter("real")
    assert getter(3) == 3 and type(getter) is types.FunctionType  # type(getter) would take any name
    functools_space = program_builtins["__import__"]("functools", fromlist=("*",))
    with pytest.raises(TypeError):
        functools_space.update_wrapper(lambda: 0, len, ("__globals__",))


def test_no_argument_replaces_a_capability_s_state(program_builtins):
    # state in defaults could be replaced by a keyword (attrgetter(name, _check=...)): there is none
    operator_space = program_builtins["__import__"]("operator", fromlist=("*",))
    with pytest.raises(TypeError):
        operator_space.attrgetter("__globals__", _check=lambda name: None, _real=operator.attrgetter)
    with pytest.raises(AttributeError, match="is not available"):  # extra keywords go to the method, not the check
        operator_space.methodcaller("__subclasses__", _check=len, _real=operator.methodcaller)(object)
    with pytest.raises(TypeError):
        program_builtins["__import__"]("os", spaces={"os": sys}, fromlist=("*",))
    for made in (operator_space.attrgetter, operator_space.methodcaller, program_builtins["__import__"]):
        assert made.__defaults__ is None or all(not callable(d) and not isinstance(d, (dict, list))
                                                for d in made.__defaults__), made
        assert not made.__kwdefaults__
