"""Tests for llm_zoo.policies.vllm.

On a CPU (no vLLM, no GPU) they check the errors and drive the policy through a stand-in ``vllm``
module, which records what the policy asks of the engine. On a CUDA machine with vLLM, the GPU
tests compare the engine's log-probs with TransformersPolicy's on the same replies and check that
``sync_from`` changes what the engine samples.
"""

from __future__ import annotations

import importlib.util
import random
import sys
import types
from types import SimpleNamespace

import numpy as np
import pytest

torch = pytest.importorskip("torch")
pytest.importorskip("transformers")

from llm_zoo.models import build_byte_tokenizer, build_tiny_model, make_tiny_model, save_tiny  # noqa: E402
from llm_zoo.policies import TransformersPolicy, VLLMPolicy  # noqa: E402
from llm_zoo.policies import vllm as vllm_policy  # noqa: E402

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
ENV_VAR = "VLLM_ENABLE_V1_MULTIPROCESSING"


@pytest.fixture(scope="module")
def model_dir(tmp_path_factory):
    return make_tiny_model(tmp_path_factory.mktemp("tiny"), hidden_size=32, num_layers=1)


@pytest.fixture
def no_env_var(monkeypatch):
    monkeypatch.delenv(ENV_VAR, raising=False)  # restored (absent) after the test


# ---- errors without a GPU or without vLLM ------------------------------------------------------


def test_without_a_gpu_the_error_says_what_is_needed(monkeypatch, model_dir):
    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    with pytest.raises(
        RuntimeError, match=r"needs a CUDA GPU.*torch\.cuda\.is_available\(\) is False"
    ) as info:
        VLLMPolicy(model_dir)
    assert "pip install 'llm_zoo[vllm]'" in str(info.value)


def test_without_vllm_the_error_says_how_to_install_it(monkeypatch, model_dir):
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    monkeypatch.setitem(sys.modules, "vllm", None)  # makes `import vllm` raise ImportError
    with pytest.raises(ImportError, match=r"needs vLLM") as info:
        VLLMPolicy(model_dir)
    assert "pip install 'llm_zoo[vllm]'" in str(info.value) and "CUDA GPU" in str(info.value)


def test_an_old_vllm_is_refused_with_the_minimum_version(monkeypatch, model_dir):
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
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
    ],
)
def test_bad_settings_are_refused_before_any_gpu_check(model_dir, kwargs, match):
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
    with pytest.raises(ValueError, match="Use top_p=1, or temperature=1"):
        vllm_policy.logprobs_mode(1.3, 0.95)


# ---- the policy against a stand-in engine ------------------------------------------------------


def _fake_vllm(version: str = "0.33.0", *, rpc: bool = True, in_process: bool = True) -> types.ModuleType:
    """A stand-in ``vllm`` module: ``LLM`` records its arguments and answers every prompt with "hi" + eos."""
    eos = build_byte_tokenizer().eos_token_id
    completion = [ord("h"), ord("i"), eos]

    class Worker:
        def __init__(self) -> None:
            self.loaded: list[tuple[str, torch.Tensor]] = []
            self.model = SimpleNamespace(load_weights=self.loaded.extend)

        def get_model(self):
            return self.model

    class LLM:
        def __init__(self, model: str, **kwargs) -> None:
            self.model, self.kwargs, self.requests, self.resets = model, kwargs, [], 0
            random.seed(kwargs["seed"])  # as vLLM's in-process engine does
            np.random.seed(kwargs["seed"])
            torch.manual_seed(kwargs["seed"])
            self.worker = Worker()
            executor = SimpleNamespace(driver_worker=self.worker) if in_process else SimpleNamespace()
            self.llm_engine = SimpleNamespace(model_executor=executor)

        def generate(self, prompts, sampling_params, use_tqdm=True):
            self.requests.append((prompts, sampling_params))
            steps = [{t: SimpleNamespace(logprob=-0.5 * (i + 1), rank=1)} for i, t in enumerate(completion)]
            return [
                SimpleNamespace(outputs=[SimpleNamespace(token_ids=completion, logprobs=steps)])
                for _ in prompts
            ]

        def collective_rpc(self, method, timeout=None, args=(), kwargs=None):
            if not rpc:
                raise NotImplementedError("callables are not supported")
            return [method(self.worker, *args, **(kwargs or {}))]

        def reset_prefix_cache(self) -> bool:
            self.resets += 1
            return True

    class SamplingParams:
        def __init__(self, **kwargs) -> None:
            self.kwargs = kwargs

    module = types.ModuleType("vllm")
    module.__version__ = version
    module.LLM, module.SamplingParams = LLM, SamplingParams
    return module


@pytest.fixture
def fake_engine(monkeypatch, no_env_var):
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    monkeypatch.setitem(sys.modules, "vllm", _fake_vllm())


def test_engine_gets_the_settings_and_the_logprobs_mode(fake_engine, model_dir):
    import os

    policy = VLLMPolicy(
        model_dir, temperature=0.7, gpu_memory_utilization=0.3, engine_kwargs={"max_model_len": 512}
    )
    kwargs = policy.llm.kwargs
    assert policy.llm.model == str(model_dir)
    assert kwargs["logprobs_mode"] == "processed_logprobs" and kwargs["dtype"] == "bfloat16"
    assert kwargs["gpu_memory_utilization"] == 0.3 and kwargs["enable_prefix_caching"] is True
    assert kwargs["max_model_len"] == 512 and kwargs["tensor_parallel_size"] == 1
    assert os.environ[ENV_VAR] == "0"  # one GPU: the engine core runs in this process
    assert "processed_logprobs" in repr(policy)


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
    assert policy.act([]) == []


def test_a_seeded_policy_gives_each_request_a_seed_and_replays(fake_engine, model_dir):
    policy = VLLMPolicy(model_dir, seed=3)
    policy.act(OBSERVATIONS)
    policy.seed(3)
    policy.act(OBSERVATIONS)
    first, second = ([p.kwargs["seed"] for p in params] for _, params in policy.llm.requests)
    assert first == second and len(set(first)) == len(OBSERVATIONS)


def test_sync_from_pushes_every_parameter_and_resets_the_prefix_cache(fake_engine, model_dir):
    policy = VLLMPolicy(model_dir)
    model = build_tiny_model(build_byte_tokenizer(), hidden_size=32, num_layers=1)
    policy.sync_from(model)
    loaded = dict(policy.llm.worker.loaded)
    assert sorted(loaded) == sorted(name for name, _ in model.named_parameters())
    assert all(not t.requires_grad for t in loaded.values())
    assert torch.equal(loaded["lm_head.weight"], model.lm_head.weight)
    assert policy.llm.resets == 1
    policy.load_weights(
        [("_orig_mod.lm_head.weight", model.lm_head.weight)]
    )  # a torch.compile'd model's name
    assert policy.llm.worker.loaded[-1][0] == "lm_head.weight"
    with pytest.raises(ValueError, match="no \\(name, tensor\\) pairs"):
        policy.load_weights([])


def test_load_weights_falls_back_to_the_driver_worker_and_else_says_why(monkeypatch, no_env_var, model_dir):
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    monkeypatch.setitem(sys.modules, "vllm", _fake_vllm(rpc=False))
    policy = VLLMPolicy(model_dir)
    policy.load_weights([("lm_head.weight", torch.zeros(2))])
    assert [n for n, _ in policy.llm.worker.loaded] == ["lm_head.weight"]

    monkeypatch.setitem(sys.modules, "vllm", _fake_vllm(rpc=False, in_process=False))
    policy = VLLMPolicy(model_dir)
    with pytest.raises(RuntimeError, match=r"vLLM 0\.33\.0 neither runs a callable"):
        policy.load_weights([("lm_head.weight", torch.zeros(2))])


# ---- on a GPU with vLLM ------------------------------------------------------------------------

_MISSING = [
    *([] if importlib.util.find_spec("vllm") else ["vLLM (pip install 'llm_zoo[vllm]')"]),
    *([] if torch.cuda.is_available() else ["a CUDA GPU (torch.cuda.is_available() is False)"]),
]
gpu = pytest.mark.skipif(bool(_MISSING), reason=f"needs {' and '.join(_MISSING)}")

BF16_MEAN_TOLERANCE = 0.05
"""Mean |vLLM - transformers| log-prob, both in bfloat16: the logits differ by bf16 rounding (~2**-8
relative, on logits of a few units), kernels and summation order. On this model, on a CPU,
bfloat16 against float32 differs by 0.013 on average (0.06 at most), while the wrong distribution
(untempered log-probs at temperature 0.7) differs by 0.46 on average."""
BF16_MAX_TOLERANCE = 0.5


@pytest.fixture(scope="module")
def peaked_model_dir(tmp_path_factory):
    """A tiny qwen2 (head_dim 64, which vLLM's attention kernels take) with logits spread over a few units."""
    tok = build_byte_tokenizer()
    model = build_tiny_model(tok, arch="qwen2", hidden_size=128, num_layers=2, num_heads=2, seed=0)
    with torch.no_grad():
        model.lm_head.weight.mul_(10.0)  # logits std about 2.3
    return save_tiny(tmp_path_factory.mktemp("peaked"), tok, model)


@pytest.fixture(scope="module")
def engine(peaked_model_dir):
    return VLLMPolicy(
        peaked_model_dir,
        temperature=0.7,
        max_new_tokens=16,
        seed=0,
        gpu_memory_utilization=0.2,
        engine_kwargs={"max_model_len": 1024, "enforce_eager": True},
    )


def _diffs(replies, reference) -> tuple[float, float]:
    scored = reference.logprobs_of([r.prompt_ids for r in replies], [r.completion_ids for r in replies])
    diffs = [abs(a - b) for r, row in zip(replies, scored) for a, b in zip(r.logprobs, row)]
    return max(diffs), sum(diffs) / len(diffs)


@gpu
def test_gpu_logprobs_match_transformers_in_bf16(engine, peaked_model_dir):
    replies = engine.act(OBSERVATIONS * 4)
    reference = TransformersPolicy.from_pretrained(
        peaked_model_dir, device="cuda", dtype=torch.bfloat16, temperature=0.7
    )
    assert [r.prompt_ids for r in replies] == reference.encode_prompts(OBSERVATIONS * 4)
    assert all(len(r.logprobs) == len(r.completion_ids) > 0 for r in replies)
    worst, mean = _diffs(replies, reference)
    assert mean < BF16_MEAN_TOLERANCE and worst < BF16_MAX_TOLERANCE, (worst, mean)


@gpu
def test_gpu_sync_from_changes_what_the_engine_samples(engine, peaked_model_dir):
    from transformers import AutoModelForCausalLM

    model = AutoModelForCausalLM.from_pretrained(peaked_model_dir, dtype=torch.bfloat16).to("cuda")
    before = TransformersPolicy(
        AutoModelForCausalLM.from_pretrained(peaked_model_dir, dtype=torch.bfloat16),
        engine.tokenizer,
        device="cuda",
        temperature=0.7,
    )
    try:
        with torch.no_grad():
            model.lm_head.weight.neg_()  # every preference reversed
        engine.sync_from(model)
        replies = engine.act(OBSERVATIONS * 4)
        after = TransformersPolicy(model, engine.tokenizer, device="cuda", temperature=0.7)
        _, mean_after = _diffs(replies, after)
        _, mean_before = _diffs(replies, before)
        assert mean_after < BF16_MEAN_TOLERANCE, mean_after
        assert mean_before > 10 * BF16_MEAN_TOLERANCE, mean_before
    finally:
        engine.sync_from(before.model)
