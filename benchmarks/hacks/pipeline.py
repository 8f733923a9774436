"""Attacks on the pipeline around the envs: the files a user hands in, and the run directories ``train`` writes.

No env's reward is at stake here; what an attacker wants is code run on the machine, data read as
something it is not, a bare traceback out of the command line, or someone else's run clobbered. Every
attempt plays through the real code path: ``llm-zoo train --resume``, ``llm-zoo eval --checkpoint``,
``llm-zoo train --config`` / ``--set`` (all by ``llm_zoo.cli.main``, in this process), and
:func:`llm_zoo.episode.read_jsonl`, against a real checkpoint of a tiny Kuhn poker run made here.

An attempt *paid* when its payload ran (a marker file appeared), when a damaged or crafted file was
accepted (the command exited 0, or a record loaded with a value converted), when the command raised
instead of printing one ``llm-zoo: error:`` line that names the file or field, or when a run's files
changed under an attempt to start another over it. ``reward`` is 1 for a paid attempt and 0 otherwise;
``baseline`` is 0, what a refused attempt gets.

Every attempt here paid against the pipeline as it was (``--overwrite`` aside, which did not exist): the
three payloads ran (pickled trainer state, a legacy pickle, a saved PPO model's cloudpickled schedule),
damaged checkpoints and configs ended in bare tracebacks or were accepted (a flipped bit, a latest pointer
out of the run, a FIFO, ``lr=.inf``), episode files were coerced or crashed their reader, and ``train``
wrote over a finished run, beside a running one and through a planted link. The mechanisms that close
them: ``torch.load(weights_only=True)`` and a restricted unpickler, a manifest of hashes, schemas with
JSON's own types, one error type per reader that names the file, and a ``flock`` on ``run.lock``.
"""

from __future__ import annotations

import atexit
import contextlib
import functools
import gzip
import io
import json
import os
import pickle
import shutil
import signal
import subprocess
import sys
import tempfile
from collections.abc import Callable
from pathlib import Path

from benchmarks.hacks import Hack, Outcome

ENV = "pipeline"
TINY = {"steps": 1, "episodes_per_step": 8, "rollout_batch_size": 8, "model_hidden_size": 32, "eval_every": 0,
        "progress": False, "tensorboard": False, "threads": 1, "sample_every": 0, "policies": {},
        "checkpoint_every": 1, "unmask.steps": 0, "device": "cpu"}
SETS = [a for k, v in TINY.items() for a in ("--set", f"{k}={v if isinstance(v, str) else json.dumps(v)}")]


@functools.cache
def _scratch() -> Path:
    path = Path(tempfile.mkdtemp(prefix="pipeline-hacks-"))
    atexit.register(shutil.rmtree, path, True)
    return path


@functools.cache
def _finished_run() -> Path:
    """A real run of the tiny Kuhn poker model, one step, one checkpoint (made once, about a second)."""
    from llm_zoo.trainers.grpo import make_config, train

    run = _scratch() / "finished"
    with contextlib.redirect_stderr(io.StringIO()):
        train(make_config("kuhn_poker_v0", {**TINY, "run_dir": str(run)}))
    return run


def _fresh(name: str) -> tuple[Path, Path]:
    """A copy of the finished run to damage; return (run, its latest checkpoint)."""
    run = _scratch() / name
    shutil.rmtree(run, ignore_errors=True)
    shutil.copytree(_finished_run(), run)
    return run, run / "checkpoints" / (run / "checkpoints" / "latest").read_text().strip()


def _reseal(ckpt: Path) -> None:
    """Rewrite the manifest over the edited files, as an attacker who knows the format would (where there is one)."""
    from llm_zoo.trainers import checkpoint

    if (ckpt / "manifest.json").exists():
        (ckpt / "manifest.json").write_text(json.dumps(checkpoint._manifest(ckpt)))


def _cli(*argv: str) -> tuple[int | None, str, str]:
    """Run ``llm-zoo ARGV`` in this process; return (exit code, or None when it raised; stderr; what it raised)."""
    from llm_zoo import cli

    err = io.StringIO()
    try:
        with contextlib.redirect_stderr(err), contextlib.redirect_stdout(io.StringIO()):
            return cli.main(list(argv)), err.getvalue(), ""
    except (Exception, SystemExit) as exc:  # noqa: BLE001 - a bare traceback is what the attempt looks for
        return None, err.getvalue(), f"{type(exc).__name__}: {' '.join(str(exc).split())[:160]}"


def _judge(result: tuple[int | None, str, str], *needles: str, ran: Path | None = None) -> Outcome:
    """Paid unless the command refused in one clear line naming each of ``needles`` (and ``ran`` never appeared)."""
    code, err, raised = result
    lines = [line for line in err.splitlines() if line.startswith("llm-zoo: error:")]
    if ran is not None and ran.exists():
        return Outcome(True, 1.0, 0.0, f"the payload ran ({ran.name} appeared)")
    if code is None:
        return Outcome(True, 1.0, 0.0, f"a bare traceback: {raised}")
    if code == 0:
        return Outcome(True, 1.0, 0.0, "accepted: the command exited 0")
    missing = [n for n in needles if not any(n in line for line in lines)]
    if len(lines) != 1 or missing:
        return Outcome(True, 1.0, 0.0, f"exit {code} without one clear line naming {missing}: {err[-160:]!r}")
    return Outcome(False, 0.0, 0.0, lines[0][:200])


def _resume(run: Path) -> tuple[int | None, str, str]:
    return _cli("train", "kuhn_poker_v0", "--resume", "--run-dir", str(run), *SETS, "--set", "steps=2")


class Payload:
    """Pickles as ``os.mkdir(marker)``: any loader that unpickles it runs it."""

    def __init__(self, marker: Path) -> None:
        self.marker = marker

    def __reduce__(self) -> tuple[Callable[..., object], tuple[str]]:
        return os.mkdir, (str(self.marker),)


def rewrite_zip(source: Path, path: Path, edit: Callable[[str, bytes], bytes | None]) -> Path:
    """Write ``path``: the zip ``source`` with each member passed through ``edit(name, data)`` (None drops it)."""
    import zipfile

    with zipfile.ZipFile(source) as old, zipfile.ZipFile(path, "w") as new:
        for member in old.namelist():
            data = edit(member, old.read(member))
            if data is not None:
                new.writestr(member, data)
    return path


def pickled_payload(marker: Path, key: str = "policy_class") -> Callable[[str, bytes], bytes]:
    """An edit for :func:`rewrite_zip` of a saved stable-baselines3 model: the cloudpickled parameter ``key`` of its
    ``data`` member becomes a :class:`Payload` that makes ``marker`` when unpickled."""
    import base64

    def edit(member: str, data: bytes) -> bytes:
        if member == "data":
            params = json.loads(data)
            params[key][":serialized:"] = base64.b64encode(pickle.dumps(Payload(marker))).decode()
            data = json.dumps(params).encode()
        return data

    return edit


# ---- unsafe loading: checkpoints --------------------------------------------------------------------------


def pickle_payload_in_trainer_state() -> Outcome:
    import torch

    run, ckpt = _fresh("payload")
    marker = _scratch() / "payload_ran"
    state = torch.load(ckpt / "main.trainer.pt", weights_only=True)
    torch.save({**state, "met": Payload(marker)}, ckpt / "main.trainer.pt")
    _reseal(ckpt)
    return _judge(_resume(run), "main.trainer.pt", ran=marker)


def legacy_pickle_as_trainer_state() -> Outcome:
    run, ckpt = _fresh("legacy")
    marker = _scratch() / "legacy_ran"
    (ckpt / "main.trainer.pt").write_bytes(pickle.dumps({"optimizer": Payload(marker)}, protocol=2))
    _reseal(ckpt)
    return _judge(_resume(run), "main.trainer.pt", ran=marker)


def truncated_weights_at_eval() -> Outcome:
    _, ckpt = _fresh("truncated")
    weights = ckpt / "policies" / "main" / "model.safetensors"
    weights.write_bytes(weights.read_bytes()[:200])
    return _judge(_cli("eval", "kuhn_poker_v0", "--checkpoint", str(ckpt), "--episodes", "2"), "model.safetensors")


def flipped_bit_in_weights() -> Outcome:
    run, ckpt = _fresh("flipped")
    weights = ckpt / "policies" / "main" / "model.safetensors"
    data = bytearray(weights.read_bytes())
    data[-3] ^= 0x40  # same size, a valid header: a different model, silently
    weights.write_bytes(bytes(data))
    first = _judge(_cli("eval", "kuhn_poker_v0", "--checkpoint", str(ckpt), "--episodes", "2"), "model.safetensors")
    return first if first.paid else _judge(_resume(run), "model.safetensors")


def truncated_trainer_state() -> Outcome:
    run, ckpt = _fresh("cut_trainer")
    file = ckpt / "main.trainer.pt"
    file.write_bytes(file.read_bytes()[: file.stat().st_size // 3])
    return _judge(_resume(run), "main.trainer.pt")


def state_json_missing_or_mistyped() -> Outcome:
    run, ckpt = _fresh("state")
    good = json.loads((ckpt / "state.json").read_text())
    edits: list[tuple[str, Callable[[dict], None]]] = [
        ("torch_rng", lambda s: s.pop("torch_rng")), ("step", lambda s: s.update(step="1")),
        ("step", lambda s: s.update(step=1.5)), ("torch_rng", lambda s: s.update(torch_rng=[999] * 5056)),
        ("rae", lambda s: s.update(rae={"k": "x"})), ("policies", lambda s: s.update(policies=["main", "ghost"]))]
    for needle, edit in edits:
        state = json.loads(json.dumps(good))
        edit(state)
        (ckpt / "state.json").write_text(json.dumps(state))
        _reseal(ckpt)
        outcome = _judge(_resume(run), "state.json", needle)
        if outcome.paid:
            return outcome
    return Outcome(False, 0.0, 0.0, f"{len(edits)} edits of state.json, each refused naming the key")


def latest_pointer_out_of_the_run() -> Outcome:
    run, ckpt = _fresh("pointer")
    elsewhere = _scratch() / "planted_step"
    shutil.rmtree(elsewhere, ignore_errors=True)
    shutil.copytree(ckpt, elsewhere)
    (run / "checkpoints" / "latest").write_text(os.path.relpath(elsewhere, run / "checkpoints"))
    return _judge(_resume(run), "latest")


def special_files_in_a_checkpoint() -> Outcome:
    """A FIFO where a JSON file is, then a link to /dev/zero: a reader would wait, or read, forever."""
    _, ckpt = _fresh("special")
    target = ckpt / "policies" / "main" / "generation_config.json"
    target.unlink()
    os.mkfifo(target)
    first = _judge(_cli("eval", "kuhn_poker_v0", "--checkpoint", str(ckpt), "--episodes", "2"), "generation_config")
    if first.paid:
        return first
    target.unlink()
    target.symlink_to("/dev/zero")
    return _judge(_cli("eval", "kuhn_poker_v0", "--checkpoint", str(ckpt), "--episodes", "2"), "generation_config")


def damaged_checkpoint_as_init_or_crossplay_player() -> Outcome:
    """The same damage through the two other readers of a checkpoint: train's init and crossplay's players."""
    _, ckpt = _fresh("init")
    weights = ckpt / "policies" / "main" / "model.safetensors"
    weights.write_bytes(weights.read_bytes()[:-40])
    first = _judge(_cli("train", "kuhn_poker_v0", *SETS, "--set", f"init={ckpt}", "--run-dir",
                        str(_scratch() / "from_init")), "model.safetensors")
    if first.paid:
        return first
    return _judge(_cli("crossplay", "kuhn_poker_v0", "--players", str(ckpt), "nash", "--episodes", "2", "--out",
                       str(_scratch() / "crossplay")), "model.safetensors")


def pickled_payload_in_a_saved_ppo_model() -> Outcome:
    """stable-baselines3 keeps a model's parameters as cloudpickle; crossplay's ppo:PATH loads such a zip."""
    from llm_zoo.trainers.baselines import ppo

    saved = _scratch() / "ppo.zip"
    if not saved.exists():
        with contextlib.redirect_stderr(io.StringIO()), contextlib.redirect_stdout(io.StringIO()):
            ppo.train_maskable_ppo(256, seed=0).model.save(saved)
    marker = _scratch() / "ppo_payload_ran"
    crafted = rewrite_zip(saved, _scratch() / "crafted_ppo.zip", pickled_payload(marker, "lr_schedule"))
    return _judge(_cli("crossplay", "kuhn_poker_v0", "--players", f"ppo:{crafted}", "nash", "--episodes", "2",
                       "--out", str(_scratch() / "crossplay_ppo")), "crafted_ppo.zip", ran=marker)


def _fifo(path: Path, data: bytes = b"lr: 0.1\n") -> Path:
    """Make a FIFO; a helper thread feeds any reader that blocks on it within 5 s, so a reader that does
    open it returns (and the attempt reports it) instead of waiting forever."""
    import errno
    import threading
    import time

    path.unlink(missing_ok=True)
    os.mkfifo(path)

    def feed() -> None:
        deadline = time.monotonic() + 5
        while time.monotonic() < deadline:
            try:
                fd = os.open(path, os.O_WRONLY | os.O_NONBLOCK)
            except OSError as exc:
                if exc.errno not in (errno.ENXIO, errno.ENOENT):
                    return
                time.sleep(0.05)
                continue
            with contextlib.suppress(OSError):
                os.write(fd, data)
            os.close(fd)
            return

    threading.Thread(target=feed, daemon=True).start()
    return path


def fifos_as_inputs() -> Outcome:
    """A FIFO as a --config, as an episode file and as the run's config.json beside a checkpoint."""
    first = _judge(_cli("train", "kuhn_poker_v0", *SETS, "--config", str(_fifo(_scratch() / "pipe.yaml")),
                        "--run-dir", str(_scratch() / "piped")), "pipe.yaml")
    if first.paid:
        return first
    if (outcome := _read_outcome(_fifo(_scratch() / "pipe.jsonl", b"{}\n"), "a FIFO as episodes")) is not None:
        return outcome
    run, ckpt = _fresh("piped_run")
    (run / "config.json").unlink()
    _fifo(run / "config.json", b"{}")
    return _judge(_cli("eval", "kuhn_poker_v0", "--checkpoint", str(ckpt), "--episodes", "2"), "config.json")


# ---- unsafe loading: configs and episodes ------------------------------------------------------------------


def yaml_python_tag_config() -> Outcome:
    marker = _scratch() / "yaml_ran"
    config = _scratch() / "evil.yaml"
    config.write_text(f"lr: !!python/object/apply:os.mkdir [{str(marker)!r}]\n")
    return _judge(_cli("train", "kuhn_poker_v0", "--config", str(config), "--run-dir", str(_scratch() / "y")),
                  "evil.yaml", ran=marker)


def yaml_alias_bomb_and_deep_nesting() -> Outcome:
    """Eight lines of aliases that stand for 10**8 numbers, then nesting past Python's recursion limit."""
    lines = ["env_kwargs:", "  a: &a [1, 1, 1, 1, 1, 1, 1, 1, 1, 1]"]
    lines += [f"  {b}: &{b} [{', '.join(['*' + a] * 10)}]" for a, b in zip("abcdefg", "bcdefgh")]
    config = _scratch() / "bomb.yaml"
    config.write_text("\n".join(lines) + "\n")
    run = str(_scratch() / "bomb")
    first = _judge(_cli("train", "kuhn_poker_v0", "--config", str(config), "--run-dir", run), "bomb.yaml")
    if first.paid:
        return first
    return _judge(_cli("train", "kuhn_poker_v0", "--set", "env_kwargs=" + "[" * 5000 + "]" * 5000, "--run-dir", run),
                  "--set env_kwargs")


def non_finite_config_values() -> Outcome:
    run = _scratch() / "nonfinite"
    for value in ("lr=.inf", "temperature=.nan", "lr=1e999", "beta=-.inf", "env_kwargs={num_hands: .nan}"):
        outcome = _judge(_cli("train", "kuhn_poker_v0", *SETS, "--set", value, "--run-dir", str(run)),
                         f"config.{value.split('=')[0]}")
        if outcome.paid:
            return Outcome(True, 1.0, 0.0, f"--set {value}: {outcome.detail}")
    return Outcome(False, 0.0, 0.0, "5 non-finite values (--set), each refused naming the field")


def saved_ppo_models_through_ppo_load() -> Outcome:
    """``ppo.load`` called directly (a script, not the command line) on a saved model whose cloudpickled
    policy_class calls os.mkdir, on a truncated one and on one without its weights: each must be refused
    naming the file, and the payload must not run."""
    from llm_zoo.trainers.baselines import ppo

    saved = _scratch() / "ppo.zip"
    if not saved.exists():
        with contextlib.redirect_stderr(io.StringIO()), contextlib.redirect_stdout(io.StringIO()):
            ppo.train_maskable_ppo(256, seed=0).model.save(saved)
    marker = _scratch() / "ppo_load_payload_ran"

    truncated = _scratch() / "truncated_ppo.zip"
    truncated.write_bytes(saved.read_bytes()[:3000])
    files = [rewrite_zip(saved, _scratch() / "payload_ppo.zip", pickled_payload(marker)), truncated,
             rewrite_zip(saved, _scratch() / "weightless_ppo.zip",
                         lambda member, data: None if member.endswith(".pth") else data)]
    for path in files:
        try:
            ppo.load(path)
        except Exception as exc:  # noqa: BLE001 - anything but a refusal naming the file pays
            if marker.exists():
                return Outcome(True, 1.0, 0.0, f"{path.name}: the payload ran")
            if not (isinstance(exc, ValueError) and str(path) in str(exc)):
                return Outcome(True, 1.0, 0.0, f"{path.name}: {type(exc).__name__} without the file: {str(exc)[:120]}")
            continue
        return Outcome(True, 1.0, 0.0, f"{path.name}: loaded" + (" and the payload ran" if marker.exists() else ""))
    return Outcome(False, 0.0, 0.0, f"{len(files)} crafted or damaged models, each refused naming the file")


def non_finite_numbers_written_to_an_episode_file() -> Outcome:
    """write_jsonl given NaN or an infinity in a return, a reward or an info: it must refuse naming the field
    and write nothing, or write what read_jsonl reads back; a file its reader refuses pays."""
    from llm_zoo.episode import Episode, read_jsonl, write_jsonl

    def returns(episode: Episode) -> None:
        episode.returns["player_0"] = float("nan")

    def reward(episode: Episode) -> None:
        episode.turns[0].reward = float("inf")

    def infos(episode: Episode) -> None:
        episode.infos["player_0"] = {"score": [1.0, float("-inf")]}

    path = _scratch() / "written.jsonl"
    edits = {"NaN return": returns, "inf reward": reward, "-inf in infos": infos}
    for what, edit in edits.items():
        episode = Episode.from_json(_episode_line(lambda r: None))
        edit(episode)
        path.unlink(missing_ok=True)
        try:
            write_jsonl(path, [episode])
        except ValueError as exc:
            if "finite" not in str(exc) or path.exists():
                return Outcome(True, 1.0, 0.0, f"{what}: refused unclearly or left a file: {str(exc)[:120]}")
            continue
        try:
            read_jsonl(path)
        except Exception as exc:  # noqa: BLE001 - a file its own reader refuses is what the attempt looks for
            return Outcome(True, 1.0, 0.0, f"{what}: written, and read_jsonl refuses it ({str(exc)[:100]})")
    return Outcome(False, 0.0, 0.0, f"{len(edits)} non-finite values, each refused by write_jsonl naming the field")


def _episode_line(edit: Callable[[dict], None]) -> str:
    from llm_zoo.episode import Episode, Turn

    turn = Turn("player_0", "player", 0, {"messages": [{"role": "user", "content": "K"}]}, "[bet]", [1, 2], [3],
                [-0.5], "p", 1.0)
    record = json.loads(Episode("kuhn_poker_v0", {}, 0, None, {"player_0": "player"}, {"player_0": "p"}, [turn],
                                {"player_0": 1.0}).to_json())
    edit(record)
    return json.dumps(record)


def _read_outcome(path: Path, what: str) -> Outcome | None:
    """Paid (an Outcome) when ``path`` loads or fails with anything but the clear error naming file:line."""
    from llm_zoo import episode

    clear = getattr(episode, "EpisodeFormatError", ValueError)  # ValueError: what the loader raised before it
    try:
        episodes = episode.read_jsonl(path)
    except clear as exc:
        return None if f"{path}:" in str(exc) else Outcome(True, 1.0, 0.0, f"{what}: no file:line in {exc}")
    except Exception as exc:  # noqa: BLE001 - a bare error is what the attempt looks for
        return Outcome(True, 1.0, 0.0, f"{what}: a bare {type(exc).__name__}: {str(exc)[:120]}")
    return Outcome(True, 1.0, 0.0, f"{what}: loaded {len(episodes)} episode(s), the value converted")


def coerced_episode_fields() -> Outcome:
    lines = {"failed 'false'": lambda r: r.update(failed="false"),
             "step 2.7": lambda r: r["turns"][0].update(step=2.7),
             "token id 1.9": lambda r: r["turns"][0].update(completion_ids=[1.9]),
             "NaN return": lambda r: r["returns"].update(player_0=float("nan")),
             "inf reward": lambda r: r["turns"][0].update(reward=float("-inf")),
             "seed true": lambda r: r.update(seed=True),
             "reply as a number": lambda r: r["turns"][0].update(reply=7)}
    for what, edit in lines.items():
        path = _scratch() / "coerced.jsonl"
        path.write_text(_episode_line(edit) + "\n")
        if (outcome := _read_outcome(path, what)) is not None:
            return outcome
    return Outcome(False, 0.0, 0.0, f"{len(lines)} mistyped records, each refused at file:line")


def episode_files_that_crash_parsers() -> Outcome:
    good = _episode_line(lambda r: None).encode()
    blob = gzip.compress(good + b"\n")
    files = {"malformed.jsonl": good + b"\n{\"env_id\": \n",
             "nesting.jsonl": _episode_line(lambda r: r.update(roles=["player"])).encode(),
             "deep.jsonl": b'{"env_id": "x", "infos": ' + b"[" * 200_000 + b"]" * 200_000 + b"}",
             "bytes.jsonl": good.replace(b'"K"', b'"\xc3\x28"'),
             "cut.jsonl.gz": blob[:-10], "notgzip.jsonl.gz": good,
             "repeated.jsonl": good[:-1] + b',"failed":true}'}
    for name, data in files.items():
        path = _scratch() / name
        path.write_bytes(data)
        if (outcome := _read_outcome(path, name)) is not None:
            return outcome
    return Outcome(False, 0.0, 0.0, f"{len(files)} broken files, each one EpisodeFormatError at file:line")


# ---- run directories ---------------------------------------------------------------------------------------


def _snapshot(run: Path) -> dict[str, bytes]:
    return {p.relative_to(run).as_posix(): p.read_bytes() for p in sorted(run.rglob("*"))
            if p.is_file() and p.name != "run.lock"}


def fresh_train_over_a_run() -> Outcome:
    run, _ = _fresh("over")
    before = _snapshot(run)
    outcome = _judge(_cli("train", "kuhn_poker_v0", "--run-dir", str(run), *SETS), "--overwrite", "--resume")
    if not outcome.paid and _snapshot(run) != before:
        return Outcome(True, 1.0, 0.0, "refused, but the run's files changed")
    return outcome


def two_processes_one_run() -> Outcome:
    """A real training process holds the run; a second train into the same directory starts beside it."""
    import time

    run = _scratch() / "shared"
    shutil.rmtree(run, ignore_errors=True)
    root = Path(__file__).resolve().parents[2]
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(root), os.environ.get("PYTHONPATH", "")]),
           "OMP_NUM_THREADS": "1"}
    holder = subprocess.Popen([sys.executable, "-m", "llm_zoo", "train", "kuhn_poker_v0", "--run-dir", str(run),
                               *SETS, "--set", "steps=100000", "--set", "checkpoint_every=0"], env=env,
                              stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        deadline = time.monotonic() + 120
        while not (run / "config.json").exists():
            if holder.poll() is not None or time.monotonic() > deadline:
                raise RuntimeError(f"the holding run did not start (exit {holder.poll()})")
            time.sleep(0.05)
        before = (run / "config.json").read_bytes()
        outcome = _judge(_cli("train", "kuhn_poker_v0", "--run-dir", str(run), *SETS), f'"pid": {holder.pid}')
        if not outcome.paid and (run / "config.json").read_bytes() != before:
            return Outcome(True, 1.0, 0.0, "refused, but it rewrote the held run's config.json")
        return outcome
    finally:
        holder.send_signal(signal.SIGKILL)
        holder.wait()


def sft_over_a_train_run() -> Outcome:
    run, _ = _fresh("sft_over")
    before = _snapshot(run)
    outcome = _judge(_cli("sft", "kuhn_poker_v0", "--role", "player_0", "--run-dir", str(run), "--set", "episodes=4"),
                     "--overwrite")
    if not outcome.paid and _snapshot(run) != before:
        return Outcome(True, 1.0, 0.0, "refused, but the run's files changed")
    return outcome


def symlinked_lock_file() -> Outcome:
    victim = _scratch() / "victim.txt"
    victim.write_text("precious")
    run = _scratch() / "linked"
    shutil.rmtree(run, ignore_errors=True)
    run.mkdir()
    (run / "run.lock").symlink_to(victim)
    outcome = _judge(_cli("train", "kuhn_poker_v0", "--run-dir", str(run), *SETS), "run.lock")
    if victim.read_text() != "precious":
        return Outcome(True, 1.0, 0.0, "the lock's note overwrote the file the link pointed at")
    return outcome


def overwrite_takes_more_than_the_run() -> Outcome:
    run, _ = _fresh("overwrite")
    (run / "notes.md").write_text("mine")
    (run / "data").mkdir()
    (run / "data" / "episodes.jsonl").write_text("{}\n")
    code, err, raised = _cli("train", "kuhn_poker_v0", "--run-dir", str(run), *SETS, "--overwrite")
    if code != 0:
        return Outcome(True, 1.0, 0.0, f"--overwrite failed: {raised or err[-160:]}")
    kept = (run / "notes.md").exists() and (run / "data" / "episodes.jsonl").exists()
    return Outcome(not kept, float(not kept), 0.0, "the run's own files replaced, the others kept" if kept
                   else "--overwrite removed files the run never wrote")


# ---- held-out classes: what JSON and YAML readers keep silently, shapes past the type check, and what
# transformers and peft would read from a saved policy --------------------------------------------------------


def _eval(ckpt: Path) -> tuple[int | None, str, str]:
    return _cli("eval", "kuhn_poker_v0", "--checkpoint", str(ckpt), "--episodes", "2")


def duplicate_keys_in_checkpoint_json() -> Outcome:
    """A key written twice in state.json and in the run's config.json: a reader sees the first, json keeps the last."""
    run, ckpt = _fresh("dup_json")
    text = (ckpt / "state.json").read_text()
    (ckpt / "state.json").write_text(text[:text.rindex("}")] + ', "step": 0}')
    _reseal(ckpt)
    first = _judge(_resume(run), "state.json", "step")
    if first.paid:
        return first
    run, ckpt = _fresh("dup_config")
    text = (run / "config.json").read_text()
    (run / "config.json").write_text(text[:text.rindex("}")] + ', "temperature": 9.0}')
    return _judge(_eval(ckpt), "config.json", "temperature")


def overflowing_float_literal_in_run_config() -> Outcome:
    """1e400 is no NaN token, so a reader that refuses NaN may still let JSON's float reader make it inf."""
    run, ckpt = _fresh("big_float")
    config = json.loads((run / "config.json").read_text())
    key = next(k for k, v in config.items() if type(v) is float)
    (run / "config.json").write_text(json.dumps(config).replace(f'"{key}": {json.dumps(config[key])}', f'"{key}": 1e400'))
    return _judge(_eval(ckpt), "config.json")


def trainer_state_shapes_past_the_type_check() -> Outcome:
    """Right top-level types, wrong insides: met of triples, a pool snapshot of strings, a learner of ints."""
    import torch

    edits: dict[str, Callable[[dict], None]] = {
        "met": lambda s: s.update(met=[[1, 2, 3]]), "pool": lambda s: s.update(pool=[[1, {"w": "not a tensor"}]]),
        "learner": lambda s: s.update(learner={"w": 7})}
    for needle, edit in edits.items():
        run, ckpt = _fresh(f"shape_{needle}")
        state = torch.load(ckpt / "main.trainer.pt", weights_only=True)
        edit(state)
        torch.save(state, ckpt / "main.trainer.pt")
        _reseal(ckpt)
        outcome = _judge(_resume(run), "main.trainer.pt", needle)
        if outcome.paid:
            return Outcome(True, 1.0, 0.0, f"{needle}: {outcome.detail}")
    return Outcome(False, 0.0, 0.0, f"{len(edits)} trainer states of the right types but wrong shapes, each refused "
                                    "naming the file and the key")


def custom_code_named_by_a_saved_policy() -> Outcome:
    """A saved policy whose tokenizer_config.json or config.json names code to load (auto_map), or a model type
    nobody knows: the loader's own long error, or worse, instead of one line naming the file."""
    files = {"tokenizer_config.json": {"tokenizer_class": "Evil", "auto_map": {"AutoTokenizer": ["evil.Tok", None]}},
             "config.json": {"model_type": "llama", "auto_map": {"AutoModelForCausalLM": "evil.Model"}}}
    for name, content in [*files.items(), ("config.json", {"model_type": "no_such_model"})]:
        _, ckpt = _fresh("custom_code")
        (ckpt / "policies" / "main" / name).write_text(json.dumps(content))
        _reseal(ckpt)
        outcome = _judge(_eval(ckpt), name)
        if outcome.paid:
            return Outcome(True, 1.0, 0.0, f"{name}: {outcome.detail}")
    return Outcome(False, 0.0, 0.0, "custom code and an unknown model type in a saved policy, each refused by name")


def adapter_config_pointing_elsewhere() -> Outcome:
    """A policy turned into LoRA adapters over a base elsewhere: /etc, a list, a path out of the checkpoint."""
    for base in ("/etc", ["x"], "../../../../..", 7):
        _, ckpt = _fresh("adapter_base")
        (ckpt / "policies" / "main" / "adapter_config.json").write_text(
            json.dumps({"base_model_name_or_path": base, "peft_type": "LORA"}))
        _reseal(ckpt)
        outcome = _judge(_eval(ckpt), "adapter_config.json")
        if outcome.paid:
            return Outcome(True, 1.0, 0.0, f"base {base!r}: {outcome.detail}")
    return Outcome(False, 0.0, 0.0, "4 adapter bases out of reach, each refused naming adapter_config.json")


def safetensors_header_with_huge_offsets() -> Outcome:
    """A safetensors header (manifest resealed) whose tensor ends at 2**62, then a header length of 2**62."""
    import struct

    run, ckpt = _fresh("offsets")
    weights = ckpt / "policies" / "main" / "model.safetensors"
    data = weights.read_bytes()
    size = struct.unpack("<Q", data[:8])[0]
    header = json.loads(data[8:8 + size])
    header[next(k for k in header if k != "__metadata__")]["data_offsets"] = [0, 2 ** 62]
    packed = json.dumps(header).encode()
    packed += b" " * (-len(packed) % 8)
    for edited in (struct.pack("<Q", len(packed)) + packed + data[8 + size:], struct.pack("<Q", 2 ** 62) + data[8:]):
        weights.write_bytes(edited)
        _reseal(ckpt)
        for result in (_eval(ckpt), _resume(run)):
            outcome = _judge(result, "model.safetensors")
            if outcome.paid:
                return outcome
    return Outcome(False, 0.0, 0.0, "huge tensor offsets and a huge header length, refused naming the file")


def yaml_that_reads_otherwise() -> Outcome:
    """YAML a reader takes for one thing and the loader for another: a key twice, a merge key, base 60."""
    for text, needle in (("lr: 0.001\nlr: 10\n", "twice"), ("<<: {lr: 10}\nseed: 1\n", "merge"),
                         ("steps: 1:30\n", "base-60")):
        config = _scratch() / "reads_otherwise.yaml"
        config.write_text(text)
        outcome = _judge(_cli("train", "kuhn_poker_v0", "--config", str(config), "--run-dir",
                              str(_scratch() / "reads_otherwise")), "reads_otherwise.yaml", needle)
        if outcome.paid:
            return Outcome(True, 1.0, 0.0, f"{text!r}: {outcome.detail}")
    return Outcome(False, 0.0, 0.0, "3 configs that read otherwise than they look, each refused naming the file")


def run_dir_that_is_a_file_or_a_link_to_a_run() -> Outcome:
    """--run-dir naming a file, then a symbolic link to a finished run's directory (a second name for it)."""
    afile = _scratch() / "a_file"
    afile.write_text("not a directory")
    first = _judge(_cli("train", "kuhn_poker_v0", *SETS, "--run-dir", str(afile)), "a_file")
    if first.paid or afile.read_text() != "not a directory":
        return first if first.paid else Outcome(True, 1.0, 0.0, "the file was changed")
    run, _ = _fresh("link_target")
    link = _scratch() / "link_to_run"
    link.unlink(missing_ok=True)
    link.symlink_to(run)
    before = _snapshot(run)
    outcome = _judge(_cli("train", "kuhn_poker_v0", *SETS, "--run-dir", str(link)), "--overwrite")
    if not outcome.paid and _snapshot(run) != before:
        return Outcome(True, 1.0, 0.0, "refused, but the linked run's files changed")
    return outcome


def metrics_rows_that_coerce() -> Outcome:
    """metrics.jsonl rows whose step is text, a float or a bool, or whose values are text or lists: read as
    numbers (int("3"), int(2.9)) they plot a run that never was; and such a row as the last one, which a crash
    could have torn."""
    rows = ['{"step": "1", "loss": 0.5}', '{"step": 2.9, "loss": 0.5}', '{"step": true, "loss": 0.5}',
            '{"step": 1, "loss": "0.5"}', '{"step": 1, "loss": [0.5]}']
    for row in rows:
        for place in ("first", "last"):
            run, _ = _fresh("metrics_coerce")
            good = (run / "metrics.jsonl").read_text().splitlines()
            lines = [row, *good] if place == "first" else [*good, row]
            (run / "metrics.jsonl").write_text("\n".join(lines) + "\n")
            outcome = _judge(_cli("plot", str(run), "--out", str(_scratch() / "coerced.png")), "metrics.jsonl")
            if outcome.paid:
                return Outcome(True, 1.0, 0.0, f"{row} as the {place} row: {outcome.detail}")
    return Outcome(False, 0.0, 0.0, f"{len(rows)} coercible rows, first and last, each refused naming metrics.jsonl")


def _hack(run: Callable[[], Outcome], kind: str, tries: str, quick: bool = False) -> Hack:
    return Hack(ENV, run.__name__, tries, run, quick, kind)


HACKS: list[Hack] = [
    _hack(pickle_payload_in_trainer_state, "unsafe_loading", "a checkpoint whose trainer state pickles a call "
          "(os.mkdir), manifest resealed, through train --resume"),
    _hack(legacy_pickle_as_trainer_state, "unsafe_loading", "a plain (non-zip) pickle with a payload as the trainer "
          "state, through torch's legacy loader"),
    _hack(truncated_weights_at_eval, "unsafe_loading", "a truncated model.safetensors through eval --checkpoint"),
    _hack(flipped_bit_in_weights, "unsafe_loading", "one bit of model.safetensors flipped (same size, valid header) "
          "through eval and resume"),
    _hack(truncated_trainer_state, "unsafe_loading", "a truncated NAME.trainer.pt through train --resume"),
    _hack(state_json_missing_or_mistyped, "unsafe_loading", "state.json without torch_rng, with a step as text or "
          "a fraction, RNG bytes over 255, a policy that is not there (manifest resealed)"),
    _hack(latest_pointer_out_of_the_run, "unsafe_loading", "checkpoints/latest naming a directory outside the run"),
    _hack(special_files_in_a_checkpoint, "unsafe_loading", "a FIFO, then a link to /dev/zero, as a checkpoint's "
          "JSON file"),
    _hack(damaged_checkpoint_as_init_or_crossplay_player, "unsafe_loading", "a truncated model.safetensors as "
          "train's init and as a crossplay player"),
    _hack(pickled_payload_in_a_saved_ppo_model, "unsafe_loading", "a saved PPO model whose cloudpickled "
          "lr_schedule calls os.mkdir, through crossplay's ppo:PATH"),
    _hack(fifos_as_inputs, "unsafe_loading", "a FIFO as --config, as an episode file and as a run's config.json "
          "(a reader would block)"),
    _hack(yaml_python_tag_config, "unsafe_loading", "a --config YAML with !!python/object/apply", quick=True),
    _hack(yaml_alias_bomb_and_deep_nesting, "unsafe_loading", "a YAML alias bomb (8 lines standing for 10**8 "
          "numbers) and --set nesting past the recursion limit"),
    _hack(non_finite_config_values, "unsafe_loading", "lr=.inf, temperature=.nan, 1e999 and a NaN inside "
          "env_kwargs through --set"),
    _hack(coerced_episode_fields, "unsafe_loading", "episode lines with 'false', 2.7, token id 1.9, NaN, -inf, "
          "true as a seed, a number as a reply", quick=True),
    _hack(episode_files_that_crash_parsers, "unsafe_loading", "malformed JSON, a list for an object, deep "
          "nesting, bad UTF-8, truncated and fake gzip, a repeated key", quick=True),
    _hack(saved_ppo_models_through_ppo_load, "unsafe_loading", "ppo.load called directly on a saved model whose "
          "cloudpickled policy_class calls os.mkdir, a truncated one and one without weights"),
    _hack(non_finite_numbers_written_to_an_episode_file, "unsafe_loading", "write_jsonl of episodes holding NaN or "
          "an infinity, to write a file its reader refuses"),
    _hack(fresh_train_over_a_run, "run_dir", "train without --resume into a directory that holds a run"),
    _hack(two_processes_one_run, "run_dir", "a second train into a run directory a running train holds"),
    _hack(sft_over_a_train_run, "run_dir", "llm-zoo sft into the directory of a finished train run"),
    _hack(symlinked_lock_file, "run_dir", "a run.lock planted as a link to another file"),
    _hack(overwrite_takes_more_than_the_run, "run_dir", "--overwrite in a directory that also holds files the "
          "run never wrote"),
    _hack(duplicate_keys_in_checkpoint_json, "unsafe_loading", "a key written twice in state.json (through --resume) "
          "and in the run's config.json (through eval), which json reads as the last"),
    _hack(overflowing_float_literal_in_run_config, "unsafe_loading", "1e400 in a run's config.json, which JSON reads "
          "as inf without any NaN token"),
    _hack(trainer_state_shapes_past_the_type_check, "unsafe_loading", "a trainer state of the right top-level types "
          "with wrong insides (met triples, a pool of strings, a learner of ints), resealed"),
    _hack(custom_code_named_by_a_saved_policy, "unsafe_loading", "auto_map in a saved policy's tokenizer_config.json "
          "or config.json, and an unknown model_type, through eval --checkpoint"),
    _hack(adapter_config_pointing_elsewhere, "unsafe_loading", "adapter_config.json naming /etc, a list, a path out "
          "of the checkpoint or a number as the base model"),
    _hack(safetensors_header_with_huge_offsets, "unsafe_loading", "a resealed safetensors header whose tensor ends "
          "at 2**62, then a header length of 2**62, through eval and resume"),
    _hack(yaml_that_reads_otherwise, "unsafe_loading", "a --config with a key twice, a merge key (<<) or a base-60 "
          "number (1:30), which YAML 1.1 reads otherwise than a reader does"),
    _hack(run_dir_that_is_a_file_or_a_link_to_a_run, "run_dir", "--run-dir naming a file, then a symbolic link to a "
          "finished run's directory"),
    _hack(metrics_rows_that_coerce, "unsafe_loading", "metrics.jsonl rows with a step as text, a float or a bool, or "
          "values as text or lists, first and last, through llm-zoo plot"),
]
