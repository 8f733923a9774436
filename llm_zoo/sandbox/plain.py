"""Calling untrusted code across a process boundary, with results that come back as plain data.

A *server* (this module's source plus a call to ``_serve()``, run as ``python -I -S -B`` with the
standard library only) imports a module of untrusted code and answers requests on a private pipe:
get an attribute, call a function, take ``len`` of an object, and so on. A *client*
(:class:`Session`) in another process sends the requests and gets the answers back. What crosses
the boundary is only *plain data*: ``None``, ``bool``, ``int``, ``float``, ``str``, ``bytes``,
``list``, ``tuple``, ``dict``, ``set`` and ``frozenset``, checked by exact type (a subclass of
``int`` or ``str`` is not plain), recursively, under size and depth caps (:data:`MAX_NODES`,
:data:`MAX_DEPTH`, :data:`MAX_CHARS`, :data:`MAX_INT_BITS`). Any other object stays in the server
and the client gets a :class:`RemoteObject` in its place, an opaque handle that can be called,
measured or iterated (each answer again plain data) but never compared, hashed or used as a
value: ``RemoteObject.__eq__`` raises. So an object whose ``__eq__`` is always true cannot pass
for a value, and whatever the untrusted code does inside its own process (patching builtins,
walking frames, printing, exiting), the client only ever sees values it must then check itself.

An exception raised by the untrusted code comes back as the most derived *built-in* exception
class in its MRO (looked up in a copy of ``builtins`` taken before the import, by identity), with
its message as a clipped string: a class named ``ValueError`` that is not one is an ``Exception``.
Exceptions outside ``Exception`` (``SystemExit``, ``KeyboardInterrupt``) come back as
:class:`SolutionExit`.

Arguments are sent by value, and nothing the call does to them comes back: the server works on
its own copies, so the caller's data never changes, whatever the code under test does (a call that
empties its argument list cannot end the caller's loop over that list). After each call the server
compares every container argument with a copy taken before the call and reports which changed;
:attr:`Session.changed_arguments` holds that count for the last call (the server's own report, so only
as trustworthy as the code under test, which shares its process). Container arguments are
*mirrored*: the client sends one once and then only its id while it is unchanged (compared with a
snapshot, or by identity for a tuple of scalars) and the server has not reported it changed, so a
test that searches one big list a thousand times sends it once. A result that *is* one of the
unchanged containers an argument carried (at any depth) comes back as a reference to the client's
own object, so aliasing is preserved (``merged["a"] is base["a"]``). Limitations: identity inside
one value is not kept (``[x, x]`` arrives as two copies; a cycle exceeds :data:`MAX_DEPTH`).

This module is standard library only on purpose: the sandbox binds it read-only at
``/sandbox/plain.py`` in every run, beside the program, and a program loads it with :data:`LOADER`
(by file, never through ``sys.path``, so nothing in the workspace can stand in for it).
"""

from __future__ import annotations

import array
import base64
import builtins
import io
import json
import os
import sys
import time

LOADER = (
    "import importlib.util as _plain_util, os as _plain_os, sys as _plain_sys\n"
    "_plain_spec = _plain_util.spec_from_file_location('plain', _plain_os.path.join(\n"
    "    _plain_os.path.dirname(_plain_os.path.abspath(__file__)), 'plain.py'))\n"
    "plain = _plain_util.module_from_spec(_plain_spec)\n"
    "_plain_sys.modules['plain'] = plain\n"
    "_plain_spec.loader.exec_module(plain)\n"
)
"""Source that loads this module, as ``plain``, from beside the running program (``/sandbox/plain.py``)."""

MAX_DEPTH = 100
"""Deepest nesting of containers in one value."""
MAX_NODES = 2_000_000
"""Most values (containers and scalars) in one value."""
MAX_CHARS = 8_000_000
"""Most characters (str) and bytes (bytes) in one value, all strings together."""
MAX_INT_BITS = 100_000
"""Largest int, in bits (about 30 000 decimal digits)."""
MAX_FRAME_BYTES = 16 << 20
"""Largest encoded request or answer (a million packed ints take 10.7 MB; parsing a frame costs the
reader several times its size in memory, so this also bounds what a hostile answer costs the client)."""
CLIP = 300
"""Characters kept of a message, a type name or captured output coming from untrusted code."""

_SCALARS = (type(None), bool, int, float, str, bytes)
_MUTABLE = (list, dict, set)
_FROZEN = frozenset((tuple, frozenset))
_FROZEN_ITEMS = frozenset(_SCALARS) | _FROZEN


class NotPlain(TypeError):
    """A value is not plain data (or breaks a cap); the message says what and where."""


class SolutionExit(Exception):
    """The untrusted code raised an exception outside ``Exception`` (``SystemExit``, ...)."""

    builtin = "BaseException"
    """The built-in class it was (``SystemExit``, ``KeyboardInterrupt``, ...)."""


class SessionDead(BaseException):
    """The server is gone or stopped answering: it exited, was killed, timed out, or broke the protocol.

    A ``BaseException``, so that code calling the server with ``except Exception`` cannot swallow it.
    """

    def __init__(self, message: str, reason: str = "ended") -> None:
        super().__init__(message)
        self.reason = reason
        """"timeout", "ended" (the process exited or was killed) or "protocol" (an answer that is not one)."""


def clip(text: str, limit: int = CLIP) -> str:
    """Return ``text`` cut to ``limit`` characters, marked when cut."""
    return text if len(text) <= limit else text[:limit] + "..."


# ---------------------------------------------------------------------------------------------
# the codec: plain data <-> JSON, with exact types and caps
# ---------------------------------------------------------------------------------------------


class _Budget:
    def __init__(self) -> None:
        self.nodes = 0
        self.chars = 0

    def take(self, nodes: int = 1, chars: int = 0) -> None:
        self.nodes += nodes
        self.chars += chars
        if self.nodes > MAX_NODES:
            raise NotPlain(f"a value of more than {MAX_NODES} items")
        if self.chars > MAX_CHARS:
            raise NotPlain(f"a value holding more than {MAX_CHARS} characters of strings")


def encode(value, *, refs=None, on_object=None, registry=None):
    """Turn a plain value into JSON-able data; raise :class:`NotPlain` for anything else.

    Args:
        value: The value.
        refs: ``id(container) -> tag`` of containers to send as references instead of by value.
        on_object: Called with a value that is not plain data, returns its tag (a handle), or None
            to refuse it.
        registry: A list that collects, in pre-order, every mutable container encoded by value
            (the decoder's ``registry`` gets the same order).
    """
    return _encode(value, refs or {}, on_object, registry, _Budget(), 0)


def _encode(value, refs, on_object, registry, budget, depth):
    kind = type(value)
    budget.take()
    if kind in _SCALARS:
        if kind is str:
            budget.take(0, len(value))
            return value
        if kind is int:
            if value.bit_length() > MAX_INT_BITS:
                raise NotPlain(f"an int of {value.bit_length()} bits, over {MAX_INT_BITS}")
            return value if -(1 << 62) < value < (1 << 62) else {"i": format(value, "x")}
        if kind is bytes:
            budget.take(0, len(value))
            return {"b": value.hex()}
        return value
    if depth >= MAX_DEPTH:
        raise NotPlain(f"a value nested deeper than {MAX_DEPTH} levels (or a cycle)")
    if id(value) in refs:
        return refs[id(value)]
    if kind in (list, tuple, dict, set, frozenset):
        if registry is not None and kind in _MUTABLE:
            registry.append(value)
        if kind is dict:
            return {"d": [[_encode(k, refs, on_object, registry, budget, depth + 1),
                           _encode(v, refs, on_object, registry, budget, depth + 1)] for k, v in value.items()]}
        letter = "l" if kind is list else "t" if kind is tuple else "s" if kind is set else "f"
        packed = _pack(value, letter, budget)
        if packed is not None:
            return packed
        items = _flat(value, budget)
        if items is None:
            items = [_encode(v, refs, on_object, registry, budget, depth + 1) for v in value]
        return items if kind is list else {letter: items}
    tag = on_object(value) if on_object is not None else None
    if tag is None:
        raise NotPlain(f"an object of type {clip(_type_name(value))!r}, which is not plain data")
    return tag


def _pack(value, letter, budget):
    """A big container of only ints (in int64) or only floats, packed as raw machine values: fast both ways."""
    if len(value) < 1024:
        return None
    kinds = set(map(type, value))
    code = "q" if kinds == {int} else "d" if kinds == {float} else None
    if code is None:
        return None
    try:
        raw = array.array(code, value).tobytes()
    except (OverflowError, TypeError):
        return None
    budget.take(len(value))
    return {"a": [letter, code, base64.b64encode(raw).decode("ascii")]}


def _unpack(body, registry, budget):
    letter, code, text = body
    if letter not in ("l", "t", "s", "f") or code not in ("q", "d") or type(text) is not str:
        raise NotPlain("malformed packed data")
    items = array.array(code)
    items.frombytes(base64.b64decode(text))
    budget.take(len(items))
    if budget.nodes > MAX_NODES:
        raise NotPlain(f"a value of more than {MAX_NODES} items")
    values = items.tolist()
    out = values if letter == "l" else tuple(values) if letter == "t" else set(values) if letter == "s" else frozenset(values)
    if registry is not None and letter in ("l", "s"):
        registry.append(out)
    return out


def _flat(value, budget):
    """Fast path for a big container of JSON scalars (ints in range, floats, str, None): the items as a list."""
    if len(value) < 64:
        return None
    kinds = set(map(type, value))
    if not kinds <= {int, float, str, type(None)}:
        return None
    items = list(value)
    if int in kinds:
        ints = [v for v in items if type(v) is int] if len(kinds) > 1 else items
        if not -(1 << 62) < min(ints) <= max(ints) < (1 << 62):
            return None
    budget.take(len(items), sum(map(len, (v for v in items if type(v) is str))) if str in kinds else 0)
    return items


def decode(data, *, resolve=None, registry=None):
    """Turn JSON-able data from :func:`encode` back into a value.

    Args:
        data: The data.
        resolve: Called with a tag that is not plain data (a reference or a handle), returns its value.
        registry: A list that collects every mutable container built, in pre-order.
    """
    return _decode(data, resolve, registry, _Budget(), 0)


def _decode(data, resolve, registry, budget, depth):
    kind = type(data)
    budget.take()
    if kind in (type(None), bool, int, float):
        return data
    if kind is str:
        budget.take(0, len(data))
        return data
    if depth >= MAX_DEPTH:
        raise NotPlain(f"a value nested deeper than {MAX_DEPTH} levels")
    if kind is list:
        out: list = []
        if registry is not None:
            registry.append(out)
        flat = _flat(data, budget) if len(data) >= 64 else None
        out.extend(flat if flat is not None else (_decode(v, resolve, registry, budget, depth + 1) for v in data))
        return out
    if kind is not dict or not data:
        raise NotPlain(f"malformed plain data {clip(repr(data))}")
    tag, body = next(iter(data.items())) if len(data) == 1 else ("", None)
    if tag == "i" and type(body) is str:
        value = int(body, 16)
        if value.bit_length() > MAX_INT_BITS:
            raise NotPlain(f"an int of {value.bit_length()} bits, over {MAX_INT_BITS}")
        return value
    if tag == "a" and type(body) is list and len(body) == 3:
        return _unpack(body, registry, budget)
    if tag == "b" and type(body) is str:
        budget.take(0, len(body) // 2)
        return bytes.fromhex(body)
    if tag == "d" and type(body) is list:
        out_d: dict = {}
        if registry is not None:
            registry.append(out_d)
        for pair in body:
            if type(pair) is not list or len(pair) != 2:
                raise NotPlain("malformed dict item in plain data")
            out_d[_decode(pair[0], resolve, registry, budget, depth + 1)] = _decode(pair[1], resolve, registry,
                                                                                 budget, depth + 1)
        return out_d
    if tag in ("t", "s", "f") and type(body) is list:
        if tag == "s":
            out_s: set = set()
            if registry is not None:
                registry.append(out_s)
            flat = _flat(body, budget) if len(body) >= 64 else None
            out_s.update(flat if flat is not None else (_decode(v, resolve, registry, budget, depth + 1) for v in body))
            return out_s
        items = _flat(body, budget) if len(body) >= 64 else None
        if items is None:
            items = [_decode(v, resolve, registry, budget, depth + 1) for v in body]
        return tuple(items) if tag == "t" else frozenset(items)
    if resolve is not None:
        return resolve(data)
    raise NotPlain(f"unexpected tag {clip(repr(tag))} in plain data")


def _frozen(value) -> bool:
    """True for a tuple (or frozenset) of scalars and such tuples: nothing in it can change."""
    if type(value) not in _FROZEN:
        return False
    stack = [value]  # tuples and frozensets only; each one's item types read at C speed (a tuple of 10^6 ints)
    while stack:
        item = stack.pop()
        kinds = set(map(type, item))
        if not kinds <= _FROZEN_ITEMS:
            return False
        if not kinds.isdisjoint(_FROZEN):
            stack.extend(x for x in item if type(x) in _FROZEN)
    return True


def _snapshot(value, data, resolve):
    """A copy of ``value`` to tell later whether it changed: shallow for a flat list of scalars, else decoded anew."""
    if type(value) is list and set(map(type, value)) <= set(_SCALARS):
        return value.copy()
    return decode(data, resolve=resolve)


def _same(a, b) -> bool:
    try:
        return type(a) is type(b) and bool(a == b)
    except Exception:
        return False


def _type_name(value) -> str:
    try:
        return type(value).__qualname__
    except Exception:
        return "?"



# ---------------------------------------------------------------------------------------------
# the server: runs in the process of the untrusted code
# ---------------------------------------------------------------------------------------------


def _source_only(root: str) -> None:
    """Import modules under ``root`` from their ``.py`` source only: never a .pyc, .so or sourceless file there.

    A planted ``__pycache__/solution.cpython-311.pyc`` whose header matches the source would
    otherwise run in place of the source that a judge reads.
    """
    import importlib.machinery as machinery

    class SourceOnly(machinery.SourceFileLoader):
        def get_code(self, fullname):
            return compile(self.get_data(self.get_filename(fullname)), self.path, "exec", dont_inherit=True)

    def hook(path):
        if path == root or path.startswith(root.rstrip("/") + "/"):
            return machinery.FileFinder(path, (SourceOnly, [".py"]))
        raise ImportError("not under " + root)

    sys.path_hooks.insert(0, hook)
    sys.path_importer_cache.clear()


def _serve() -> None:
    """Answer requests on fds 0 and 1 (taken private first) until end of input; see the module docstring."""
    channel_in = os.fdopen(os.dup(0), "rb")
    channel_out = os.fdopen(os.dup(1), "wb")
    null = os.open(os.devnull, os.O_RDWR)
    for fd in (0, 1):  # what the code under test prints or reads never touches the channel
        os.dup2(null, fd)
    sys.setrecursionlimit(3000)  # as deep as a test module's own run allowed
    exceptions = {name: obj for name, obj in vars(builtins).items()
                  if isinstance(obj, type) and issubclass(obj, BaseException)}
    real_type, real_id, real_isinstance = type, id, isinstance
    handles: dict = {}
    mirrors: dict = {}  # id -> [object, snapshot or None (frozen), registry]

    def new_handle(value):
        handles[len(handles) + 1] = value
        return {"h": len(handles), "type": clip(_type_name(value), 80)}

    def resolve(tag):
        if "h" in tag and tag["h"] in handles:
            return handles[tag["h"]]
        if "m" in tag and tag["m"] in mirrors:
            return mirrors[tag["m"]][0]
        if "M" in tag and "v" in tag:
            registry: list = []
            value = decode(tag["v"], resolve=resolve, registry=registry)
            frozen = _frozen(value)
            mirrors[tag["M"]] = [value, None if frozen else _snapshot(value, tag["v"], resolve), registry]
            return value
        raise NotPlain(f"unknown reference {clip(repr(tag))}")

    def references() -> dict:
        return {real_id(c): {"r": [m, k]} for m, (_, _, reg) in mirrors.items() for k, c in enumerate(reg)}

    def raised(exc) -> dict:
        cls = next((c for c in real_type(exc).__mro__ if exceptions.get(getattr(c, "__name__", None)) is c),
                   BaseException)
        name = cls.__name__ if issubclass(cls, Exception) else "SolutionExit"
        builtin = cls.__name__
        try:
            message = clip(str(exc))
        except BaseException:
            message = "<str() of the exception failed>"
        tb, where = exc.__traceback__, None
        while tb is not None:
            if tb.tb_frame.f_code.co_filename.startswith(workspace):
                where = f"{os.path.relpath(tb.tb_frame.f_code.co_filename, workspace)} line {tb.tb_lineno}"
            tb = tb.tb_next
        return {"raised": name, "builtin": builtin, "type": clip(_type_name(exc), 80), "message": message,
                "where": where}

    workspace = "/nonexistent/"
    while True:
        line = channel_in.readline(MAX_FRAME_BYTES)
        if not line:
            return
        captured = io.StringIO()
        sys.stdout = sys.stderr = captured
        try:
            request = json.loads(line)
            op, used = request["op"], []
            if op == "import":
                path = os.path.abspath(request["path"])
                workspace = path.rstrip("/") + "/"
                _source_only(path)
                sys.path.append(path)  # last: the standard library can never be shadowed
                __import__(request["module"])
                result = sys.modules[request["module"]]
            else:
                target = handles[request["obj"]]
                if op == "getattr":
                    result = getattr(target, request["name"])
                elif op == "call":
                    args = [decode(a, resolve=resolve) for a in request["args"]]
                    kwargs = {k: decode(v, resolve=resolve) for k, v in request["kwargs"].items()}
                    used = [m for m in request["mirrors"] if m in mirrors]
                    result = target(*args, **kwargs)
                elif op == "len":
                    result = len(target)
                elif op == "list":
                    result = list(target)
                elif op == "contains":
                    result = decode(request["value"], resolve=resolve) in target
                elif op == "getitem":
                    result = target[decode(request["key"], resolve=resolve)]
                else:
                    raise ValueError(f"unknown op {op!r}")
            changed = []  # this server's copies the call changed: dropped, and reported (never sent back)
            for m in used:
                value, snapshot, _ = mirrors[m]
                if snapshot is not None and not _same(value, snapshot):
                    del mirrors[m]
                    changed.append(m)
            answer = {"value": encode(result, refs=references(), on_object=new_handle), "changed": changed}
        except BaseException as exc:  # noqa: B036 - everything the code under test raises is an answer
            answer = raised(exc) if real_isinstance(exc, BaseException) else {"raised": "Exception"}
        finally:
            sys.stdout, sys.stderr = sys.__stdout__, sys.__stderr__
        out = captured.getvalue()
        if out:
            answer["stdout"] = clip(out)
        for m in request.get("drop", ()) if real_isinstance(request, dict) else ():
            mirrors.pop(m, None)
        answer["id"] = request.get("id") if real_isinstance(request, dict) else None
        try:
            data = json.dumps(answer)
        except BaseException as exc:
            data = json.dumps({"raised": "ValueError", "message": clip(f"the answer is not plain data: {exc}"),
                               "id": answer["id"]})
        channel_out.write(data.encode("utf-8", "surrogatepass") + b"\n")
        channel_out.flush()


def _link(read_fd: int, write_fd: int) -> None:
    """Make the workspace's modules importable in this program only as handles on a linked server.

    For a program that runs beside a server in a sandbox of its own (``llm_zoo.sandbox.run_python_beside``):
    the server's pipes are ``read_fd`` and ``write_fd``. The current directory leaves ``sys.path``, and
    ``import name`` (or ``from name import f``) of a top-level module that the standard library does not
    have and the current directory holds (``name.py`` or ``name/``) returns a :class:`RemoteObject` of that
    module imported in the server. The session is :data:`LINKED`.
    """
    import importlib.machinery
    import types

    global LINKED
    channel = types.SimpleNamespace(stdin=os.fdopen(write_fd, "wb"), stdout=os.fdopen(read_fd, "rb"))
    session = LINKED = Session(*pipe_transport(channel))
    here = os.getcwd()
    sys.path[:] = [p for p in sys.path if p not in ("", ".") and os.path.abspath(p) != here]
    real_import, remote = builtins.__import__, {}

    def ours(top: str) -> bool:
        if top in sys.modules or top in sys.builtin_module_names or not top.isidentifier():
            return False
        if not (os.path.isfile(top + ".py") or os.path.isdir(top)):
            return False
        return importlib.machinery.PathFinder.find_spec(top) is None  # the standard library wins, as there

    def linked_import(name, globals=None, locals=None, fromlist=(), level=0):
        top = name.partition(".")[0]
        if level == 0 and ours(top):
            if top != name:
                raise ImportError(f"only top-level modules of the workspace can be imported here, not {name!r}")
            if name not in remote:
                remote[name] = session.import_module(name, ".")
            return remote[name]
        return real_import(name, globals, locals, fromlist, level)

    builtins.__import__ = linked_import


LINKED = None
"""The session with the linked server, in a program that :func:`_link` set up (else None)."""


# ---------------------------------------------------------------------------------------------
# the client: runs in the process that checks the results
# ---------------------------------------------------------------------------------------------


class RemoteObject:
    """A handle on an object that stays in the server: callable and measurable, never a value."""

    __slots__ = ("_session", "_id", "_type")

    def __init__(self, session: Session, handle: int, type_name: str) -> None:
        object.__setattr__(self, "_session", session)
        object.__setattr__(self, "_id", handle)
        object.__setattr__(self, "_type", type_name)

    def __getattr__(self, name: str):
        if name.startswith("__") and name.endswith("__"):
            raise AttributeError(name)
        return self._session.request("getattr", obj=self._id, name=name)

    def __call__(self, *args, **kwargs):
        return self._session.call(self._id, args, kwargs)

    def __len__(self) -> int:
        return _exact(self._session.request("len", obj=self._id), int, "len()")

    def __iter__(self):
        return iter(_exact(self._session.request("list", obj=self._id), list, "list()"))

    def __contains__(self, item) -> bool:
        return _exact(self._session.request("contains", obj=self._id, value=item), bool, "in")

    def __getitem__(self, key):
        return self._session.request("getitem", obj=self._id, key=key)

    def _not_a_value(self, *_args):
        raise TypeError(f"the solution gave an object of type {self._type!r} where a value was needed; results "
                        "are compared as plain data of exact built-in types (None, bool, int, float, str, bytes, "
                        "list, tuple, dict, set): convert subclasses such as Counter or a namedtuple with dict(...) "
                        "or tuple(...)")

    __eq__ = __ne__ = __lt__ = __le__ = __gt__ = __ge__ = __hash__ = __bool__ = _not_a_value
    __add__ = __radd__ = __sub__ = __rsub__ = __mul__ = __rmul__ = __mod__ = __truediv__ = _not_a_value
    __int__ = __float__ = __index__ = __str__ = _not_a_value

    def __setattr__(self, name: str, value) -> None:
        raise TypeError("objects of the solution cannot be changed from here")

    def __repr__(self) -> str:
        return f"<object of type {self._type!r} from the solution>"


def _exact(value, kind: type, what: str):
    if type(value) is not kind:
        raise TypeError(f"{what} of a solution object gave {type(value).__name__}, expected {kind.__name__}")
    return value


class Session:
    """The client side: send requests to a server over a transport, get plain values back.

    Args:
        send: Writes one encoded request line (bytes) to the server.
        receive: Reads one answer line before the deadline (a ``time.monotonic()`` value), or
            raises :class:`SessionDead`.
    """

    def __init__(self, send, receive) -> None:
        self._send, self._receive = send, receive
        self.deadline = float("inf")
        """Requests fail with SessionDead(reason="timeout") when their answer comes after this monotonic time."""
        self.stdout: list[str] = []
        """What the code under test printed during the requests, clipped per request."""
        self.dead: SessionDead | None = None
        self._next = 0
        self._handles: dict[int, RemoteObject] = {}
        self._mirrors: dict[int, list] = {}  # id(obj) -> [obj, snapshot or None, registry, mirror id]
        self._drop: list[int] = []
        self.changed_arguments = 0
        """How many container arguments the last call changed, as the server reports it (nothing comes back)."""

    def import_module(self, name: str, path: str) -> RemoteObject:
        """Import module ``name`` in the server, its directory ``path`` last on ``sys.path``; return its handle."""
        return self.request("import", module=name, path=path)

    def call(self, handle: int, args, kwargs):
        """Call the server's object ``handle`` with plain arguments (sent as copies); return the result."""
        used: list[int] = []
        sent_args = [self._argument(a, used) for a in args]
        sent_kwargs = {str(k): self._argument(v, used) for k, v in kwargs.items()}
        return self.request("call", obj=handle, args=sent_args, kwargs=sent_kwargs, mirrors=used)

    def _argument(self, value, used: list[int]):
        if type(value) not in (list, dict, set, tuple):
            return encode(value, on_object=self._tag)
        entry = self._mirrors.get(id(value))
        if entry is not None and entry[0] is value and (entry[1] is None or _same(value, entry[1])):
            used.append(entry[3])
            return {"m": entry[3]}
        if entry is not None:
            self._forget(entry)
        registry: list = []
        data = encode(value, on_object=self._tag, registry=registry)
        self._next += 1
        frozen = _frozen(value)
        snapshot = None if frozen else _snapshot(value, data, self._resolve)
        self._mirrors[id(value)] = [value, snapshot, registry, self._next]
        used.append(self._next)
        return {"M": self._next, "v": data}

    def _forget(self, entry: list) -> None:
        self._mirrors.pop(id(entry[0]), None)
        self._drop.append(entry[3])

    def _tag(self, value):
        return {"h": value._id} if type(value) is RemoteObject and value._session is self else None

    def _resolve(self, tag):
        if "h" in tag and type(tag["h"]) is int:
            if tag["h"] not in self._handles:
                self._handles[tag["h"]] = RemoteObject(self, tag["h"], clip(str(tag.get("type", "?")), 80))
            return self._handles[tag["h"]]
        if "r" in tag and type(tag["r"]) is list and len(tag["r"]) == 2:
            mirror, index = tag["r"]
            for entry in self._mirrors.values():
                if entry[3] == mirror and type(index) is int and 0 <= index < len(entry[2]):
                    return entry[2][index]
        raise NotPlain(f"unexpected tag {clip(repr(tag))} from the solution's process")

    def request(self, op: str, **fields):
        """Send one request; return the decoded value, or raise what the code under test raised."""
        if self.dead is not None:
            raise self.dead
        self._next += 1
        ident = self._next
        fields = {k: (encode(v, on_object=self._tag) if k in ("value", "key") else v) for k, v in fields.items()}
        line = json.dumps({"op": op, "id": ident, "drop": self._drop, **fields}).encode() + b"\n"
        self._drop = []
        try:
            self._send(line)
            raw = self._receive(self.deadline)
        except SessionDead as exc:
            self.dead = exc
            raise
        try:
            answer = json.loads(raw)
            if type(answer) is not dict or answer.get("id") != ident:
                raise ValueError("an answer out of turn")
        except (ValueError, RecursionError, MemoryError) as exc:
            self.dead = SessionDead(f"the solution's process broke the protocol ({exc})", "protocol")
            raise self.dead from None
        if type(answer.get("stdout")) is str:
            self.stdout.append(clip(answer["stdout"]))
        if "raised" in answer:
            raise _exception(answer)
        changed = answer.get("changed") if type(answer.get("changed")) is list else []
        sent = fields.get("mirrors", ())
        changed = {m for m in changed if type(m) is int and m in sent}  # only an argument of this call
        for entry in [e for e in self._mirrors.values() if e[3] in changed]:
            self._forget(entry)  # the server dropped its copy: the next call sends the value again
        if op == "call":
            self.changed_arguments = len(changed)
        return decode(answer.get("value"), resolve=self._resolve)


def _exception(answer: dict) -> BaseException:
    """Rebuild the built-in exception the code under test raised (only built-in classes come back)."""
    name, message = str(answer.get("raised")), clip(str(answer.get("message", "")))
    cls = getattr(builtins, name, None)
    if not (isinstance(cls, type) and issubclass(cls, Exception)):
        cls = SolutionExit if name == "SolutionExit" else Exception
    try:
        exc = cls(message)
    except Exception:
        exc = Exception(message)
    if isinstance(exc, SolutionExit) and isinstance(getattr(builtins, str(answer.get("builtin")), None), type):
        exc.builtin = str(answer["builtin"])
    exc.solution_where = answer.get("where") if type(answer.get("where")) is str else None  # type: ignore[attr-defined]
    exc.solution_type = clip(str(answer.get("type", name)), 80)  # type: ignore[attr-defined]
    return exc


def pipe_transport(proc, max_bytes: int = MAX_FRAME_BYTES):
    """Return (send, receive) for a ``subprocess.Popen`` server with binary stdin and stdout pipes."""
    import selectors

    buffer = bytearray()

    def send(line: bytes) -> None:
        try:
            proc.stdin.write(line)
            proc.stdin.flush()
        except (BrokenPipeError, OSError):
            raise SessionDead("the solution's process is gone", "ended") from None

    def receive(deadline: float) -> bytes:
        fd = proc.stdout.fileno()
        with selectors.DefaultSelector() as selector:
            selector.register(fd, selectors.EVENT_READ)
            while b"\n" not in buffer:
                left = deadline - time.monotonic()
                if left <= 0:
                    raise SessionDead("the solution ran past its time limit", "timeout")
                if not selector.select(min(left, 3600)):
                    continue
                chunk = os.read(fd, 1 << 16)
                if not chunk:
                    raise SessionDead("the solution's process ended", "ended")
                buffer.extend(chunk)
                if len(buffer) > max_bytes:
                    raise SessionDead(f"an answer over {max_bytes} bytes", "protocol")
        end = buffer.index(b"\n")
        line = bytes(buffer[:end])
        del buffer[:end + 1]
        return line

    return send, receive
