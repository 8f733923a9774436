"""A policy backed by vLLM's offline engine: the records of :class:`TransformersPolicy`, at GPU speed.

vLLM is an optional extra (``pip install 'llm_zoo[vllm]'``) that needs a CUDA GPU; it is imported
inside the constructor, so this module imports (and its errors can be tested) without it. The
engine is vLLM's offline ``vllm.LLM``, fed token ids (``{"prompt_token_ids": [...]}``, a
``TokensPrompt``), so prompts are encoded here, by :meth:`TransformersPolicy.encode_prompts` itself:
same chat template call, same control-token handling, same token ids.

Targets vLLM >= 0.10.2 (the V1 engine, with the ``logprobs_mode`` engine argument and
``LLM.collective_rpc`` taking a callable); read against vLLM 0.33.0 and TRL's colocate mode.

Log-probability definition
--------------------------
``Reply.logprobs[t]`` means what it means for :class:`TransformersPolicy`:
``log_softmax(logits_t / temperature)[token_t]`` in float32, before top-p truncation; with
``temperature=0`` (greedy) it is taken at temperature 1. vLLM returns the sampled token's
log-prob when a request sets ``SamplingParams(logprobs=0)``; which distribution it comes from is
the engine-wide ``logprobs_mode`` (vLLM >= 0.10; ``vllm/config/model.py``, ``v1/sample/sampler.py``):

- ``raw_logprobs`` (vLLM's default): ``log_softmax(logits)`` in float32, before any processor,
  temperature or top-k/top-p. That is our definition at temperature 1 and when greedy, for any top-p.
- ``processed_logprobs``: ``log_softmax`` after the processors, temperature and top-k/top-p. With
  no penalty, bias, min-p or top-k set (this policy sets none) and ``top_p=1``, that is
  ``log_softmax(logits / temperature)``: our definition.

So the policy asks for ``raw_logprobs`` at temperature 0 or 1 and ``processed_logprobs`` at any
other temperature with ``top_p=1`` (:func:`logprobs_mode`). A temperature other than 0 or 1 *with*
``top_p < 1`` has no mode that matches (processed log-probs are renormalised over the nucleus;
raw ones are untempered), and the constructor refuses it. vLLM's prompt log-probs are raw in
every mode, which is why there is no ``logprobs_of`` here: score with the trainer's model.

Weights in place
----------------
:meth:`VLLMPolicy.load_weights` and :meth:`VLLMPolicy.sync_from` copy a transformers model's
current weights into the running engine, the way TRL's colocate mode does: each worker's
``model.load_weights(iterable of (name, tensor))`` (vLLM's checkpoint loader, which takes
Hugging Face names and fuses q/k/v and gate/up itself), reached through
``LLM.collective_rpc(callable)``; where that is missing or refuses callables, through the
in-process driver worker (``llm.llm_engine.model_executor.driver_worker``); where neither is
there, it raises, naming the vLLM version. Then the prefix cache is reset: its keys and values
belong to the old weights. With ``tensor_parallel_size=1`` the policy runs vLLM's engine core in
this process (it sets ``VLLM_ENABLE_V1_MULTIPROCESSING=0`` unless the caller has set it), so the
trainer's CUDA tensors reach the worker by reference; with more GPUs they travel through CPU
memory to the worker processes. An in-process engine seeds the global RNGs of Python, NumPy and
torch when it starts; the constructor puts their states back. vLLM's quantised models would need
its layerwise ``reload_weights`` instead; this policy loads unquantised weights only.

Seeds and speed
---------------
A seeded policy gives each request a seed of its own (``SamplingParams(seed=...)``), which vLLM
samples row by row with a generator per request; an unseeded one lets vLLM sample the batch at
once. ``rollout.collect(seed=...)`` reseeds its policies, so rollouts under the trainer are seeded.
"""

from __future__ import annotations

import contextlib
import importlib
import os
import random
import sys
from collections.abc import Hashable, Iterable, Iterator, Mapping, Sequence
from pathlib import Path
from typing import Any

import numpy as np
import torch
from transformers import AutoTokenizer, GenerationConfig, PreTrainedTokenizerBase

from llm_zoo.policies.base import Observation, Policy, Reply
from llm_zoo.policies.transformers import TransformersPolicy

if sys.version_info >= (3, 12):
    from typing import override
else:
    from typing_extensions import override

MIN_VLLM_VERSION = "0.10.2"
"""Oldest vLLM with ``logprobs_mode="processed_logprobs"`` and callables in ``collective_rpc``."""

INSTALL_HINT = "install it with `pip install 'llm_zoo[vllm]'` on a machine with a CUDA GPU"

_SEED_RANGE = 2**31
"""Request and engine seeds are drawn from [0, 2**31): every vLLM version takes them."""


def logprobs_mode(temperature: float, top_p: float) -> str:
    """Return the vLLM ``logprobs_mode`` whose sampled-token log-prob is ``log_softmax(logits/T)``.

    Raises:
        ValueError: for a temperature other than 0 or 1 together with ``top_p < 1``, where no mode
            gives the tempered log-prob before top-p (see the module docstring).
    """
    if temperature in (0.0, 1.0):
        return "raw_logprobs"  # greedy records temperature-1 log-probs, as TransformersPolicy does
    if top_p == 1.0:
        return "processed_logprobs"
    raise ValueError(
        f"VLLMPolicy: temperature={temperature!r} with top_p={top_p!r} has no vLLM logprobs_mode that "
        "gives log_softmax(logits / temperature) before top-p (TransformersPolicy's log-prob): "
        "processed log-probs are renormalised over the nucleus and raw ones ignore the temperature. "
        "Use top_p=1, or temperature=1 (or 0)."
    )


class VLLMPolicy(Policy):
    """Replies with vLLM's offline engine, one ``generate`` call per :meth:`act` call.

    Each observation's ``messages`` go through the tokenizer's chat template with the generation
    prompt (:meth:`encode_prompts`, shared with :class:`TransformersPolicy`), and the token ids go
    to the engine. Sampling is temperature and top-p alone; each reply stops at its first
    end-of-turn token (the tokenizer's ``eos_token`` and the ``eos_token_id`` of the folder's
    ``generation_config.json``) or after ``max_new_tokens``. Every :class:`Reply` carries
    ``prompt_ids``, ``completion_ids`` (ending with the end-of-turn token when one came),
    ``logprobs`` (module docstring) and the completion decoded without special tokens.

    Args:
        model: Local folder written by ``save_pretrained`` (weights, config and tokenizer).
        name: Shown in ``Reply.policy``; the trainer matches it against the learner's name.
        temperature: Softmax temperature; ``0`` decodes greedily.
        top_p: Nucleus sampling mass, in (0, 1]; below 1 only with temperature 0 or 1.
        max_new_tokens: Longest completion, in tokens.
        seed: Seed of the private RNG. An int gives every request its own seed drawn from it, so a
            sequence of :meth:`act` calls replays; ``None`` leaves requests unseeded (vLLM samples
            them with its engine generator, the whole batch at once: faster, not reproducible).
        gpu_memory_utilization: Fraction of the GPU's memory vLLM may take (weights, activations
            and KV cache); leave room for a trainer on the same GPU.
        tensor_parallel_size: GPUs the engine shards the model over.
        dtype: Weights and activations in the engine (``"bfloat16"``, ``"float16"``, ...).
        enable_prefix_caching: Reuse the KV cache of prompt prefixes across requests.
        engine_kwargs: More keyword arguments for ``vllm.LLM`` (``max_model_len``, ``enforce_eager``, ...).

    Raises:
        ValueError: on a bad sampling setting (see :func:`logprobs_mode`).
        FileNotFoundError: when ``model`` is not a local folder.
        RuntimeError: without a CUDA GPU.
        ImportError: without vLLM, or with one older than ``MIN_VLLM_VERSION``.
    """

    # Prompts are encoded exactly as TransformersPolicy encodes them: the same method, memo included.
    encode_prompts = TransformersPolicy.encode_prompts

    def __init__(
        self,
        model: str | os.PathLike[str],
        *,
        name: str = "vllm",
        temperature: float = 1.0,
        top_p: float = 1.0,
        max_new_tokens: int = 64,
        seed: int | None = None,
        gpu_memory_utilization: float = 0.5,
        tensor_parallel_size: int = 1,
        dtype: str = "bfloat16",
        enable_prefix_caching: bool = True,
        engine_kwargs: Mapping[str, Any] | None = None,
    ) -> None:
        if temperature < 0:
            raise ValueError(f"VLLMPolicy: temperature must be >= 0 (0 is greedy), got {temperature!r}.")
        if not 0 < top_p <= 1:
            raise ValueError(f"VLLMPolicy: top_p must be in (0, 1], got {top_p!r}.")
        if max_new_tokens < 1:
            raise ValueError(f"VLLMPolicy: max_new_tokens must be >= 1, got {max_new_tokens!r}.")
        if not 0 < gpu_memory_utilization <= 1:
            raise ValueError(
                f"VLLMPolicy: gpu_memory_utilization must be in (0, 1], got {gpu_memory_utilization!r}."
            )
        if tensor_parallel_size < 1:
            raise ValueError(f"VLLMPolicy: tensor_parallel_size must be >= 1, got {tensor_parallel_size!r}.")
        mode = logprobs_mode(float(temperature), float(top_p))
        path = Path(model)
        if not path.is_dir():
            raise FileNotFoundError(
                f"VLLMPolicy expects a local folder written by save_pretrained, got {str(path)!r}, which is "
                "not a directory; download hub models first (huggingface_hub.snapshot_download) or make one "
                "with llm_zoo.models.make_tiny_model."
            )
        vllm = _import_vllm()

        self.name = name
        self.path = path
        self.temperature = float(temperature)
        self.top_p = float(top_p)
        self.max_new_tokens = int(max_new_tokens)
        self.logprobs_mode = mode
        self.tokenizer: PreTrainedTokenizerBase = AutoTokenizer.from_pretrained(path)
        if getattr(self.tokenizer, "chat_template", None) is None:
            raise ValueError(
                f"VLLMPolicy needs a tokenizer with a chat template; the one in {str(path)!r} has none. "
                "Save one with the tokenizer (tokenizer.chat_template = ...; save_pretrained)."
            )
        self.eos_token_ids = _eos_token_ids(self.tokenizer, path)
        self._prompt_memo: dict[Hashable, tuple[int, ...]] | None = (
            None if "strftime_now" in str(self.tokenizer.chat_template) else {}
        )
        self._rng = random.Random()
        self.seed(seed)
        if tensor_parallel_size == 1:
            # The engine core in this process: load_weights hands CUDA tensors over by reference.
            os.environ.setdefault("VLLM_ENABLE_V1_MULTIPROCESSING", "0")
        engine_seed = random.Random(seed).randrange(
            _SEED_RANGE
        )  # apart from the request seeds: seed() replays
        with _global_rng_kept():  # an in-process engine seeds Python's, NumPy's and torch's global RNGs
            self.llm = vllm.LLM(
                model=str(path),
                dtype=dtype,
                seed=engine_seed,
                gpu_memory_utilization=gpu_memory_utilization,
                tensor_parallel_size=tensor_parallel_size,
                enable_prefix_caching=enable_prefix_caching,
                logprobs_mode=mode,
                **dict(engine_kwargs or {}),
            )
        self._sampling_params = vllm.SamplingParams

    @override
    def seed(self, seed: int | None) -> None:
        self._seeded = seed is not None
        self._rng.seed(seed)

    @override
    def act(self, observations: Sequence[Observation]) -> list[Reply]:
        self.check_batch(observations, key="messages")
        if not observations:
            return []
        prompts = self.encode_prompts(observations)
        params = [self._params() for _ in prompts]
        outputs = self.llm.generate([{"prompt_token_ids": p} for p in prompts], params, use_tqdm=False)
        if len(outputs) != len(prompts):
            raise RuntimeError(f"vLLM returned {len(outputs)} outputs for {len(prompts)} prompts.")
        records = [completion_records(out.outputs[0]) for out in outputs]
        texts = self.tokenizer.batch_decode([ids for ids, _ in records], skip_special_tokens=True)
        return [
            Reply(text, prompt_ids=p, completion_ids=ids, logprobs=lps, policy=self.name)
            for text, p, (ids, lps) in zip(texts, prompts, records, strict=True)
        ]

    def load_weights(self, named_tensors: Iterable[tuple[str, torch.Tensor]]) -> None:
        """Copy ``(name, tensor)`` pairs, named as in the Hugging Face checkpoint, into the engine in place.

        Names may carry the ``_orig_mod.`` prefix of a ``torch.compile``'d model. Tensors may be on
        any device and in any dtype; each lands in the engine's copy, cast to its dtype. The prefix
        cache is reset afterwards.

        Raises:
            ValueError: when ``named_tensors`` is empty.
            RuntimeError: when this vLLM offers no way into its workers (module docstring).
        """
        weights = [(name.replace("_orig_mod.", ""), tensor.detach()) for name, tensor in named_tensors]
        if not weights:
            raise ValueError(
                "VLLMPolicy.load_weights got no (name, tensor) pairs; pass model.named_parameters()."
            )
        driver = _driver_worker(self.llm)
        if driver is None:  # worker processes: tensors travel through (pickled) CPU memory
            weights = [(name, tensor.cpu()) for name, tensor in weights]
        rpc = getattr(self.llm, "collective_rpc", None)
        try:
            if rpc is None:
                raise NotImplementedError("vllm.LLM has no collective_rpc")
            rpc(load_weights_on_worker, args=(weights,))
        except NotImplementedError as err:
            if driver is None:
                raise RuntimeError(
                    f"VLLMPolicy.load_weights: vLLM {_vllm_version()} neither runs a callable through "
                    f"LLM.collective_rpc ({err}) nor keeps its driver worker in this process "
                    f"(llm.llm_engine.model_executor.driver_worker); use vllm>={MIN_VLLM_VERSION} with "
                    "tensor_parallel_size=1."
                ) from err
            load_weights_on_worker(driver, weights)
        self.llm.reset_prefix_cache()

    def sync_from(self, model: torch.nn.Module) -> None:
        """Push ``model``'s current parameters (a transformers model of the same architecture) into the engine."""
        with torch.no_grad():
            self.load_weights(model.named_parameters())

    def __repr__(self) -> str:
        return (
            f"{type(self).__name__}(name={self.name!r}, model={str(self.path)!r}, temperature={self.temperature}, "
            f"top_p={self.top_p}, max_new_tokens={self.max_new_tokens}, logprobs_mode={self.logprobs_mode!r})"
        )

    def _params(self) -> Any:
        """Sampling parameters of one request: its own seed when the policy is seeded."""
        return self._sampling_params(
            temperature=self.temperature,
            top_p=self.top_p,
            max_tokens=self.max_new_tokens,
            stop_token_ids=list(self.eos_token_ids),
            logprobs=0,  # the sampled token's log-prob only
            seed=self._rng.randrange(_SEED_RANGE) if self._seeded else None,
            detokenize=False,  # decoded here, with the tokenizer TransformersPolicy uses
        )


def completion_records(completion: Any) -> tuple[list[int], list[float]]:
    """Return a vLLM ``CompletionOutput``'s token ids and each one's log-prob (``logprobs=0`` requests).

    ``completion.logprobs`` holds one ``{token_id: Logprob}`` mapping per generated token, which
    always contains the sampled token.
    """
    ids = [int(t) for t in completion.token_ids]
    steps = completion.logprobs
    if steps is None or len(steps) != len(ids):
        raise RuntimeError(
            f"vLLM returned {0 if steps is None else len(steps)} log-prob entries for {len(ids)} tokens; "
            "the request must set SamplingParams(logprobs=0)."
        )
    return ids, [float(step[token].logprob) for step, token in zip(steps, ids)]


def load_weights_on_worker(worker: Any, weights: list[tuple[str, torch.Tensor]]) -> None:
    """Load ``weights`` into the model of one vLLM worker (run there by ``LLM.collective_rpc``)."""
    get_model = getattr(worker, "get_model", None)
    model = get_model() if callable(get_model) else worker.model_runner.model
    model.load_weights(weights)


# ---- helpers ---------------------------------------------------------------------------------


def _import_vllm() -> Any:
    """Import vLLM after checking for a CUDA GPU; raise a message that says what is missing."""
    if not torch.cuda.is_available():
        raise RuntimeError(
            "VLLMPolicy needs a CUDA GPU, and torch.cuda.is_available() is False here; vLLM runs on GPUs "
            f"only ({INSTALL_HINT}). On a CPU, use llm_zoo.policies.TransformersPolicy."
        )
    try:
        vllm = importlib.import_module("vllm")
    except ImportError as err:
        raise ImportError(f"VLLMPolicy needs vLLM ({err}); {INSTALL_HINT}.") from err
    version = getattr(vllm, "__version__", "")
    if _older(version, MIN_VLLM_VERSION):
        raise ImportError(
            f"VLLMPolicy needs vllm>={MIN_VLLM_VERSION} (logprobs_mode, collective_rpc with a callable), "
            f"found {version}; {INSTALL_HINT}."
        )
    return vllm


@contextlib.contextmanager
def _global_rng_kept() -> Iterator[None]:
    """Restore the global RNG states of Python, NumPy and torch (CPU and every GPU) after the block."""
    python_state, numpy_state = random.getstate(), np.random.get_state()
    with torch.random.fork_rng(devices=range(torch.cuda.device_count())):
        yield
    random.setstate(python_state)
    np.random.set_state(numpy_state)


def _older(version: str, minimum: str) -> bool:
    """Tell whether a version string is older than ``minimum``; unparsable ones (source builds) are not."""
    from packaging.version import InvalidVersion, Version

    try:
        return Version(version) < Version(minimum)
    except InvalidVersion:
        return False


def _vllm_version() -> str:
    module = sys.modules.get("vllm")
    return str(getattr(module, "__version__", "unknown"))


def _driver_worker(llm: Any) -> Any | None:
    """Return the engine's in-process driver worker, or None when the workers run in other processes."""
    executor = getattr(getattr(llm, "llm_engine", None), "model_executor", None)
    return getattr(executor, "driver_worker", None)


def _eos_token_ids(tokenizer: PreTrainedTokenizerBase, path: Path) -> list[int]:
    """Collect the end-of-turn ids: the tokenizer's eos plus the folder's generation config's (int or list)."""
    ids: list[int] = [] if tokenizer.eos_token_id is None else [tokenizer.eos_token_id]
    config_eos = None
    if (path / "generation_config.json").is_file():
        config_eos = GenerationConfig.from_pretrained(path).eos_token_id
    if isinstance(config_eos, int):
        config_eos = [config_eos]
    ids.extend(i for i in config_eos or () if i not in ids)
    if not ids:
        raise ValueError(
            f"VLLMPolicy needs an end-of-turn token: neither the tokenizer in {str(path)!r} nor its "
            "generation_config.json names an eos token; set tokenizer.eos_token and save it."
        )
    return ids


def missing_requirements() -> str | None:
    """Say what this machine lacks for vLLM (the package, a CUDA GPU), or None; vLLM is looked up, not imported."""
    import importlib.util
    if importlib.util.find_spec("vllm") is None:
        return "needs vLLM and a CUDA GPU: vLLM is not installed (pip install 'llm_zoo[vllm]' on a CUDA machine)"
    import torch

    if not torch.cuda.is_available():
        return "needs a CUDA GPU: torch.cuda.is_available() is False"
    return None
