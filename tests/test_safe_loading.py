"""Files a user hands in are read safely: checkpoints (`train --resume`, `eval --checkpoint`), episode JSONL and
YAML configs. A crafted file never runs code, a damaged one is refused in one line naming it, nothing is coerced."""

from __future__ import annotations

import gzip
import json
import os
import shutil
from pathlib import Path

import pytest
import torch

from benchmarks.hacks.pipeline import Payload, pickled_payload, rewrite_zip
from llm_zoo import cli
from llm_zoo.episode import Episode, EpisodeFormatError, Turn, read_jsonl, write_jsonl
from llm_zoo.trainers import checkpoint
from llm_zoo.trainers.checkpoint import CheckpointError
from llm_zoo.trainers.grpo import make_config, train

TINY = {"steps": 2, "episodes_per_step": 8, "rollout_batch_size": 8, "model_hidden_size": 32, "eval_every": 0,
        "progress": False, "tensorboard": False, "threads": 1, "sample_every": 0, "policies": {},
        "checkpoint_every": 1, "unmask.steps": 0, "device": "cpu"}
SETS = [a for k, v in TINY.items() for a in ("--set", f"{k}={v if isinstance(v, str) else json.dumps(v)}")]


@pytest.fixture(scope="module")
def finished_run(tmp_path_factory):
    run = tmp_path_factory.mktemp("finished") / "run"
    train(make_config("kuhn_poker_v0", {**TINY, "run_dir": str(run)}))
    return run


@pytest.fixture
def run(finished_run, tmp_path):
    copy = tmp_path / "run"
    shutil.copytree(finished_run, copy)
    return copy


def _latest(run: Path) -> Path:
    return run / "checkpoints" / (run / "checkpoints" / "latest").read_text().strip()


def _reseal(ckpt: Path) -> None:
    """Rewrite the manifest to match the files, as an attacker who edits a checkpoint would."""
    (ckpt / "manifest.json").write_text(json.dumps(checkpoint._manifest(ckpt)))


def _cli(capsys, *argv: str) -> tuple[int, str]:
    code = cli.main(list(argv))
    return code, capsys.readouterr().err


def _resume(capsys, run: Path) -> tuple[int, str]:
    return _cli(capsys, "train", "kuhn_poker_v0", "--resume", "--run-dir", str(run), *SETS, "--set", "steps=3")


def assert_one_line_refusal(code: int, err: str, *needles: str) -> None:
    lines = [line for line in err.splitlines() if line.startswith("llm-zoo: error:")]
    assert code == 2 and len(lines) == 1, err[-2000:]
    assert "Traceback" not in err
    for needle in needles:
        assert needle in lines[0], (needle, lines[0])


# ---- checkpoints ----------------------------------------------------------------------------------------


def test_a_pickled_payload_in_trainer_state_is_refused_and_never_runs(run, tmp_path, capsys):
    ckpt = _latest(run)
    proof = tmp_path / "ran_with_weights_only_false"
    torch.save({"optimizer": Payload(proof)}, tmp_path / "proof.pt")
    torch.load(tmp_path / "proof.pt", weights_only=False)  # the file kind is dangerous as loaded before
    assert proof.is_dir()
    marker = tmp_path / "payload_ran"
    state = torch.load(ckpt / "main.trainer.pt", weights_only=True)
    torch.save({**state, "met": Payload(marker)}, ckpt / "main.trainer.pt")
    _reseal(ckpt)  # the attacker keeps the manifest consistent: the refusal must come from the loader
    code, err = _resume(capsys, run)
    assert_one_line_refusal(code, err, "main.trainer.pt", "refused", "plain data")
    assert not marker.exists()


def test_resume_state_is_plain_data_that_weights_only_reads(run):
    ckpt = _latest(run)
    for file in ckpt.glob("*.pt"):
        state = torch.load(file, weights_only=True)
        assert isinstance(state, dict) and state, file
    assert checkpoint.latest_checkpoint(run) == ckpt


@pytest.mark.parametrize("damage", ["truncate", "flip"])
def test_a_damaged_model_file_is_refused_by_eval_and_resume(run, capsys, damage):
    ckpt = _latest(run)
    weights = ckpt / "policies" / "main" / "model.safetensors"
    data = bytearray(weights.read_bytes())
    if damage == "truncate":
        data = data[: len(data) // 2]
    else:  # same size, one bit of a weight changed: only the manifest's hash can tell
        data[-5] ^= 0x10
    weights.write_bytes(bytes(data))
    expect = "model.safetensors"
    code, err = _cli(capsys, "eval", "kuhn_poker_v0", "--checkpoint", str(ckpt), "--episodes", "2")
    assert_one_line_refusal(code, err, expect)
    code, err = _resume(capsys, run)
    assert_one_line_refusal(code, err, expect)


def test_a_truncated_trainer_state_is_refused_naming_it(run, capsys):
    ckpt = _latest(run)
    file = ckpt / "main.trainer.pt"
    file.write_bytes(file.read_bytes()[:300])
    code, err = _resume(capsys, run)
    assert_one_line_refusal(code, err, "main.trainer.pt", "truncated")


def test_state_json_without_torch_rng_is_refused_naming_the_key(run, capsys):
    ckpt = _latest(run)
    state = json.loads((ckpt / "state.json").read_text())
    del state["torch_rng"]
    (ckpt / "state.json").write_text(json.dumps(state))
    code, err = _resume(capsys, run)
    assert_one_line_refusal(code, err, "state.json", "torch_rng")
    for bad in ({"step": "2"}, {"step": 2.5}, {"torch_rng": [300] * 5056}, {"torch_rng": [0] * 3}):
        (ckpt / "state.json").write_text(json.dumps({**state, "torch_rng": [0] * 5056, **bad}))
        code, err = _resume(capsys, run)
        assert_one_line_refusal(code, err, "state.json", next(iter(bad)))
    (ckpt / "state.json").write_text(json.dumps({**state, "torch_rng": [0] * 5056, "step": float("nan")}))
    code, err = _resume(capsys, run)
    assert_one_line_refusal(code, err, "state.json", "NaN")


def test_a_latest_pointer_outside_the_run_is_refused(run, capsys):
    (run / "checkpoints" / "latest").write_text("../../../../etc")
    with pytest.raises(CheckpointError, match="expected the name of a step_N directory"):
        checkpoint.latest_checkpoint(run)
    code, err = _resume(capsys, run)
    assert_one_line_refusal(code, err, "latest")


def test_a_manifest_entry_outside_the_checkpoint_is_refused(run):
    ckpt = _latest(run)
    (ckpt / "manifest.json").write_text(json.dumps({"../../config.json": {"bytes": 1, "sha256": "0"}}))
    with pytest.raises(CheckpointError, match="not a file inside the checkpoint"):
        checkpoint.verify_checkpoint(ckpt)


# ---- configs ---------------------------------------------------------------------------------------------


def test_a_yaml_tag_is_refused_naming_the_file_and_never_constructed(tmp_path, capsys):
    marker = tmp_path / "constructed"
    config = tmp_path / "evil.yaml"
    config.write_text(f"lr: !!python/object/apply:os.mkdir [{str(marker)!r}]\n")
    code, err = _cli(capsys, "train", "kuhn_poker_v0", "--config", str(config), "--run-dir", str(tmp_path / "r"))
    assert_one_line_refusal(code, err, "evil.yaml", "!!python")
    assert not marker.exists() and not (tmp_path / "r").exists()
    config.write_bytes(b"lr: \xff\n")
    code, err = _cli(capsys, "train", "kuhn_poker_v0", "--config", str(config), "--run-dir", str(tmp_path / "r"))
    assert_one_line_refusal(code, err, "evil.yaml", "UnicodeDecodeError")


@pytest.mark.parametrize("text", ["lr=.inf", "temperature=.nan", "lr=1e999", "lr=-inf", "env_kwargs={a: [1, .nan]}"])
def test_non_finite_numbers_in_a_config_are_refused_naming_the_field(tmp_path, capsys, text):
    field = text.split("=")[0]
    code, err = _cli(capsys, "train", "kuhn_poker_v0", "--set", text, "--run-dir", str(tmp_path / "r"))
    assert_one_line_refusal(code, err, f"config.{field}", "finite")
    (tmp_path / "c.yaml").write_text(text.replace("=", ": ", 1) + "\n")
    code, err = _cli(capsys, "train", "kuhn_poker_v0", "--config", str(tmp_path / "c.yaml"),
                     "--run-dir", str(tmp_path / "r"))
    assert_one_line_refusal(code, err, f"config.{field}", "c.yaml")
    assert not (tmp_path / "r").exists()


# ---- episodes --------------------------------------------------------------------------------------------


def _episode() -> Episode:
    turn = Turn("player_0", "player", 0, {"messages": [{"role": "user", "content": "K"}]}, "[bet]", [1, 2], [3],
                [-0.5], "p", 1.0)
    return Episode("kuhn_poker_v0", {}, 3, None, {"player_0": "player"}, {"player_0": "p"}, [turn],
                   {"player_0": 1.0}, {"player_0": {"payoff": 1.0}})


def _edited(edit) -> str:
    record = json.loads(_episode().to_json())
    edit(record)
    return json.dumps(record)


BAD_LINES = {
    "failed as a string": (_edited(lambda r: r.update(failed="false")), "episode.failed"),
    "fractional step": (_edited(lambda r: r["turns"][0].update(step=2.7)), "turns[0].step"),
    "step as a float": (_edited(lambda r: r["turns"][0].update(step=2.0)), "turns[0].step"),
    "fractional token id": (_edited(lambda r: r["turns"][0].update(completion_ids=[1.9])), "completion_ids"),
    "negative token id": (_edited(lambda r: r["turns"][0].update(prompt_ids=[-1])), "prompt_ids"),
    "bool token id": (_edited(lambda r: r["turns"][0].update(prompt_ids=[True])), "prompt_ids"),
    "NaN return": (_edited(lambda r: r["returns"].update(player_0=float("nan"))), "NaN"),
    "infinite reward": (_edited(lambda r: r["turns"][0].update(reward=float("inf"))), "Infinity"),
    "NaN logprob": (_edited(lambda r: r["turns"][0].update(logprobs=[float("nan")])), "NaN"),
    "roles as a list": (_edited(lambda r: r.update(roles=["player"])), "episode.roles"),
    "turns as an object": (_edited(lambda r: r.update(turns={"0": {}})), "episode.turns"),
    "observation as a string": (_edited(lambda r: r["turns"][0].update(observation="hi")), "observation"),
    "seed as a bool": (_edited(lambda r: r.update(seed=True)), "episode.seed"),
    "messages as text": (_edited(lambda r: r["turns"][0]["observation"].update(messages="hi")), "messages"),
    "a message without a role": (_edited(lambda r: r["turns"][0]["observation"].update(messages=[{"content": "x"}])),
                                 "'role' is a required property"),
    "a repeated key": (_episode().to_json()[:-1] + ',"failed":true}', "twice"),
    "malformed JSON": ('{"env_id": ', "not JSON"),
    "deep nesting": ('{"env_id": "x", "env_kwargs": ' + "[" * 100_000 + "]" * 100_000 + "}", "nested deeper"),
}


@pytest.mark.parametrize("name", BAD_LINES)
def test_episode_loading_refuses_what_it_would_have_coerced_naming_file_and_line(tmp_path, name):
    line, needle = BAD_LINES[name]
    path = tmp_path / "episodes.jsonl"
    path.write_text(_episode().to_json() + "\n" + line + "\n")
    with pytest.raises(EpisodeFormatError, match=r"episodes\.jsonl:2: ") as caught:
        read_jsonl(path)
    assert needle in str(caught.value), str(caught.value)[:300]


def test_undecodable_or_truncated_files_are_the_same_error(tmp_path):
    good = _episode().to_json().encode()
    (tmp_path / "bytes.jsonl").write_bytes(good + b"\n" + good.replace(b'"K"', b'"\xff"') + b"\n")
    with pytest.raises(EpisodeFormatError, match=r"bytes\.jsonl:2: not UTF-8"):
        read_jsonl(tmp_path / "bytes.jsonl")
    blob = gzip.compress(good + b"\n" * 1) * 1
    (tmp_path / "cut.jsonl.gz").write_bytes(blob[: len(blob) - 12])
    with pytest.raises(EpisodeFormatError, match=r"cut\.jsonl\.gz:\d+: unreadable \(EOFError"):
        read_jsonl(tmp_path / "cut.jsonl.gz")
    (tmp_path / "plain.jsonl.gz").write_bytes(good)
    with pytest.raises(EpisodeFormatError, match=r"plain\.jsonl\.gz:1: unreadable \(BadGzipFile"):
        read_jsonl(tmp_path / "plain.jsonl.gz")


def test_well_formed_files_still_round_trip(tmp_path):
    episodes = [_episode(), Episode("x", turns=[], returns={"a": -0.0}, wall_time=1.5)]
    for name in ("ok.jsonl", "ok.jsonl.gz"):
        write_jsonl(tmp_path / name, episodes)
        assert read_jsonl(tmp_path / name) == episodes
    (tmp_path / "empty.jsonl").write_text("")
    assert read_jsonl(tmp_path / "empty.jsonl") == []


def test_yaml_aliases_and_deep_nesting_are_refused_in_one_line(tmp_path, capsys):
    lines = ["env_kwargs:", "  a: &a [1, 1, 1, 1, 1, 1, 1, 1, 1, 1]"]
    lines += [f"  {b}: &{b} [{', '.join(['*' + a] * 10)}]" for a, b in zip("abcdefg", "bcdefgh")]  # 10**8 numbers
    (tmp_path / "bomb.yaml").write_text("\n".join(lines) + "\n")
    code, err = _cli(capsys, "train", "kuhn_poker_v0", "--config", str(tmp_path / "bomb.yaml"))
    assert_one_line_refusal(code, err, "bomb.yaml", "aliases")
    code, err = _cli(capsys, "train", "kuhn_poker_v0", "--set", "env_kwargs={a: &x [1], b: *x}")
    assert_one_line_refusal(code, err, "--set env_kwargs", "aliases")
    code, err = _cli(capsys, "train", "kuhn_poker_v0", "--set", "env_kwargs=" + "[" * 5000 + "]" * 5000)
    assert_one_line_refusal(code, err, "--set env_kwargs", "recursion")


def test_a_damaged_run_config_beside_the_checkpoint_is_refused_by_eval(run, capsys):
    (run / "config.json").write_text('{"temperature": NaN}')
    code, err = _cli(capsys, "eval", "kuhn_poker_v0", "--checkpoint", str(_latest(run)), "--episodes", "2")
    assert_one_line_refusal(code, err, "config.json", "NaN")


def test_a_damaged_checkpoint_given_as_init_is_refused_naming_the_file(run, tmp_path, capsys):
    ckpt = _latest(run)
    (ckpt / "main.trainer.pt").unlink()  # not read by init, but listed in the manifest
    code, err = _cli(capsys, "train", "kuhn_poker_v0", *SETS, "--set", f"init={ckpt}", "--run-dir",
                     str(tmp_path / "next"))
    assert_one_line_refusal(code, err, "main.trainer.pt", "missing")


def test_crossplay_env_args_refuse_non_finite_numbers_naming_the_flag(capsys):
    for value in ("NaN", "-Infinity", "[" * 100_000):
        code, err = _cli(capsys, "crossplay", "kuhn_poker_v0", "--players", "nash", "random", "--episodes", "2",
                         "--env-arg", f"num_hands={value}")
        assert_one_line_refusal(code, err, "--env-arg num_hands")


def test_a_saved_ppo_model_with_a_pickled_payload_is_refused_and_the_real_one_loads(tmp_path):
    from llm_zoo.crossplay import _load_saved_ppo
    from llm_zoo.trainers.baselines import ppo

    saved = tmp_path / "ppo.zip"
    ppo.train_maskable_ppo(256, seed=0).model.save(saved)
    assert type(_load_saved_ppo(ppo, str(saved))).__name__ == "MaskablePPO"
    marker = tmp_path / "payload_ran"
    crafted = rewrite_zip(saved, tmp_path / "crafted.zip", pickled_payload(marker, "lr_schedule"))
    with pytest.raises(ValueError, match=r"crafted\.zip.*data\['lr_schedule'\]: it pickles posix\.mkdir"):
        _load_saved_ppo(ppo, str(crafted))
    assert not marker.exists()
    crafted.write_bytes(saved.read_bytes()[:2000])
    with pytest.raises(ValueError, match=r"crafted\.zip \(BadZipFile"):
        _load_saved_ppo(ppo, str(crafted))


def test_ppo_load_called_directly_refuses_a_crafted_or_damaged_file_naming_it(tmp_path):
    from llm_zoo.trainers.baselines import ppo

    saved = tmp_path / "ppo.zip"
    ppo.train_maskable_ppo(256, seed=0).model.save(saved)
    assert type(ppo.load(saved)).__name__ == "MaskablePPO"
    marker = tmp_path / "payload_ran"
    crafted = rewrite_zip(saved, tmp_path / "crafted.zip", pickled_payload(marker))
    with pytest.raises(ppo.SavedModelError, match=r"crafted\.zip .*data\['policy_class'\]: it pickles posix\.mkdir"):
        ppo.load(crafted)
    assert not marker.exists()
    cases = {
        "truncated.zip": (saved.read_bytes()[:2000], "BadZipFile"),
        "no_data.zip": (rewrite_zip(saved, tmp_path / "x.zip", lambda m, d: None if m == "data" else d).read_bytes(), "KeyError"),
        "list_data.zip": (rewrite_zip(saved, tmp_path / "y.zip", lambda m, d: b"[1]" if m == "data" else d).read_bytes(), "JSON list"),
        "no_weights.zip": (rewrite_zip(saved, tmp_path / "z.zip", lambda m, d: None if m == "policy.pth" else d).read_bytes(), "policy"),
    }
    for name, (data, reason) in cases.items():
        (tmp_path / name).write_bytes(data)
        with pytest.raises(ppo.SavedModelError, match=rf"refused {tmp_path / name} \(.*{reason}"):
            ppo.load(tmp_path / name)


def test_resuming_with_a_model_of_another_shape_is_refused_naming_the_file(run, capsys):
    code, err = _cli(capsys, "train", "kuhn_poker_v0", "--resume", "--run-dir", str(run), *SETS,
                     "--set", "model_hidden_size=64")
    assert_one_line_refusal(code, err, "model.safetensors", "does not fit", "config.yaml")


def test_fifos_and_devices_are_refused_before_anything_reads_them(run, tmp_path, capsys):
    fifo = tmp_path / "pipe"
    os.mkfifo(fifo)  # a reader that opened it would block until a writer came
    for config in (fifo, Path("/dev/zero"), tmp_path):
        code, err = _cli(capsys, "train", "kuhn_poker_v0", "--config", str(config), "--run-dir", str(tmp_path / "r"))
        assert_one_line_refusal(code, err, str(config), "regular YAML file")
    (tmp_path / "big.yaml").write_text("# " + "x" * (1 << 20) + "\n")
    code, err = _cli(capsys, "train", "kuhn_poker_v0", "--config", str(tmp_path / "big.yaml"))
    assert_one_line_refusal(code, err, "big.yaml", "bytes")
    for path in (fifo, Path("/dev/zero")):
        with pytest.raises(EpisodeFormatError, match="not a regular file"):
            read_jsonl(path)
    (run / "config.json").unlink()
    os.mkfifo(run / "config.json")
    code, err = _cli(capsys, "eval", "kuhn_poker_v0", "--checkpoint", str(_latest(run)), "--episodes", "2")
    assert_one_line_refusal(code, err, "config.json", "not a regular file")


@pytest.mark.parametrize(("text", "why"), [('{"step": 1, "step": 2}', "appears twice"), ('{"lr": 1e400}', "not a finite"),
                                           ('{"a": {"b": 1, "b": 1}}', "appears twice")])
def test_json_a_reader_would_read_otherwise_is_refused_naming_the_file(tmp_path, text, why):
    path = tmp_path / "state.json"
    path.write_text(text)
    with pytest.raises(CheckpointError, match=why) as caught:
        checkpoint.read_json(path)
    assert str(path) in str(caught.value)


@pytest.mark.parametrize(("text", "why"), [("lr: 0.1\nlr: 10\n", "appears twice"), ("<<: {lr: 10}\n", "merge keys"),
                                           ("steps: 1:30\n", "base-60"), ("a: {x: 1, x: 2}\n", "appears twice")])
def test_yaml_a_reader_would_read_otherwise_is_refused(text, why):
    import yaml

    with pytest.raises(yaml.YAMLError, match=why):
        cli._plain_yaml(text)
    assert cli._plain_yaml("steps: '1:30'\nlr: 0.5\nrun: a:b\n") == {"steps": "1:30", "lr": 0.5, "run": "a:b"}


@pytest.mark.parametrize("row", ['{"step": "1", "loss": 0.5}', '{"step": 2.9}', '{"step": true}',
                                 '{"step": 1, "loss": "0.5"}', '{"step": 1, "loss": [0.5]}'])
def test_metrics_rows_are_read_as_written_or_refused(tmp_path, row):
    from llm_zoo.trainers.logging import MetricsFormatError, read_metrics

    good = '{"step": 0, "loss": NaN}'
    for lines in ([row, good], [good, row]):
        (tmp_path / "metrics.jsonl").write_text("\n".join(lines) + "\n")
        with pytest.raises(MetricsFormatError, match="metrics.jsonl:"):
            read_metrics(tmp_path)
    (tmp_path / "metrics.jsonl").write_text(good + '\n{"step": 1, "lo')  # a last row torn by a crash
    assert [r["step"] for r in read_metrics(tmp_path)] == [0]
