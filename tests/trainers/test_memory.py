"""Tests for llm_zoo.trainers.memory: the estimate bounds measured peaks, and a setting that cannot fit is refused."""

from __future__ import annotations

import json
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

pytest.importorskip("torch")
pytest.importorskip("transformers")

from llm_zoo.trainers.grpo import Sample, make_config, train  # noqa: E402
from llm_zoo.trainers.memory import estimate, micro_batches, pass_bytes, preflight  # noqa: E402

ROOT = Path(__file__).resolve().parents[2]

MEASURE = textwrap.dedent("""
    import json, sys, torch
    from llm_zoo.models import build_byte_tokenizer, build_tiny_model
    from llm_zoo.scoring import completion_logprobs
    torch.set_num_threads(1)
    rows, prompt, new, hidden, grad, lora_r, checkpointing, lora_layers = map(int, sys.argv[1:9])
    tok = build_byte_tokenizer()
    model = build_tiny_model(tok, hidden_size=hidden)
    if lora_r:  # as a run adds them: the adapters, then checkpointing
        from llm_zoo.models import add_lora
        model = add_lora(model, "tiny", r=lora_r, alpha=2.0 * lora_r, dropout=0.0, layers=lora_layers)
    if checkpointing:
        from llm_zoo.policies.compat import enable_checkpointing
        enable_checkpointing(model)
    g = torch.Generator().manual_seed(0)
    # ragged prompts: a padded batch, whose attention mask is materialised
    prompts = [torch.randint(0, 256, (prompt - (i % 3),), generator=g).tolist() for i in range(rows)]
    completions = [torch.randint(0, 256, (new,), generator=g).tolist() for _ in range(rows)]

    def peak():  # this process's own high-water RSS in kB (ru_maxrss may carry the parent's over fork and exec)
        with open("/proc/self/status") as f:
            return next(int(line.split()[1]) for line in f if line.startswith("VmHWM:"))

    before = peak()
    if grad:
        model.train()
        logps, mask, entropy = completion_logprobs(model, prompts, completions, pad_token_id=tok.pad_token_id,
                                                   with_entropy=True)
        (logps.sum() + entropy.sum()).backward()
    else:
        with torch.inference_mode():
            completion_logprobs(model, prompts, completions, pad_token_id=tok.pad_token_id)
    after = peak()
    print(json.dumps({"grown": (after - before) * 1024, "config": model.config.to_dict()}))
""")


@pytest.mark.parametrize("rows,prompt,new,hidden,grad,lora_r,checkpointing,lora_layers", [
    (4, 1500, 32, 64, True, 0, False, 0),
    (2, 2500, 16, 128, True, 0, False, 0),
    (12, 300, 64, 64, True, 0, False, 0),
    (4, 3000, 16, 64, False, 0, False, 0),
    (4, 1500, 32, 64, True, 8, False, 0),  # LoRA: the frozen layers still save what the adapters' gradients need
    (4, 1500, 32, 64, True, 0, True, 0),  # checkpointing: one block's activations at a time
    (4, 1500, 32, 64, True, 8, True, 0),
    (4, 1500, 32, 64, True, 8, False, 1),  # adapters in the top block of 2: the one below keeps nothing
    (4, 1500, 32, 64, True, 8, True, 1),
])
def test_the_estimate_of_a_pass_bounds_its_measured_peak(rows, prompt, new, hidden, grad, lora_r, checkpointing,
                                                         lora_layers):
    # one pass in a fresh process: how far its peak RSS grows past the model and inputs it starts with
    out = subprocess.run([sys.executable, "-c", MEASURE,
                          *map(str, (rows, prompt, new, hidden, int(grad), lora_r, int(checkpointing), lora_layers))],
                         capture_output=True, text=True, timeout=300, check=True, cwd=ROOT)
    measured = json.loads(out.stdout)
    from transformers import LlamaConfig

    config = LlamaConfig(**measured["config"])
    from llm_zoo.trainers.memory import model_shape

    estimated = pass_bytes(model_shape(config), rows, prompt + new, prompt + new, grad=grad, logits=new,
                           checkpointing=checkpointing, lora_r=lora_r, lora_layers=lora_layers)
    assert measured["grown"] > 20 * 2**20  # the pass was measured at all
    assert measured["grown"] <= estimated, (measured["grown"] / 2**20, estimated / 2**20)
    assert estimated <= 8 * measured["grown"]  # an upper bound, not an absurd one


def test_a_run_that_cannot_fit_is_refused_before_its_first_step_naming_the_field(tmp_path):
    config = make_config("kuhn_poker_v0", {"steps": 1, "episodes_per_step": 4, "micro_batch_size": 4,
                                           "max_prompt_tokens": 60000, "max_forward_tokens": 240000,
                                           "run_dir": str(tmp_path / "run"), "progress": False,
                                           "tensorboard": False})
    with pytest.raises(ValueError, match="memory_limit_gb") as info:
        train(config)
    message = str(info.value)
    assert "max_forward_tokens" in message and "max_prompt_tokens" in message and "--set" in message
    assert not (tmp_path / "run" / "metrics.jsonl").exists() or not (tmp_path / "run" / "metrics.jsonl").read_text()
    assert not (tmp_path / "run" / "checkpoints").exists()


def test_a_warm_started_run_that_cannot_fit_is_refused_before_the_sft_stage_runs(tmp_path):
    # user_sim's preset warm-starts (init: sft, minutes of fitting); a setting that cannot fit must be
    # refused first, not after the warm start has spent its time
    config = make_config("user_sim_v0", {"model": "tiny", "steps": 1, "memory_limit_gb": 0.05, "run_dir": str(tmp_path / "run"),
                                         "progress": False, "tensorboard": False})
    assert config.init == "sft"
    with pytest.raises(ValueError, match="over memory_limit_gb=0.05"):
        train(config)
    assert not (tmp_path / "run" / "sft").exists()  # the SFT stage never started


def test_the_defaults_fit_and_a_lower_limit_refuses_them(tiny_model):
    model_config = tiny_model().config
    for env in ("kuhn_poker_v0", "agentic_judge_v0", "proposer_solver_v0", "user_sim_v0"):
        config = make_config(env, {"model": "tiny"})  # the pretrained presets' estimates: tests/trainers/test_presets.py
        found = preflight(config, model_config)
        assert 0 < found.total <= config.memory_limit_gb * 2**30
    config = make_config("agentic_judge_v0", {"memory_limit_gb": found.gib / 2})
    with pytest.raises(ValueError, match="over memory_limit_gb"):
        preflight(config, model_config)
    assert preflight(make_config("agentic_judge_v0", {"memory_limit_gb": 0.0}), model_config).total > 0


def test_the_refusal_names_the_field_that_binds(tiny_model):
    model_config = tiny_model().config
    # one sequence a pass already: a smaller token budget would not help, a shorter prompt would
    with pytest.raises(ValueError, match=r"Lower max_prompt_tokens, max_new_tokens \(e.g. --set max_prompt_tokens="):
        preflight(make_config("user_sim_v0", {"model": "tiny", "max_prompt_tokens": 12000}), model_config)
    # many rows a pass: the token budget is what to lower
    with pytest.raises(ValueError, match=r"Lower max_forward_tokens, .*\(e.g. --set max_forward_tokens="):
        preflight(make_config("user_sim_v0", {"model": "tiny", "max_forward_tokens": 200000, "micro_batch_size": 64,
                                               "rollout_batch_size": 64}), model_config)
    # the micro-batch binds before the budget does
    with pytest.raises(ValueError, match=r"Lower micro_batch_size"):
        preflight(make_config("user_sim_v0", {"model": "tiny", "max_forward_tokens": 200000, "micro_batch_size": 20,
                                               "rollout_batch_size": 20}), model_config)


def test_the_estimate_grows_with_what_it_bounds(tiny_model):
    model_config = tiny_model().config
    base = estimate(make_config("user_sim_v0", {"model": "tiny"}), model_config)
    assert estimate(make_config("user_sim_v0", {"model": "tiny", "max_prompt_tokens": 8192}), model_config).total > base.total
    assert estimate(make_config("user_sim_v0", {"model": "tiny", "max_forward_tokens": 65536}), model_config).total > base.total
    # but not with the batch: the passes are split under max_forward_tokens
    big = estimate(make_config("user_sim_v0", {"model": "tiny", "rollout_batch_size": 512, "micro_batch_size": 512}), model_config)
    assert big.total == base.total


def sample(prompt: int, completion: int, tag: int = 0) -> Sample:
    return Sample([tag] * prompt, [1] * completion, [0.0] * completion, 1.0)


def test_micro_batches_split_under_the_budget_and_keep_what_fits_whole():
    batch = [sample(100, 10, i) for i in range(8)]
    assert micro_batches(batch, 4, None) == [batch[:4], batch[4:]]
    assert micro_batches(batch, 8, 10_000) == [batch]  # fits: one micro-batch, as before
    split = micro_batches(batch, 8, 250)  # two rows of 110 tokens a pass
    assert [len(mb) for mb in split] == [2, 2, 2, 2]
    assert [s for mb in split for s in mb] == batch
    # repeated rows cost once: eight copies of one row fit a budget of one row
    same = [sample(100, 10) for _ in range(8)]
    assert micro_batches(same, 8, 110) == [same]


def test_micro_batches_keep_a_conversations_turns_with_its_longest_row():
    # two episodes of three turns: each turn's prompt is the last prompt, its reply and 20 tokens of the other side
    batch = []
    for episode in (1, 2):
        prompt = [episode] * 50
        for turn in range(3):
            reply = [100 + turn] * 10
            batch.append(Sample(list(prompt), reply, [0.0] * 10, 1.0))
            prompt = prompt + reply + [7] * 20
    # each episode runs as its last row (110 tokens of prompt, 10 of reply): one per pass under a budget of 200
    split = micro_batches(batch, 8, 200)
    assert split == [batch[:3], batch[3:]]
    assert micro_batches(batch, 8, 240) == [batch]  # both episodes in one pass of 2 x 120 tokens
    masked = [Sample(s.prompt_ids, s.completion_ids, s.logprobs, 1.0, allowed=[[1, 2]] * 10) for s in batch]
    assert len(micro_batches(masked, 8, 200)) > 2  # a decoding mask keeps each turn its own row


SMOLLM2_135M = {"hidden_size": 576, "intermediate_size": 1536, "num_hidden_layers": 30, "num_attention_heads": 9,
                "num_key_value_heads": 3, "vocab_size": 49152, "tie_word_embeddings": True}
"""SmolLM2-135M's shape (its config.json), for estimates that need no weights."""


@pytest.mark.parametrize("targets,layers", [([], 0), (["q_proj", "v_proj"], 0), ([], 12)])
def test_the_lora_count_is_peft_s(tmp_path, targets, layers):
    import torch
    from transformers import LlamaConfig, LlamaForCausalLM

    from llm_zoo.models import add_lora
    from llm_zoo.trainers.memory import model_shape, trainable_params

    model_config = LlamaConfig(**SMOLLM2_135M)
    with torch.device("meta"):  # the shapes without the weights
        model = add_lora(LlamaForCausalLM(model_config), tmp_path, r=8, alpha=16.0, dropout=0.0,
                         target_modules=targets, layers=layers)
    counted = sum(p.numel() for p in model.parameters() if p.requires_grad)
    config = make_config("kuhn_poker_v0", {"model": str(tmp_path), "lora_r": 8, "lora_target_modules": targets,
                                           "lora_layers": layers})
    assert trainable_params(config, model_shape(model_config)) == counted > 0


def test_the_estimate_follows_lora_checkpointing_and_dtype(tmp_path):
    from transformers import LlamaConfig

    from llm_zoo.trainers.memory import model_params, model_shape

    model_config = LlamaConfig(**SMOLLM2_135M)
    params = model_params(model_shape(model_config))

    def parts(**overrides):
        config = make_config("kuhn_poker_v0", {"model": str(tmp_path), "beta": 0.1, "max_prompt_tokens": 1024,
                                               "optimizer": "adamw", "magnet.ema": 1.0, "memory_limit_gb": 0.0,
                                               **overrides})
        return estimate(config, model_config).parts

    full, lora = parts(lora_r=0, gradient_checkpointing=False), parts(lora_r=8, gradient_checkpointing=False)
    # LoRA drops the gradients, AdamW's moments and the reference copy of every weight (4 float32 copies)
    assert full["resident"] - lora["resident"] > 3.9 * 4 * params
    # a magnet with LoRA keeps adapters of its own, not a copy of the model
    magnet = parts(lora_r=8, gradient_checkpointing=False, **{"magnet.ema": 0.9})
    assert 0 < magnet["resident"] - lora["resident"] < 0.05 * params * 4
    checkpointed = parts(lora_r=8, gradient_checkpointing=True)
    assert checkpointed["update"] < lora["update"] / 2 and checkpointed["rollout"] == lora["rollout"]
    # adapters in the top half of the blocks: the frozen half below keeps no activations, sampling is unchanged
    top = parts(lora_r=8, gradient_checkpointing=False, lora_layers=15)
    assert 0.4 * lora["update"] < top["update"] < 0.6 * lora["update"] and top["rollout"] == lora["rollout"]
    half = parts(lora_r=8, gradient_checkpointing=True, dtype="bfloat16")
    assert half["resident"] < checkpointed["resident"] - 1.9 * params and half["update"] < checkpointed["update"]
    # a refusal for a pretrained model names checkpointing first, the cheapest fix
    config = make_config("kuhn_poker_v0", {"model": str(tmp_path), "lora_r": 8, "gradient_checkpointing": False,
                                           "memory_limit_gb": 2.0})
    with pytest.raises(ValueError, match=r"Set gradient_checkpointing=true \(--set gradient_checkpointing=true\), or "
                                         r"lower max_forward_tokens"):
        preflight(config, model_config)


def test_sampling_has_a_budget_of_its_own(tiny_model):
    import torch

    from llm_zoo.trainers.grpo import make_learner

    model_config = tiny_model().config
    base = make_config("user_sim_v0", {"model": "tiny", "max_forward_tokens": 2048, "max_prompt_tokens": 1900,
                                       "max_new_tokens": 48})
    wide = make_config("user_sim_v0", {"model": "tiny", "max_forward_tokens": 2048, "max_prompt_tokens": 1900,
                                       "max_new_tokens": 48, "max_rollout_tokens": 8 * 2048})
    narrow, broad = estimate(base, model_config), estimate(wide, model_config)
    assert broad.parts["rollout"] > narrow.parts["rollout"]  # eight prompts a prefill instead of one
    assert broad.parts["update"] == narrow.parts["update"]  # the update keeps max_forward_tokens
    learner = make_learner("main", wide, torch.device("cpu"), 0)
    assert learner.policy.max_forward_tokens == 8 * 2048
    assert make_learner("main", base, torch.device("cpu"), 0).policy.max_forward_tokens == 2048
    with pytest.raises(ValueError, match="max_rollout_tokens must be >= 0"):
        make_config("user_sim_v0", {"model": "tiny", "max_rollout_tokens": -1})
    huge = make_config("user_sim_v0", {"model": "tiny", "max_rollout_tokens": 2**22, "rollout_batch_size": 4096,
                                       "episodes_per_step": 4096, "memory_limit_gb": 1.0})
    with pytest.raises(ValueError, match=r"the rollout.*max_rollout_tokens=4194304.*Lower max_rollout_tokens"):
        preflight(huge, model_config)
