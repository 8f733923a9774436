"""Run untrusted code: bubblewrap namespaces plus rlimits.

Models write Python; envs such as the agentic judge and the proposer-solver run it with
`run_python`, `run_command` or `run_pytest`, in a `Workspace` that lasts one episode. A program
that breaks a limit comes back as a `SandboxResult` whose `reason` names the limit; only caller
mistakes and a missing sandbox raise.

```python
from llm_zoo.sandbox import Workspace, open_session, run_python

with Workspace() as ws:
    ws.write_file("solution.py", reply_code)
    probe = run_python("import solution; print(solution.f(3))", workspace=ws)   # probe.stdout
    session, process = open_session(ws)   # ground truth: the comparison happens here, not in there
    with process:
        f = session.import_module("solution", ".").f
        correct = f(3) == 4               # f(3) came back as plain data (an int, or a refusal)
```

Never write expected values (hidden tests) into a workspace whose code runs: the program can read
them, or forge whatever report reads them. `run_pytest` is for tests that are not secret.

| Boundary | How |
|---|---|
| Filesystem | a fresh read-only root: /usr, the /bin and /lib links, and the base interpreter: where it lives outside /usr and the host is root, a copy of it (binary, libpython, standard library; no site-packages) on a tmpfs of its own, made once per machine (`_bwrap.private_interpreter`, about 66 MB of memory) and bound at /python; else its prefix at its host path (site-packages masked by an empty tmpfs), /etc/ld.so.cache, a new /proc (mounted again by the wrapper with `hidepid=2` where it may, so the program sees no process of another uid, bwrap's pid 1 included), a minimal read-only /dev; /tmp and /dev/shm are tmpfs capped in bytes (`Limits.tmp_mb`, default 64) and in inodes (`Limits.tmp_inodes`, default 16384); the workspace is read-write at /workspace. Nothing else of the host: no /etc, /root, /home, the project, the virtualenv or other workspaces |
| Interpreter | the host's base interpreter (`sys.base_prefix`, not the virtualenv's) with `-S -s`; PYTHONPATH puts the standard library *before* the workspace, so a planted `encodings/` or `json.py` shadows nothing; `modules=` binds chosen packages read-only under /sandbox/lib (`run_pytest` binds pytest's); `llm_zoo.sandbox.plain` is bound at /sandbox/plain.py |
| Servers | `open_session(workspace)` keeps a process up (`python -I -S -B`, the workspace last on `sys.path`, its modules read from `.py` source only, never a planted `.pyc`) that imports code from the workspace and answers calls with plain data only (`plain`: exact builtin types, capped; any other object stays behind as an uncomparable handle); arguments arrive as copies, nothing comes back into the caller's data; the caller compares the values in its own process |
| Beside | `run_python_beside(code, workspace=..., server_workspace=...)` runs code in one sandbox and what it imports from the workspace (`import solution`) in `open_session`'s server in another, linked by a pipe: a checker's program, expected values and output never enter the process of the code it checks |
| Network | `--unshare-net`: a loopback of its own, nothing reachable |
| Processes | `--unshare-pid --die-with-parent --new-session`; the runner waits for the sandbox's pid 1 to die, which takes every leftover (daemonised) process with it before the call returns |
| Other namespaces | `--unshare-ipc`, `--unshare-uts` (hostname "sandbox"), `--unshare-cgroup-try`, each kept only if bwrap accepts it (see `sandbox_info()`) |
| Identity | host is root: no user namespace; the program runs as a fresh unprivileged uid per workspace, with no capabilities and no_new_privs. Otherwise: a user namespace (`--unshare-user`) |
| Environment | cleared, then PATH, HOME=/workspace, TMPDIR, LANG, PYTHONDONTWRITEBYTECODE=1, PYTHONPATH |
| Limits | RLIMIT_CPU, RLIMIT_AS (`memory_mb`), RLIMIT_NPROC, RLIMIT_FSIZE, RLIMIT_NOFILE, set by a small wrapper inside just before exec (no `preexec_fn`, which is unsafe with threads); a wall-clock timeout; stdout and stderr read into bounded buffers, the run killed once one overflows |
| Disk | RLIMIT_FSIZE per file (`Limits.file_mb`, default 16); /tmp and /dev/shm: see Filesystem (the inode cap where `sandbox_info().tmpfs_inodes`: the wrapper mounts them itself before it drops privileges; else bwrap's `--size` alone); as root, each workspace is a tmpfs capped at `Workspace(quota_mb=64, quota_inodes=16384)` |

A fork bomb is contained by RLIMIT_NPROC, which the kernel counts per real uid and never enforces
for root; hence the per-workspace uid (a user namespace would map the program back to root, where
the limit does not apply). Where the host is not root, the runner counts the caller's processes
and adds `Limits.processes`.

Without bubblewrap every run raises `SandboxUnavailable`, whose message says how to install it,
unless the caller passes `allow_unsandboxed=True`: then only the rlimits apply, a warning is
issued once, and daemonised children may outlive the run. bwrap is probed once per process.

Nothing of the host shows inside where the host is root: bwrap's options, which name the workspace's and the checkout's host paths, reach it through a memfd (`--args`), `plain.py` and the program are bound as data, the interpreter is the private copy, the hostname is `sandbox`, and /etc holds only ld.so.cache. Limitations: without root (no private copy) the interpreter's prefix shows at its host path in /proc/self/mountinfo, `sys.prefix` and PYTHONPATH, and `modules=` binds installed packages at theirs; memory is capped per process, so a run may use up to `Limits.processes` x
`memory_mb` (a memory cgroup would cap the total); the sandboxed uid may still create user
namespaces of its own (bwrap's `--disable-userns` needs a user namespace, which as root would
disable RLIMIT_NPROC); without root there is no workspace quota, only the per-file limit (and
/tmp gets its inode cap only where the probe's capped mount works); a `run_python` program that
imports a workspace module may run a `.pyc` the workspace holds instead of its source (the
`open_session` server never does); and a
program that exits with status 128+N reads as killed by signal N.
"""

from __future__ import annotations

from ._bwrap import SandboxInfo, SandboxUnavailable, reset_probe, sandbox_info
from .pool import SandboxPool, run_many
from .runner import PYTEST_MODULES, Limits, SandboxResult, run_command, run_pytest, run_python, runs_started
from .session import SandboxProcess, open_session, run_python_beside
from .workspace import Workspace

__all__ = [
    "PYTEST_MODULES",
    "Limits",
    "SandboxInfo",
    "SandboxPool",
    "SandboxProcess",
    "SandboxResult",
    "SandboxUnavailable",
    "Workspace",
    "reset_probe",
    "run_command",
    "run_many",
    "run_pytest",
    "open_session",
    "run_python",
    "run_python_beside",
    "runs_started",
    "sandbox_info",
]
