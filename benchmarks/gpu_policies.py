"""GPU policies: VLLMPolicy against TransformersPolicy on one CUDA GPU, same model, same Kuhn poker prompts.

Needs a CUDA GPU and vLLM (``pip install 'llm_zoo[vllm]'``). Without them it prints one line saying
what is missing and ends with ``{"skipped": "..."}``, exit status 0.

The model is built from a config, offline: a Qwen2 decoder of about 0.5B parameters (hidden 1024,
24 layers, 16 heads of 64, MLP 5632) over llm_zoo's byte tokenizer, with random weights, saved in
bfloat16 with ``save_pretrained`` to a temporary folder that both backends load. Random weights
give near-uniform next-token distributions, on which any two backends agree to many digits; the
output head is scaled (``--logit-scale``) so that the logits spread over a few units, as a trained
model's do, and a log-prob mismatch shows.

Prompts are the observations of Kuhn poker (``llm_zoo.kuhn_poker_v0``, rules in the prompt: about
600 bytes, so 600 tokens) met by random play, drawn with repetition into a batch, as a rollout
sees them. Both backends answer the whole batch in one ``act`` call, after a warm-up call; the
rounds alternate so that a busy neighbour slows both alike.

Two measurements:

- log-prob agreement: the replies vLLM sampled, rescored by ``TransformersPolicy.logprobs_of`` (one
  teacher-forced pass) in bfloat16 and in float32; max and mean |difference| over all tokens.
- throughput: generated tokens per second of ``act`` on the batch, for each backend.

    python -m benchmarks.gpu_policies            # 0.5B model, batch 256, 64 new tokens, 3 rounds
    python -m benchmarks.gpu_policies --quick    # a small model, batch 16, 16 new tokens, 1 round

The last line printed is a JSON object: ``vllm_tokens_per_s``, ``transformers_tokens_per_s``,
``speedup``, ``logprob_max_abs_diff_bf16``, ``logprob_mean_abs_diff_bf16`` (and ``_fp32``),
``params`` and the setting.
"""

from __future__ import annotations

import argparse
import tempfile
import time
from pathlib import Path
from typing import Any

from benchmarks import _harness as harness
from llm_zoo.policies.vllm import missing_requirements  # noqa: E402


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    parser = harness.parser(__doc__, quick="small model, batch 16, 16 new tokens, 1 round")
    parser.add_argument("--batch", type=int, default=256, help="observations per act call")
    parser.add_argument("--max-new-tokens", type=int, default=64, help="longest reply, in tokens")
    parser.add_argument("--rounds", type=int, default=3, help="timed act calls per backend")
    parser.add_argument("--temperature", type=float, default=1.0, help="sampling temperature (top_p is 1)")
    parser.add_argument("--logit-scale", type=float, default=5.0, help="factor on the random output head")
    parser.add_argument("--gpu-memory-utilization", type=float, default=0.35, help="vLLM's share of the GPU")
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args(argv)
    if args.quick:
        args.batch, args.max_new_tokens, args.rounds = 16, 16, 1
    for name in ("batch", "max_new_tokens", "rounds"):
        if getattr(args, name) < 1:
            parser.error(f"--{name.replace('_', '-')} must be >= 1")
    return args


def model_shape(quick: bool) -> dict[str, int]:
    """Keyword arguments of ``build_tiny_model``: about 0.5B parameters, or a small model for ``--quick``."""
    from llm_zoo.models import BENCHMARK_SHAPES

    return dict(BENCHMARK_SHAPES["small" if quick else "0.5b"])


def build_model_dir(path: Path, *, quick: bool, logit_scale: float, seed: int) -> tuple[Path, int]:
    """Save a random Qwen2 with the byte tokenizer into ``path`` (bfloat16); return it and its parameter count."""
    import torch

    from llm_zoo.models import build_byte_tokenizer, build_tiny_model, save_tiny

    tokenizer = build_byte_tokenizer()
    model = build_tiny_model(tokenizer, arch="qwen2", seed=seed, **model_shape(quick))
    with torch.no_grad():
        model.lm_head.weight.mul_(logit_scale)
    params = sum(p.numel() for p in model.parameters())
    save_tiny(path, tokenizer, model.to(torch.bfloat16))
    return path, params


def kuhn_observations(n: int, seed: int) -> list[dict[str, Any]]:
    """Return ``n`` Kuhn poker observations met by random play, drawn with repetition."""
    import random

    from llm_zoo.policies import RandomPolicy
    from llm_zoo.trainers.rollout import collect

    episodes = collect("kuhn_poker_v0", {"player": RandomPolicy()}, 64, seed=seed)
    seen = [turn.observation for episode in episodes for turn in episode.turns]
    rng = random.Random(seed)
    return [rng.choice(seen) for _ in range(n)]


def timed_act(policy: Any, observations: list[dict[str, Any]]) -> tuple[list[Any], float]:
    import torch

    torch.cuda.synchronize()
    start = time.perf_counter()
    replies = policy.act(observations)
    torch.cuda.synchronize()
    return replies, time.perf_counter() - start


def logprob_diffs(replies: list[Any], reference: Any, chunk: int = 64) -> tuple[float, float]:
    """Return max and mean |reply log-prob - reference.logprobs_of| over every completion token."""
    diffs: list[float] = []
    for start in range(0, len(replies), chunk):
        part = replies[start : start + chunk]
        scored = reference.logprobs_of([r.prompt_ids for r in part], [r.completion_ids for r in part])
        diffs += [abs(a - b) for r, row in zip(part, scored) for a, b in zip(r.logprobs, row)]
    return max(diffs), sum(diffs) / len(diffs)


def main(argv: list[str] | None = None) -> dict[str, Any]:
    started = time.perf_counter()  # the JSON line's wall-clock "seconds"
    args = parse_args(argv)
    missing = missing_requirements()
    if missing is not None:
        return harness.skipped("gpu_policies", missing)

    import torch
    import vllm

    from llm_zoo.policies import TransformersPolicy, VLLMPolicy

    observations = kuhn_observations(args.batch, args.seed)
    with tempfile.TemporaryDirectory() as tmp:
        path, params = build_model_dir(
            Path(tmp), quick=args.quick, logit_scale=args.logit_scale, seed=args.seed
        )
        fast = VLLMPolicy(
            path,
            temperature=args.temperature,
            max_new_tokens=args.max_new_tokens,
            seed=args.seed,
            gpu_memory_utilization=args.gpu_memory_utilization,
        )
        slow = TransformersPolicy.from_pretrained(
            path,
            device="cuda",
            dtype=torch.bfloat16,
            temperature=args.temperature,
            max_new_tokens=args.max_new_tokens,
            seed=args.seed,
        )
        for policy in (fast, slow):  # warm-up: CUDA graphs, kernels, allocator
            policy.act(observations[: min(8, len(observations))])
        tokens = {"vllm": 0, "transformers": 0}
        seconds = {"vllm": 0.0, "transformers": 0.0}
        sampled: list[Any] = []
        for _ in range(args.rounds):
            for label, policy in (("vllm", fast), ("transformers", slow)):
                replies, elapsed = timed_act(policy, observations)
                tokens[label] += sum(len(r.completion_ids) for r in replies)
                seconds[label] += elapsed
                if label == "vllm":
                    sampled = replies
        bf16_max, bf16_mean = logprob_diffs(sampled, slow)
        slow.model.to(torch.float32)
        fp32_max, fp32_mean = logprob_diffs(sampled, slow)

    rate = {label: tokens[label] / seconds[label] for label in tokens}
    figures = {
        "vllm_tokens_per_s": round(rate["vllm"], 1),
        "transformers_tokens_per_s": round(rate["transformers"], 1),
        "speedup": round(rate["vllm"] / rate["transformers"], 2),
        "logprob_max_abs_diff_bf16": round(bf16_max, 5),
        "logprob_mean_abs_diff_bf16": round(bf16_mean, 5),
        "logprob_max_abs_diff_fp32": round(fp32_max, 5),
        "logprob_mean_abs_diff_fp32": round(fp32_mean, 5),
        "params": params,
        "batch": args.batch,
        "max_new_tokens": args.max_new_tokens,
        "rounds": args.rounds,
        "temperature": args.temperature,
        "logprobs_mode": fast.logprobs_mode,
        "vllm_version": vllm.__version__,
        "device": torch.cuda.get_device_name(),
    }
    print(
        f"VLLMPolicy vs TransformersPolicy on {figures['device']}, {params / 1e6:.0f}M-parameter qwen2, "
        f"batch {args.batch} Kuhn poker prompts, {args.max_new_tokens} new tokens, {args.rounds} round(s)\n"
    )
    print(f"{'backend':<13} {'tokens':>8} {'seconds':>8} {'tokens/s':>10}")
    for label in ("vllm", "transformers"):
        print(f"{label:<13} {tokens[label]:>8} {seconds[label]:>8.2f} {rate[label]:>10.1f}")
    print(
        f"\nlog-probs of vLLM's {len(sampled)} replies rescored by TransformersPolicy.logprobs_of "
        f"(vLLM logprobs_mode={fast.logprobs_mode!r}, engine in bfloat16)"
    )
    print(f"{'reference':<13} {'max |diff|':>11} {'mean |diff|':>12}")
    print(f"{'bfloat16':<13} {bf16_max:>11.5f} {bf16_mean:>12.5f}")
    print(f"{'float32':<13} {fp32_max:>11.5f} {fp32_mean:>12.5f}")
    figures["seconds"] = round(time.perf_counter() - started, 2)
    return harness.emit(figures)


if __name__ == "__main__":
    main()
