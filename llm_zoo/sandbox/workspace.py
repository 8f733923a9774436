"""A private directory that the sandboxed runs of one episode share.

The host reads and writes it through `Workspace` helpers that never follow a symbolic link: a
sandboxed program can plant `leak -> /etc/shadow` in its workspace, and the host, which may run as
root, must not read through it.
"""

from __future__ import annotations

import ctypes
import errno
import logging
import os
import secrets
import shutil
import stat
import tempfile
import threading
import weakref
from pathlib import PurePosixPath

from ._bwrap import UID_HIGH, UID_LOW, sandbox_info

logger = logging.getLogger("llm_zoo.sandbox")

_MS_NOSUID, _MS_NODEV, _MNT_DETACH = 2, 4, 2

_mount_lock = threading.Lock()
_mount_works: list[bool] = []  # [] = not tried yet


def _libc() -> ctypes.CDLL:
    return ctypes.CDLL(None, use_errno=True)


def _mount_quota_tmpfs(path: str, quota_mb: int, quota_inodes: int, uid: int) -> bool:
    """Mount a size-capped tmpfs on `path`; return False (once logged) where mounting is not allowed."""
    with _mount_lock:
        if _mount_works == [False]:
            return False
        options = (
            f"size={quota_mb}m,nr_inodes={quota_inodes},mode=0700,uid={uid},gid={uid}"
        )
        rc = _libc().mount(
            b"llm_zoo_workspace", path.encode(), b"tmpfs", _MS_NOSUID | _MS_NODEV, options.encode()
        )
        if rc == 0:
            _mount_works[:] = [True]
            return True
        err = ctypes.get_errno()
        if not _mount_works:
            logger.warning(
                "sandbox: cannot mount a tmpfs for workspace quotas (%s); workspaces are plain directories and "
                "only the per-file limit (Limits.file_mb) bounds what a program writes. Mounting needs root "
                "with CAP_SYS_ADMIN.",
                os.strerror(err),
            )
        _mount_works[:] = [False]
        return False


def _cleanup(path: str, mounted: bool) -> None:
    if mounted and _libc().umount2(path.encode(), _MNT_DETACH) != 0:
        logger.warning("sandbox: could not unmount workspace %s: %s", path, os.strerror(ctypes.get_errno()))
    shutil.rmtree(path, ignore_errors=True)


class Workspace:
    """A private temp directory, bound at /workspace in every run that is given it.

    It persists across the tool calls of one episode and is removed by `close()`, by leaving a
    `with` block, or when the object is garbage collected. Each workspace is separate: a run sees its
    own workspace and nothing of any other.

    Where the host runs as root, the workspace is a tmpfs capped at `quota_mb` and `quota_inodes`
    (so a program that fills it, with bytes or with empty files, gets "No space left on device", not
    the host's disk or kernel memory), and it belongs to a fresh uid that the sandboxed programs of
    this workspace run as.

    Args:
        quota_mb: Size cap of the workspace in MiB, enforced where the host may mount a tmpfs
            (root); None for no cap (and no inode cap). See `quota_enforced`.
        quota_inodes: Files, directories and links the workspace may hold (tmpfs ``nr_inodes``),
            enforced with `quota_mb`.
        max_file_mb: Largest file the host helpers write or read, in MiB.

    Example:
        >>> with Workspace() as ws:
        ...     ws.write_file("solution.py", "def f():\\n    return 1\\n")
        ...     run_python("import solution; print(solution.f())", workspace=ws).stdout
        '1\\n'
    """

    def __init__(self, *, quota_mb: int | None = 64, quota_inodes: int = 16384, max_file_mb: int = 16) -> None:
        if quota_mb is not None and (
            not isinstance(quota_mb, int) or isinstance(quota_mb, bool) or quota_mb <= 0
        ):
            raise ValueError(f"quota_mb must be a positive int (MiB) or None for no cap, got {quota_mb!r}")
        if not isinstance(quota_inodes, int) or isinstance(quota_inodes, bool) or quota_inodes < 16:
            raise ValueError(f"quota_inodes must be an int >= 16, got {quota_inodes!r}")
        if not isinstance(max_file_mb, int) or max_file_mb <= 0:
            raise ValueError(f"max_file_mb must be a positive int (MiB), got {max_file_mb!r}")
        self.max_file_bytes = max_file_mb << 20
        self.uid: int | None = None
        """The uid sandboxed programs of this workspace run as (None: the caller's own uid)."""
        if os.geteuid() == 0 and sandbox_info().per_workspace_uid:
            self.uid = secrets.randbelow(UID_HIGH - UID_LOW) + UID_LOW
        self._path = tempfile.mkdtemp(prefix="llm_zoo_ws_")
        owner = self.uid if self.uid is not None else os.geteuid()
        self.quota_enforced = (
            quota_mb is not None and os.geteuid() == 0 and _mount_quota_tmpfs(self._path, quota_mb, quota_inodes, owner)
        )
        """True when `quota_mb` is enforced by a tmpfs."""
        if self.uid is not None and not self.quota_enforced:
            os.chown(self._path, self.uid, self.uid)
        self._finalizer = weakref.finalize(self, _cleanup, self._path, self.quota_enforced)

    @property
    def path(self) -> str:
        """Host path of the workspace (for the runner and for tests; never hand it to the program)."""
        self._check_open()
        return self._path

    @property
    def closed(self) -> bool:
        """True once `close()` has removed the workspace."""
        return not self._finalizer.alive

    def close(self) -> None:
        """Remove the workspace and everything in it; calling it again does nothing."""
        self._finalizer()

    def __enter__(self) -> Workspace:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def __repr__(self) -> str:
        return f"Workspace({self._path!r}{', closed' if self.closed else ''})"

    # ------------------------------------------------------------------ file helpers

    def write_file(self, path: str, data: str | bytes) -> None:
        """Write `data` (str as UTF-8) to `path`, relative to the workspace, creating directories.

        Raises:
            ValueError: The path is absolute, has `..`, crosses a symbolic link, or the data is over
                `max_file_mb`.
        """
        payload = data.encode() if isinstance(data, str) else data
        if not isinstance(payload, bytes):
            raise TypeError(f"data must be str or bytes, got {type(data).__name__}")
        if len(payload) > self.max_file_bytes:
            raise ValueError(
                f"refusing to write {len(payload)} bytes to {path!r}: over the workspace's file limit of "
                f"{self.max_file_bytes} bytes; raise Workspace(max_file_mb=...)"
            )
        # O_NONBLOCK: opening a FIFO the program planted must fail, not hang; regular files ignore it.
        fd = self._open(path, os.O_WRONLY | os.O_CREAT | os.O_NONBLOCK, create_dirs=True)
        with os.fdopen(fd, "wb") as f:
            if not stat.S_ISREG(os.fstat(f.fileno()).st_mode):
                raise ValueError(
                    f"{path!r} in the workspace is not a regular file; only regular files can be written"
                )
            f.truncate()
            f.write(payload)

    def read_bytes(self, path: str, *, max_bytes: int | None = None) -> bytes:
        """Read the regular file at `path`, relative to the workspace.

        Args:
            path: Relative path inside the workspace.
            max_bytes: Refuse files larger than this (default: `max_file_mb`).

        Raises:
            FileNotFoundError: No such file.
            ValueError: Bad path, a symbolic link, not a regular file, or too large.
        """
        limit = self.max_file_bytes if max_bytes is None else max_bytes
        fd = self._open(path, os.O_RDONLY | os.O_NONBLOCK)
        with os.fdopen(fd, "rb") as f:
            info = os.fstat(f.fileno())
            if not stat.S_ISREG(info.st_mode):
                raise ValueError(
                    f"{path!r} in the workspace is not a regular file; only regular files can be read"
                )
            if info.st_size > limit:
                raise ValueError(
                    f"{path!r} is {info.st_size} bytes, over the read limit of {limit}; pass max_bytes=... to read it"
                )
            return f.read(limit + 1)[:limit]

    def read_file(self, path: str, *, max_bytes: int | None = None) -> str:
        """Read `path` as UTF-8 text (undecodable bytes replaced); see `read_bytes` for the checks."""
        return self.read_bytes(path, max_bytes=max_bytes).decode("utf-8", errors="replace")

    def list_files(self, *, max_files: int = 10_000, max_depth: int = 32) -> list[str]:
        """List the regular files in the workspace as sorted relative paths.

        Symbolic links, fifos, sockets and devices are skipped and never followed; directories
        deeper than `max_depth`, or that cannot be read, are skipped; at most `max_files` paths
        are returned (the first found). Whatever layout a program left, this returns a list.
        """
        self._check_open()
        found: list[str] = []
        pending: list[tuple[str, int]] = [("", 0)]
        while pending and len(found) < max_files:
            rel, depth = pending.pop()
            try:
                with os.scandir(os.path.join(self._path, rel) if rel else self._path) as entries:
                    for entry in entries:
                        path = f"{rel}/{entry.name}" if rel else entry.name
                        kind = entry.stat(follow_symlinks=False).st_mode
                        if stat.S_ISREG(kind):
                            found.append(path)
                        elif stat.S_ISDIR(kind) and depth + 1 < max_depth:
                            pending.append((path, depth + 1))
            except (OSError, ValueError):
                continue  # unreadable, vanished, or a name the OS refuses: left out
        return sorted(found[:max_files])

    # ------------------------------------------------------------------ machinery

    def _check_open(self) -> None:
        if self.closed:
            raise ValueError("the workspace is closed; create a new Workspace() for another episode")

    def _parts(self, path: str) -> list[str]:
        if not isinstance(path, str):
            raise TypeError(f"a workspace path must be a str, got {type(path).__name__}")
        pure = PurePosixPath(path)
        if (
            not path
            or "\0" in path
            or pure.is_absolute()
            or ".." in pure.parts
            or not pure.parts
            or pure.parts == (".",)
        ):
            raise ValueError(
                f"workspace paths must be relative and stay inside the workspace (no leading '/', no '..'), "
                f"got {path[:200]!r}"
            )
        return [p for p in pure.parts if p != "."]

    def _open(self, path: str, flags: int, *, create_dirs: bool = False) -> int:
        """Open `path` below the workspace one component at a time, refusing every symbolic link."""
        parts = self._parts(path)
        self._check_open()
        dir_fd = os.open(self._path, os.O_RDONLY | os.O_DIRECTORY)
        try:
            for part in parts[:-1]:
                if create_dirs:
                    try:
                        os.mkdir(part, 0o755, dir_fd=dir_fd)
                        self._own(part, dir_fd)
                    except FileExistsError:
                        pass
                next_fd = self._open_at(path, part, os.O_RDONLY | os.O_DIRECTORY, dir_fd)
                os.close(dir_fd)
                dir_fd = next_fd
            fd = self._open_at(path, parts[-1], flags, dir_fd)
            if flags & os.O_CREAT:
                self._own(fd, None)
            return fd
        finally:
            os.close(dir_fd)

    @staticmethod
    def _open_at(path: str, part: str, flags: int, dir_fd: int) -> int:
        try:
            return os.open(part, flags | os.O_NOFOLLOW | os.O_CLOEXEC, 0o644, dir_fd=dir_fd)
        except OSError as e:
            # O_NOFOLLOW reports a link as ELOOP (last component) or ENOTDIR (with O_DIRECTORY).
            if e.errno in (errno.ELOOP, errno.ENOTDIR) and stat.S_ISLNK(
                os.stat(part, dir_fd=dir_fd, follow_symlinks=False).st_mode
            ):
                raise ValueError(
                    f"{path!r} goes through the symbolic link {part!r}; workspace helpers never follow links, "
                    "since a sandboxed program can point them anywhere on the host"
                ) from None
            raise

    def _own(self, target: str | int, dir_fd: int | None) -> None:
        """Give a file the host created to the workspace's uid, so sandboxed programs can change it."""
        if self.uid is None:
            return
        if isinstance(target, int):
            os.fchown(target, self.uid, self.uid)
        else:
            os.chown(target, self.uid, self.uid, dir_fd=dir_fd, follow_symlinks=False)
