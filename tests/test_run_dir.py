"""A run directory is owned: `train` never starts afresh over a run unless told to, and two processes never
write one run (a lock naming its holder, released however the holder ends)."""

from __future__ import annotations

import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from llm_zoo import cli
from llm_zoo.trainers.checkpoint import CheckpointError, own_run_dir
from llm_zoo.trainers.grpo import make_config, train

ROOT = Path(__file__).resolve().parents[1]
TINY = {"steps": 1, "episodes_per_step": 8, "rollout_batch_size": 8, "model_hidden_size": 32, "eval_every": 0,
        "progress": False, "tensorboard": False, "threads": 1, "sample_every": 0, "policies": {},
        "checkpoint_every": 1, "unmask.steps": 0, "device": "cpu"}
SETS = [a for k, v in TINY.items() for a in ("--set", f"{k}={v if isinstance(v, str) else json.dumps(v)}")]


@pytest.fixture(scope="module")
def finished_run(tmp_path_factory):
    run = tmp_path_factory.mktemp("finished") / "run"
    train(make_config("kuhn_poker_v0", {**TINY, "run_dir": str(run)}))
    return run


def _snapshot(run: Path) -> dict[str, bytes]:
    return {p.relative_to(run).as_posix(): p.read_bytes() for p in sorted(run.rglob("*"))
            if p.is_file() and p.name != "run.lock"}


def _train(capsys, run: Path, *extra: str) -> tuple[int, str]:
    code = cli.main(["train", "kuhn_poker_v0", "--run-dir", str(run), *SETS, *extra])
    return code, capsys.readouterr().err


def test_a_fresh_run_over_a_run_is_refused_and_names_the_flags(finished_run, tmp_path, capsys):
    run = tmp_path / "run"
    shutil.copytree(finished_run, run)
    before = _snapshot(run)
    code, err = _train(capsys, run)
    assert code == 2 and "Traceback" not in err, err[-2000:]
    assert "already holds a run" in err and "--overwrite" in err and "--resume" in err
    assert _snapshot(run) == before  # nothing was written
    for entry in ("metrics.jsonl", "checkpoints"):  # any one of the run's files is enough
        lone = tmp_path / f"only_{entry}"
        lone.mkdir()
        shutil.copytree(run / entry, lone / entry) if entry == "checkpoints" else shutil.copy(run / entry, lone)
        with pytest.raises(CheckpointError, match="already holds a run"), own_run_dir(lone):
            pass


def test_overwrite_replaces_the_run_and_keeps_other_files(finished_run, tmp_path, capsys):
    run = tmp_path / "run"
    shutil.copytree(finished_run, run)
    (run / "notes.txt").write_text("mine")
    stale = run / "checkpoints" / "step_000099"
    shutil.copytree(run / "checkpoints" / "step_000001", stale)
    code, err = _train(capsys, run, "--overwrite")
    assert code == 0, err[-2000:]
    assert not stale.exists() and (run / "checkpoints" / "step_000001").is_dir()
    assert (run / "notes.txt").read_text() == "mine"
    assert [json.loads(line)["step"] for line in (run / "metrics.jsonl").read_text().splitlines()] == [1]
    code, err = _train(capsys, run, "--overwrite", "--resume")
    assert code == 2 and "give one" in err


def test_an_empty_or_new_directory_is_a_fresh_run(tmp_path):
    for run in (tmp_path, tmp_path / "new" / "deeper"):
        with own_run_dir(run) as owned:
            assert owned == run and (run / "run.lock").is_file()


HOLDER = textwrap.dedent("""
    import sys, time
    from llm_zoo.trainers.checkpoint import own_run_dir
    with own_run_dir(sys.argv[1]):
        print("held", flush=True)
        time.sleep(120)
""")


def test_a_second_process_is_refused_naming_the_holder_and_a_crash_releases_the_lock(tmp_path, capsys):
    run = tmp_path / "run"
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    holder = subprocess.Popen([sys.executable, "-c", HOLDER, str(run)], stdout=subprocess.PIPE, text=True, env=env)
    try:
        assert holder.stdout.readline().strip() == "held"
        with pytest.raises(CheckpointError) as caught, own_run_dir(run):
            pass
        message = str(caught.value)
        assert f'"pid": {holder.pid}' in message and socket.gethostname() in message and '"started"' in message
        assert "another --run-dir" in message
        code, err = _train(capsys, run)  # the command line says the same, in one line, and writes nothing
        assert code == 2 and f'"pid": {holder.pid}' in err and "Traceback" not in err
        assert not (run / "config.json").exists()
    finally:
        holder.send_signal(signal.SIGKILL)  # a crash: no cleanup runs in the holder
        holder.wait()
    with own_run_dir(run):  # the kernel dropped the lock with the process
        pass


def test_resume_takes_the_lock_too(finished_run, tmp_path):
    run = tmp_path / "run"
    shutil.copytree(finished_run, run)
    with own_run_dir(run, resume=True):
        with pytest.raises(CheckpointError, match="another run is writing there"):
            train(make_config("kuhn_poker_v0", {**TINY, "run_dir": str(run), "steps": 2}), resume=True)


def test_a_planted_symlink_lock_is_refused_and_its_target_untouched(tmp_path):
    victim = tmp_path / "victim.txt"
    victim.write_text("precious")
    run = tmp_path / "run"
    run.mkdir()
    (run / "run.lock").symlink_to(victim)
    with pytest.raises(CheckpointError, match="symbolic link"), own_run_dir(run):
        pass
    assert victim.read_text() == "precious"


def test_a_directory_left_by_a_refused_start_is_not_a_run(finished_run, tmp_path):
    run = tmp_path / "run"
    run.mkdir()
    shutil.copy(finished_run / "config.json", run)  # what a run refused before its first step leaves
    with own_run_dir(run):  # taken without --overwrite: nothing here is a run to lose
        assert (run / "run.lock").is_file() and str(os.getpid()) in (run / "run.lock").read_text()


def test_a_run_dir_that_cannot_be_one_is_refused_in_one_line(tmp_path, capsys):
    (tmp_path / "a_file").write_text("x")
    for run in (tmp_path / "a_file", tmp_path / "a_file" / "below"):
        code, err = _train(capsys, run)
        assert code == 2 and "cannot be a run directory" in err and "Traceback" not in err, err[-1000:]
    (tmp_path / "lockdir" / "run.lock").mkdir(parents=True)
    code, err = _train(capsys, tmp_path / "lockdir")
    assert code == 2 and "run.lock" in err, err[-1000:]


def test_sft_owns_its_run_directory_too(finished_run, tmp_path, capsys):
    run = tmp_path / "run"
    shutil.copytree(finished_run, run)
    before = _snapshot(run)
    code = cli.main(["sft", "kuhn_poker_v0", "--role", "player", "--run-dir", str(run)])
    err = capsys.readouterr().err
    assert code == 2 and "already holds a run" in err and "--overwrite" in err and "Traceback" not in err, err[-1000:]
    assert "--resume" not in err  # sft has none
    assert _snapshot(run) == before
    with own_run_dir(tmp_path / "held"):
        code = cli.main(["sft", "kuhn_poker_v0", "--role", "player", "--run-dir", str(tmp_path / "held")])
    err = capsys.readouterr().err
    assert code == 2 and f'"pid": {os.getpid()}' in err, err[-1000:]
