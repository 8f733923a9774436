"""Bubblewrap plumbing: what the sandbox binds, the command line it builds, and the one-time probe.

Nothing here runs untrusted code by itself; `runner.py` drives it. Kept apart from the runner so
that `workspace.py` can ask how sandboxed programs are identified (a uid per workspace, or the
caller's own uid) without importing the runner.
"""

from __future__ import annotations

import ctypes
import dataclasses
import fcntl
import hashlib
import logging
import os
import secrets
import shutil
import site
import subprocess
import sys
import sysconfig
import tempfile
import threading
from collections.abc import Sequence

logger = logging.getLogger("llm_zoo.sandbox")

WORKSPACE_DIR = "/workspace"
"""Where the workspace is bound inside the sandbox; also the program's cwd and HOME."""
SANDBOX_DIR = "/sandbox"
"""Read-only directory inside the sandbox holding the program (`main.py`), `bin/python` and `lib/`."""
PROGRAM_PATH = f"{SANDBOX_DIR}/main.py"
PLAIN_PATH = f"{SANDBOX_DIR}/plain.py"
"""`llm_zoo.sandbox.plain`, bound read-only beside the program in every run (see `plain.LOADER`)."""
PLAIN_SOURCE = os.path.join(os.path.dirname(os.path.abspath(__file__)), "plain.py")
LIB_DIR = f"{SANDBOX_DIR}/lib"
BIN_DIR = f"{SANDBOX_DIR}/bin"

# uids handed to workspaces when the host runs as root: far above login users (< 65536) and the
# usual subordinate-id ranges (100000 + 65536 * n for a few n), so no real account owns them.
UID_LOW, UID_HIGH = 0x4000_0000, 0x7FFF_0000

INSTALL_HINT = (
    "Install bubblewrap with `apt-get install bubblewrap` (Debian/Ubuntu) or `dnf install bubblewrap` "
    "(Fedora/RHEL), or pass allow_unsandboxed=True to run with resource limits only (no isolation)."
)

# Namespaces that are nice to have. Each group is kept only if bwrap accepts it on this host.
_OPTIONAL_NAMESPACES: tuple[tuple[str, ...], ...] = (
    ("--unshare-ipc",),
    ("--unshare-uts", "--hostname", "sandbox"),
    ("--unshare-cgroup-try",),
)
_REQUIRED_NAMESPACES: tuple[str, ...] = ("--unshare-net", "--unshare-pid")

# Runs inside the sandbox as the command bwrap starts, before the program: mounts /tmp and /dev/shm
# as tmpfs capped in size and inodes (bwrap's own --size caps bytes only; tmpfs nr_inodes caps the
# count of files, whose kernel memory no rlimit covers), sets the rlimits, drops to the workspace's
# uid (which clears every capability, CAP_SYS_ADMIN for the mounts included), then execs the program.
# Written in the interpreter the sandbox already has, so it needs nothing else installed.
# argv: cpu_s as_bytes nproc fsize_bytes nofile uid tmp_bytes tmp_inodes cwd command...   (-1 = leave as is)
WRAPPER = """\
import os, resource, sys
cpu, mem, nproc, fsize, nofile, uid, tmp_bytes, tmp_inodes = (int(v) for v in sys.argv[1:9])
if tmp_inodes >= 0:
    import ctypes
    libc = ctypes.CDLL(None, use_errno=True)
    options = b"size=%d,nr_inodes=%d,mode=1777" % (tmp_bytes, tmp_inodes)
    for where in (b"/tmp", b"/dev/shm"):
        if libc.mount(b"tmpfs", where, b"tmpfs", 2 | 4, options) != 0:  # MS_NOSUID | MS_NODEV
            sys.stderr.write("sandbox: cannot mount a capped tmpfs on %s: %s\\n"
                             % (where.decode(), os.strerror(ctypes.get_errno())))
            sys.exit(126)
    # A proc of its own with hidepid=2: processes of other uids (bwrap as pid 1, whose command line names
    # the host's paths and limits) are invisible to the program. Best effort: a user namespace may refuse it.
    libc.mount(b"proc", b"/proc", b"proc", 2 | 4 | 8, b"hidepid=2")  # MS_NOSUID | MS_NODEV | MS_NOEXEC
    libc.prctl(47, 4, 0, 0, 0)  # PR_CAP_AMBIENT_CLEAR_ALL: no capability may ride along through exec
    del libc
def cap(res, soft, hard):
    cur = resource.getrlimit(res)[1]  # only lowering is allowed: CAP_SYS_RESOURCE is dropped
    if cur != resource.RLIM_INFINITY:
        soft, hard = min(soft, cur), min(hard, cur)
    resource.setrlimit(res, (soft, hard))
if cpu >= 0:
    cap(resource.RLIMIT_CPU, cpu, cpu + 1)
for res, value in ((resource.RLIMIT_AS, mem), (resource.RLIMIT_NPROC, nproc),
                   (resource.RLIMIT_FSIZE, fsize), (resource.RLIMIT_NOFILE, nofile)):
    if value >= 0:
        cap(res, value, value)
if uid >= 0:
    os.setgroups([])
    os.setgid(uid)
    os.setuid(uid)
os.chdir(sys.argv[9])
os.environ["PWD"] = sys.argv[9]
try:
    os.execvp(sys.argv[10], sys.argv[10:])
except OSError as e:
    sys.stderr.write(f"sandbox: cannot run {sys.argv[10]!r}: {e}\\n")
    sys.exit(127)
"""


class SandboxUnavailable(RuntimeError):
    """Raised when bubblewrap is missing or fails its self-test and unsandboxed runs were not allowed."""


@dataclasses.dataclass(frozen=True)
class Runtime:
    """The host's Python runtime as the sandbox sees it: the interpreter and what it needs bound."""

    python: str
    """Real path of the base interpreter (never a virtualenv's, so the project's packages stay out)."""
    ro_binds: tuple[str, ...]
    """Host directories bound read-only at the same path."""
    symlinks: tuple[tuple[str, str], ...]
    """(target, link) pairs recreating the host's /bin -> usr/bin style links."""
    chmods: tuple[str, ...]
    """Directories bwrap creates on the way to a bind that must be searchable (it copies 0700 from /root)."""
    hidden: tuple[str, ...]
    """site-packages directories masked by an empty read-only tmpfs."""
    private: str | None = None
    """Host path of a private copy of the interpreter (`private_interpreter`), bound at `INTERPRETER_DIR`, or
    None: the interpreter's own directories are among `ro_binds`, at their host paths."""

    @property
    def sandbox_python(self) -> str:
        """The interpreter's path inside the sandbox."""
        return f"{INTERPRETER_DIR}/bin/{os.path.basename(self.python)}" if self.private else self.python

    @property
    def stdlib(self) -> list[str]:
        """The standard library's directories inside the sandbox (they go first on PYTHONPATH)."""
        if self.private:
            lib = f"{INTERPRETER_DIR}/lib/{_VERSION}"
            return [lib, f"{lib}/lib-dynload"]
        stdlib = sysconfig.get_paths()["stdlib"]  # the base interpreter's, also inside a virtualenv
        found = [stdlib, os.path.join(stdlib, "lib-dynload")]
        return [p for p in dict.fromkeys(os.path.realpath(p) for p in found) if os.path.isdir(p)]

    @property
    def environment(self) -> dict[str, str]:
        """What the interpreter needs in its environment inside (where its libpython is, for a private copy)."""
        return {"LD_LIBRARY_PATH": f"{INTERPRETER_DIR}/lib"} if self.private else {}


INTERPRETER_DIR = "/python"
"""Where a private copy of the interpreter is bound inside the sandbox (see `private_interpreter`)."""
_VERSION = f"python{sys.version_info.major}.{sys.version_info.minor}"
_SKIPPED = shutil.ignore_patterns("site-packages", "test", "tests", "idlelib", "turtledemo", "config-*", "*.opt-*.pyc")


def private_interpreter(python: str) -> str | None:
    """Return the host path of a tmpfs holding a copy of the interpreter, made once per machine; None where not.

    Bound at its own host path, the interpreter's directory names the host (a home directory, a user) in
    the sandbox's mount table, ``sys.prefix``, PYTHONPATH and every traceback. A tmpfs of its own, bound
    at `INTERPRETER_DIR`, shows as ``/`` of a tmpfs there: the binary, its libpython and the standard
    library (no site-packages, no test suite), about 70 MB of memory, kept for later processes under a key
    of the interpreter's path, size and mtime. Needs root (a tmpfs mount); None elsewhere, and where the
    interpreter's layout is not ``<prefix>/bin`` and ``<prefix>/lib/pythonX.Y``.
    """
    if os.geteuid() != 0:
        return None
    prefix = os.path.realpath(sys.base_prefix)
    stdlib = os.path.realpath(sysconfig.get_paths()["stdlib"])
    if os.path.dirname(os.path.dirname(python)) != prefix or stdlib != os.path.join(prefix, "lib", _VERSION):
        return None
    info = os.stat(python)
    # "scrubbed": copies made before the host prefix was written out of them keep their own key, unused
    key = hashlib.sha256(f"{python}|{info.st_size}|{info.st_mtime_ns}|{sys.version}|scrubbed".encode()).hexdigest()[:16]
    root = os.path.join("/run" if os.path.isdir("/run") else tempfile.gettempdir(), f"llm_zoo_python_{key}")
    try:
        with open(root + ".lock", "w") as lock:
            fcntl.flock(lock, fcntl.LOCK_EX)  # one process of the machine makes it; the others wait and reuse it
            if os.path.ismount(root) and os.path.isfile(os.path.join(root, ".complete")):
                return root
            os.makedirs(root, mode=0o755, exist_ok=True)
            if not os.path.ismount(root):
                libc = ctypes.CDLL(None, use_errno=True)
                if libc.mount(b"llm_zoo_python", root.encode(), b"tmpfs", 2 | 4, b"size=512m,mode=0755") != 0:
                    logger.info("sandbox: no private interpreter copy (mount: %s)", os.strerror(ctypes.get_errno()))
                    return None
            os.makedirs(os.path.join(root, "bin"), exist_ok=True)
            shutil.copy2(python, os.path.join(root, "bin", os.path.basename(python)))
            os.makedirs(os.path.join(root, "lib"), exist_ok=True)
            library = sysconfig.get_config_var("INSTSONAME") or ""  # libpython3.11.so.1.0 of a shared build
            if ".so" in library and os.path.isfile(os.path.join(prefix, "lib", library)):
                shutil.copy2(os.path.join(prefix, "lib", library), os.path.join(root, "lib", library))
            shutil.copytree(stdlib, os.path.join(root, "lib", _VERSION), ignore=_SKIPPED, symlinks=True,
                            dirs_exist_ok=True)
            _scrub(root, {prefix, sys.base_prefix, sys.base_exec_prefix, os.path.realpath(sys.base_exec_prefix)})
            with open(os.path.join(root, ".complete"), "w") as f:
                f.write("complete\n")  # a marker only: the interpreter's host path would show inside
            return root
    except OSError as exc:
        logger.info("sandbox: no private interpreter copy (%s)", exc)
        return None


def _scrub(root: str, prefixes: set[str]) -> None:
    """Write the host's install prefix out of every file of the interpreter's copy under ``root``.

    The prefix the interpreter was built for (``/root/.pyenv/versions/3.11.7``, say) is compiled into the
    binary, libpython, the extension modules, ``_sysconfigdata`` (``sysconfig.get_config_vars()``) and every
    ``.pyc``: each names a host directory and its user inside the sandbox. Each occurrence becomes
    `INTERPRETER_DIR` padded with slashes to the same length (``/python/////...``): the same path to any
    reader of paths, and the same byte length, so binaries, string tables and ``.pyc`` files stay valid. A
    prefix not longer than `INTERPRETER_DIR` cannot be padded and is left (none names a home directory).
    """
    swaps = [(p.encode(), (INTERPRETER_DIR + "/" * (len(p) - len(INTERPRETER_DIR))).encode())
             for p in sorted(prefixes, key=len, reverse=True) if len(p) > len(INTERPRETER_DIR) and p != "/"]
    for folder, _, files in os.walk(root):
        for name in files:
            path = os.path.join(folder, name)
            if os.path.islink(path) or not os.path.isfile(path):
                continue
            with open(path, "rb") as f:
                data = f.read()
            scrubbed = data
            for old, new in swaps:
                scrubbed = scrubbed.replace(old, new)
            if scrubbed != data:
                info = os.stat(path)
                with open(path, "r+b") as f:
                    f.write(scrubbed)
                os.utime(path, ns=(info.st_atime_ns, info.st_mtime_ns))  # a .pyc checks its source's mtime


def _within(path: str, roots: Sequence[str]) -> bool:
    return any(path == r or path.startswith(r.rstrip("/") + "/") for r in roots)


def discover_runtime() -> Runtime:
    """Find the base interpreter and the directories it needs, read from this process's `sys`."""
    python = os.path.realpath(getattr(sys, "_base_executable", None) or sys.executable)
    binds: list[str] = []
    symlinks: list[tuple[str, str]] = []
    for top in ("/usr", "/bin", "/sbin", "/lib", "/lib32", "/lib64", "/libx32"):
        if os.path.islink(top):
            symlinks.append((os.readlink(top), top))
        elif os.path.isdir(top):
            binds.append(top)
    for path in (sys.base_prefix, sys.base_exec_prefix, os.path.dirname(os.path.dirname(python))):
        real = os.path.realpath(path)
        if real != "/" and os.path.isdir(real) and not _within(real, binds):
            binds.append(real)
    chmods: list[str] = []
    for bind in binds:
        parent = os.path.dirname(bind)
        ancestors = []
        while parent != "/" and not _within(parent, binds):
            ancestors.append(parent)
            parent = os.path.dirname(parent)
        chmods.extend(a for a in reversed(ancestors) if a not in chmods)
    prefixes = sorted({sys.base_prefix, sys.base_exec_prefix})
    hidden = tuple(
        real
        for real in dict.fromkeys(os.path.realpath(p) for p in site.getsitepackages(prefixes))
        if os.path.isdir(real) and _within(real, binds)
    )
    host = Runtime(python, tuple(binds), tuple(symlinks), tuple(chmods), hidden)
    tops = [b for b in binds if b in ("/usr", "/bin", "/sbin", "/lib", "/lib32", "/lib64", "/libx32")]
    if tops == binds:  # the interpreter lives under /usr: its paths name nothing of this host
        return host
    private = private_interpreter(python)
    if private is None:
        return host
    return Runtime(python, tuple(tops), tuple(symlinks), (), (), private)


@dataclasses.dataclass(frozen=True)
class SandboxInfo:
    """What the one-time probe found: whether bubblewrap works here, and with which isolation."""

    available: bool
    """True when bwrap passed its self-test; runs are then sandboxed."""
    problem: str | None
    """Why the sandbox is unavailable (None when it is available)."""
    bwrap: str | None = None
    """Path of the bwrap binary."""
    version: str | None = None
    """`bwrap --version` output."""
    namespaces: tuple[str, ...] = ()
    """The namespace flags in use (net and pid always; ipc, uts, cgroup where bwrap accepts them)."""
    per_workspace_uid: bool = False
    """True when the host runs as root and each workspace's programs run under their own unprivileged
    uid (this is what makes RLIMIT_NPROC count, and so what contains a fork bomb)."""
    user_namespace: bool = False
    """True when bwrap also creates a user namespace (the case when the host is not root)."""
    tmpfs_size: bool = False
    """True when bwrap supports `--size` (0.7+), so /tmp and /dev/shm inside are capped."""
    tmpfs_inodes: bool = False
    """True when the wrapper may mount /tmp and /dev/shm itself, capped in size and in inodes
    (`Limits.tmp_mb`, `Limits.tmp_inodes`): the per-workspace uid mode (it gets CAP_SYS_ADMIN until it
    switches uid), or a user namespace entered by a non-root caller (the uid inside is not 0, so exec
    drops the capability). Probed; otherwise only `--size` applies."""


def bwrap_argv(
    info: SandboxInfo,
    runtime: Runtime,
    *,
    workspace: str,
    tmp_mb: int,
    env: dict[str, str],
    program_fd: int | None,
    modules: Sequence[tuple[str, str]],
    wrapper_args: Sequence[str],
    info_fd: int | None = None,
    plain_fd: int | None = None,
) -> list[str]:
    """Build the full bwrap command line for one run.

    Args:
        info: The probe's findings (which flags work here).
        runtime: The interpreter and the directories it needs.
        workspace: Host directory bound read-write at `WORKSPACE_DIR`.
        tmp_mb: Size cap of /tmp inside (where bwrap supports `--size`).
        env: The whole environment of the program (bwrap starts from an empty one).
        program_fd: A readable fd whose contents become `PROGRAM_PATH`, or None.
        modules: (host path, name) pairs bound read-only under `LIB_DIR`.
        wrapper_args: Arguments of `WRAPPER`: the limits, the cwd and the command.
        info_fd: A writable fd where bwrap reports the host pid of the sandbox's pid 1, or None.
        plain_fd: A readable fd holding `plain`'s source, bound as data at `PLAIN_PATH` (no host path in
            the sandbox's mount table), or None to bind the file itself.
    """
    assert info.bwrap is not None
    argv = [info.bwrap, "--die-with-parent", "--new-session", *info.namespaces]
    if info_fd is not None:
        argv += ["--info-fd", str(info_fd)]
    if info.user_namespace:
        argv.append("--unshare-user")
    if info.per_workspace_uid:
        # The wrapper needs these two to switch uid; switching then drops them as well.
        argv += ["--cap-drop", "ALL", "--cap-add", "CAP_SETUID", "--cap-add", "CAP_SETGID"]
    if info.tmpfs_inodes:
        argv += ["--cap-add", "CAP_SYS_ADMIN"]  # for the wrapper's capped tmpfs mounts, dropped at exec
    for path in runtime.ro_binds:
        argv += ["--ro-bind", path, path]
    for target, link in runtime.symlinks:
        argv += ["--symlink", target, link]
    for path in runtime.chmods:
        argv += ["--chmod", "0755", path]
    for path in runtime.hidden:
        argv += ["--tmpfs", path, "--remount-ro", path]
    if runtime.private:
        argv += ["--ro-bind", runtime.private, INTERPRETER_DIR]
    if os.path.isfile("/etc/ld.so.cache"):
        # Interpreters installed under /usr/local (Docker's python images) find libpython through it.
        argv += ["--ro-bind", "/etc/ld.so.cache", "/etc/ld.so.cache", "--chmod", "0755", "/etc"]
    argv += ["--proc", "/proc", "--dev", "/dev"]
    for scratch in ("/tmp", "/dev/shm"):  # /dev/shm: multiprocessing's semaphores live there
        if info.tmpfs_size:
            argv += ["--size", str(tmp_mb << 20)]
        argv += ["--tmpfs", scratch, "--chmod", "1777", scratch]
    argv += ["--dir", BIN_DIR, "--dir", LIB_DIR]
    for path in (SANDBOX_DIR, BIN_DIR, LIB_DIR):
        argv += ["--chmod", "0755", path]
    version = f"python{sys.version_info.major}.{sys.version_info.minor}"
    for name in ("python", "python3", version):
        argv += ["--symlink", runtime.sandbox_python, f"{BIN_DIR}/{name}"]
    if program_fd is not None:
        argv += ["--perms", "0444", "--ro-bind-data", str(program_fd), PROGRAM_PATH]
    if plain_fd is not None:
        argv += ["--perms", "0444", "--ro-bind-data", str(plain_fd), PLAIN_PATH]
    else:
        argv += ["--ro-bind", PLAIN_SOURCE, PLAIN_PATH]
    for host_path, name in modules:
        argv += ["--ro-bind", host_path, f"{LIB_DIR}/{name}"]
    argv += ["--bind", workspace, WORKSPACE_DIR]
    # The root and /dev are tmpfs without a size cap; nothing may be written there once laid out.
    argv += ["--remount-ro", "/dev", "--remount-ro", "/", "--chdir", "/", "--clearenv"]
    for key, value in env.items():
        argv += ["--setenv", key, value]
    return [*argv, "--", runtime.sandbox_python, "-S", "-s", "-c", WRAPPER, *wrapper_args]


def args_in_fd(argv: Sequence[str]) -> tuple[list[str], int]:
    """Move bwrap's arguments into a memfd it reads with ``--args``; return (the short argv, the fd to pass).

    bwrap stays the sandbox's pid 1, and every process in there can read its command line: with the
    options in a file, that line is ``bwrap --args N -- <the interpreter> ...``, and no bound host path (the
    workspace's, the checkout's) shows there.
    """
    split = list(argv).index("--")  # bwrap reads its options there; the command stays on the command line
    fd = os.memfd_create("llm_zoo_bwrap_args")
    os.write(fd, b"".join(arg.encode() + b"\0" for arg in argv[1:split]))
    os.lseek(fd, 0, os.SEEK_SET)
    return [argv[0], "--args", str(fd), *argv[split:]], fd


def _self_test(info: SandboxInfo, runtime: Runtime) -> str | None:
    """Run a tiny program through the full pipeline; return None if it worked, else what went wrong."""
    uid = secrets.randbelow(UID_HIGH - UID_LOW) + UID_LOW if info.per_workspace_uid else -1
    with tempfile.TemporaryDirectory(prefix="llm_zoo_probe_") as workspace:
        if uid >= 0:
            os.chown(workspace, uid, uid)
        expected = f"ok {uid if uid >= 0 else os.geteuid()}" + (" 64 64" if info.tmpfs_inodes else "")
        read_fd, write_fd = os.pipe()
        probe = "import os\nprint('ok', os.getuid(), *([os.statvfs(p).f_files for p in ('/tmp', '/dev/shm')] if %r else []))\n"
        os.write(write_fd, (probe % info.tmpfs_inodes).encode())
        os.close(write_fd)
        try:
            argv = bwrap_argv(
                info,
                runtime,
                workspace=workspace,
                tmp_mb=1,
                env={"PATH": f"{BIN_DIR}:/usr/bin:/bin", **runtime.environment},
                program_fd=read_fd,
                modules=(),
                wrapper_args=[
                    "-1",
                    "-1",
                    "-1",
                    "-1",
                    "-1",
                    str(uid),
                    *(["1048576", "64"] if info.tmpfs_inodes else ["-1", "-1"]),
                    WORKSPACE_DIR,
                    "python",
                    "-S",
                    PROGRAM_PATH,
                ],
            )
            proc = subprocess.run(
                argv, capture_output=True, timeout=30, pass_fds=(read_fd,), env={}, check=False
            )
        except (OSError, subprocess.SubprocessError) as e:
            return f"{type(e).__name__}: {e}"
        finally:
            os.close(read_fd)
    out = proc.stdout.decode(errors="replace").strip()
    if proc.returncode == 0 and out == expected:
        return None
    err = proc.stderr.decode(errors="replace").strip()
    return f"exit {proc.returncode}, stdout {out[-200:]!r}, stderr {err[-400:]!r}"


def _probe(runtime: Runtime) -> SandboxInfo:
    bwrap = shutil.which("bwrap")
    if bwrap is None:
        return SandboxInfo(False, f"bubblewrap (bwrap) is not on PATH. {INSTALL_HINT}")
    try:
        version = subprocess.run(
            [bwrap, "--version"], capture_output=True, text=True, timeout=10
        ).stdout.strip()
        helptext = subprocess.run([bwrap, "--help"], capture_output=True, text=True, timeout=10).stdout
    except (OSError, subprocess.SubprocessError) as e:
        return SandboxInfo(False, f"{bwrap} could not be started ({e}). {INSTALL_HINT}", bwrap)
    base = SandboxInfo(True, None, bwrap, version, _REQUIRED_NAMESPACES, tmpfs_size="--size" in helptext)
    # As root, a fresh unprivileged uid per workspace is preferred to a user namespace: a user
    # namespace maps a single uid back to root, for which RLIMIT_NPROC is not enforced.
    modes = [{"per_workspace_uid": True}, {"user_namespace": True}] if os.geteuid() == 0 else []
    modes += [{"user_namespace": True}, {}]
    problems: list[str] = []
    for mode in dict.fromkeys(tuple(m.items()) for m in modes):
        info = dataclasses.replace(base, **dict(mode))
        problem = _self_test(info, runtime)
        if problem is not None:
            problems.append(f"[{', '.join(k for k, _ in mode) or 'plain'}] {problem}")
            continue
        kept = [group for group in _OPTIONAL_NAMESPACES if _self_test(_with(info, group), runtime) is None]
        info = _with(info, *kept)
        if len(kept) < len(_OPTIONAL_NAMESPACES) and _self_test(info, runtime) is not None:
            info = _with(info)
        # Capped mounts of its own: only where exec then drops CAP_SYS_ADMIN (the uid inside is not 0).
        if info.per_workspace_uid or (info.user_namespace and os.geteuid() != 0):
            capped = dataclasses.replace(info, tmpfs_inodes=True)
            if _self_test(capped, runtime) is None:
                info = capped
            else:
                logger.warning("sandbox: /tmp and /dev/shm get no inode cap here (the capped tmpfs mount failed)")
        return info
    return SandboxInfo(
        False,
        f"bubblewrap at {bwrap} ({version}) failed its self-test: {'; '.join(problems)}. Usual causes: "
        "user namespaces are disabled (sysctl kernel.unprivileged_userns_clone=1, user.max_user_namespaces>0) "
        "or a container without CAP_SYS_ADMIN. " + INSTALL_HINT,
        bwrap,
        version,
    )


def _with(info: SandboxInfo, *groups: tuple[str, ...]) -> SandboxInfo:
    flags = [flag for group in groups for flag in group]
    return dataclasses.replace(info, namespaces=(*_REQUIRED_NAMESPACES, *flags))


_lock = threading.Lock()
_cache: dict[str, tuple[SandboxInfo, Runtime]] = {}


def probe() -> tuple[SandboxInfo, Runtime]:
    """Probe bubblewrap once per process (thread-safe) and return the cached findings."""
    with _lock:
        if "probe" not in _cache:
            runtime = discover_runtime()
            info = _probe(runtime)
            _cache["probe"] = (info, runtime)
            if info.available:
                logger.info("sandbox: %s with %s", info.version, " ".join(info.namespaces))
            else:
                logger.info("sandbox unavailable: %s", info.problem)
        return _cache["probe"]


def reset_probe() -> None:
    """Forget the cached probe, so the next run probes again (for tests and after installing bwrap)."""
    with _lock:
        _cache.clear()


def sandbox_info() -> SandboxInfo:
    """Return what the (cached) probe found about bubblewrap on this host."""
    return probe()[0]
