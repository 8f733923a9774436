"""A sandboxed process that stays up and answers requests: the server side of `llm_zoo.sandbox.plain`.

`open_session(workspace)` starts `plain`'s server in the sandbox (same boundary and limits as
`run_python`) and returns a `plain.Session` talking to it, with the process behind it. The server
runs as `python -I -S -B` from `/sandbox/main.py`, outside the workspace: no script directory, cwd,
site-packages, .pth files or PYTHON* variables on its path, no bytecode written, and the workspace
appended *last* to `sys.path` only once the server's own imports are done, so a file in the
workspace named like a standard-library module (`json.py`, `os.py`) shadows nothing, and modules
there are read from their `.py` source only (a planted `.pyc` never runs in its place). The server
speaks on private copies of fds 0 and 1 and points 0 and 1 at /dev/null before it imports the
code under test, so what that code prints never reaches the channel.
"""

from __future__ import annotations

import array
import contextlib
import fcntl
import logging
import os
import selectors
import subprocess
import termios
import threading
import time
from typing import Any

from . import plain
from .runner import Limits, SandboxResult, _close, _count_run, _kill, _launched, _open_init, _run, _validate
from .workspace import Workspace

SERVER = plain.LOADER + "plain._serve()\n"
"""The program the sandbox runs: load `plain` from beside it and serve."""
SERVER_FLAGS = ("-I", "-S", "-B")
"""Isolated mode, no site, no bytecode written (the server reads the workspace's modules from source only)."""


class SandboxProcess:
    """One running sandboxed server: line-framed requests in, answers out, bounded and killable.

    Made by `open_session`; `close()` kills it and everything it started (the pid namespace goes).
    """

    def __init__(self, proc: subprocess.Popen[bytes], info_fd: int | None, cleanup: contextlib.ExitStack,
                 hard_deadline: float, max_bytes: int, stderr_cap: int) -> None:
        self._proc, self._info_fd, self._cleanup = proc, info_fd, cleanup
        self._init_pidfd: int | None = None
        self._report = bytearray()
        self._buffer = bytearray()
        self._stderr = bytearray()
        self._hard_deadline, self._max_bytes, self._stderr_cap = hard_deadline, max_bytes, stderr_cap
        self.closed = False

    @property
    def stderr(self) -> str:
        """What the process wrote to stderr so far (bounded)."""
        return self._stderr.decode("utf-8", "replace")

    @property
    def returncode(self) -> int | None:
        """Exit status once it ended, else None."""
        return self._proc.poll()

    def send(self, line: bytes) -> None:
        """Write one request line; raise `plain.SessionDead` if the process is gone or stops reading."""
        assert self._proc.stdin is not None
        fd = self._proc.stdin.fileno()
        view = memoryview(line)
        with selectors.DefaultSelector() as selector:
            selector.register(fd, selectors.EVENT_WRITE)
            while view:
                left = self._hard_deadline - time.monotonic()
                if left <= 0:
                    raise plain.SessionDead("the solution's process ran past its time limit", "timeout")
                if not selector.select(left):
                    continue
                try:
                    view = view[os.write(fd, view[: 1 << 16]):]
                except BlockingIOError:
                    continue
                except OSError:
                    raise plain.SessionDead(self._ended(), "ended") from None

    def receive(self, deadline: float) -> bytes:
        """Read one answer line before `deadline` (monotonic); raise `plain.SessionDead` otherwise."""
        assert self._proc.stdout is not None and self._proc.stderr is not None
        out_fd, err_fd = self._proc.stdout.fileno(), self._proc.stderr.fileno()
        end = min(deadline, self._hard_deadline)
        with selectors.DefaultSelector() as selector:
            for fd in (out_fd, err_fd, self._info_fd):
                if fd is not None and fd >= 0:
                    selector.register(fd, selectors.EVENT_READ)
            while b"\n" not in self._buffer:
                left = end - time.monotonic()
                if left <= 0:
                    raise plain.SessionDead("the solution ran past its time limit", "timeout")
                for key, _ in selector.select(left):
                    chunk = os.read(key.fd, 1 << 16)
                    if key.fd == self._info_fd:
                        self._report += chunk
                        if self._init_pidfd is None:
                            self._init_pidfd = _open_init(bytes(self._report))
                        if not chunk:
                            selector.unregister(key.fd)
                            os.close(key.fd)
                            self._info_fd = -1
                    elif key.fd == err_fd:
                        self._stderr += chunk[: max(0, self._stderr_cap - len(self._stderr))]
                        if not chunk:
                            selector.unregister(key.fd)
                    elif not chunk:
                        raise plain.SessionDead(self._ended(), "ended")
                    else:
                        self._buffer += chunk
                        if len(self._buffer) > self._max_bytes:
                            raise plain.SessionDead(f"an answer over {self._max_bytes} bytes", "protocol")
        end_of_line = self._buffer.index(b"\n")
        line = bytes(self._buffer[:end_of_line])
        del self._buffer[: end_of_line + 1]
        return line

    def _ended(self) -> str:
        try:
            code = self._proc.wait(timeout=1)
        except subprocess.TimeoutExpired:
            code = None
        if code is not None and 128 < code <= 128 + 64:
            code = 128 - code  # bwrap reports a child killed by signal N as 128 + N
        how = f"was killed by signal {-code}" if code is not None and code < 0 else f"exited with status {code}"
        tail = self.stderr.strip().splitlines()[-1:]
        return f"the solution's process {how}" + (f": {tail[0][:200]!r}" if tail else "")

    def cpu_seconds(self) -> float:
        """CPU time (user + system) that the sandbox's processes have used so far, as the kernel counts it.

        Read by this process from ``/proc``, outside the sandbox: the sum over the process and every process
        it started (threads included, and the children they have reaped), so work handed to a helper process
        counts, and waiting, sleeping or a busy machine do not. A difference of two readings times what the
        code under test did between them (resolution: the kernel's clock tick, 10 ms).

        Raises:
            RuntimeError: ``/proc`` cannot be read (not Linux), or the process has ended.
        """
        if self._proc.poll() is not None:
            raise RuntimeError("the sandbox's process has ended: its CPU time can no longer be read")
        return process_tree_cpu_seconds(self._proc.pid)

    def close(self) -> None:
        """Kill the process and all it started, wait for the sandbox to go, and remove what it used."""
        if self.closed:
            return
        self.closed = True
        try:
            _kill(self._proc, self._init_pidfd)
            self._proc.wait()
            if self._init_pidfd is not None:
                with selectors.DefaultSelector() as selector:
                    selector.register(self._init_pidfd, selectors.EVENT_READ)
                    selector.select(5.0)
        finally:
            for f in (self._proc.stdin, self._proc.stdout, self._proc.stderr):
                with contextlib.suppress(OSError):
                    if f is not None:
                        f.close()
            for fd in (self._init_pidfd, self._info_fd):
                if fd is not None and fd >= 0:
                    with contextlib.suppress(OSError):
                        os.close(fd)
            self._cleanup.close()

    def __enter__(self) -> SandboxProcess:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def _stat(pid: str) -> tuple[int, int] | None:
    """Return (parent pid, CPU ticks of the process and of the children it reaped) from ``/proc/PID/stat``."""
    try:
        with open(f"/proc/{pid}/stat", "rb") as f:
            text = f.read()
    except OSError:  # it ended between the listing and the read
        return None
    # the command name (field 2) is in parentheses and may hold anything, ")" and spaces too: read after the last ")"
    fields = text[text.rfind(b")") + 2:].split()
    try:  # state ppid pgrp session tty tpgid flags minflt cminflt majflt cmajflt utime stime cutime cstime ...
        return int(fields[1]), int(fields[11]) + int(fields[12]) + int(fields[13]) + int(fields[14])
    except (IndexError, ValueError):
        return None


def process_tree_cpu_seconds(root: int) -> float:
    """CPU seconds (user + system) of process ``root`` and all its descendants, threads and reaped children
    included, read from ``/proc``; a process that starts or ends during the reading may be missed once."""
    try:
        pids = [name for name in os.listdir("/proc") if name.isdigit()]
    except OSError as exc:
        raise RuntimeError(f"cannot read /proc to measure CPU time ({exc}); this needs Linux") from None
    children: dict[int, list[int]] = {}
    ticks: dict[int, int] = {}
    for pid in pids:
        stat = _stat(pid)
        if stat is not None:
            children.setdefault(stat[0], []).append(int(pid))
            ticks[int(pid)] = stat[1]
    if root not in ticks:
        raise RuntimeError(f"process {root} is not in /proc: its CPU time cannot be read")
    total, todo, seen = 0, [root], set()
    while todo:
        pid = todo.pop()
        if pid not in seen:  # (a pid reused during the listing cannot make it loop)
            seen.add(pid)
            total += ticks.get(pid, 0)
            todo.extend(children.get(pid, ()))
    return total / os.sysconf("SC_CLK_TCK")


def open_session(
    workspace: Workspace,
    *,
    timeout_s: float = 60.0,
    memory_mb: int = 512,
    limits: Limits | None = None,
    allow_unsandboxed: bool = False,
) -> tuple[plain.Session, SandboxProcess]:
    """Start `plain`'s server in the sandbox on `workspace`; return the client session and the process.

    Args:
        workspace: The workspace whose modules the server may import (`session.import_module`).
        timeout_s: Wall-clock life of the process: every request fails once it has passed.
        memory_mb, limits, allow_unsandboxed: As for `run_python`.

    Raises:
        SandboxUnavailable: bubblewrap is missing or broken and allow_unsandboxed is False.
    """
    _validate(timeout_s, memory_mb, workspace, "", limits)
    limits = limits or Limits()
    stack = contextlib.ExitStack()
    try:
        argv, env, child_fds, info_fd = stack.enter_context(_launched(
            ["python", *SERVER_FLAGS, "/sandbox/main.py"], SERVER.encode(), timeout_s, memory_mb, workspace, limits,
            (), allow_unsandboxed))
        start = time.monotonic()
        try:
            proc = subprocess.Popen(argv, stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                                    env=env, pass_fds=tuple(child_fds), start_new_session=True)
        finally:
            for fd in child_fds:
                with contextlib.suppress(OSError):
                    os.close(fd)
            child_fds.clear()
        _count_run()
        assert proc.stdout is not None and proc.stderr is not None and proc.stdin is not None
        for f in (proc.stdout, proc.stderr, proc.stdin):
            os.set_blocking(f.fileno(), False)
        info_copy = os.dup(info_fd) if info_fd is not None else None  # _launched closes its own copy
        process = SandboxProcess(proc, info_copy, stack, start + timeout_s, plain.MAX_FRAME_BYTES,
                                 limits.output_bytes)
    except BaseException:
        stack.close()
        raise
    return plain.Session(process.send, process.receive), process




LINK_HEADER = ("import importlib.util as _u, sys as _s; _p = _u.spec_from_file_location('plain', '/sandbox/plain.py'); "
               "plain = _u.module_from_spec(_p); _s.modules['plain'] = plain; _p.loader.exec_module(plain); "
               "plain._link(%d, %d); del _u, _s, _p\n")
"""The first line of a program run beside a server: it loads ``plain`` and links ``import`` to the server."""


def run_python_beside(
    code: str,
    *,
    workspace: Workspace,
    server_workspace: Workspace,
    timeout_s: float = 5.0,
    server_timeout_s: float | None = None,
    memory_mb: int = 256,
    limits: Limits | None = None,
    allow_unsandboxed: bool = False,
) -> SandboxResult:
    """Run ``code`` in one sandbox and the modules it imports from the workspace in another, linked by a pipe.

    The code runs as `run_python` runs it, in ``workspace``, except that ``import solution`` (any
    top-level module that ``workspace`` holds and the standard library does not) returns a handle on
    that module imported by `plain`'s server in a second sandbox on ``server_workspace``: the same
    server, started the same way, as `open_session`'s. The two share no file, process or memory:
    the code's program, its files and its output stay out of the imported code's reach, and only
    plain data crosses (see `plain`). The program's first line is a header (`LINK_HEADER`), so
    its own lines are numbered from 2.

    Args:
        code: Python source (not starting with ``from __future__`` imports, which must come first).
        workspace: Where the code runs (its cwd).
        server_workspace: Where the server imports from (a different workspace, or the same one).
        timeout_s, memory_mb, limits, allow_unsandboxed: As for `run_python`, for the code.
        server_timeout_s: Wall-clock life of the server (default ``timeout_s``); its other limits are the code's.
    """
    if not isinstance(code, str):
        raise TypeError(f"code must be a str of Python source, got {type(code).__name__}")
    _validate(timeout_s, memory_mb, workspace, "", limits)
    limits = limits or Limits()
    to_server_r, to_server_w = os.pipe()
    from_server_r, from_server_w = os.pipe()
    life = server_timeout_s if server_timeout_s is not None else timeout_s
    with _OnFirstRequest(lambda: _start_linked(server_workspace, to_server_r, from_server_w, life, memory_mb, limits,
                                               allow_unsandboxed), to_server_r, from_server_w):
        program = LINK_HEADER % (from_server_r, to_server_w) + code
        return _run(["python", "-S", "-s", "/sandbox/main.py"], program=program.encode(), timeout_s=timeout_s,
                    memory_mb=memory_mb, workspace=workspace, stdin="", limits=limits, modules=(),
                    allow_unsandboxed=allow_unsandboxed, pass_fds=(from_server_r, to_server_w))


class _OnFirstRequest:
    """Start the linked server once the program's first request waits in its pipe, and kill it at exit.

    `open_session`'s server finds its first request waiting when it starts (the caller writes it at
    once); started the same way here, the server cannot tell by its start who is asking. A program
    that never asks starts no server.

    The thread that starts the server lives until the server is killed: bwrap runs with
    ``--die-with-parent`` (``PR_SET_PDEATHSIG``), and Linux sends that signal when the *thread* that
    forked it ends, not the process, so a starting thread that returned at once would kill the server
    whenever bwrap had armed the signal first (most runs on a busy machine).
    """

    def __init__(self, start: Any, stdin_fd: int, stdout_fd: int) -> None:
        self._start, self._fds = start, [stdin_fd, stdout_fd]  # the host's copies, closed once the server has them
        self._server: _LinkedServer | None = None
        self._lock, self._done, self._killed = threading.Lock(), threading.Event(), threading.Event()
        self._thread = threading.Thread(target=self._watch, name="llm_zoo-linked-server", daemon=True)

    def __enter__(self) -> _OnFirstRequest:
        self._thread.start()
        return self

    def _watch(self) -> None:
        if self._first_request():
            with self._lock:
                if not self._done.is_set():
                    try:
                        self._server = self._start()
                    except Exception:  # noqa: BLE001 - the program's requests then end, which it reports
                        logging.getLogger("llm_zoo.sandbox").exception("sandbox: the linked server did not start")
                    self._close_fds()
        self._killed.wait()  # the server's parent thread stays until __exit__ has killed the server

    def _first_request(self) -> bool:
        """Wait until the program's first request waits in the pipe (True), or it ends or we exit (False)."""
        fd = self._fds[0]
        with selectors.DefaultSelector() as selector:
            selector.register(fd, selectors.EVENT_READ)
            while not self._done.is_set():
                if selector.select(0.05):
                    with self._lock:
                        if self._done.is_set():
                            return False
                        # readable with nothing waiting is end of file: every writer closed, the program ended
                        return _pending(fd) > 0
        return False

    def _close_fds(self) -> None:
        for fd in self._fds:
            _close(fd)
        self._fds = []

    def __exit__(self, *exc: object) -> None:
        with self._lock:
            self._done.set()
            self._close_fds()
        try:
            if self._server is not None:
                self._server.__exit__()
        finally:
            self._killed.set()
            self._thread.join()


def _pending(fd: int) -> int:
    """Bytes waiting in the pipe ``fd`` (FIONREAD)."""
    buffer = array.array("i", [0])
    fcntl.ioctl(fd, termios.FIONREAD, buffer)
    return buffer[0]


class _LinkedServer:
    """A server whose pipes belong to another sandboxed program; here only to be killed with all it started."""

    def __init__(self, proc: subprocess.Popen[bytes], info_fd: int | None, cleanup: contextlib.ExitStack) -> None:
        self._proc, self._info_fd, self._cleanup = proc, info_fd, cleanup

    def __enter__(self) -> _LinkedServer:
        return self

    def __exit__(self, *exc: object) -> None:
        init_pidfd = None
        try:
            if self._info_fd is not None:
                os.set_blocking(self._info_fd, False)
                with contextlib.suppress(OSError):
                    init_pidfd = _open_init(os.read(self._info_fd, 1 << 16))
            _kill(self._proc, init_pidfd)
            self._proc.wait()
            if init_pidfd is not None:  # wait for the sandbox's pid 1, and so for every process in it, to go
                with selectors.DefaultSelector() as selector:
                    selector.register(init_pidfd, selectors.EVENT_READ)
                    selector.select(5.0)
        finally:
            for fd in (init_pidfd, self._info_fd):
                if fd is not None:
                    _close(fd)
            self._cleanup.close()


def _drain(pipe: Any) -> None:
    with contextlib.suppress(OSError, ValueError):
        while pipe.read(1 << 16):
            pass


def _start_linked(workspace: Workspace, stdin_fd: int, stdout_fd: int, timeout_s: float, memory_mb: int,
                  limits: Limits, allow_unsandboxed: bool) -> _LinkedServer:
    _validate(timeout_s, memory_mb, workspace, "", limits)
    stack = contextlib.ExitStack()
    try:
        argv, env, child_fds, info_fd = stack.enter_context(_launched(
            ["python", *SERVER_FLAGS, "/sandbox/main.py"], SERVER.encode(), timeout_s, memory_mb, workspace, limits,
            (), allow_unsandboxed))
        try:  # stderr is a pipe, drained and dropped here, as `open_session`'s is read: the same process shape
            proc = subprocess.Popen(argv, stdin=stdin_fd, stdout=stdout_fd, stderr=subprocess.PIPE, env=env,
                                    pass_fds=tuple(child_fds), start_new_session=True)
        finally:
            for fd in child_fds:
                _close(fd)
            child_fds.clear()
        _count_run()
        assert proc.stderr is not None
        threading.Thread(target=_drain, args=(proc.stderr,), daemon=True).start()
        info_copy = os.dup(info_fd) if info_fd is not None else None  # _launched closes its own copy
    except BaseException:
        stack.close()
        raise
    return _LinkedServer(proc, info_copy, stack)
