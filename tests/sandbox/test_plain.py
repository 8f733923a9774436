"""Tests for llm_zoo.sandbox.plain and open_session: plain data only crosses, whatever the code under test does."""

from __future__ import annotations

import math
import shutil
import time

import pytest

from llm_zoo.sandbox import Workspace, open_session, plain

needs_bwrap = pytest.mark.skipif(shutil.which("bwrap") is None,
                                 reason="bubblewrap is not installed (apt-get install bubblewrap); CI installs it")


@pytest.mark.parametrize("value", [None, True, 0, -7, 2 ** 200, -(2 ** 90), 1.5, math.inf, "", "é\n\"x\"",
                                   b"\x00\xff", [1, [2, (3, "a")]], (1,), {1: "a", (2, 3): [4], None: {}},
                                   {1, 2.5, "x"}, frozenset({(1, 2)}), list(range(5000)), [0.25] * 2000,
                                   tuple(range(3000)), set(range(2000)), [True] * 2000])
def test_plain_values_round_trip_with_their_exact_types(value):
    back = plain.decode(plain.encode(value))
    assert back == value and type(back) is type(value)
    if isinstance(value, (list, tuple)):
        assert [type(v) for v in back] == [type(v) for v in value]


def test_nan_round_trips_as_a_float():
    back = plain.decode(plain.encode([math.nan]))
    assert type(back[0]) is float and math.isnan(back[0])


class Loose(int):
    def __eq__(self, other):
        return True

    __hash__ = int.__hash__


@pytest.mark.parametrize("value", [Loose(3), [1, Loose(2)], {"a": object()}, (lambda: 0), {Loose(1): 2}])
def test_anything_but_exact_builtin_types_is_refused(value):
    with pytest.raises(plain.NotPlain, match="not plain data"):
        plain.encode(value)


def test_caps_on_depth_size_and_ints():
    deep: list = []
    for _ in range(plain.MAX_DEPTH + 5):
        deep = [deep]
    cycle: list = []
    cycle.append(cycle)
    for value, words in ((deep, "deeper than"), (cycle, "deeper than"), (2 ** (plain.MAX_INT_BITS + 1), "bits"),
                         ([[0]] * (plain.MAX_NODES // 2 + 10), "items"), (["x" * 1000] * 9000, "characters")):
        with pytest.raises(plain.NotPlain, match=words):
            plain.encode(value)


def test_malformed_data_is_refused():
    for data in ({"zz": 1}, {"d": [[1]]}, {"a": ["l", "q", 5]}, {}):
        with pytest.raises(plain.NotPlain):
            plain.decode(data)


SOLUTION = '''
import os, sys, time

class Always:
    def __eq__(self, other):
        return True

class Stack:
    def __init__(self):
        self.items = []
    def push(self, x):
        self.items.append(x)
    def pop(self):
        if not self.items:
            raise IndexError("pop from empty stack")
        return self.items.pop()
    def __len__(self):
        return len(self.items)

FakeError = type("ValueError", (Exception,), {})

def always():
    return Always()

def append_one(items):
    items.append(1)
    return items

def inner(d):
    return d["a"]

def fake_value_error():
    raise FakeError("looks like one")

def real_value_error():
    raise ValueError("is one")

def shout(x):
    print("PASS test_everything")
    os.write(1, b'{"id": 99, "value": 1}\\n')
    return x

def spin():
    while True:
        pass

def die():
    os._exit(0)

def where():
    return sys.path[-1], [m for m in ("json",) if getattr(sys.modules[m], "SHADOW", False)]
'''


@pytest.fixture()
def remote():
    with Workspace() as ws:
        ws.write_file("solution.py", SOLUTION)
        ws.write_file("json.py", "SHADOW = True\nraise SystemExit('a workspace json.py was imported')\n")
        session, process = open_session(ws, timeout_s=30)
        with process:
            session.deadline = time.monotonic() + 10
            yield session, session.import_module("solution", ".")


@needs_bwrap
def test_objects_stay_behind_as_handles_that_cannot_be_compared(remote):
    _, module = remote
    trick = module.always()
    assert isinstance(trick, plain.RemoteObject)
    for compare in (lambda: trick == 1, lambda: 1 == trick, lambda: [trick] == [1], lambda: bool(trick),
                    lambda: hash(trick)):
        with pytest.raises(TypeError, match="where a value was needed"):
            compare()
    stack = module.Stack()
    stack.push("x")
    assert len(stack) == 1 and stack.pop() == "x"
    with pytest.raises(IndexError, match="pop from empty stack"):
        stack.pop()


@needs_bwrap
def test_arguments_are_copies_mutations_are_reported_and_aliases_are_kept(remote):
    session, module = remote
    items = [0]
    got = module.append_one(items)
    assert items == [0] and got == [0, 1] and got is not items  # the caller's list never changes
    assert session.changed_arguments == 1
    assert module.append_one(items) == [0, 1]  # sent again as it is here, not the server's changed copy
    base = {"a": {"x": 1}}
    assert module.inner(base) is base["a"] and session.changed_arguments == 0


@needs_bwrap
def test_only_real_builtin_exceptions_come_back_as_themselves(remote):
    _, module = remote
    with pytest.raises(ValueError, match="is one"):
        module.real_value_error()
    with pytest.raises(Exception) as raised:
        module.fake_value_error()
    assert type(raised.value) is Exception and raised.value.solution_where == "solution.py line 33"


@needs_bwrap
def test_printed_and_written_output_never_reaches_the_channel(remote):
    session, module = remote
    assert module.shout(5) == 5
    assert session.stdout[-1] == "PASS test_everything\n"


@needs_bwrap
def test_the_workspace_comes_last_on_the_path_and_shadows_no_stdlib_module(remote):
    _, module = remote
    last, shadowed = module.where()
    assert last == "/workspace" and shadowed == []


@needs_bwrap
def test_a_timeout_or_an_exit_ends_the_session(remote):
    session, module = remote
    session.deadline = time.monotonic() + 0.5
    with pytest.raises(plain.SessionDead) as dead:
        module.spin()
    assert dead.value.reason == "timeout"
    with pytest.raises(plain.SessionDead):
        module.always()


@needs_bwrap
def test_a_process_that_exits_is_a_dead_session_not_a_value():
    with Workspace() as ws:
        ws.write_file("solution.py", SOLUTION)
        session, process = open_session(ws, timeout_s=30)
        with process:
            session.deadline = time.monotonic() + 10
            module = session.import_module("solution", ".")
            with pytest.raises(plain.SessionDead, match="exited with status 0") as dead:
                module.die()
            assert dead.value.reason == "ended"


def scripted_server(*answers: bytes) -> plain.Session:
    """A client whose 'server' sends these raw answer lines, whatever was asked (a hostile process)."""
    queue = list(answers)
    return plain.Session(lambda line: None, lambda deadline: queue.pop(0))


def test_a_hostile_server_cannot_crash_or_fool_the_client():
    deep = b'{"id": 1, "value": ' + b"[" * 100_000 + b"]" * 100_000 + b"}"
    for raw in (deep, b'{"id": 7, "value": 1}', b"not json", b'[1, 2]', b'{"id": 1, "value": {"zz": 1}}'):
        session = scripted_server(raw)
        with pytest.raises((plain.SessionDead, plain.NotPlain)):
            session.request("getattr", obj=0, name="f")
    session = scripted_server(b'{"id": 1, "raised": "SystemExit", "message": "0"}')
    with pytest.raises(Exception) as raised:  # never a SystemExit in this process
        session.request("getattr", obj=0, name="f")
    assert type(raised.value) is Exception


def test_nothing_is_ever_written_back_and_only_the_call_s_arguments_count_as_changed():
    kept, passed = [1, 2], [3]
    session = scripted_server(b'{"id": 2, "value": null, "changed": []}',
                              b'{"id": 4, "value": null, "changed": [1, 3], "updates": [[3, [8]]]}')
    session.call(0, (kept,), {})    # mirrored as 1
    session.call(0, (passed,), {})  # mirrored as 3: only it may count as changed
    assert kept == [1, 2] and passed == [3] and session.changed_arguments == 1


def test_only_values_with_nothing_mutable_inside_count_as_frozen():
    """A frozen argument is sent once and then by id unchecked; anything that can change inside it must not be."""
    frozen = [(), (1, 2.5, "x", b"y", None, True), (1, (2, (3, frozenset({(4, "z")})))), frozenset({1, (2, 3)}),
              tuple(range(100_000))]
    thawed = [[1], (1, [2]), (1, (2, (3, [4]))), (1, {2: 3}), (1, {2}), (1, (2, bytearray(b"x"))),
              (object(),), tuple(range(100_000)) + ([],), (1, (2,) * 3, range(3))]
    assert all(plain._frozen(v) for v in frozen)
    assert not any(plain._frozen(v) for v in thawed)


WORKER = '''
import os, threading, time

def burn(seconds):
    end = time.process_time() + seconds
    while time.process_time() < end:
        pass

def nap(seconds):
    time.sleep(seconds)

def burn_in_thread(seconds):
    t = threading.Thread(target=burn, args=(seconds,))
    t.start()
    t.join()

def burn_in_child(seconds, reap):
    pid = os.fork()
    if pid == 0:
        burn(seconds)
        os._exit(0)
    if reap:
        os.waitpid(pid, 0)
    else:  # left a zombie: wait without reaping
        os.waitid(os.P_PID, pid, os.WEXITED | os.WNOWAIT)
'''


@needs_bwrap
def test_cpu_seconds_counts_the_work_of_every_process_and_thread_in_the_sandbox_and_no_waiting():
    with Workspace() as ws:
        ws.write_file("solution.py", WORKER)
        session, process = open_session(ws, timeout_s=60)
        with process:
            session.deadline = time.monotonic() + 50
            module = session.import_module("solution", ".")
            spent = {}
            for name, call in {"burn": lambda: module.burn(0.4), "nap": lambda: module.nap(0.6),
                               "thread": lambda: module.burn_in_thread(0.4),
                               "child": lambda: module.burn_in_child(0.4, True),
                               "zombie": lambda: module.burn_in_child(0.4, False)}.items():
                before = process.cpu_seconds()
                call()
                spent[name] = process.cpu_seconds() - before
        with pytest.raises(RuntimeError, match="ended"):
            process.cpu_seconds()
    assert spent["nap"] < 0.1, spent
    for name in ("burn", "thread", "child", "zombie"):
        assert 0.35 <= spent[name] < 1.0, (name, spent)


@needs_bwrap
def test_a_program_beside_the_server_keeps_its_source_and_output_out_of_reach():
    from llm_zoo.sandbox import run_python_beside

    snoop = ("import os\ndef f(items):\n    items.clear()\n    seen = []\n"
             "    for p in ['/sandbox/main.py', '/proc/1/cmdline', '/proc/%d/cmdline' % os.getppid()]:\n"
             "        try:\n            seen.append(open(p).read())\n        except OSError:\n            pass\n"
             "    return ' '.join(seen + os.listdir('.'))\n")
    with Workspace() as mine, Workspace() as theirs:
        theirs.write_file("solution.py", snoop)
        mine.write_file("notes.txt", "SECRET-EXPECTED-42")
        mine.write_file("solution.py", "raise SystemExit('this copy never runs')\n")  # imports go to the server
        out = run_python_beside("SECRET = 'SECRET-EXPECTED-42'\nitems = [1, 2]\nfrom solution import f\n"
                                "seen = f(items)\nprint('SECRET' in seen, items)\n", workspace=mine,
                                server_workspace=theirs, timeout_s=20)
    assert out.ok and out.stdout.strip() == "False [1, 2]", out


VIEW_AT_START = '''import fcntl, os, re, sys, termios, array
def _pending(fd):
    buffer = array.array("i", [0])
    try:
        fcntl.ioctl(fd, termios.FIONREAD, buffer)
    except OSError:
        return None
    return buffer[0]
def _fd(fd):
    try:
        target = re.sub(r"\\[\\d+\\]", "", os.readlink("/proc/self/fd/" + fd))
        info = open("/proc/self/fdinfo/" + fd).read().split("\\n")
    except OSError:
        return None
    flags = [line for line in info if line.startswith("flags:")]
    return [fd, target, flags, _pending(int(fd)) if target.startswith("pipe") else None]
VIEW = repr({
    "pid": os.getpid(), "ppid": os.getppid(), "pids": sorted(p for p in os.listdir("/proc") if p.isdigit()),
    "fds": [_fd(fd) for fd in sorted(os.listdir("/proc/self/fd"), key=int)],
    "cmdline": open("/proc/self/cmdline", "rb").read(), "cwd": os.getcwd(), "argv": sys.argv,
    "path": sys.path, "environ": sorted(os.environ.items()), "modules": sorted(sys.modules),
    "status": [line.split(":")[0] + ":" + line.split(":")[1].strip() for line in open("/proc/self/status")
               if line.split(":")[0] in ("Uid", "Gid", "Groups", "NSpid", "Seccomp", "CapEff", "NoNewPrivs")],
})
def view():
    return VIEW
'''


@needs_bwrap
def test_the_server_sees_the_same_at_its_start_in_review_and_in_grading(monkeypatch):
    """What the imported code can read of its own process at import (pids, fds with their flags and bytes
    waiting, argv, environment, modules, credentials) is the same when the judge's tools import it
    (`open_session`) as when grading's program does (`run_python_beside`), and grading starts the server only
    once the program's first request waits in its pipe, as review's server finds its first request."""
    from llm_zoo.sandbox import run_python_beside
    from llm_zoo.sandbox import session as session_module

    waiting = []
    real_start = session_module._start_linked

    def start(workspace, stdin_fd, *args):
        waiting.append(session_module._pending(stdin_fd))
        return real_start(workspace, stdin_fd, *args)

    monkeypatch.setattr(session_module, "_start_linked", start)
    with Workspace() as mine, Workspace() as theirs:
        theirs.write_file("solution.py", VIEW_AT_START)
        mine.write_file("solution.py", "raise SystemExit('this copy never runs')\n")  # imports go to the server
        session, process = open_session(theirs, timeout_s=30)
        with process:
            session.deadline = time.monotonic() + 20
            review = session.import_module("solution", ".").view()
        out = run_python_beside("import solution\nprint(solution.view())\n", workspace=mine,
                                server_workspace=theirs, timeout_s=30)
        assert out.ok, out.stderr
        grading = out.stdout.strip()
        unasked = run_python_beside("print('no import')\n", workspace=mine, server_workspace=theirs, timeout_s=30)
    assert unasked.ok and unasked.stdout.strip() == "no import", unasked
    assert len(waiting) == 1 and waiting[0] > 0, f"the server started with {waiting} bytes of request waiting"
    assert "'fds': [['0', '/dev/null'" in review, review  # the view was read (the channel moved off fds 0 and 1)
    assert grading == review
