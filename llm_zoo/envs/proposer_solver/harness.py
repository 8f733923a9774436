"""The sandboxed harness of proposer-solver: runs untrusted programs and reports their results as plain data.

This file is not imported by the env: :mod:`llm_zoo.envs.proposer_solver.verify` sends its text to
the sandbox as the program to run (``/sandbox/main.py``) and a job on stdin. It has two parts,
each in a process of its own:

- the **supervisor** (``main.py``) reads the job (JSON), starts one **runner** per run, feeds each
  its part of the job on a pipe, counts the runner's stdout and stderr (never reads them; too
  much stops the runner), waits for it under the job's deadline, turns its results into canonical
  JSON, and writes one JSON report on its own stdout, which no runner holds. The first run goes
  alone and, if it fails, the others are not started. No untrusted code runs in the supervisor.
- a **runner** (``main.py --child``) is a fresh interpreter started with a hash seed of the job's
  choosing. It reads its job to the end of stdin (a random per-run key, the program, the calls, a
  fake clock), disarms what the program must not reach, installs an audit hook, writes the key on
  fd 3 (ready: the program's time starts), runs the program and calls ``f``, freezes each value
  with ``marshal`` the moment ``f`` returns, and writes ``key + length + payload`` on fd 3. The
  program has nothing that writes to fd 3 (``posix.write`` is gone, opening a file descriptor is
  refused), and anything there that is not exactly that is no result at all.

What holds while the program runs (the audit hook cannot be removed from Python):

| Class | How |
|---|---|
| capabilities, not names | the program's builtins are curated (no ``eval``, ``getattr``, ``vars``, ``open``, ...) and ``import`` hands out namespaces of an allowed module's public names (:func:`capabilities`), never a module; the source check refuses private, dunder, frame and code attributes, and the functions that read an attribute by a name they are given refuse the same names, so no attribute chain leads to ``sys``, ``os``, ``builtins`` or the import machinery (a test walks them all) |
| forged results | the program's output goes to a pipe the supervisor only counts; a result counts only if it carries the runner's key, which lives in the runner's frame; frames (``sys._getframe``, ``tb_frame``, ``gi_frame``, tracing) and ``gc`` introspection are refused; the harness uses only references it took before the program ran |
| the system | every ``open``, ``os.*``, ``subprocess``, ``socket``, ``ctypes``, ``mmap`` event and any other unknown audit event is refused and recorded; the process, signal and raw-fd functions of ``posix``, ``_thread``, ``_signal`` and ``_imp`` are removed from every module that holds them |
| imports | ``__import__`` refuses top-level names outside the allowlist, and the hook refuses loading any module not loaded before the program started (the modules the program's source imports are loaded first) |
| clocks | every function of ``time`` reads a fake clock chosen per run; ``datetime`` is the pure-Python one, on that clock; the file-status, load and ``times`` functions are gone |
| determinism | the first run is under the reference conditions the outputs are recorded under; each other run has its own hash seed, fake clock, heap layout, recursion limit, time zone (``TZ``), memory headroom (:func:`cap_memory`) and the seed ``random`` takes when given none (never the system's entropy), so a program that depends on them differs between runs; the regular-expression cache starts empty |
| code objects | ``code.__new__`` (hand-made bytecode) and ``marshal.loads`` are refused |

Limitation: a memory-safety bug in CPython itself (which pure Python can sometimes reach) would
void these; the sandbox around the whole run still holds then.
"""

import sys

# ---- the runner -----------------------------------------------------------------------------------

# Audit events a program's plain computation raises (dataclasses, typing, copy, time.sleep, ...).
_FREE_EVENTS = frozenset({"compile", "exec", "builtins.id", "object.__setattr__", "object.__delattr__",
                          "marshal.dumps", "time.sleep", "sys._getframemodulename", "sys.excepthook",
                          "sys.unraisablehook"})
# Attributes whose read raises object.__getattr__ and which hand out no frame.
_SAFE_ATTRS = frozenset({"__code__", "__defaults__", "__kwdefaults__", "gi_code", "cr_code", "ag_code"})
# Functions of these modules that may stay; every other function of them is removed.
_KEEP = {
    "posix": {"fspath", "strerror", "getcwd", "get_terminal_size", "device_encoding", "cpu_count", "getpid",
              "WIFEXITED", "WEXITSTATUS", "WIFSIGNALED", "WTERMSIG", "WIFSTOPPED", "WSTOPSIG", "WCOREDUMP",
              "WIFCONTINUED", "stat_result", "statvfs_result", "terminal_size", "times_result",
              "uname_result", "DirEntry", "sched_param", "waitid_result"},
    "_thread": {"allocate_lock", "allocate", "get_ident", "get_native_id", "RLock", "LockType", "_local",
                "stack_size", "_count", "daemon_threads_allowed", "error", "_set_sentinel",
                "_excepthook", "_ExceptHookArgs", "lock", "interrupt_main", "exit", "exit_thread"},
    "_signal": {"getsignal", "default_int_handler", "valid_signals", "strsignal", "ItimerError"},
    "_imp": {"acquire_lock", "release_lock", "lock_held", "is_builtin", "is_frozen", "is_frozen_package",
             "_fix_co_filename", "extension_suffixes", "source_hash", "check_hash_based_pycs",
             "_override_frozen_modules_for_tests", "_override_multi_interp_extensions_check",
             "_frozen_module_names", "find_frozen"},
}
_CODECS = ("encodings.ascii", "encodings.latin_1", "encodings.utf_16", "encodings.utf_32", "encodings.cp1252",
           "encodings.unicode_escape", "encodings.raw_unicode_escape", "encodings.utf_8_sig")
"""Codecs loaded for every program: str.encode and bytes.decode import theirs when first used."""
_LAZY_IMPORTS = {"datetime": ("_strptime",)}
"""Modules an allowed module imports only when first used; loaded with it."""


def _runner() -> None:
    import builtins
    import functools  # noqa: F401 - capabilities() needs these, loaded while imports are open
    import gc
    import marshal
    import operator  # noqa: F401
    import posix
    import re  # noqa: F401
    import resource  # noqa: F401 - cap_memory() needs it
    import time
    import types  # noqa: F401

    read, write, exit_now = posix.read, posix.write, posix._exit
    dumps, loads = marshal.dumps, marshal.loads
    BaseExc, str_, type_, len_ = BaseException, str, type, len
    posix.closerange(4, 1 << 16)  # the result channel is fd 3; nothing else is inherited

    chunks = []
    while True:
        chunk = read(0, 1 << 16)
        if not chunk:
            break
        chunks.append(chunk)
    job = loads(b"".join(chunks))
    del chunks
    key, program, calls, allowed = job["key"], job["program"], job["calls"], frozenset(job["allowed"])
    max_value = job["max_value"]
    refused: list = []
    sys.path[:] = [p for p in sys.path if p.startswith(sys.base_prefix)]

    # ---- clocks: every reader sees this run's fake instant. The real functions sit in the fakes'
    # defaults, which the hook guards; the fakes' globals are emptied once they are defined.
    now = float(job["clock"])
    fakes: dict = {}
    space = {"__builtins__": {"int": int}, "LOCAL": time.localtime, "GM": time.gmtime, "CTIME": time.ctime,
             "ASC": time.asctime, "STRF": time.strftime}
    exec(_FAKE_CLOCK.replace("NOW", repr(now)), space, fakes)  # noqa: S102 - the harness's own code
    for name in ("LOCAL", "GM", "CTIME", "ASC", "STRF"):
        del space[name]
    replace = {id(getattr(time, name)): (getattr(time, name), fn) for name, fn in fakes.items()}
    sys.modules["_datetime"] = None  # the pure-Python datetime reads time.time(), which is fake

    # ---- the modules the program imports, loaded now, while imports are still open
    preload = [name for name in job["preload"] if name.partition(".")[0] in allowed]
    for name in (*preload, *_CODECS):
        for module in (name, *_LAZY_IMPORTS.get(name, ())):
            try:
                __import__(module)
            except BaseExc:  # noqa: S112 - the program's own import reports it
                continue

    # ---- remove the process, signal, raw-fd and status functions from every holder
    builtin_function = type_(len)
    for module_name, keep in _KEEP.items():
        module = sys.modules.get(module_name)
        for name, value in list(vars(module).items()) if module is not None else ():
            # functions only: posix.error is OSError itself, and classes hand out nothing
            if type_(value) is builtin_function and name not in keep:
                replace.setdefault(id(value), (value, None))
    for name in ("clock_settime", "clock_settime_ns", "pthread_getcpuclockid"):
        if hasattr(time, name):
            replace.setdefault(id(getattr(time, name)), (getattr(time, name), None))
    holders = [m.__dict__ for m in list(sys.modules.values()) if m is not None]
    holders += gc.get_referrers(*[old for old, _ in replace.values()])
    for holder in holders:
        kind = type_(holder)
        if kind is dict:
            for name, value in list(holder.items()):
                if id(value) in replace:
                    if replace[id(value)][1] is None:
                        del holder[name]
                    else:
                        holder[name] = replace[id(value)][1]
        elif kind is set:  # os.supports_fd and its kin hold functions
            for value in list(holder):
                if id(value) in replace:
                    holder.discard(value)
        elif kind is list:
            holder[:] = [v if id(v) not in replace else replace[id(v)][1] for v in holder]
    del replace, holders

    # ---- what must not matter is fixed here: seeding from the system's entropy draws this run's
    # seed instead, the regular-expression cache starts empty, the recursion limit is the run's
    random_module = sys.modules.get("random")
    if random_module is not None:
        seed_space: dict = {"__builtins__": {}}
        exec(_FIXED_SEED, seed_space)  # noqa: S102 - the harness's own code
        real_seed = random_module.Random.seed
        random_module.Random.seed = seed_space["make"](real_seed, job["entropy"])
        random_module._inst.seed(job["entropy"])
        random_module.seed = random_module._inst.seed
        fakes["seed"] = random_module.Random.seed
    if "re" in sys.modules:
        sys.modules["re"].purge()

    # ---- the program's capabilities: curated builtins and modules (see capabilities())
    program_builtins = builtins
    if job["capabilities"]:
        program_builtins = capabilities(sys.modules, preload, allowed, job["denied_attributes"], refused)
        fakes.update((f"capability {name}", fn) for name, fn in program_builtins["__guarded__"].items())
        del program_builtins["__guarded__"]

    # ---- the import guard and the audit hook. Neither shares a closure cell or a global with
    # anything the program can reach: the guard (which the program can reach, as __import__) is
    # defined with empty globals and its state in defaults, which the hook guards like the fakes'.
    guard_space: dict = {"__builtins__": {"ImportError": ImportError, "type": type, "str": str, "len": len, "dict": dict,
                                          "sorted": sorted}}
    exec(_GUARD, guard_space)  # noqa: S102 - the harness's own code
    guard = guard_space.pop("make")(allowed, builtins.__import__, refused, sys.modules)
    guarded = frozenset(id(fn) for fn in (*fakes.values(), guard))
    hook = _make_hook(guarded, refused, _FREE_EVENTS, _SAFE_ATTRS, type_, str_, len_, id, repr)

    pad = [object() for _ in range(job["pad"])]  # shifts the heap, so object ids differ between runs
    main = type_(sys)("__main__")
    main.__builtins__ = program_builtins
    sys.modules["__main__"] = main
    program_globals = main.__dict__
    try:
        code, failure = compile(program, "<program>", "exec"), None
    except BaseExc as exc:
        code, failure = None, f"{type_(exc).__name__}: {str_(exc)[:200]}"

    def describe(exc):
        try:
            name, text = type_(exc).__name__, str_(exc)
            return (name if type_(name) is str_ else "?")[:80] + (": " + text[:200] if type_(text) is str_ else "")
        except BaseExc:
            return "an exception that cannot be described"

    builtins.__import__ = guard
    gc.collect()
    cap_memory(job["headroom_mb"])
    sys.setrecursionlimit(job["recursion_limit"])
    sys.addaudithook(hook)
    del hook, guard_space
    write(3, key)  # ready: the supervisor starts this run's clock

    # ---- the program: from here on the harness uses only its own locals
    results: list = []
    try:
        if code is not None:
            exec(code, program_globals)  # noqa: S102 - the untrusted program, inside the sandbox and the hook
    except BaseExc as exc:
        failure = describe(exc)
    f = program_globals.get("f") if failure is None else None
    if failure is None and not callable(f):
        failure = "f is not defined as a function"
    for args in calls:
        if failure is not None:
            results.append(("error", failure))
            continue
        try:
            value = f(*args)
        except BaseExc as exc:
            results.append(("error", describe(exc)))
            continue
        try:
            frozen = dumps(value)
        except BaseExc:
            results.append(("not_json", "a value of a type that is not JSON data"))
            continue
        results.append(("ok", frozen) if len_(frozen) <= max_value else ("too_long", len_(frozen)))
    del pad
    try:
        payload = dumps((results, refused))
    except BaseExc:
        payload = dumps(([("error", "the results could not be sent")] * len_(calls), list(refused)))
    message = key + len_(payload).to_bytes(8, "big") + payload
    sent = 0
    try:
        while sent < len_(message):
            sent += write(3, message[sent:])
    except BaseExc:
        pass
    exit_now(0)


_FAKE_CLOCK = """
def time(_n=NOW): return _n
def time_ns(_n=NOW): return int(_n * 1e9)
def monotonic(_n=NOW): return _n
def monotonic_ns(_n=NOW): return int(_n * 1e9)
def perf_counter(_n=NOW): return _n
def perf_counter_ns(_n=NOW): return int(_n * 1e9)
def process_time(): return 0.0
def process_time_ns(): return 0
def thread_time(): return 0.0
def thread_time_ns(): return 0
def clock_gettime(clk_id, _n=NOW): return _n
def clock_gettime_ns(clk_id, _n=NOW): return int(_n * 1e9)
def sleep(secs): return None
def localtime(secs=None, _f=LOCAL, _n=NOW): return _f(_n if secs is None else secs)
def gmtime(secs=None, _f=GM, _n=NOW): return _f(_n if secs is None else secs)
def ctime(secs=None, _f=CTIME, _n=NOW): return _f(_n if secs is None else secs)
def asctime(t=None, _f=ASC, _l=LOCAL, _n=NOW): return _f(_l(_n) if t is None else t)
def strftime(format, t=None, _f=STRF, _l=LOCAL, _n=NOW): return _f(format, _l(_n) if t is None else t)
"""
"""The clock every runner's program sees: fixed at the run's instant (NOW), so nothing measures time."""

_GUARD = """
def make(allowed, real_import, refused, modules):
    def __import__(name, globals=None, locals=None, fromlist=(), level=0, _allowed=allowed, _real=real_import,
                   _refused=refused, _modules=modules):
        # a loaded module's own import statements (the standard library's lazy imports) pass; the
        # audit hook still refuses loading anything new
        where = _modules.get(globals.get("__name__")) if type(globals) is dict else None
        if where is not None and where.__dict__ is globals and where.__name__ != "__main__":
            return _real(name, globals, locals, fromlist, level)
        top = name.partition(".")[0] if type(name) is str else "?"
        if level or top not in _allowed:
            if len(_refused) < 8:
                _refused.append(f"import of {name!r:.80} at run time (allowed: {', '.join(sorted(_allowed))})")
            raise ImportError(f"import of {name!r:.80} is not allowed")
        return _real(name, globals, locals, fromlist, level)
    return __import__
"""
"""The program's ``__import__``: allowlisted top-level names only, relative imports never (for the
program's code; a loaded module's lazy imports pass, and loading anything new is refused by the hook)."""


_FIXED_SEED = """
def make(real_seed, entropy):
    def seed(self, a=None, version=2):
        return real_seed(self, entropy if a is None else a, version)
    return seed
"""
"""``random.Random.seed`` for a program's run: no seed means this run's seed, never the system's entropy."""

HIDDEN_BUILTINS = frozenset({
    "eval", "exec", "compile", "open", "input", "breakpoint", "exit", "quit", "help", "copyright", "credits",
    "license", "globals", "locals", "vars", "dir", "getattr", "setattr", "delattr", "hasattr",
})
"""Builtins a program does not get: code from strings, files, its own scopes, attributes by name."""
HIDDEN: dict[str, frozenset[str]] = {
    "calendar": frozenset({"LocaleTextCalendar", "LocaleHTMLCalendar", "different_locale", "main"}),  # host locales
    "functools": frozenset({"singledispatch", "singledispatchmethod"}),  # evaluate annotations (get_type_hints)
    "string": frozenset({"Formatter"}),  # get_field reads the attributes a string names
    "typing": frozenset({"get_type_hints", "ForwardRef"}),  # evaluate strings as code
}
"""Public names of allowed modules that a program does not get, and why."""

_CAPABILITIES = """
def make(real, deny, spaces, refused, allowed):
    real_attrgetter, real_methodcaller = real["attrgetter"], real["methodcaller"]
    real_wraps, real_update_wrapper = real["wraps"], real["update_wrapper"]

    def check(name):
        if type(name) is not str:
            raise TypeError("an attribute name must be a str")
        for part in name.split("."):
            if deny(part) is not None:
                raise AttributeError(f"the attribute {part!r:.60} is not available to a task's program")

    # each returns a function of its own: the real getter's type (type(getter)) would take any name
    def attrgetter(attr, /, *attrs):
        for name in (attr, *attrs):
            check(name)
        getter = real_attrgetter(attr, *attrs)
        return lambda obj, /: getter(obj)

    def methodcaller(name, /, *args, **kwargs):
        check(name)
        caller = real_methodcaller(name, *args, **kwargs)
        return lambda obj, /: caller(obj)

    def wraps(wrapped, /):
        return real_wraps(wrapped)

    def update_wrapper(wrapper, wrapped, /):
        return real_update_wrapper(wrapper, wrapped)

    def __import__(name, globals=None, locals=None, fromlist=(), level=0):
        if level or type(name) is not str or name not in spaces:
            if len(refused) < 8:
                refused.append(f"import of {name!r:.80} at run time (allowed: {', '.join(sorted(allowed))})")
            raise ImportError(f"import of {name!r:.80} is not allowed")
        return spaces[name] if fromlist else spaces[name.partition(".")[0]]

    return {"attrgetter": attrgetter, "methodcaller": methodcaller, "wraps": wraps, "update_wrapper": update_wrapper,
            "__import__": __import__}
"""
"""The functions a program gets in place of ones that read attributes it names, and its ``__import__``.
Their globals are empty and their state is in closure cells, which only dunder attributes reach (the
program has none); no parameter of theirs can replace their state."""
_WRAPPED = {("operator", "attrgetter"), ("operator", "methodcaller"), ("functools", "wraps"),
            ("functools", "update_wrapper")}


def capabilities(modules: dict, names: list, allowed, denied_attributes: str, refused: list) -> dict:
    """Return the builtins of a program's run: curated builtins, and an ``__import__`` that hands out
    curated namespaces of the allowed modules in ``names`` (loaded, in ``modules``), never modules.

    A namespace holds a module's public names (its ``__all__``), less :data:`HIDDEN` and any module;
    functions that read an attribute by a name they are given refuse the names ``denied_attributes``
    (a regular expression) matches, the same names the source check refuses. The ``__guarded__`` key
    lists the functions made here, for the audit hook to guard.
    """
    import builtins
    import re
    import types

    spaces: dict = {}
    space = {"__builtins__": {"type": type, "str": str, "len": len, "sorted": sorted, "TypeError": TypeError,
                              "AttributeError": AttributeError, "ImportError": ImportError}}
    exec(_CAPABILITIES, space)  # noqa: S102 - the harness's own code
    import functools
    import operator

    real = {"attrgetter": operator.attrgetter, "methodcaller": operator.methodcaller, "wraps": functools.wraps,
            "update_wrapper": functools.update_wrapper}
    made = space.pop("make")(real, re.compile(denied_attributes).fullmatch, spaces, refused, frozenset(allowed))
    for name in sorted({n for imported in names for n in _parents(imported)}, key=lambda n: n.count(".")):
        module = modules.get(name)
        if name.partition(".")[0] not in allowed or type(module) is not types.ModuleType:
            continue
        public = getattr(module, "__all__", None)
        public = public if isinstance(public, (list, tuple)) else [n for n in vars(module) if not n.startswith("_")]
        hidden = HIDDEN.get(name, frozenset())
        members = {}
        for member in public:
            value = vars(module).get(member, _MISSING)
            if value is _MISSING or member in hidden or type(value) is types.ModuleType:
                continue
            members[member] = made[member] if (name, member) in _WRAPPED and member in made else value
        spaces[name] = types.SimpleNamespace(**members)
        parent, _, child = name.rpartition(".")
        if parent in spaces:
            setattr(spaces[parent], child, spaces[name])
    program_builtins = {n: v for n, v in vars(builtins).items() if not n.startswith("_") and n not in HIDDEN_BUILTINS}
    program_builtins["__build_class__"] = builtins.__build_class__
    program_builtins["__import__"] = made["__import__"]
    program_builtins["__guarded__"] = made
    return program_builtins


_MISSING = object()


def cap_memory(headroom_mb: int) -> None:
    """Let this process map at most ``headroom_mb`` MiB beyond what it maps now (its RLIMIT_AS, never above
    the sandbox's): what a program can allocate is the run's condition, not the sandbox's setting.
    The scripted solvers' simulator calls it too, so a simulation has the headroom grading has."""
    # the runner loaded resource while imports were open; its import guard refuses the harness's own
    resource = sys.modules.get("resource") or __import__("resource")
    try:
        with open("/proc/self/statm") as statm:
            mapped = int(statm.read().split()[0]) * resource.getpagesize()
        soft, hard = resource.getrlimit(resource.RLIMIT_AS)
        limit = mapped + headroom_mb * 2**20
        resource.setrlimit(resource.RLIMIT_AS, (limit if hard == resource.RLIM_INFINITY else min(limit, hard), hard))
    except (OSError, ValueError):
        pass  # no /proc: the sandbox's cap alone holds


def _parents(name: str) -> list[str]:
    parts = name.split(".")
    return [".".join(parts[:i]) for i in range(1, len(parts) + 1)]


def _make_hook(guarded, refused, free, safe, type_, str_, len_, id_, repr_):
    """Return the runner's audit hook; its closure cells are its own."""

    class Refused(RuntimeError, ValueError):  # RuntimeError: sys.addaudithook then fails silently
        """Raised where a task's program tries something the harness does not allow."""

    def hook(event, args):
        if event in free:
            if event not in ("object.__setattr__", "object.__delattr__") or id_(args[0]) not in guarded:
                return
        elif event == "object.__getattr__" and args[1] in safe and id_(args[0]) not in guarded:
            return
        if event == "sys._getframe":  # typing and namedtuple ask, and cope with a ValueError
            raise Refused("frames are not available to a task's program")
        first = args[0] if args else None
        shown = repr_(first)[:80] if type_(first) in (str_, int, bytes) else ""
        if len_(refused) < 8:
            refused.append(f"import of {shown} at run time" if event == "import" else f"{event}({shown})")
        raise Refused(f"{event} is not allowed in a task's program")

    return hook


# ---- the supervisor -------------------------------------------------------------------------------

_CRASH_SIGNALS = {4: "crashed", 6: "crashed", 7: "crashed", 8: "crashed", 11: "crashed", 24: "timeout",
                  25: "file_size"}


def _supervise() -> None:
    import json
    import marshal
    import os
    import signal

    job = json.loads(sys.stdin.read())
    # The first run goes alone: a program that fails there (a loop, a memory bomb, a refusal) has
    # the machine to itself and is reported at once; the others then check determinism side by side.
    runs = [_read_run(child, marshal, os, signal) for child in _run_batch(job, job["runs"][:1])]
    if not _failed(runs[0]):
        runs += [_read_run(child, marshal, os, signal) for child in _run_batch(job, job["runs"][1:])]
    sys.stdout.write(json.dumps({"nonce": job["nonce"], "runs": runs}, ensure_ascii=True) + "\n")
    sys.stdout.flush()


def _failed(run: dict) -> bool:
    return run["reason"] is not None or bool(run["refused"]) or any(status != "ok" for status, _ in run["calls"])


def _run_batch(job: dict, batch: list) -> list[dict]:
    """Run one runner per run of ``batch`` side by side; return each runner's record once it is gone."""
    import marshal
    import os
    import selectors
    import time

    timeout_s, startup_s, cap = float(job["timeout_s"]), float(job["startup_s"]), int(job["max_output"])
    children = []
    for run in batch:
        key = os.urandom(32)
        payload = marshal.dumps({"key": key, "program": run["program"], "calls": marshal.loads(bytes.fromhex(run["calls"])),
                                 "allowed": job["allowed"], "preload": run["preload"], "clock": run["clock"],
                                 "pad": run["pad"], "max_value": job["max_value"], "entropy": run["entropy"],
                                 "recursion_limit": run["recursion_limit"], "headroom_mb": run["headroom_mb"],
                                 "capabilities": job["capabilities"],
                                 "denied_attributes": job["denied_attributes"]})
        stdin_r, stdin_w = os.pipe()
        out_r, out_w = os.pipe()
        res_r, res_w = os.pipe()
        pid = os.posix_spawn(sys.executable, [sys.executable, "-S", "-s", "-B", sys.argv[0], "--child"],
                             {"PYTHONHASHSEED": str(run["hash_seed"]), "LANG": "C.UTF-8", "PYTHONIOENCODING": "utf-8",
                              "TZ": run["tz"]},
                             file_actions=[(os.POSIX_SPAWN_DUP2, stdin_r, 0), (os.POSIX_SPAWN_DUP2, out_w, 1),
                                           (os.POSIX_SPAWN_DUP2, out_w, 2), (os.POSIX_SPAWN_DUP2, res_w, 3)])
        for fd in (stdin_r, out_w, res_w):
            os.close(fd)
        # the runner's time starts when it says it is ready (its key alone on fd 3), just before the
        # program runs, so a slow interpreter start on a busy machine does not eat the program's time
        children.append({"pid": pid, "key": key, "stdin": stdin_w, "out": out_r, "res": res_r, "input": payload,
                         "sent": 0, "printed": 0, "max_text": int(job["max_text"]),
                         "result": bytearray(), "stopped": None, "status": None, "open": 2, "started": False,
                         "deadline": time.monotonic() + startup_s})
    with selectors.DefaultSelector() as selector:
        for child in children:
            os.set_blocking(child["stdin"], False)
            selector.register(child["stdin"], selectors.EVENT_WRITE, (child, "stdin"))
            selector.register(child["out"], selectors.EVENT_READ, (child, "out"))
            selector.register(child["res"], selectors.EVENT_READ, (child, "res"))
        while any(child["status"] is None for child in children):
            now = time.monotonic()
            for child in children:
                if child["status"] is not None:
                    continue
                if not child["open"]:
                    done, status = os.waitpid(child["pid"], os.WNOHANG)
                    if done:
                        child["status"] = status
                        continue
                if now >= child["deadline"]:
                    child["stopped"] = child["stopped"] or ("timeout" if child["started"] else "startup")
                    _kill(child["pid"])
                    child["status"] = os.waitpid(child["pid"], 0)[1]
            pending = [c["deadline"] for c in children if c["status"] is None]
            if not pending:
                break
            wait = min(pending) - now
            if any(not c["open"] and c["status"] is None for c in children):
                wait = min(wait, 0.002)  # pipes closed, exit not yet seen
            for item, _ in selector.select(max(wait, 0.0)):
                child, what = item.data
                fd = item.fd
                if what == "stdin":
                    try:
                        child["sent"] += os.write(fd, child["input"][child["sent"]:child["sent"] + 65536])
                    except BlockingIOError:
                        continue
                    except OSError:
                        child["sent"] = len(child["input"])
                    if child["sent"] >= len(child["input"]):
                        selector.unregister(fd)
                        os.close(fd)
                    continue
                chunk = os.read(fd, 65536)
                if not chunk:
                    selector.unregister(fd)
                    os.close(fd)
                    child["open"] -= 1
                    continue
                if what == "out":
                    child["printed"] += len(chunk)  # the program's own output: counted, never read
                    over = child["printed"] > cap
                else:
                    child["result"] += chunk
                    over = len(child["result"]) > job["max_result"]
                    if not child["started"] and len(child["result"]) >= 32:
                        child["started"] = True
                        child["deadline"] = time.monotonic() + timeout_s
                if over and child["stopped"] is None:
                    child["stopped"] = "output"
                    _kill(child["pid"])
    return children


def _kill(pid: int) -> None:
    import os
    import signal

    try:
        os.kill(pid, signal.SIGKILL)
    except OSError:
        pass


def _read_run(child: dict, marshal, os, signal) -> dict:
    """Return one run's report: why it stopped, what the program tried, each call's [status, text]."""
    status, none = child["status"], {"calls": [], "refused": []}
    if child["stopped"] == "startup":
        return {"reason": "timeout", "detail": "the runner did not start in time (a busy machine?)", **none}
    if child["stopped"]:
        what = "ran past the time limit" if child["stopped"] == "timeout" else "printed more than allowed"
        return {"reason": child["stopped"], "detail": f"the program {what}", **none}
    if os.WIFSIGNALED(status):
        sig = os.WTERMSIG(status)
        name = signal.Signals(sig).name if sig in signal.valid_signals() else "?"
        return {"reason": _CRASH_SIGNALS.get(sig, "killed"),
                "detail": f"the program was killed by signal {sig} ({name})", **none}
    data, key = bytes(child["result"]), child["key"]
    if len(data) <= 32:
        return {"reason": "error", "detail": f"the program ended (exit status {os.WEXITSTATUS(status)}) before "
                                             "f's results were sent", **none}
    if len(data) < 72 or data[:32] != key or data[32:64] != key or len(data) != 72 + int.from_bytes(data[64:72], "big"):
        return {"reason": "error", "detail": "the program wrote to the harness's result channel", **none}
    try:
        results, refused = marshal.loads(data[72:])
        calls = [_call(marshal, status_, value, child["max_text"]) for status_, value in results]
        refused = [str(r) for r in refused]
    except Exception:  # noqa: BLE001 - damaged data is a failed run, whatever broke
        return {"reason": "error", "detail": "the runner's results are damaged", **none}
    return {"reason": None, "detail": "", "calls": calls, "refused": refused}


def _call(marshal, status: str, value, max_text: int) -> list[str]:
    """Turn one call's result into [status, text]: canonical JSON for "ok", else what went wrong."""
    import json

    if status == "too_long":
        return ["too_long", f"{int(value)} bytes as marshal data"]
    if status != "ok":
        return [str(status), str(value)]
    data = marshal.loads(value)
    problem = _not_json(data, 0)
    if problem is not None:
        return ["not_json", problem]
    try:
        text = json.dumps(data, sort_keys=True, allow_nan=False)
    except (ValueError, TypeError, RecursionError) as exc:
        return ["not_json", f"{type(exc).__name__}: {str(exc)[:100]}"]
    return ["ok", text] if len(text) <= max_text else ["too_long", f"{len(text)} characters as JSON"]


def _not_json(value, depth: int) -> str | None:
    """Return what keeps ``value`` from being exact JSON data (a type's name), or None if nothing does."""
    kind = type(value)
    if depth > 100:
        return "a value nested too deeply"
    if value is None or kind in (bool, int, str):
        return None
    if kind is float:
        return None if value - value == 0 else "float (nan or infinity)"
    if kind is list:
        return next((p for p in (_not_json(v, depth + 1) for v in value) if p), None)
    if kind is dict:
        if not all(type(k) is str for k in value):
            return "dict with keys that are not str"
        return next((p for p in (_not_json(v, depth + 1) for v in value.values()) if p), None)
    return kind.__name__


if __name__ == "__main__":
    if sys.argv[1:] == ["--child"]:
        _runner()
    else:
        _supervise()
