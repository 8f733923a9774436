"""Tests for llm_zoo.sandbox: normal runs, workspaces, and hostile programs that must be contained."""

from __future__ import annotations

import dataclasses
import gc
import os
import shutil
import socket
import subprocess
import sys
import tempfile
import textwrap
import uuid
import warnings

import pytest

from llm_zoo.sandbox import (
    Limits,
    SandboxPool,
    SandboxResult,
    SandboxUnavailable,
    Workspace,
    _bwrap,
    reset_probe,
    run_command,
    run_many,
    run_pytest,
    run_python,
    sandbox_info,
)
from llm_zoo.sandbox import runner as runner_module

needs_bwrap = pytest.mark.skipif(
    shutil.which("bwrap") is None,
    reason="bubblewrap is not installed (apt-get install bubblewrap); CI installs it, so these run there",
)
pytestmark = needs_bwrap


def code(source: str) -> str:
    return textwrap.dedent(source).strip() + "\n"


def processes_with(marker: str) -> list[int]:
    """Host pids whose command line contains `marker` (no psutil: read /proc)."""
    found = []
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            try:
                with open(f"/proc/{entry}/cmdline", "rb") as f:
                    if marker.encode() in f.read():
                        found.append(int(entry))
            except OSError:
                continue
    return found


def processes_of_uid(uid: int) -> list[int]:
    found = []
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            try:
                if os.stat(f"/proc/{entry}").st_uid == uid:
                    found.append(int(entry))
            except OSError:
                continue
    return found


@pytest.fixture
def ws():
    with Workspace() as workspace:
        yield workspace


# ---------------------------------------------------------------------------------------------------
# the probe
# ---------------------------------------------------------------------------------------------------


def test_probe_finds_a_working_sandbox_with_net_and_pid_namespaces():
    info = sandbox_info()
    assert info.available, info.problem
    assert {"--unshare-net", "--unshare-pid"} <= set(info.namespaces)
    if os.geteuid() == 0:
        assert info.per_workspace_uid


# ---------------------------------------------------------------------------------------------------
# normal programs
# ---------------------------------------------------------------------------------------------------


def test_stdout_stderr_returncode_and_stdin():
    result = run_python(
        code("""
        import sys
        data = sys.stdin.read()
        print("got", data.upper())
        print("oops", file=sys.stderr)
        sys.exit(3)
        """),
        stdin="hello",
    )
    assert isinstance(result, SandboxResult)
    assert (result.returncode, result.stdout, result.stderr) == (3, "got HELLO\n", "oops\n")
    assert result.reason is None and not result.timed_out and not result.ok and result.sandboxed
    assert 0 < result.duration_s < 5
    with pytest.raises(dataclasses.FrozenInstanceError):
        result.returncode = 0  # type: ignore[misc]


def test_large_stdin_is_fed_in_full():
    data = "x" * 300_000
    result = run_python("import sys; print(len(sys.stdin.read()))", stdin=data)
    assert result.stdout == "300000\n" and result.ok


def test_run_command_runs_python_from_the_sandbox_path():
    result = run_command(["python", "-c", "import sys; print(sys.argv[1:])", "a", "b"])
    assert result.stdout == "['a', 'b']\n" and result.ok
    missing = run_command(["no-such-tool-xyz"])
    assert missing.returncode == 127 and "cannot run 'no-such-tool-xyz'" in missing.stderr


def test_environment_is_cleared_and_project_is_not_importable(monkeypatch, ws):
    monkeypatch.setenv("LLM_ZOO_CANARY", "host-secret")
    result = run_python(
        code("""
        import os, sys
        print(sorted(os.environ))
        print(os.environ["HOME"], os.environ["PWD"], os.getcwd())
        for name in ("llm_zoo", "numpy", "pytest"):
            try:
                __import__(name)
                print(name, "IMPORTED")
            except ImportError:
                print(name, "missing")
        print(sys.flags.no_site, os.getuid())
        """),
        workspace=ws,
    )
    assert result.ok, result.stderr
    assert "LLM_ZOO_CANARY" not in result.stdout and "host-secret" not in result.stdout
    assert "/workspace /workspace /workspace" in result.stdout
    assert "IMPORTED" not in result.stdout
    no_site, uid = result.stdout.splitlines()[-1].split()
    assert no_site == "1"
    if ws.uid is not None:
        assert int(uid) == ws.uid


def test_modules_are_exposed_read_only_on_request():
    result = run_python(
        "import numpy; print(numpy.__name__); open(numpy.__file__, 'a')", modules=["numpy"], memory_mb=1024
    )
    assert result.stdout == "numpy\n"
    assert "Read-only file system" in result.stderr or "Permission denied" in result.stderr
    with pytest.raises(ValueError, match="not importable here"):
        run_python("pass", modules=["no_such_module_xyz"])


# ---------------------------------------------------------------------------------------------------
# workspaces
# ---------------------------------------------------------------------------------------------------


def test_workspace_persists_across_calls(ws):
    ws.write_file("solution.py", "def f():\n    return 41\n")
    first = run_python("import solution\nopen('out.txt', 'w').write(str(solution.f() + 1))", workspace=ws)
    assert first.ok, first.stderr
    second = run_python("print(open('out.txt').read())", workspace=ws)
    assert second.stdout == "42\n"
    assert ws.read_file("out.txt") == "42"
    assert ws.list_files() == ["out.txt", "solution.py"]
    ws.write_file("out.txt", "overwritten by the host")
    assert run_python("print(open('out.txt').read())", workspace=ws).stdout == "overwritten by the host\n"


def test_two_workspaces_are_isolated():
    with Workspace() as a, Workspace() as b:
        a.write_file("secret.txt", "only for a")
        probe = code(f"""
        import os
        print(os.listdir("/workspace"), os.listdir("/"), os.listdir("/tmp"))
        try:
            print(open({a.path + "/secret.txt"!r}).read())
        except OSError as e:
            print(type(e).__name__)
        """)
        result = run_python(probe, workspace=b)
        assert result.ok, result.stderr
        assert "only for a" not in result.stdout and "secret.txt" not in result.stdout
        assert "FileNotFoundError" in result.stdout
        assert a.uid != b.uid or a.uid is None


def test_workspace_rejects_escaping_paths_and_planted_links(ws):
    for bad in ("/etc/passwd", "../x", "a/../../x", "", "."):
        with pytest.raises(ValueError, match="relative and stay inside"):
            ws.write_file(bad, "x")
        with pytest.raises(ValueError, match="relative and stay inside"):
            ws.read_file(bad)
    planted = run_python(
        "import os\nos.symlink('/etc/hostname', 'leak')\nos.symlink('/', 'root')\nos.mkfifo('fifo')",
        workspace=ws,
    )
    assert planted.ok, planted.stderr
    with pytest.raises(ValueError, match="symbolic link"):
        ws.read_file("leak")
    with pytest.raises(ValueError, match="symbolic link"):
        ws.write_file("leak", "clobber the host")
    with pytest.raises(ValueError, match="symbolic link"):
        ws.write_file("root/tmp/escaped.txt", "x")
    with pytest.raises(ValueError, match="not a regular file"):
        ws.read_file("fifo")
    assert not os.path.exists("/tmp/escaped.txt")
    assert ws.list_files() == []


def test_workspace_rejects_over_size_files():
    with Workspace(max_file_mb=1) as ws:
        with pytest.raises(ValueError, match="over the workspace's file limit"):
            ws.write_file("big.bin", b"x" * ((1 << 20) + 1))
        assert run_python("open('big.bin', 'wb').write(b'x' * (2 << 20))", workspace=ws).ok
        with pytest.raises(ValueError, match="pass max_bytes"):
            ws.read_bytes("big.bin")
        assert len(ws.read_bytes("big.bin", max_bytes=3 << 20)) == 2 << 20


def test_workspace_close_removes_it_and_refuses_further_use():
    ws = Workspace()
    path = ws.path
    ws.write_file("a.txt", "x")
    ws.close()
    ws.close()
    assert ws.closed and not os.path.exists(path)
    with pytest.raises(ValueError, match="workspace is closed"):
        run_python("pass", workspace=ws)
    with pytest.raises(ValueError, match="workspace is closed"):
        ws.read_file("a.txt")
    forgotten = Workspace()
    path = forgotten.path
    del forgotten
    gc.collect()
    assert not os.path.exists(path)


def test_a_run_without_workspace_leaves_nothing_behind(tmp_path, monkeypatch):
    monkeypatch.setattr(tempfile, "tempdir", str(tmp_path))
    assert run_python("open('x', 'w').write('y')").ok
    assert os.listdir(tmp_path) == []


# ---------------------------------------------------------------------------------------------------
# hostile programs: each must end as a clean result with the right reason
# ---------------------------------------------------------------------------------------------------


def test_infinite_loop_is_stopped_by_the_wall_clock():
    result = run_python("while True:\n    pass", timeout_s=1.0)
    assert result.timed_out and result.reason == "timeout"
    assert 1.0 <= result.duration_s < 3.0


def test_cpu_limit_stops_a_busy_program():
    result = run_python("while True:\n    pass", timeout_s=10.0, limits=Limits(cpu_s=1))
    assert result.reason == "cpu" and not result.timed_out
    assert result.returncode == -24  # SIGXCPU


def test_fork_bomb_is_contained(ws):
    result = run_python(
        "import os\nwhile True:\n    os.fork()", timeout_s=3.0, limits=Limits(processes=32), workspace=ws
    )
    assert result.reason in ("processes", "timeout"), result
    if ws.uid is not None:
        assert processes_of_uid(ws.uid) == []
    assert subprocess.run([sys.executable, "-c", "print(1)"], capture_output=True).stdout == b"1\n"


def test_fork_bomb_that_keeps_trying_is_capped_then_killed(ws):
    bomb = code("""
    import os
    while True:
        try:
            os.fork()
        except OSError:
            pass
    """)
    result = run_python(bomb, timeout_s=1.5, limits=Limits(processes=16), workspace=ws)
    assert result.reason == "timeout"
    if ws.uid is not None:
        assert processes_of_uid(ws.uid) == []


def test_memory_bomb_hits_the_address_space_cap():
    assert run_python("x = bytearray(1 << 30)", memory_mb=128).reason == "memory"
    gradual = run_python("chunks = []\nwhile True:\n    chunks.append(bytearray(1 << 20))", memory_mb=128)
    assert gradual.reason == "memory" and "MemoryError" in gradual.stderr


def test_one_huge_file_hits_the_file_size_limit(ws):
    result = run_python("open('big', 'wb').write(b'x' * (8 << 20))", limits=Limits(file_mb=2), workspace=ws)
    assert result.reason == "file_size"
    assert os.path.getsize(os.path.join(ws.path, "big")) <= 2 << 20


def test_many_files_fill_the_workspace_quota_not_the_disk():
    with Workspace(quota_mb=8) as ws:
        if not ws.quota_enforced:
            pytest.skip("workspace quotas need a tmpfs mount (root with CAP_SYS_ADMIN)")
        fill = "for i in range(100):\n    open(f'f{i}', 'wb').write(b'x' * (1 << 20))"
        result = run_python(fill, workspace=ws)
        assert result.reason == "disk_full"
        assert sum(os.path.getsize(os.path.join(ws.path, f)) for f in ws.list_files()) <= 8 << 20
        many = run_python(
            "for i in range(10**6):\n    open(f'e{i}', 'w').close()", workspace=ws, timeout_s=20
        )
        assert many.reason == "disk_full"


def test_tmp_is_a_capped_private_tmpfs():
    fill = "for i in range(100):\n    open(f'/tmp/f{i}', 'wb').write(b'x' * (1 << 20))"
    result = run_python(fill, limits=Limits(tmp_mb=4))
    if sandbox_info().tmpfs_size:
        assert result.reason == "disk_full"
    assert not os.path.exists("/tmp/f0")


def test_huge_output_is_truncated_and_stops_the_program():
    result = run_python(
        "while True:\n    print('y' * 1000)", timeout_s=5.0, limits=Limits(output_bytes=10_000)
    )
    assert result.reason == "output" and result.stdout_truncated and not result.stderr_truncated
    assert len(result.stdout) == 10_000
    assert result.duration_s < 3.0


def test_network_is_unreachable():
    server = socket.socket()
    server.bind(("127.0.0.1", 0))
    server.listen()
    server.settimeout(0.5)
    port = server.getsockname()[1]
    try:
        attempt = code(f"""
        import socket
        for address in [("127.0.0.1", {port}), ("1.1.1.1", 53)]:
            try:
                socket.create_connection(address, timeout=2).close()
                print("CONNECTED", address)
            except OSError as e:
                print(type(e).__name__, address)
        """)
        result = run_python(attempt)
        assert result.ok, result.stderr
        assert "CONNECTED" not in result.stdout
        with pytest.raises(socket.timeout):
            server.accept()
    finally:
        server.close()


def test_host_files_outside_the_workspace_cannot_be_read(tmp_path):
    secret = tmp_path / "secret.txt"
    secret.write_text("host secret")
    project_file = os.path.abspath(__file__)
    attempt = code(f"""
    import os
    for path in [{str(secret)!r}, {project_file!r}, "/etc/passwd", "/root/.bashrc", {sys.prefix!r}]:
        try:
            print(open(path).read()[:20] if os.path.isfile(path) else os.listdir(path))
        except OSError as e:
            print(type(e).__name__)
    """)
    result = run_python(attempt)
    assert result.ok, result.stderr
    assert result.stdout.split() == ["FileNotFoundError"] * 5, result.stdout


def test_writes_outside_the_workspace_fail(tmp_path):
    targets = [
        str(tmp_path / "evil.txt"),
        "/evil.txt",
        "/usr/evil.txt",
        "/sandbox/evil.txt",
        "/proc/evil.txt",
    ]
    attempt = code(f"""
    for path in {targets!r}:
        try:
            open(path, "w").write("x")
            print("WROTE", path)
        except OSError as e:
            print(type(e).__name__)
    """)
    result = run_python(attempt)
    assert result.ok, result.stderr
    assert "WROTE" not in result.stdout
    assert not (tmp_path / "evil.txt").exists() and not os.path.exists("/usr/evil.txt")


def test_killing_its_parent_and_everyone_leaves_the_host_alive():
    for attack in ("import os\nos.kill(os.getppid(), 9)", "import os\nos.kill(-1, 9)\nprint('still here')"):
        result = run_python(attack)
        assert isinstance(result, SandboxResult) and not result.timed_out
        assert result.reason in (None, "killed")
    assert run_python("print('next run fine')").stdout == "next run fine\n"


def test_no_background_process_survives_the_call():
    marker = f"llm-zoo-daemon-{uuid.uuid4().hex}"
    daemonise = code(f"""
    import os, sys, time
    if os.fork() == 0:
        os.setsid()
        if os.fork() == 0:
            os.execv(sys.executable, [sys.executable, "-c", "import time; time.sleep(60)", {marker!r}])
        os._exit(0)
    for _ in range(200):
        alive = [p for p in os.listdir("/proc") if p.isdigit() and {marker!r}.encode() in open(f"/proc/{{p}}/cmdline", "rb").read()]
        if alive:
            print("daemon running")
            break
        time.sleep(0.01)
    """)
    result = run_python(daemonise)
    assert result.stdout == "daemon running\n" and result.ok, result.stderr
    assert processes_with(marker) == []


def test_timeout_kills_the_whole_process_tree():
    marker = f"llm-zoo-child-{uuid.uuid4().hex}"
    spawn = code(f"""
    import subprocess, sys
    subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)", {marker!r}], start_new_session=True)
    while True:
        pass
    """)
    result = run_python(spawn, timeout_s=1.0)
    assert result.reason == "timeout"
    assert processes_with(marker) == []


# ---------------------------------------------------------------------------------------------------
# pytest inside the sandbox
# ---------------------------------------------------------------------------------------------------


def test_run_pytest_on_workspace_files(ws):
    ws.write_file("solution.py", "def add(a, b):\n    return a + b\n")
    ws.write_file(
        "tests/test_solution.py",
        "from solution import add\n\ndef test_ok():\n    assert add(1, 2) == 3\n\ndef test_bad():\n    assert add(1, 1) == 3\n",
    )
    result = run_pytest(ws, ["-q"], timeout_s=30)
    assert result.returncode == 1, result.stdout + result.stderr
    assert "1 failed, 1 passed" in result.stdout
    assert ws.list_files() == ["solution.py", "tests/test_solution.py"]  # no cache, no bytecode


# ---------------------------------------------------------------------------------------------------
# pool
# ---------------------------------------------------------------------------------------------------


def test_pool_keeps_order_and_one_failure_does_not_affect_the_others():
    programs = [
        "print(0)",
        "while True:\n    pass",
        "x = bytearray(1 << 30)",
        "import sys\nsys.exit(5)",
        "print('y' * 10**6)",
        "print(5)",
    ]
    with SandboxPool() as pool:
        assert pool.max_workers == (os.cpu_count() or 1)
        results = pool.run_many(programs, timeout_s=1.5, limits=Limits(output_bytes=1000))
    assert [r.reason for r in results] == [None, "timeout", "memory", None, "output", None]
    assert results[0].stdout == "0\n" and results[5].stdout == "5\n" and results[3].returncode == 5


def test_run_many_reports_a_bad_item_in_its_slot():
    outcomes = run_many(["print(1)", 123, "print(3)"], return_exceptions=True)  # type: ignore[list-item]
    assert outcomes[0].stdout == "1\n" and outcomes[2].stdout == "3\n"
    assert isinstance(outcomes[1], TypeError)
    with pytest.raises(TypeError, match="code must be a str"):
        run_many(["print(1)", 123])  # type: ignore[list-item]


# ---------------------------------------------------------------------------------------------------
# caller mistakes and a missing sandbox
# ---------------------------------------------------------------------------------------------------


def test_bad_arguments_raise_with_a_fix():
    with pytest.raises(TypeError, match="code must be a str"):
        run_python(b"print(1)")  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="timeout_s must be a positive number"):
        run_python("pass", timeout_s=0)
    with pytest.raises(ValueError, match="memory_mb must be an int >= 32"):
        run_python("pass", memory_mb=1)
    with pytest.raises(ValueError, match="Limits.processes must be a positive int"):
        Limits(processes=0)
    with pytest.raises(TypeError, match="argv must be a non-empty sequence"):
        run_command("python -c 1")  # type: ignore[arg-type]
    with pytest.raises(TypeError, match="workspace must be"):
        run_python("pass", workspace="/tmp")  # type: ignore[arg-type]


def test_without_bwrap_it_raises_unless_unsandboxed_is_allowed(monkeypatch):
    monkeypatch.setattr(_bwrap.shutil, "which", lambda name: None)
    monkeypatch.setattr(runner_module, "_warned", type(runner_module._warned)())
    reset_probe()
    try:
        assert not sandbox_info().available
        with pytest.raises(SandboxUnavailable, match="apt-get install bubblewrap.*dnf install bubblewrap"):
            run_python("print(1)")
        with pytest.warns(RuntimeWarning, match="WITHOUT isolation"):
            result = run_python("import sys; print(sys.stdin.read())", stdin="hi", allow_unsandboxed=True)
        assert result.stdout == "hi\n" and not result.sandboxed
        with warnings.catch_warnings():
            warnings.simplefilter("error")  # warned once already
            loop = run_python("while True:\n    pass", timeout_s=0.5, allow_unsandboxed=True)
            bomb = run_python("x = bytearray(1 << 30)", memory_mb=128, allow_unsandboxed=True)
        assert loop.reason == "timeout" and bomb.reason == "memory"
    finally:
        monkeypatch.undo()
        reset_probe()
    assert sandbox_info().available


def test_a_bwrap_that_fails_its_self_test_is_reported(monkeypatch):
    monkeypatch.setattr(_bwrap, "_self_test", lambda info, runtime: "exit 1, stderr 'bwrap: No permissions'")
    reset_probe()
    try:
        with pytest.raises(SandboxUnavailable, match="failed its self-test.*No permissions.*apt-get install"):
            run_python("print(1)")
    finally:
        monkeypatch.undo()
        reset_probe()
    assert sandbox_info().available


# ---- caps on /tmp, /dev/shm and the workspace; what the workspace may plant ------------------------


INODE_BOMB = code("""
    import os, sys, time
    start, made = time.monotonic(), 0
    try:
        while made < 300000:
            open(os.path.join(sys.argv[1] if len(sys.argv) > 1 else WHERE, "f%d" % made), "w").close()
            made += 1
    except OSError as exc:
        print(made, exc.errno, round(time.monotonic() - start, 2))
""")


@pytest.mark.parametrize("where", ["/tmp", "/dev/shm"])
def test_tmp_and_shm_have_an_inode_cap_that_stops_a_file_bomb_quickly(where):
    if not sandbox_info().tmpfs_inodes:
        pytest.skip("this host gives the sandbox no capped tmpfs mounts (see sandbox_info().tmpfs_inodes)")
    limits = Limits(tmp_inodes=2000)
    result = run_python(INODE_BOMB.replace("WHERE", repr(where)), limits=limits, timeout_s=20)
    made, errno, seconds = result.stdout.split()
    assert int(made) < 2000 and errno == "28" and float(seconds) < 5  # ENOSPC, long before 300 000 files
    info = run_python(f"import os; s = os.statvfs({where!r}); print(s.f_files, s.f_blocks * s.f_frsize)",
                      limits=Limits(tmp_inodes=2000, tmp_mb=8)).stdout.split()
    assert info == ["2000", str(8 << 20)]


def test_the_program_cannot_unmount_its_capped_tmp():
    if not sandbox_info().tmpfs_inodes:
        pytest.skip("this host gives the sandbox no capped tmpfs mounts (see sandbox_info().tmpfs_inodes)")
    out = run_python(code("""
        import ctypes
        libc = ctypes.CDLL(None, use_errno=True)
        print(libc.umount2(b"/tmp", 2), libc.mount(b"tmpfs", b"/tmp", b"tmpfs", 0, b""), ctypes.get_errno())
        print(open("/proc/self/status").read().split("CapEff:")[1].split()[0])
    """)).stdout.split()
    assert out == ["-1", "-1", "1", "0000000000000000"]  # EPERM, and no capability left


def test_the_workspace_has_an_inode_cap():
    with Workspace(quota_inodes=500) as ws:
        if not ws.quota_enforced:
            pytest.skip("workspace quotas need root (a tmpfs per workspace)")
        made, errno, _ = run_python(INODE_BOMB.replace("WHERE", "'/workspace'"), workspace=ws).stdout.split()
        assert int(made) < 500 and errno == "28"
    with pytest.raises(ValueError, match="quota_inodes"):
        Workspace(quota_inodes=0)


def test_limits_tmp_inodes_is_validated():
    assert Limits().tmp_inodes == 16384
    with pytest.raises(ValueError, match="tmp_inodes"):
        Limits(tmp_inodes=0)


def test_modules_planted_in_the_workspace_do_not_run_at_interpreter_start(ws):
    ws.write_file("encodings/__init__.py", "print('HIJACKED')\nraise SystemExit(3)\n")
    ws.write_file("json.py", "print('HIJACKED json')\n")
    ws.write_file("helper.py", "X = 5\n")
    result = run_python("import json, helper\nprint(helper.X, json.__file__.startswith('/workspace'))", workspace=ws)
    assert result.ok and result.stdout == "5 False\n", result


def test_listing_a_hostile_layout_never_raises(ws):
    run_python(code("""
        import os
        path = "deep"
        for _ in range(200):
            path = os.path.join(path, "d")
        os.makedirs(path)
        os.symlink("/", "root")
        os.symlink("loop", "loop")
        os.mkfifo("pipe.py")
        os.mkdir("test_solution.py")
        for i in range(50):
            open("f%d.py" % i, "w").close()
        open("deep/d/x.py", "w").close()
    """), workspace=ws)
    files = ws.list_files(max_files=20)
    assert len(files) == 20 and "pipe.py" not in files and not any(f.startswith("root") for f in files)
    assert "deep/d/x.py" in ws.list_files()


@needs_bwrap
def test_the_sandbox_shows_nothing_of_the_host():
    """mountinfo, cgroup, environ, pid 1 and the parent's command line, /etc, the hostname and a traceback, read
    from inside a real run, name neither the checkout, the workspace's host path nor the host's name."""
    from benchmarks.hacks import judge as judge_hacks

    found, out = judge_hacks.host_facts_seen()
    assert found == [] and "/proc/self/mountinfo" not in out and "sandbox" in out, (found, out[-500:])


@needs_bwrap
def test_the_interpreters_own_files_name_no_host_path():
    """The prefix the interpreter was built for is compiled into its binary, libpython, extension modules,
    _sysconfigdata and .pyc files; inside, none of them (nor sysconfig's config vars, a stdlib traceback or a
    marker file beside the copy) names the host's prefix, home directory, checkout or workspace path."""
    from benchmarks.hacks import judge as judge_hacks

    outcome = judge_hacks._compiled_host_paths()
    assert not outcome.paid, outcome.detail


def test_scrubbing_keeps_each_file_s_length_and_the_path_it_names(tmp_path):
    from llm_zoo.sandbox import _bwrap

    prefix = "/home/someone/.pyenv/versions/3.11.7"
    (tmp_path / "lib").mkdir()
    blob = b"\x00RUNPATH=" + prefix.encode() + b"/lib\x00" + prefix.encode() + b"\x00tail"
    (tmp_path / "lib" / "libpython.so").write_bytes(blob)
    (tmp_path / "lib" / "_sysconfigdata.py").write_text(f"build_time_vars = {{'prefix': {prefix!r}}}\n")
    _bwrap._scrub(str(tmp_path), {prefix, "/"})
    data = (tmp_path / "lib" / "libpython.so").read_bytes()
    assert len(data) == len(blob) and prefix.encode() not in data and b"someone" not in data
    name = data.split(b"RUNPATH=")[1].split(b"\x00")[0].decode()
    assert os.path.normpath(name) == _bwrap.INTERPRETER_DIR + "/lib"
    assert "someone" not in (tmp_path / "lib" / "_sysconfigdata.py").read_text()
