"""Checking a statement's doctest-style examples against a solution that runs in another process.

Standard library only, and without ``from __future__`` imports: the rule judge's check program
(``grading.example_check_program``) embeds this module's source and runs it in a sandbox of its
own, beside the solution's (``llm_zoo.sandbox.run_python_beside``; ``llm_zoo.sandbox.plain`` is
there as ``plain``); the env's task checker imports it as a module. Either way each example's source is
evaluated here, with the solution's names looked up in the solution's process, and the values come
back as plain data to be compared here, leniently: numbers to 1e-9 relative, exceptions by class
(never by message), and with ``any_order`` lists and tuples as multisets. Beside the examples: the
probe's calls (:func:`run_probes`), the shown outputs a source holds as literals, read whole
(:func:`held_outputs`), and the names the solution module lacks (:func:`missing_names`).
"""

import ast
import builtins
import math
import time

try:  # as a module of the package
    from llm_zoo.sandbox.plain import RemoteObject, SessionDead, clip
except ImportError:  # embedded in the sandbox's check program, which has loaded /sandbox/plain.py
    from plain import RemoteObject, SessionDead, clip  # type: ignore[no-redef]


class _Names(dict):
    """Names an example sees: its own assignments first, then the solution module's attributes."""

    def __init__(self, module):
        super().__init__()
        self.module = module

    def __missing__(self, key):
        try:
            return getattr(self.module, key)
        except AttributeError:
            raise KeyError(key) from None


def _norm(value, any_order):
    if type(value) in (list, tuple):
        items = [_norm(v, any_order) for v in value]
        return ("seq", sorted(items, key=repr) if any_order else items)
    if type(value) in (set, frozenset):
        return ("seq", sorted((_norm(v, any_order) for v in value), key=repr))
    if type(value) is dict:
        return ("map", sorted(((repr(k), _norm(v, any_order)) for k, v in value.items()), key=repr))
    return value


def _same(a, b):
    if type(a) is RemoteObject or type(b) is RemoteObject:
        return False
    if isinstance(a, bool) or isinstance(b, bool):
        return type(a) is type(b) and a == b
    if type(a) is int and type(b) is int:
        return a == b
    if isinstance(a, (int, float)) and isinstance(b, (int, float)):
        try:
            return math.isclose(a, b, rel_tol=1e-9, abs_tol=1e-12) or a == b
        except OverflowError:  # an int past any float (10**309): equal to no float
            return False
    if type(a) is tuple and type(b) is tuple and len(a) == 2 and a[0] in ("seq", "map") and b[0] == a[0]:
        return len(a[1]) == len(b[1]) and all(_same(x, y) for x, y in zip(a[1], b[1]))
    if type(a) is tuple and type(b) is tuple:
        return len(a) == len(b) and all(_same(x, y) for x, y in zip(a, b))
    return type(a) is type(b) and a == b


def _repr(value):
    """``repr(value)``, which never raises here: an int past Python's digit limit has none."""
    try:
        return repr(value)
    except ValueError:
        return f"<int of {value.bit_length()} bits>" if type(value) is int else "<no repr>"


def _show(value):
    return clip(_repr(value), 200)


def run_examples(start, examples, any_order, per_example_s=1.0):
    """Check ``examples`` (``[source, expected or None, exception name or None]`` each); return the lines.

    Args:
        start: Called with no argument, starts a solution process and returns ``(session, module
            handle, stop)``; called again after a process died (a timeout), for the examples left.
        examples: The examples, in order (later ones see the names earlier ones assigned).
        any_order: Compare lists and tuples as multisets.
        per_example_s: Time limit of each example.

    Lines: ``OK <i>``, ``BAD <i>: <what differed>``, and a last ``EXAMPLES <passed>/<n>``, or one
    ``IMPORT-ERROR <name>: <message>`` line when the solution does not import.
    """
    safe = dict(vars(builtins))
    lines, passed = [], 0
    try:
        session, module, stop = start()
    except SessionDead as exc:
        return ["IMPORT-ERROR SolutionProcessEnded: " + _show(str(exc))]
    except Exception as exc:
        return [f"IMPORT-ERROR {type(exc).__name__}: {_show(str(exc))}"]
    names = _Names(module)
    try:
        for i, (source, expected, raises) in enumerate(examples, 1):
            if session.dead is not None:
                stop()
                try:
                    session, module, stop = start()
                except (Exception, SessionDead) as exc:
                    lines.append(f"BAD {i}: the solution no longer imports: {_show(str(exc))}")
                    continue
                names.module = module
            session.deadline = time.monotonic() + per_example_s
            got = error = None
            try:
                if expected is None and raises is None:
                    exec(compile(source, f"<example {i}>", "exec"), {"__builtins__": safe}, names)
                else:
                    got = eval(compile(source, f"<example {i}>", "eval"), {"__builtins__": safe}, names)
            except SessionDead as exc:
                error = "Timeout" if exc.reason == "timeout" else "SolutionProcessEnded"
            except Exception as exc:
                error = exc
            if raises is not None:
                ok = isinstance(error, BaseException) and any(c.__name__ == raises for c in type(error).__mro__)
                got_text = "no exception" if error is None else error if isinstance(error, str) else type(error).__name__
                note = f"expected {raises}, got {got_text}"
            elif error is not None:
                ok = False
                note = "raised " + (error if isinstance(error, str)
                                    else type(error).__name__ + ": " + _show(str(error)))
            elif expected is None:
                ok, note = True, ""
            else:
                try:
                    want = eval(expected, {"__builtins__": safe}, dict(names))
                    ok = _same(_norm(got, any_order), _norm(want, any_order))
                    note = f"got {_show(got)}, expected {_show(want)}"
                except Exception as exc:  # an expected value that does not evaluate, or values that do not sort
                    ok, note = False, f"could not compare: {type(exc).__name__}"
            passed += ok
            lines.append(f"OK {i}" if ok else f"BAD {i}: {note}")
    finally:
        stop()
    lines.append(f"EXAMPLES {passed}/{len(examples)}")
    return lines


def run_probes(start, calls, per_call_s=0.25, budget_s=1.0):
    """Evaluate ``calls`` (sources of calls on inputs the solution was not shown); return the lines.

    ``start`` is as for :func:`run_examples`. Lines: ``PROBE <i> = <repr>`` for a plain value,
    ``PROBE <i> ! <exception name>`` (``Timeout`` and ``SolutionProcessEnded`` included; calls past
    ``budget_s`` in all are ``Timeout`` unrun), ``PROBE <i> ? object`` for a handle, and a last
    ``PROBES <n>``, or one ``PROBES-FAILED <why>`` line when the solution does not import.
    """
    safe = dict(vars(builtins))
    lines = []
    try:
        session, module, stop = start()
    except SessionDead as exc:
        return ["PROBES-FAILED SolutionProcessEnded: " + _show(str(exc))]
    except Exception as exc:
        return [f"PROBES-FAILED {type(exc).__name__}: {_show(str(exc))}"]
    names = _Names(module)
    end = time.monotonic() + budget_s
    try:
        for i, source in enumerate(calls, 1):
            if time.monotonic() > end:
                lines.append(f"PROBE {i} ! Timeout")
                continue
            if session.dead is not None:
                stop()
                try:
                    session, module, stop = start()
                except (Exception, SessionDead):
                    lines.append(f"PROBE {i} ! SolutionProcessEnded")
                    continue
                names.module = module
            session.deadline = min(time.monotonic() + per_call_s, end)
            try:
                got = eval(compile(source, f"<probe {i}>", "eval"), {"__builtins__": safe}, names)
            except SessionDead as exc:
                lines.append(f"PROBE {i} ! " + ("Timeout" if exc.reason == "timeout" else "SolutionProcessEnded"))
                continue
            except Exception as exc:
                lines.append(f"PROBE {i} ! {type(exc).__name__}")
                continue
            lines.append(f"PROBE {i} ? object" if type(got) is RemoteObject else f"PROBE {i} = {clip(_repr(got), 1000)}")
    finally:
        stop()
    lines.append(f"PROBES {len(calls)}")
    return lines


def literals_held(sources, outputs):
    """Return the indices of ``outputs`` that some source among ``sources`` holds as a literal (same type, equal).

    Every source is read whole; one that does not parse holds nothing.
    """
    held = set()
    for source in sources:
        try:
            tree = ast.parse(source)
        except (SyntaxError, ValueError, RecursionError, MemoryError):
            continue
        for node in ast.walk(tree):
            if isinstance(node, (ast.Constant, ast.List, ast.Tuple, ast.Set, ast.Dict)):
                try:
                    value = ast.literal_eval(node)
                except (ValueError, TypeError, SyntaxError, MemoryError, RecursionError):
                    continue
                held.update(i for i, o in enumerate(outputs) if i not in held and _equal_literal(o, value))
    return sorted(held)


def _equal_literal(a, b):
    try:
        return type(a) is type(b) and bool(a == b)
    except Exception:  # a comparison that cannot be made (a set of unhashables never parses): not equal
        return False


def held_outputs(sources, outputs):
    """Lines ``SOURCES <n>`` and ``HELD <i>,<j>,...``: which of ``outputs`` (reprs of literals) the sources hold."""
    values = []
    for text in outputs:
        try:
            values.append(ast.literal_eval(text))
        except (ValueError, TypeError, SyntaxError, MemoryError, RecursionError):
            values.append(NotImplemented)  # matches no literal
    held = literals_held(list(sources.values()), values)
    return [f"SOURCES {len(sources)}", "HELD " + ",".join(map(str, held))]


def missing_names(start, names):
    """Lines: one ``MISSING <name>,<name>,...``, the ``names`` the solution module lacks (``getattr`` raises
    ``AttributeError``), or one ``NAMES-FAILED <why>`` line when the solution cannot be asked."""
    try:
        session, module, stop = start()
    except (Exception, SessionDead) as exc:
        return [f"NAMES-FAILED {type(exc).__name__}"]
    missing = []
    try:
        for name in names:
            try:
                getattr(module, name)
            except AttributeError:
                missing.append(name)
            except Exception:  # it is there, and does something odd when fetched
                continue
    except SessionDead as exc:
        return ["NAMES-FAILED " + ("Timeout" if exc.reason == "timeout" else "SolutionProcessEnded")]
    finally:
        stop()
    return ["MISSING " + ",".join(missing)]
