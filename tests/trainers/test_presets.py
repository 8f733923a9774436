"""Tests for llm_zoo.trainers.presets: one preset per kind of model, and no tiny-model setting on a pretrained one."""

from __future__ import annotations

import json

import pytest

pytest.importorskip("torch")

from llm_zoo.configdoc import nest  # noqa: E402
from llm_zoo.trainers import presets  # noqa: E402
from llm_zoo.trainers.grpo import TrainConfig, make_config  # noqa: E402

PRETRAINED = "smollm2-135m"  # a name only: nothing here loads it


def test_every_env_has_a_preset_for_each_kind_of_model():
    assert set(presets.PRETRAINED_PRESETS) == set(presets.PRESETS)


@pytest.mark.parametrize("env", sorted(presets.PRESETS))
def test_a_pretrained_model_starts_from_its_own_preset_with_nothing_of_the_tiny_one(env):
    config = make_config(env, {"model": PRETRAINED})
    for name, (refused, _) in presets.TINY_ONLY.items():
        assert not refused(*presets.value_and_default(config, name)), name
    for name, value in presets.PRETRAINED_PRESETS[env].items():
        assert presets.value_and_default(config, name)[0] == value, name
    # small steps: the pretrained weights are the asset (AdamW moves a weight by about lr a step; SGD by lr times its
    # gradient, whose norm over all of a LoRA model's adapters is 0.01-0.11 in Kuhn's self-play)
    assert config.lr <= (0.1 if config.optimizer == "sgd" else 1e-4)
    assert config.max_new_tokens > 1


@pytest.mark.parametrize("field, value", [
    ("model_hidden_size", 128), ("model_layers", 4), ("model_init_std", 0.125), ("model_zero_head", True),
    ("copy_heads.enabled", True), ("max_new_tokens", 1), ("unmask.steps", 200), ("model_tokenizer", "bpe"),
])
def test_a_tiny_model_setting_on_a_pretrained_model_is_refused_by_name(field, value):
    with pytest.raises(ValueError, match=rf"config\.{field}={value!r} is a setting for the tiny model.*"
                                         rf"config\.model='{PRETRAINED}'"):
        make_config("kuhn_poker_v0", {"model": PRETRAINED, field: value})
    with pytest.raises(ValueError, match=rf"config\.{field}="):  # built directly too, not only through make_config
        TrainConfig(model="some/model", **nest(TrainConfig, {field: value}))
    config = make_config("kuhn_poker_v0", {field: value})
    assert presets.value_and_default(config, field)[0] == value  # the tiny model takes it


def test_kuhns_tiny_preset_copied_onto_a_pretrained_model_is_refused():
    """The whole tiny preset as a config file would give it: refused, not evaluated to the uniform fallback."""
    copied = {**presets.preset("kuhn_poker_v0"), "model": PRETRAINED}
    with pytest.raises(ValueError, match="is a setting for the tiny model"):
        make_config("kuhn_poker_v0", copied)


def test_the_tiny_models_tokenizer_is_a_model_setting_each_env_sets_in_its_preset():
    from llm_zoo.trainers.sft import make_sft_config

    assert {env: make_config(env, {"model": "tiny"}).model_tokenizer for env in presets.PRESETS} == {
        "kuhn_poker_v0": "auto", "leduc_poker_v0": "auto", "agentic_judge_v0": "bpe", "proposer_solver_v0": "bpe",
        "user_sim_v0": "bpe_words"}
    assert make_sft_config("user_sim_v0", {"model": "tiny"}).model_tokenizer == "bpe_words"  # the warm start builds the same model
    with pytest.raises(ValueError, match=r"config\.model_tokenizer must be one of \('auto', 'words', 'bpe', 'bpe_words'\); "
                                         r"got 'sentencepiece'"):
        make_config("kuhn_poker_v0", {"model_tokenizer": "sentencepiece"})


def test_an_env_from_outside_adds_a_preset_per_kind(monkeypatch):
    monkeypatch.setattr(presets, "PRESETS", dict(presets.PRESETS))
    monkeypatch.setattr(presets, "PRETRAINED_PRESETS", dict(presets.PRETRAINED_PRESETS))
    presets.add("outside_v0", {"steps": 3})
    presets.add("outside_v0", {"steps": 7}, pretrained=True)
    assert presets.preset("outside_v0") == {"steps": 3}
    assert presets.preset("outside_v0", model="/some/dir") == {"steps": 7}


def test_user_sims_main_job_is_the_pretrained_models_and_tiny_still_names_the_tiny_one():
    from llm_zoo.trainers.sft import make_sft_config

    config = make_config("user_sim_v0")
    assert config.model == presets.default_model("user_sim_v0") == PRETRAINED
    assert config.env_kwargs == presets.PRETRAINED_PRESETS["user_sim_v0"]["env_kwargs"]
    assert config.init == "sft" and config.memory_limit_gb <= 4.0
    warm = make_sft_config("user_sim_v0", {"role": "assistant"})
    assert warm.model == PRETRAINED and warm.lora_r == config.lora_r and warm.episodes == config.sft["episodes"]
    tiny = make_config("user_sim_v0", {"model": "tiny"})
    assert tiny.model == "tiny" and tiny.model_tokenizer == presets.PRESETS["user_sim_v0"]["model_tokenizer"]
    assert {env: make_config(env).model for env in presets.PRESETS if env != "user_sim_v0"} == {
        env: "tiny" for env in presets.PRESETS if env != "user_sim_v0"}


def test_user_sims_main_job_pays_nothing_for_doing_nothing():
    """Five of the twelve templates succeed when nothing changes. The preset's advantage compares the episodes of one
    env seed (one template and world), so an assistant that never acts earns no advantage on any template, where a
    baseline shared by every template (RAE's) pays for its successes."""
    import llm_zoo
    from llm_zoo.trainers.advantages import ESTIMATORS, RAEState
    from llm_zoo.trainers.grpo import _outcomes
    from llm_zoo.trainers.rollout import collect

    config = make_config("user_sim_v0")
    spec = llm_zoo.env_spec("user_sim_v0")
    seats = {"user": spec.scripted["scripted"](seed=0), "assistant": spec.scripted["no_tools"](seed=0)}
    seeds = [s for s in (3, 4, 5) for _ in range(config.group_size)]
    templates = ["cancel_shipped_refused", "cancel_mistake", "payment_gift_card_short"]
    options = [{"scenario": t} for t in templates for _ in range(config.group_size)]
    episodes = collect("user_sim_v0", seats, seeds, options=options, env_kwargs=config.env_kwargs, seed=0)
    # the trainer's own baseline and group keys of the assistant's returns
    outcomes = _outcomes(episodes, [{"assistant"}] * len(episodes), {"user": "user", "assistant": "assistant"}, config)
    rewards, keys, groups = ([getattr(o, f) for o in outcomes] for f in ("reward", "key", "group"))
    assert not any(e.failed for e in episodes) and sorted(set(rewards)) == [0.0, 1.0]  # the floor: some templates pay
    assert ESTIMATORS[config.algorithm](rewards, keys, groups, RAEState()) == [0.0] * len(rewards)
    assert max(ESTIMATORS["rae"](rewards, keys, groups, RAEState())) > 0  # a shared baseline would reinforce it


@pytest.mark.parametrize("env", sorted(presets.PRETRAINED_PRESETS))
def test_each_pretrained_preset_fits_the_default_memory_limit_with_a_135m_model(env):
    """SmolLM2-135M's shape, written here as its config.json has it (the estimate reads the shape, not weights)."""
    from transformers import LlamaConfig

    from llm_zoo.trainers import memory

    smollm2 = LlamaConfig(vocab_size=49152, hidden_size=576, intermediate_size=1536, num_hidden_layers=30,
                          num_attention_heads=9, num_key_value_heads=3, tie_word_embeddings=True)
    config = make_config(env, {"model": PRETRAINED})
    estimate = memory.preflight(config, smollm2)  # raises, naming the fields, when over config.memory_limit_gb
    assert 0 < estimate.total <= config.memory_limit_gb * 2**30
    full = memory.estimate(make_config(env, {"model": PRETRAINED, "lora_r": 0, "lora_layers": 0,
                                             "gradient_checkpointing": False}), smollm2)
    assert full.total > config.memory_limit_gb * 2**30  # full fine-tuning alone would not fit: the preset's choice


def test_a_model_directory_trains_on_kuhns_pretrained_preset(tmp_path, tiny_model_dir):
    """The preset as it is (LoRA, the mask over moves of several tokens), on a tiny model saved to a
    directory: a byte tokenizer spells [check] in 7 tokens, as a pretrained tokenizer spells it in several."""
    from llm_zoo.trainers.grpo import train

    model = tiny_model_dir("model", shape="smallest")
    config = make_config("kuhn_poker_v0", {"model": str(model), "steps": 1, "episodes_per_step": 4,
                                           "rollout_batch_size": 4, "micro_batch_size": 4, "run_dir": str(tmp_path / "run"),
                                           "progress": False, "tensorboard": False, "threads": 1,
                                           # the byte tokenizer's prompt is about 640 tokens, past the preset's 384
                                           "max_prompt_tokens": 1024, "max_forward_tokens": 2048})
    assert config.lora_r and config.constrain_to_legal and config.max_new_tokens == 8
    result = train(config)
    assert 0 <= result["exploitability"] <= 1
    rows = [json.loads(line) for line in (tmp_path / "run" / "metrics.jsonl").read_text().splitlines()]
    played = [r for r in rows if "charts/failed_episodes" in r]
    assert played and all(r["charts/failed_episodes"] == 0 for r in played)  # every episode played, none failed
    saved = next((tmp_path / "run" / "checkpoints").glob("step_*/policies/main"))
    assert (saved / "adapter_config.json").is_file()  # the adapters alone, over the directory they name
