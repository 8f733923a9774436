"""Run untrusted programs: `run_python`, `run_command`, `run_pytest` and their result type."""

from __future__ import annotations

import contextlib
import dataclasses
import importlib.util
import logging
import math
import os
import re
import selectors
import shutil
import signal
import subprocess
import sysconfig
import tempfile
import threading
import time
import warnings
from collections.abc import Iterator, Sequence

from . import _bwrap
from ._bwrap import BIN_DIR, LIB_DIR, PROGRAM_PATH, WORKSPACE_DIR, SandboxUnavailable
from .workspace import Workspace

logger = logging.getLogger("llm_zoo.sandbox")

PYTEST_MODULES = (
    "pytest",
    "_pytest",
    "pluggy",
    "iniconfig",
    "packaging",
    "pygments",
    "py",
    "exceptiongroup",
    "tomli",
)
"""Top-level modules pytest may import; `run_pytest` exposes those installed here, read-only."""

_READ_CHUNK = 1 << 16
_IDLE_POLL_S = 0.05
"""How often to look whether the program exited while its pipes stay open (unsandboxed leftovers)."""
_DRAIN_AFTER_KILL_S = 5.0
_CRASH_SIGNALS = frozenset({signal.SIGSEGV, signal.SIGBUS, signal.SIGABRT, signal.SIGILL, signal.SIGFPE})
_RUNS_LOCK = threading.Lock()
_runs_started = 0  # programs started by this process, read by runs_started(); a cost the trainer logs
# The last stderr line of a Python program that died of an uncaught exception, mapped to the limit
# behind it. Python ignores SIGXFSZ, so the file size limit shows up as EFBIG (errno 27).
_EXCEPTION_LINE = re.compile(r"[A-Za-z_][\w.]*(: |$)")
_EXCEPTION_REASONS: tuple[tuple[str, str], ...] = (
    ("MemoryError", "memory"),
    ("OSError: [Errno 27]", "file_size"),
    ("OSError: [Errno 28]", "disk_full"),
    ("OSError: [Errno 122]", "disk_full"),
    ("BlockingIOError: [Errno 11]", "processes"),
    ("RuntimeError: can't start new thread", "processes"),
)


@dataclasses.dataclass(frozen=True)
class Limits:
    """Resource limits of one run, beside its wall-clock `timeout_s` and its `memory_mb`.

    The workspace, which outlives a run, has its own caps: `Workspace(quota_mb=64, quota_inodes=16384)`.
    """

    cpu_s: int | None = None
    """CPU seconds per process (RLIMIT_CPU; SIGXCPU, reason "cpu"). None: ceil(timeout_s) + 1, so the
    wall clock stops a single busy process first and this catches CPU burnt on several cores."""
    processes: int = 64
    """Processes and threads at once (RLIMIT_NPROC, counted for the workspace's own uid). With
    `memory_mb` it bounds a run's memory: at most processes x memory_mb of address space."""
    file_mb: int = 16
    """Largest file a program may write, in MiB (RLIMIT_FSIZE; reason "file_size")."""
    open_files: int = 256
    """Open file descriptors per process (RLIMIT_NOFILE)."""
    output_bytes: int = 256 * 1024
    """Bytes kept of each of stdout and stderr; more stops the program (reason "output")."""
    tmp_mb: int = 64
    """Size of each of the private tmpfs at /tmp and /dev/shm, in MiB (reason "disk_full" when full)."""
    tmp_inodes: int = 16384
    """Files, directories and links that each of /tmp and /dev/shm may hold (tmpfs ``nr_inodes``; more
    gets "No space left on device", reason "disk_full"). Their kernel memory lies outside `memory_mb`, so
    this is what bounds it. Enforced where `sandbox_info().tmpfs_inodes` is True (see the package docs)."""

    def __post_init__(self) -> None:
        for field in dataclasses.fields(self):
            value = getattr(self, field.name)
            if value is None and field.name == "cpu_s":
                continue
            if not isinstance(value, int) or isinstance(value, bool) or value <= 0:
                raise ValueError(f"Limits.{field.name} must be a positive int, got {value!r}")


@dataclasses.dataclass(frozen=True)
class SandboxResult:
    """What a run did. A program that breaks a limit is a result, never an exception.

    `reason` says which limit stopped the program, or is None when it ended on its own (a nonzero
    `returncode` is then the program's own failure): "timeout" (wall clock), "cpu" (RLIMIT_CPU),
    "memory" (MemoryError under the address-space cap), "processes" (fork or thread creation
    refused), "file_size" (RLIMIT_FSIZE), "disk_full" (workspace quota or /tmp full), "output"
    (stdout or stderr over `Limits.output_bytes`), "crashed" (SIGSEGV, SIGABRT, ...) or "killed"
    (any other signal). The reasons read from an uncaught Python exception are best effort.
    """

    returncode: int
    """Exit status; -N when a signal N ended it (a program exiting with 128+N reads the same)."""
    stdout: str
    """Captured stdout, UTF-8 with undecodable bytes replaced, at most `Limits.output_bytes`."""
    stderr: str
    """Captured stderr, likewise capped."""
    timed_out: bool
    """True when the wall-clock timeout killed the run."""
    reason: str | None
    """Which limit stopped it (see the class docstring), or None."""
    duration_s: float
    """Wall-clock seconds from start to the last process gone, sandbox setup included."""
    stdout_truncated: bool = False
    """True when stdout was cut at `Limits.output_bytes`."""
    stderr_truncated: bool = False
    """True when stderr was cut at `Limits.output_bytes`."""
    sandboxed: bool = True
    """False when it ran without bubblewrap (allow_unsandboxed=True on a host without it)."""

    @property
    def ok(self) -> bool:
        """True when the program exited 0 and no limit stopped it."""
        return self.returncode == 0 and self.reason is None


def runs_started() -> int:
    """Return how many programs this process has started in a sandbox (or unsandboxed) so far.

    Every `run_python`, `run_command` and `run_pytest` call that gets as far as starting its
    program counts once, whatever its outcome (a timeout or a crash counts); calls refused before
    the start (bad arguments, no sandbox) do not. Pool threads count into the same total. Read it
    before and after a piece of work to get that work's sandbox runs.
    """
    return _runs_started


def run_python(
    code: str,
    *,
    timeout_s: float = 5.0,
    memory_mb: int = 256,
    workspace: Workspace | None = None,
    stdin: str | bytes = "",
    limits: Limits | None = None,
    modules: Sequence[str] = (),
    allow_unsandboxed: bool = False,
) -> SandboxResult:
    """Run Python source in the sandbox and return what happened.

    The code runs as `/sandbox/main.py` under the host's base interpreter (with `-S -s`: no
    site-packages), with `/workspace` as cwd and on `sys.path`, so it can import files the episode
    wrote there.

    Args:
        code: Python source.
        timeout_s: Wall-clock limit in seconds; the whole sandbox is killed when it passes.
        memory_mb: Address-space cap per process in MiB (RLIMIT_AS).
        workspace: The episode's workspace; None runs in a fresh one removed afterwards.
        stdin: Data fed to the program's stdin (str as UTF-8).
        limits: The other limits (CPU, processes, file size, open files, output, /tmp).
        modules: Names of top-level modules installed here to expose read-only (e.g. "numpy").
        allow_unsandboxed: Where bubblewrap is unavailable, run with rlimits only (and warn) instead
            of raising `SandboxUnavailable`.

    Raises:
        SandboxUnavailable: bubblewrap is missing or broken and allow_unsandboxed is False.
        TypeError, ValueError: A bad argument (not the program's behaviour, which is always a result).
    """
    if not isinstance(code, str):
        raise TypeError(f"code must be a str of Python source, got {type(code).__name__}")
    return _run(
        ["python", "-S", "-s", PROGRAM_PATH],
        program=code.encode(),
        timeout_s=timeout_s,
        memory_mb=memory_mb,
        workspace=workspace,
        stdin=stdin,
        limits=limits,
        modules=modules,
        allow_unsandboxed=allow_unsandboxed,
    )


def run_command(
    argv: Sequence[str],
    *,
    timeout_s: float = 5.0,
    memory_mb: int = 256,
    workspace: Workspace | None = None,
    stdin: str | bytes = "",
    limits: Limits | None = None,
    modules: Sequence[str] = (),
    allow_unsandboxed: bool = False,
) -> SandboxResult:
    """Run a command in the sandbox, found on its PATH (`/sandbox/bin`, where `python` is the base
    interpreter, then /usr/bin and /bin), with `/workspace` as cwd. Arguments as for `run_python`.

    Example:
        >>> run_command(["python", "-c", "print(2 + 2)"]).stdout
        '4\\n'
    """
    if isinstance(argv, (str, bytes)) or not argv or not all(isinstance(a, str) for a in argv):
        raise TypeError(
            f"argv must be a non-empty sequence of str, like ['python', 'check.py'], got {argv!r:.200}"
        )
    return _run(
        list(argv),
        program=None,
        timeout_s=timeout_s,
        memory_mb=memory_mb,
        workspace=workspace,
        stdin=stdin,
        limits=limits,
        modules=modules,
        allow_unsandboxed=allow_unsandboxed,
    )


def run_pytest(
    workspace: Workspace,
    args: Sequence[str] = (),
    *,
    timeout_s: float = 60.0,
    memory_mb: int = 1024,
    limits: Limits | None = None,
    modules: Sequence[str] = (),
    allow_unsandboxed: bool = False,
) -> SandboxResult:
    """Run pytest on the workspace, in the sandbox, with this host's pytest bound read-only.

    Plugin autoloading and the cache are off, so the run reads the workspace and writes nothing to
    it. Exit codes are pytest's: 0 all passed, 1 some failed, 2 interrupted, 5 no tests collected.

    Args:
        workspace: The workspace holding the tests and the code under test.
        args: Extra pytest arguments (default: every test under /workspace), e.g. ["-q", "test_x.py"].
        timeout_s, memory_mb, limits, modules, allow_unsandboxed: As for `run_python`.

    Raises:
        ValueError: pytest is not installed in this environment (install the `dev` extra).
    """
    if importlib.util.find_spec("pytest") is None:
        raise ValueError(
            "run_pytest needs pytest installed here, to expose it read-only; pip install 'llm_zoo[dev]'"
        )
    exposed = [m for m in PYTEST_MODULES if importlib.util.find_spec(m) is not None]
    return run_command(
        ["python", "-S", "-s", "-m", "pytest", "-p", "no:cacheprovider", *args],
        timeout_s=timeout_s,
        memory_mb=memory_mb,
        workspace=workspace,
        limits=limits,
        modules=[*exposed, *modules],
        allow_unsandboxed=allow_unsandboxed,
    )


# ---------------------------------------------------------------------------------------------------
# machinery
# ---------------------------------------------------------------------------------------------------

_warned = threading.Event()


def _warn_unsandboxed(problem: str | None) -> None:
    if _warned.is_set():
        return
    _warned.set()
    message = (
        "llm_zoo.sandbox is running untrusted code WITHOUT isolation (allow_unsandboxed=True): only "
        f"resource limits apply; the program can read and write your files and use the network. {problem}"
    )
    logger.warning(message)
    warnings.warn(message, RuntimeWarning, stacklevel=4)


def _validate(timeout_s: float, memory_mb: int, workspace: object, stdin: object, limits: object) -> None:
    if isinstance(timeout_s, bool) or not isinstance(timeout_s, (int, float)) or not 0 < timeout_s < math.inf:
        raise ValueError(f"timeout_s must be a positive number of seconds, got {timeout_s!r}")
    if isinstance(memory_mb, bool) or not isinstance(memory_mb, int) or memory_mb < 32:
        raise ValueError(
            f"memory_mb must be an int >= 32 (the interpreter itself needs ~20 MiB), got {memory_mb!r}"
        )
    if workspace is not None and not isinstance(workspace, Workspace):
        raise TypeError(
            f"workspace must be a llm_zoo.sandbox.Workspace or None, got {type(workspace).__name__}"
        )
    if not isinstance(stdin, (str, bytes)):
        raise TypeError(f"stdin must be str or bytes, got {type(stdin).__name__}")
    if limits is not None and not isinstance(limits, Limits):
        raise TypeError(f"limits must be a llm_zoo.sandbox.Limits or None, got {type(limits).__name__}")


def _module_paths(names: Sequence[str]) -> list[tuple[str, str]]:
    """Resolve top-level module names to (host path, name to bind) pairs."""
    found: list[tuple[str, str]] = []
    for name in dict.fromkeys(names):
        if not isinstance(name, str) or not name.isidentifier():
            raise ValueError(f"modules takes top-level module names like 'numpy', got {name!r}")
        spec = importlib.util.find_spec(name)
        if spec is None:
            raise ValueError(
                f"cannot expose module {name!r} to the sandbox: it is not importable here; install it"
            )
        locations = list(spec.submodule_search_locations or [])
        if len(locations) > 1 or (not locations and not spec.origin):
            raise ValueError(
                f"cannot expose {name!r}: namespace packages spread over {locations} are not supported"
            )
        path = os.path.realpath(locations[0] if locations else str(spec.origin))
        found.append((path, os.path.basename(path)))
        # manylinux wheels keep their vendored shared libraries beside the package: numpy.libs/
        libs = f"{path}.libs"
        if locations and os.path.isdir(libs):
            found.append((libs, os.path.basename(libs)))
    return found


def _processes_of(uid: int) -> int:
    """Count the tasks (threads included, as RLIMIT_NPROC does) that `uid` runs now."""
    count = 0
    for entry in os.scandir("/proc"):
        if entry.name.isdigit():
            try:
                with open(f"/proc/{entry.name}/status") as f:
                    fields = dict(line.split(":", 1) for line in f if ":" in line)
                if int(fields["Uid"].split()[0]) == uid:
                    count += int(fields["Threads"])
            except (OSError, KeyError, ValueError):
                continue
    return count


def _run(
    command: list[str],
    *,
    program: bytes | None,
    timeout_s: float,
    memory_mb: int,
    workspace: Workspace | None,
    stdin: str | bytes,
    limits: Limits | None,
    modules: Sequence[str],
    allow_unsandboxed: bool,
    pass_fds: Sequence[int] = (),
) -> SandboxResult:
    """Run ``command``; ``pass_fds`` are inherited by the program at the same numbers, and closed here in any case."""
    handed = False
    try:
        _validate(timeout_s, memory_mb, workspace, stdin, limits)
        limits = limits or Limits()
        stdin_bytes = stdin.encode() if isinstance(stdin, str) else stdin
        with _launched(command, program, timeout_s, memory_mb, workspace, limits, modules, allow_unsandboxed) as launch:
            argv, popen_env, child_fds, info_fd = launch
            child_fds.extend(pass_fds)  # closed with the others once the program has them
            handed = True
            return _execute(argv, popen_env, child_fds, info_fd, stdin_bytes, timeout_s, limits.output_bytes)
    finally:
        if not handed:
            for fd in pass_fds:
                _close(fd)


@contextlib.contextmanager
def _launched(
    command: list[str],
    program: bytes | None,
    timeout_s: float,
    memory_mb: int,
    workspace: Workspace | None,
    limits: Limits,
    modules: Sequence[str],
    allow_unsandboxed: bool,
) -> Iterator[tuple[list[str], dict[str, str], list[int], int | None]]:
    """Lay out one run: yield (argv, environment, fds to pass, bwrap's info fd); clean up afterwards."""
    module_paths = _module_paths(modules)
    info, runtime = _bwrap.probe()
    if not info.available:
        if not allow_unsandboxed:
            raise SandboxUnavailable(info.problem)
        _warn_unsandboxed(info.problem)
    ws = workspace if workspace is not None else Workspace()
    if ws.closed:
        raise ValueError("the workspace is closed; create a new Workspace() for another episode")
    nproc = limits.processes
    uid = ws.uid if info.available and info.per_workspace_uid else None
    if uid is None:
        # RLIMIT_NPROC then counts everything this uid runs (root: not enforced at all).
        nproc = -1 if os.geteuid() == 0 else _processes_of(os.geteuid()) + limits.processes
    cpu_s = limits.cpu_s if limits.cpu_s is not None else math.ceil(timeout_s) + 1
    rlimits = [cpu_s, memory_mb << 20, nproc, limits.file_mb << 20, limits.open_files]
    scratch = None if info.available else tempfile.mkdtemp(prefix="llm_zoo_unsandboxed_")
    child_fds: list[int] = []  # handed to bwrap, closed here once it has them
    info_fd = None
    try:
        if info.available:
            program_fd = None
            if program is not None:
                program_fd = os.memfd_create("llm_zoo_program")
                child_fds.append(program_fd)
                os.write(program_fd, program)
                os.lseek(program_fd, 0, os.SEEK_SET)
            info_fd, info_write = os.pipe()
            child_fds.append(info_write)
            plain_fd = os.memfd_create("llm_zoo_plain")
            child_fds.append(plain_fd)
            with open(_bwrap.PLAIN_SOURCE, "rb") as f:
                os.write(plain_fd, f.read())
            os.lseek(plain_fd, 0, os.SEEK_SET)
            env = {**_environment(WORKSPACE_DIR, "/tmp", BIN_DIR, LIB_DIR if module_paths else None, runtime.stdlib),
                   **runtime.environment}
            tmp_caps = [limits.tmp_mb << 20, limits.tmp_inodes] if info.tmpfs_inodes else [-1, -1]
            argv = _bwrap.bwrap_argv(
                info,
                runtime,
                workspace=ws.path,
                tmp_mb=limits.tmp_mb,
                env=env,
                program_fd=program_fd,
                modules=module_paths,
                wrapper_args=[*map(str, rlimits), str(-1 if uid is None else uid), *map(str, tmp_caps),
                              WORKSPACE_DIR, *command],
                info_fd=info_write,
                plain_fd=plain_fd,
            )
            argv, args_fd = _bwrap.args_in_fd(argv)
            child_fds.append(args_fd)
            popen_env: dict[str, str] = {}
        else:
            assert scratch is not None
            command = _unsandboxed_command(command, program, scratch, runtime.python, module_paths)
            popen_env = _environment(
                ws.path, f"{scratch}/tmp", f"{scratch}/bin", f"{scratch}/lib" if module_paths else None, _stdlib_path()
            )
            argv = [
                runtime.python,
                "-S",
                "-s",
                "-c",
                _bwrap.WRAPPER,
                *map(str, rlimits),
                "-1",
                "-1",
                "-1",
                ws.path,
                *command,
            ]
        yield argv, popen_env, child_fds, info_fd
    finally:
        for fd in child_fds:
            _close(fd)
        if info_fd is not None:
            _close(info_fd)
        if scratch is not None:
            shutil.rmtree(scratch, ignore_errors=True)
        if workspace is None:
            ws.close()


def _count_run() -> None:
    global _runs_started
    with _RUNS_LOCK:  # pool threads start runs concurrently
        _runs_started += 1


def _close(fd: int) -> None:
    try:
        os.close(fd)
    except OSError:
        pass


def _stdlib_path() -> list[str]:
    """The base interpreter's standard-library directories, which go *before* the workspace on PYTHONPATH."""
    stdlib = sysconfig.get_paths()["stdlib"]  # the base interpreter's, also inside a virtualenv
    found = [stdlib, os.path.join(stdlib, "lib-dynload")]
    return [p for p in dict.fromkeys(os.path.realpath(p) for p in found) if os.path.isdir(p)]


def _environment(home: str, tmp: str, bin_dir: str, lib_dir: str | None, stdlib: list[str]) -> dict[str, str]:
    # PYTHONPATH puts its entries before the standard library; with the workspace alone there, a file
    # the program wrote (encodings/__init__.py, json.py) would run at the start of every later
    # interpreter, before the caller's own program. The standard library comes first, then the workspace.
    path = ":".join([*stdlib, home] + ([lib_dir] if lib_dir else []))
    return {
        "PATH": f"{bin_dir}:/usr/local/bin:/usr/bin:/bin",
        "HOME": home,
        "TMPDIR": tmp,
        "LANG": "C.UTF-8",
        "PYTHONIOENCODING": "utf-8",
        "PYTHONDONTWRITEBYTECODE": "1",
        "PYTHONNOUSERSITE": "1",
        "PYTHONPATH": path,
        "PYTEST_DISABLE_PLUGIN_AUTOLOAD": "1",
    }


def _unsandboxed_command(
    command: list[str], program: bytes | None, scratch: str, python: str, modules: Sequence[tuple[str, str]]
) -> list[str]:
    """Lay out /sandbox's equivalent in a host scratch dir and point the command at it."""
    for sub in ("bin", "lib", "tmp"):
        os.mkdir(f"{scratch}/{sub}")
    for name in ("python", "python3"):
        os.symlink(python, f"{scratch}/bin/{name}")
    for path, name in modules:
        os.symlink(path, f"{scratch}/lib/{name}")
    if program is not None:
        with open(f"{scratch}/main.py", "wb") as f:
            f.write(program)
    shutil.copyfile(_bwrap.PLAIN_SOURCE, f"{scratch}/plain.py")
    return [f"{scratch}/main.py" if arg == PROGRAM_PATH else arg for arg in command]


def _kill(proc: subprocess.Popen[bytes], init_pidfd: int | None) -> None:
    # The group holds bwrap. Killing the sandbox's pid 1 tears down its pid namespace, and with it
    # every process in there however daemonised; --die-with-parent would do it too, a moment later.
    if init_pidfd is not None:
        try:
            signal.pidfd_send_signal(init_pidfd, signal.SIGKILL)
        except OSError:
            pass
    try:
        os.killpg(proc.pid, signal.SIGKILL)
    except (ProcessLookupError, PermissionError):
        pass


def _open_init(report: bytes) -> int | None:
    """Open a pidfd on the sandbox's pid 1, named by bwrap's --info-fd report, once it is readable."""
    match = re.search(rb'"child-pid":\s*(\d+)', report)
    if match is None:
        return None
    pid = int(match.group(1))
    try:
        pidfd = os.pidfd_open(pid)
    except OSError:
        return None  # already gone: nothing left to wait for
    try:
        # Guard against a reused pid: bwrap's child lives in a pid namespace of its own.
        if os.readlink(f"/proc/{pid}/ns/pid") != os.readlink("/proc/self/ns/pid"):
            return pidfd
    except OSError:
        pass  # a zombie already: its namespace is gone
    os.close(pidfd)
    return None


def _execute(
    argv: list[str],
    env: dict[str, str],
    child_fds: list[int],
    info_fd: int | None,
    stdin: bytes,
    timeout_s: float,
    cap: int,
) -> SandboxResult:
    """Start the run, feed stdin, collect bounded output, enforce the deadline, and wait for the end."""
    sandboxed = info_fd is not None
    start = time.monotonic()
    deadline = start + timeout_s
    try:
        proc = subprocess.Popen(
            argv,
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            env=env,
            pass_fds=tuple(child_fds),
            start_new_session=True,
        )
    finally:
        for fd in child_fds:
            _close(fd)
        child_fds.clear()
    _count_run()
    assert proc.stdin and proc.stdout and proc.stderr
    out, err, report = bytearray(), bytearray(), bytearray()
    out_fd, err_fd, in_fd = proc.stdout.fileno(), proc.stderr.fileno(), proc.stdin.fileno()
    buffers = {out_fd: out, err_fd: err}
    truncated = {out_fd: False, err_fd: False}
    init_pidfd: int | None = None
    stopped: str | None = None  # "timeout" or "output" once we killed it
    try:
        with selectors.DefaultSelector() as selector:
            for fd in (out_fd, err_fd):
                os.set_blocking(fd, False)
                selector.register(fd, selectors.EVENT_READ)
            if info_fd is not None:
                selector.register(info_fd, selectors.EVENT_READ)
            if stdin:
                os.set_blocking(in_fd, False)
                selector.register(in_fd, selectors.EVENT_WRITE)
            else:
                proc.stdin.close()
            sent = 0
            while selector.get_map():
                now = time.monotonic()
                if stopped is None and now >= deadline:
                    stopped = "timeout"
                    _kill(proc, init_pidfd)
                end = deadline if stopped is None else deadline + _DRAIN_AFTER_KILL_S
                if now >= end:
                    break
                events = selector.select(end - now if sandboxed else min(end - now, _IDLE_POLL_S))
                if not events and not sandboxed and proc.poll() is not None:
                    break  # unsandboxed: a leftover child holds the pipes; the program itself is done
                for key, _ in events:
                    fd = key.fd
                    if fd == in_fd:
                        try:
                            sent += os.write(fd, stdin[sent : sent + _READ_CHUNK])
                        except BlockingIOError:
                            continue
                        except BrokenPipeError:
                            sent = len(stdin)
                        if sent >= len(stdin):
                            selector.unregister(fd)
                            proc.stdin.close()
                        continue
                    chunk = os.read(fd, _READ_CHUNK)
                    if fd == info_fd:
                        report += chunk
                        if init_pidfd is None:
                            init_pidfd = _open_init(bytes(report))
                        if not chunk:
                            selector.unregister(fd)
                        continue
                    if not chunk:
                        selector.unregister(fd)
                        continue
                    buf = buffers[fd]
                    room = cap - len(buf)
                    if len(chunk) > room:
                        buf += chunk[: max(room, 0)]
                        truncated[fd] = True
                        if stopped is None:
                            stopped = "output"
                            _kill(proc, init_pidfd)
                    else:
                        buf += chunk
        for f in (proc.stdin, proc.stdout, proc.stderr):
            f.close()
        try:
            proc.wait(timeout=max(0.0, deadline - time.monotonic()))
        except subprocess.TimeoutExpired:
            stopped = stopped or "timeout"
            _kill(proc, init_pidfd)
            proc.wait()
        if init_pidfd is not None:
            # bwrap returns as soon as the program exits; its pid 1 then takes the namespace down.
            # Wait for that, so no process of this run outlives the call.
            with selectors.DefaultSelector() as selector:
                selector.register(init_pidfd, selectors.EVENT_READ)
                if not selector.select(_DRAIN_AFTER_KILL_S):
                    logger.warning(
                        "sandbox: pid 1 of a finished sandbox is still alive after %ss", _DRAIN_AFTER_KILL_S
                    )
        elif not sandboxed:
            _kill(proc, None)  # best effort: the program's group, for children that did not leave it
    finally:
        if init_pidfd is not None:
            os.close(init_pidfd)
        if proc.returncode is None:
            _kill(proc, None)
            proc.wait()
    duration = time.monotonic() - start
    returncode = proc.returncode
    if sandboxed and 128 < returncode <= 128 + 64:
        returncode = 128 - returncode  # bwrap reports a child killed by signal N as 128 + N
    stderr = err.decode("utf-8", errors="replace")
    return SandboxResult(
        returncode=returncode,
        stdout=out.decode("utf-8", errors="replace"),
        stderr=stderr,
        timed_out=stopped == "timeout",
        reason=stopped or _reason(returncode, stderr),
        duration_s=duration,
        stdout_truncated=truncated[out_fd],
        stderr_truncated=truncated[err_fd],
        sandboxed=sandboxed,
    )


def _reason(returncode: int, stderr: str) -> str | None:
    """Name the limit behind an exit the runner did not cause itself."""
    if returncode < 0:
        sig = -returncode
        if sig == signal.SIGXCPU:
            return "cpu"
        if sig == signal.SIGXFSZ:
            return "file_size"
        return "crashed" if sig in _CRASH_SIGNALS else "killed"
    if returncode == 0:
        return None
    # The exception line that ends a traceback; tracebacks of several processes may interleave.
    for line in reversed(stderr.splitlines()):
        if _EXCEPTION_LINE.match(line):
            return next((reason for prefix, reason in _EXCEPTION_REASONS if line.startswith(prefix)), None)
    return None
