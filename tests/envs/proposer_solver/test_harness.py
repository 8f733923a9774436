"""The sandboxed harness (harness.py, through verify): capabilities, the result channel, run-time refusals,
determinism.

A task's program gets capabilities (curated builtins and module namespaces) and cannot reach the
interpreter's internals at all: :func:`outcome` runs programs so. Beneath that, the audit hook and
the removed functions still hold: :func:`beneath` runs programs with the real builtins and modules,
whose attribute walks (``typing.sys``) reach the internals, and checks what the env would record.
"""

from __future__ import annotations

import json

import pytest

from llm_zoo.envs.proposer_solver import verify
from llm_zoo.envs.proposer_solver.rules import (
    REFERENCE,
    Mode,
    Proposal,
    Task,
    TaskInvalid,
    check_outputs,
    check_run,
    harness_job,
)
from llm_zoo.sandbox import run_python

pytestmark = pytest.mark.bwrap
SETTINGS = verify.SandboxSettings(timeout_s=1.0, memory_mb=128)
WALK = "import typing\nimport operator\nS = typing.sys\nP = S.modules['posix']\nB = S.modules['builtins']\n"
FORGED = '@@llm_zoo_proposer_solver@@[["ok", "99"]]'


def outcome(program: str, inputs: tuple[str, ...] = ("1",), mode: Mode = Mode.DEDUCTION) -> tuple[str, ...] | str:
    """Validate a program; return its recorded outputs, or ``"<code>: <detail>"`` when it is invalid."""
    try:
        return verify.validate(Proposal(mode, program, inputs), SETTINGS)[0]
    except TaskInvalid as exc:
        return f"{exc.code}: {exc.detail}"


def beneath(program: str, inputs: tuple[str, ...] = ("1",)) -> tuple[str, ...] | str:
    """Run a program as validation does but with the real builtins and modules (no capabilities); return
    its outputs, or ``"<code>: <detail>"`` for what the layer beneath the capabilities refused."""
    try:
        (runs,) = verify.run_programs([[(program, list(inputs), c) for c in verify.checking_conditions()]], SETTINGS,
                                      capabilities=False)
        if isinstance(runs, TaskInvalid):
            raise runs
        results = [check_run(run, len(inputs)) for run in runs]
        outputs = check_outputs(results[0], Mode.DEDUCTION)
    except TaskInvalid as exc:
        return f"{exc.code}: {exc.detail}"
    return outputs if all(r == results[0] for r in results) else f"nondeterministic: {results}"


def f(body: str, head: str = "") -> str:
    return head + "def f(x):\n" + "\n".join("    " + line for line in body.splitlines())


# ---- the result channel: what the program prints or writes never becomes the record -----------------

CHANNEL = [
    ("printed marker", f(f"print({FORGED!r})\nreturn 2")),
    ("raw writes to every fd", f(f"for fd in range(1, 64):\n    try:\n        P.write(fd, {FORGED.encode()!r})\n"
                                 "    except Exception:\n        pass\nreturn 2", WALK)),
    ("dup2 over the channel", f(f"for fd in range(3, 8):\n    try:\n        P.dup2(1, fd)\n    except Exception:\n"
                                f"        pass\nprint({FORGED!r})\nreturn 2", WALK)),
    ("FileIO on fd 3", f("try:\n    S.modules['_io'].FileIO(3, 'wb').write(b'x' * 80)\nexcept Exception:\n"
                         "    pass\nreturn 2", WALK)),
    ("patched marshal and builtins", f("S.modules['marshal'].dumps = lambda *a: b'\\xe9\\x63\\x00\\x00\\x00'\n"
                                       "B.len = lambda v: 0\nB.repr = lambda v: '99'\nreturn 2", WALK)),
    ("non-UTF-8 bytes on stdout and stderr", f("S.stdout.buffer.write(b'\\xff\\xfe\\x80')\nS.stderr.write('\\udcff')\n"
                                                "return 2", WALK)),
]


@pytest.mark.parametrize(("name", "program"), CHANNEL, ids=[c[0] for c in CHANNEL])
def test_what_the_program_writes_is_never_recorded_as_its_output(name, program):
    result = beneath(program)
    assert result == ("2",) or (isinstance(result, str) and result.split(":")[0] in ("forbidden", "error")), result


@pytest.mark.parametrize("program", [
    f(f"print({FORGED!r}, flush=True)\nP._exit(0)\nreturn 2", WALK),
    f("try:\n    return 2\nfinally:\n    raise SystemExit(0)"),
    f(f"for _ in range(10**5):\n    print({FORGED!r})\nreturn 2"),
    f("S.setrecursionlimit(10**6)\ndef deep(n):\n    return deep(n + 1)\nreturn deep(0)", WALK),
], ids=["os._exit after a marker", "SystemExit in finally", "output flood", "C stack overflow"])
def test_a_program_that_leaves_early_or_floods_gives_no_result(program):
    result = beneath(program)
    assert isinstance(result, str) and result.split(":")[0] in ("error", "output", "crashed", "killed", "timeout"), result


def test_an_abduction_program_cannot_judge_every_answer_right():
    marker = '@@llm_zoo_proposer_solver@@[["ok", "3"]]'
    program = f(f"print({marker!r})\nreturn x % 10")
    outputs, conditions = verify.validate(Proposal(Mode.ABDUCTION, program, ("13",)), SETTINGS)
    task = Task(Proposal(Mode.ABDUCTION, program, ("13",)), outputs, conditions=conditions)
    graded = verify.grade(task, {"a": "13", "b": "4", "c": "'a'", "d": "23"}, SETTINGS)
    assert graded == {"a": True, "b": False, "c": False, "d": True}


def test_the_supervisor_alone_writes_the_report_and_a_wrong_nonce_is_damage():
    job = harness_job([(f("print('{\"nonce\": \"n\", \"runs\": []}')\nreturn 2"), ["1"], verify.draw_conditions())],
                      nonce="n", timeout_s=1.0, allowed_imports=["math"], max_output=1 << 16)
    run = run_python(verify.HARNESS, stdin=json.dumps(job), timeout_s=10, limits=verify.LIMITS)
    report = json.loads(run.stdout)
    assert run.stdout.count("\n") == 1 and report["nonce"] == "n" and report["runs"][0]["calls"] == [["ok", "2"]]


# ---- run-time refusals: attribute walks reach the objects, using them fails --------------------------

REFUSED = [
    ("open through builtins", f("return len(B.open('/etc/hostname').read())", WALK), "forbidden", "open("),
    ("open through Formatter globals",
     f("g = string.Formatter().get_field('0.__globals__', [string.capwords], {})[0]\n"
       "return len(g['__builtins__']['open']('/etc/hostname').read())", "import string\n"), "forbidden", "open("),
    ("FileIO through the io module", f("return len(S.modules['_io'].FileIO('/etc/hostname').read())", WALK),
     "forbidden", "open("),
    ("import of subprocess", f("return operator.attrgetter('__imp' + 'ort__')(B)('subprocess').run(['true'])", WALK),
     "import", "'subprocess'"),
    ("import of os where os is loaded", f("return len(operator.attrgetter('__imp' + 'ort__')(B)('os').listdir('/'))",
                                          "import dataclasses\n" + WALK), "import", "'os'"),
    ("frames through sys._getframe", f("return len(S._getframe(0).f_back.f_locals)", WALK), "error", "frames"),
    ("frames through a traceback", f("try:\n    1 / 0\nexcept Exception as e:\n"
                                     "    return len(operator.attrgetter('__traceback__.tb_frame')(e).f_back.f_locals)",
                                     WALK), "forbidden", "object.__getattr__"),
    ("frames through a generator", f("def g():\n    yield 1\nreturn len(operator.attrgetter('gi_frame')(g()).f_locals)",
                                     WALK), "forbidden", "object.__getattr__"),
    ("gc introspection", f("return len(S.modules['gc'].get_objects())", WALK), "forbidden", "gc.get_objects"),
    ("tracing", f("S.settrace(lambda *a: None)\nreturn 2", WALK), "forbidden", "sys.settrace"),
    ("a new audit hook", f("S.addaudithook(lambda *a: None)\nreturn 2", WALK), "forbidden", "sys.addaudithook"),
    ("hand-made code", f("return operator.attrgetter('__code__')(f).replace(co_consts=(None,)) and 2", WALK),
     "forbidden", "code.__new__"),
    ("marshal.loads", f("return S.modules['marshal'].loads(b'\\xe9\\x02\\x00\\x00\\x00')", WALK), "forbidden",
     "marshal.loads"),
    ("the real clock behind a fake", f("return operator.attrgetter('__defaults__')(S.modules['time'].localtime)[1]()[0]",
                                       WALK), "forbidden", "object.__getattr__"),
]


@pytest.mark.parametrize(("name", "program", "code", "said"), REFUSED, ids=[r[0] for r in REFUSED])
def test_forbidden_things_fail_when_they_run_whatever_the_source_looks_like(name, program, code, said):
    result = beneath(program)
    assert isinstance(result, str) and result.startswith(f"{code}: ") and said in result, result


# A search of everything a program can reach by attributes from the loaded modules and from
# object's subclasses: module and class dicts, containers, functions' defaults, closures and
# globals, bound methods' __self__. It returns what it found that it must not find.
GRAPH_SEARCH = r"""
import typing, operator, dataclasses, statistics, datetime, calendar, fractions, decimal, re, string, collections
S = typing.sys
ga = operator.attrgetter
BAD = {"time", "time_ns", "monotonic", "monotonic_ns", "perf_counter", "perf_counter_ns", "process_time",
       "thread_time", "localtime", "gmtime", "ctime", "asctime", "strftime", "clock_gettime", "stat", "lstat", "fstat",
       "statvfs", "times", "getloadavg", "urandom", "getrandom", "write", "read", "_exit", "fork", "system", "dup",
       "dup2", "close", "kill", "pipe", "start_new_thread", "signal", "setitimer", "alarm", "create_builtin",
       "create_dynamic"}
def f(x):
    fakes = {id(v) for v in vars(S.modules["time"]).values()}
    todo, seen, found = [*S.modules.values(), ga("__class__.__base__")(())], set(), []
    while todo:
        o = todo.pop()
        if id(o) in seen:
            continue
        seen.add(id(o))
        t = type(o)
        if t is bytes and len(o) == 32:
            found.append("a 32-byte key?")
        if t is type(len):
            owner = getattr(o, "__self__", None)
            if type(owner) is type(S) and ga("__name__")(o) in BAD and id(o) not in fakes:
                found.append(ga("__name__")(owner) + "." + ga("__name__")(o))
            continue
        try:
            if t is dict:
                todo += [*o.values(), *o.keys()]
            elif t in (list, tuple, set, frozenset):
                todo += list(o)
            elif isinstance(o, type):
                todo += [*vars(o).values(), *operator.methodcaller("__subclasses__")(o)]
            else:
                todo += list(vars(o).values())
        except Exception:
            pass
        for name in ("__defaults__", "__kwdefaults__", "__closure__", "__globals__", "cell_contents", "__func__",
                     "__wrapped__", "__self__", "func", "args", "keywords"):
            try:
                todo.append(ga(name)(o))
            except Exception:
                pass
    return [sorted(set(found)), len(seen) > 10000]
""".replace("getattr(o, \"__self__\", None)", "ga(\"__self__\")(o) if hasattr(o, \"__self__\") else None")


def test_no_reachable_object_is_a_real_clock_a_process_function_or_the_key():
    (runs,) = verify.run_programs([[(GRAPH_SEARCH, ["1"], verify.draw_conditions())]],
                                  verify.SandboxSettings(timeout_s=30.0, memory_mb=512), capabilities=False)
    assert not isinstance(runs, TaskInvalid) and runs[0].reason is None, runs
    # reading the fakes' defaults is refused (and recorded); what the search found is the point here
    assert json.loads(runs[0].calls[0][1]) == [[], True], runs[0].calls


@pytest.mark.parametrize(("name", "body"), [
    ("process", "P.fork()"), ("raw fd", "P.write(1, b'x')"), ("exit", "P._exit(0)"), ("status clock", "P.stat('/')"),
    ("times", "P.times()"), ("entropy", "P.urandom(1)"), ("threads", "S.modules['_thread'].start_new_thread(f, (1,))"),
    ("signals", "S.modules['_signal'].setitimer(0, 1.0)"), ("new builtin modules", "S.modules['_imp'].create_builtin(S)"),
])
def test_process_signal_fd_and_status_functions_are_gone(name, body):
    result = beneath(f(f"{body}\nreturn 2", WALK))
    assert isinstance(result, str) and result.startswith("error: ") and "has no attribute" in result, result


# ---- determinism: what must not matter differs between runs ---------------------------------------------

DEPTH_LEFT = "def d(n):\n    try:\n        return d(n + 1)\n    except RecursionError:\n        return n\nreturn d(0)"


@pytest.mark.parametrize(("name", "program"), [
    ("hash seed", f("return hash('abc') % 1000")),
    ("set order", f("return ''.join({'a', 'b', 'c', 'd', 'e', 'f'})")),
    ("object ids", f("return id(object()) % 100000")),
    ("datetime.now", f("return str(datetime.datetime.now())", "import datetime\n")),
    ("date.today's year", f("return datetime.date.today().year", "import datetime\n")),
    ("recursion depth left", f(DEPTH_LEFT)),
    ("local time zone", f("return datetime.datetime(2020, 1, 1, tzinfo=datetime.timezone.utc).astimezone().hour",
                          "import datetime\n")),
    ("entropy through NormalDist.samples", f("return statistics.NormalDist().samples(1)[0]", "import statistics\n")),
])
def test_programs_that_read_what_must_not_matter_are_nondeterministic(name, program):
    result = outcome(program)
    assert isinstance(result, str) and result.startswith("nondeterministic: "), result


@pytest.mark.parametrize(("name", "program"), [
    ("time through sys.modules", f("return S.modules['time'].time()", WALK)),
    ("random.seed() through statistics", f("statistics.random.seed()\nreturn statistics.random.random()",
                                           "import statistics\n")),
    ("random.Random() through statistics", f("return statistics.random.Random().random()", "import statistics\n")),
])
def test_clocks_and_entropy_reached_beneath_the_capabilities_still_differ_between_runs(name, program):
    # seeding from the system's entropy draws the run's seed (no audit event would catch the system's)
    result = beneath(program)
    assert isinstance(result, str) and result.startswith("nondeterministic: "), result


def test_what_a_program_can_allocate_is_the_run_s_headroom_not_the_sandbox_s_setting():
    program = f("try:\n    b = bytearray(x * 1024 * 1024)\n    return 3\nexcept MemoryError:\n    return 0")
    for memory_mb in (128, 512):
        settings = verify.SandboxSettings(timeout_s=2.0, memory_mb=memory_mb)
        assert verify.validate(Proposal(Mode.DEDUCTION, program, ("100",)), settings)[0] == ("0",), memory_mb
        assert verify.validate(Proposal(Mode.DEDUCTION, program, ("8",)), settings)[0] == ("3",), memory_mb
    # near the headroom, runs with less of it differ
    result = outcome(program, ("60",))
    assert isinstance(result, str) and result.startswith(("nondeterministic", "timeout")), result


def test_outputs_are_recorded_under_the_reference_conditions():
    # the recorded output is the reference run's whatever the other runs drew; an f that recurses
    # less deep than the lowest limit is the same in every run
    outputs, conditions = verify.validate(Proposal(Mode.DEDUCTION, f("def d(n):\n    return 0 if n == 0 else 1 + "
                                                                     "d(n - 1)\nreturn d(900)"), ("1",)), SETTINGS)
    assert outputs == ("900",) and conditions == REFERENCE


def test_abduction_checks_a_solver_input_under_validation_s_conditions():
    # f is deterministic on the proposer's input (13) and not on others: an input on which f is
    # not deterministic is never right, however its runs fall (a thousand values per run)
    program = f("if x == 13:\n    return 3\nreturn x % 10 + hash(str(x)) % 1000 * (x % 2)")
    outputs, conditions = verify.validate(Proposal(Mode.ABDUCTION, program, ("13",)), SETTINGS)
    task = Task(Proposal(Mode.ABDUCTION, program, ("13",)), outputs, conditions=conditions)
    graded = verify.grade(task, {"same": "13", "coin": "23", "even": "22", "wrong": "4"}, SETTINGS)
    assert outputs == ("3",) and graded == {"same": True, "coin": False, "even": False, "wrong": False}
    assert verify.grade(task, {"even": "12"}, SETTINGS) == {"even": False}  # 12 % 10 = 2, deterministic, wrong


def test_induction_checks_a_solver_program_under_validation_s_conditions():
    # a solver's f that is right under the recorded conditions only (it reads the depth left, which
    # is larger under every other run's limit) is wrong
    depth = "def f(x):\n" + "\n".join("    " + line for line in DEPTH_LEFT.splitlines())
    (runs,) = verify.run_programs([[(depth, ["1"], REFERENCE)]], SETTINGS)
    assert not isinstance(runs, TaskInvalid)
    left = int(runs[0].calls[0][1])
    task = Task(Proposal(Mode.INDUCTION, f("return x * 2"), ("1", "2", "3", "4")), ("2", "4", "6", "8"),
                held_out=(1, 3), conditions=REFERENCE)
    only_recorded = depth.replace("return d(0)", f"return x * 2 if d(0) <= {left} else -1")
    graded = verify.grade(task, {"right": "def f(x):\n    return x + x", "only_recorded": only_recorded}, SETTINGS)
    assert graded == {"right": True, "only_recorded": False}


# ---- what tasks legitimately do keeps working -----------------------------------------------------------

LEGIT = [
    ("dataclass", "import dataclasses\n@dataclasses.dataclass(order=True)\nclass P:\n    a: int\n    b: int = 2\n"
                  "def f(x):\n    return [repr(P(x)), P(1) < P(2), dataclasses.asdict(P(x))['b']]",
     '["P(a=1, b=2)", true, 2]'),
    ("typing and namedtuple", "import typing\nimport collections\nT = typing.TypeVar('T')\nN = collections.namedtuple("
                              "'N', 'a b')\nclass Q(typing.NamedTuple):\n    a: int\ndef f(x: T) -> T:\n"
                              "    return N(x, 2).b + Q(3).a", "5"),
    ("datetime without the clock", "import datetime\ndef f(x):\n    d = datetime.date(2024, 2, 28) + datetime.timedelta"
                                   "(days=x)\n    return [d.isoformat(), d.strftime('%A'), datetime.datetime.strptime("
                                   "'2020-03-04', '%Y-%m-%d').day]", '["2024-02-29", "Thursday", 4]'),
    ("numbers", "import fractions, decimal, statistics, math\ndef f(x):\n    return [str(fractions.Fraction(x, 3) + 1), "
                "str(decimal.Decimal('1.1') + x), statistics.median([3, x, 9]), math.comb(5, 2)]",
     '["4/3", "2.1", 3, 10]'),
    ("text and collections", "import re, string, heapq, bisect, itertools, functools, operator, calendar\n"
                             "from collections import Counter\n@functools.lru_cache\ndef g(n):\n    return n * 2\n"
                             "def f(x):\n    return [re.findall(r'\\d+', 'a12b3'), string.ascii_lowercase[:3], "
                             "heapq.nsmallest(2, [5, 1, 4]), bisect.bisect([1, 3], 2), list(itertools.accumulate("
                             "[1, 2, 3])), functools.reduce(operator.add, [1, 2]), calendar.isleap(2024), g(x), "
                             "Counter('aab').most_common(1)[0][0], 'é'.encode('utf-16').decode('utf-16')]",
     '[["12", "3"], "abc", [1, 4], 1, [1, 3, 6], 3, true, 2, "a", "\\u00e9"]'),
    ("exceptions by name", "def f(x):\n    out = []\n    for exc in (OSError, RuntimeError, ValueError, KeyError):\n"
                           "        try:\n            raise exc('boom')\n        except (OSError, RuntimeError, "
                           "LookupError, ValueError) as e:\n            out.append(str(e) + str(isinstance(e, OSError)))\n    return out",
     '["boomTrue", "boomFalse", "boomFalse", "\'boom\'False"]'),
]


@pytest.mark.parametrize(("name", "program", "expected"), LEGIT, ids=[c[0] for c in LEGIT])
def test_plain_computation_with_the_allowed_modules_is_valid_and_deterministic(name, program, expected):
    assert outcome(program) == (expected,)


WALKS = [*CHANNEL[1:], *[(r[0], r[1]) for r in REFUSED], ("graph search", GRAPH_SEARCH.replace("    ", " "))]


@pytest.mark.parametrize(("name", "program"), WALKS, ids=[w[0] for w in WALKS])
def test_with_capabilities_the_same_walks_reach_nothing(name, program):
    # the source check or the curated namespaces stop each walk before anything runs or is read
    result = outcome(program)
    assert isinstance(result, str) and result.split(":")[0] in ("forbidden", "error"), result
    assert "has no attribute" in result or "is not allowed" in result, result
