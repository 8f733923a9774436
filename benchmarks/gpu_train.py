"""GPU training step: the GRPO/RAE trainer's update on CUDA in bfloat16, with rollouts sampled by vLLM.

Needs a CUDA GPU and vLLM (``pip install 'llm_zoo[vllm]'``). Without them it prints one line saying
what is missing and ends with ``{"skipped": "..."}``, exit status 0.

The model is built from a config, offline: a Qwen2 decoder of about 0.5B parameters (hidden 1024,
24 layers, 16 heads of 64, MLP 5632) over llm_zoo's byte tokenizer, random weights, saved in
bfloat16 to a temporary folder. Two copies live on the GPU: the trainer's (transformers, bfloat16
weights and AdamW state) and vLLM's engine (:class:`~llm_zoo.policies.VLLMPolicy`, its share of
the GPU set by ``--gpu-memory-utilization``).

Each step drives the pieces of :mod:`llm_zoo.trainers.grpo` the way ``train()`` does:

1. GENERATE: ``rollout.collect`` plays Kuhn poker (rules in the prompt: about 600 prompt tokens),
   every seat served by the vLLM policy, all episodes side by side (one ``generate`` call a tick).
2. UPDATE: rewards -> RAE advantages -> ``grpo.update`` (the clipped token-level loss, one AdamW
   step) on the completion tokens, scored by the trainer's model.
3. SYNC: ``VLLMPolicy.sync_from(trainer model)`` copies the new weights into the engine in place.

The untrained model writes invalid replies, so each episode ends after one reply by forfeit; the
forfeiting seat gets -1 and its opponent +1, so RAE advantages are not zero and the update is a
real one. The first step warms up (kernels, allocator, CUDA graphs) and is not counted.

Figures (over the counted steps):

- seconds per step, split into generate, update and sync;
- generated tokens/s (completion tokens / generate time) and trained tokens/s (prompt + completion
  tokens of the update batch / update time);
- MFU = 6 * N * trained tokens / time / peak, with N the parameters outside the input embedding
  (6N: forward and backward, attention ignored) and peak the bfloat16 matmul rate measured here
  (8192 x 8192 matrices). ``mfu_update`` divides by the update time, ``mfu_step`` by the whole
  step. Every prompt token counts although the update runs a prefix shared by several prompts
  once, so this is useful work per second, not kernel utilisation;
- the mean |log-prob| gap between the engine and the trainer's model after the last sync, on
  fresh replies: small (bfloat16 rounding) when the sync carried the weights.

    python -m benchmarks.gpu_train            # 0.5B model, 256 episodes, 64 new tokens, 3 steps + 1 warm-up
    python -m benchmarks.gpu_train --quick    # a small model, 16 episodes, 16 new tokens, 2 steps + 1

The last line printed is a JSON object with those figures and the setting.
"""

from __future__ import annotations

import argparse
import random
import tempfile
import time
from pathlib import Path
from typing import Any

from benchmarks import _harness as harness

ENV = "kuhn_poker_v0"
ENV_KWARGS = {"rules_in_prompt": True, "max_retries": 0}


from llm_zoo.policies.vllm import missing_requirements  # noqa: E402


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    parser = harness.parser(__doc__, quick="small model, 16 episodes, 16 new tokens, 2 steps")
    parser.add_argument("--steps", type=int, default=3, help="counted steps (after one warm-up step)")
    parser.add_argument("--episodes", type=int, default=256, help="episodes per step")
    parser.add_argument("--max-new-tokens", type=int, default=64, help="longest reply, in tokens")
    parser.add_argument("--micro-batch", type=int, default=32, help="sequences per forward/backward")
    parser.add_argument("--lr", type=float, default=1e-5, help="AdamW learning rate")
    parser.add_argument("--gpu-memory-utilization", type=float, default=0.3, help="vLLM's share of the GPU")
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args(argv)
    if args.quick:
        args.steps, args.episodes, args.max_new_tokens, args.micro_batch = 2, 16, 16, 16
    for name in ("steps", "episodes", "max_new_tokens", "micro_batch"):
        if getattr(args, name) < 1:
            parser.error(f"--{name.replace('_', '-')} must be >= 1")
    return args


def model_shape(quick: bool) -> dict[str, int]:
    """Keyword arguments of ``build_tiny_model``: about 0.5B parameters, or a small model for ``--quick``."""
    from llm_zoo.models import BENCHMARK_SHAPES

    return dict(BENCHMARK_SHAPES["small" if quick else "0.5b"])


def measure_peak_flops(n: int = 8192, iters: int = 20) -> float:
    """Return the bfloat16 matmul rate of this GPU, in FLOP/s, from ``iters`` products of n x n matrices."""
    import torch

    a = torch.randn(n, n, device="cuda", dtype=torch.bfloat16)
    b = torch.randn(n, n, device="cuda", dtype=torch.bfloat16)
    for _ in range(3):
        a @ b
    start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    start.record()
    for _ in range(iters):
        a @ b
    end.record()
    torch.cuda.synchronize()
    return 2 * n**3 * iters / (start.elapsed_time(end) / 1e3)


def build_batch(
    episodes: list[Any], rae_state: Any, name: str
) -> list[tuple[list[int], list[int], list[float], float]]:
    """Return the update batch as ``train()`` builds it: each seat's return as the RAE advantage of its turns."""
    from llm_zoo.trainers import advantages as adv

    samples = [
        (e, agent, e.returns.get(agent, 0.0), f"{ENV}/{e.roles[agent]}")
        for e in episodes
        if not e.failed
        for agent in sorted(e.roles)
    ]
    advantages = adv.rae([s[2] for s in samples], [s[3] for s in samples], rae_state)
    return [
        (t.prompt_ids, t.completion_ids, t.logprobs, a)
        for (e, agent, _, _), a in zip(samples, advantages)
        for t in e.turns
        if t.agent == agent and t.completion_ids and t.policy == name
    ]


def main(argv: list[str] | None = None) -> dict[str, Any]:
    started = time.perf_counter()  # the JSON line's wall-clock "seconds"
    args = parse_args(argv)
    missing = missing_requirements()
    if missing is not None:
        return harness.skipped("gpu_train", missing)

    import torch
    import vllm
    from transformers import AutoModelForCausalLM, AutoTokenizer

    from llm_zoo.models import build_byte_tokenizer, build_tiny_model, save_tiny
    from llm_zoo.policies import TransformersPolicy, VLLMPolicy
    from llm_zoo.trainers import advantages as adv
    from llm_zoo.trainers.grpo import Learner, make_config, update
    from llm_zoo.trainers.rollout import collect

    peak = measure_peak_flops()
    torch.cuda.empty_cache()  # vLLM sizes itself from the free memory: hand the matmul buffers back
    config = make_config(
        ENV,
        {
            "env_kwargs": ENV_KWARGS,
            "max_new_tokens": args.max_new_tokens,
            "episodes_per_step": args.episodes,
            "micro_batch_size": args.micro_batch,
            "lr": args.lr,
            "temperature": 1.0,
            "algorithm": "rae",
            "seed": args.seed,
        },
    )
    with tempfile.TemporaryDirectory() as tmp:
        tokenizer = build_byte_tokenizer()
        save_tiny(
            Path(tmp),
            tokenizer,
            build_tiny_model(tokenizer, arch="qwen2", seed=args.seed, **model_shape(args.quick)).to(
                torch.bfloat16
            ),
        )
        # The engine first: vLLM sizes its KV cache from the memory free when it starts.
        engine = VLLMPolicy(
            tmp,
            name="main",
            temperature=config.temperature,
            max_new_tokens=config.max_new_tokens,
            gpu_memory_utilization=args.gpu_memory_utilization,
        )
        model = AutoModelForCausalLM.from_pretrained(tmp, dtype=torch.bfloat16)
        policy = TransformersPolicy(
            model,
            AutoTokenizer.from_pretrained(tmp),
            name="main",
            device="cuda",
            temperature=config.temperature,
            max_new_tokens=config.max_new_tokens,
        )
    learner = Learner("main", policy, torch.optim.AdamW(policy.model.parameters(), lr=config.lr))
    n_params = (
        sum(p.numel() for p in learner.model.parameters())
        - learner.model.get_input_embeddings().weight.numel()
    )

    rae_state = adv.RAEState()
    totals = {"generate": 0.0, "update": 0.0, "sync": 0.0, "generated": 0, "trained": 0, "sequences": 0}
    rows = []
    for step in range(args.steps + 1):
        rng = random.Random(f"{args.seed}/{step}")
        seeds = [rng.randrange(2**31) for _ in range(config.episodes_per_step)]
        torch.cuda.synchronize()
        t0 = time.perf_counter()
        # GENERATE
        episodes = collect(
            ENV,
            {"player": engine},
            seeds,
            batch_size=len(seeds),
            env_kwargs=config.env_kwargs,
            seed=rng.randrange(2**31),
        )
        t1 = time.perf_counter()
        # UPDATE
        batch = build_batch(episodes, rae_state, learner.name)
        stats = update(learner, batch, config)
        torch.cuda.synchronize()
        t2 = time.perf_counter()
        # SYNC
        engine.sync_from(learner.model)
        torch.cuda.synchronize()
        t3 = time.perf_counter()
        generated = sum(e.completion_tokens for e in episodes)
        trained = sum(len(p) + len(c) for p, c, _, _ in batch)
        rows.append((step, len(batch), generated, trained, t1 - t0, t2 - t1, t3 - t2, stats["loss"]))
        if step == 0:
            continue  # warm-up
        for key, value in zip(
            ("generate", "update", "sync", "generated", "trained", "sequences"),
            (t1 - t0, t2 - t1, t3 - t2, generated, trained, len(batch)),
        ):
            totals[key] += value

    # Did the sync carry the weights? Fresh replies, rescored by the trainer's model.
    probe = collect(ENV, {"player": engine}, 16, env_kwargs=config.env_kwargs, seed=args.seed)
    turns = [t for e in probe for t in e.turns if t.completion_ids]
    scored = learner.policy.logprobs_of([t.prompt_ids for t in turns], [t.completion_ids for t in turns])
    gaps = [abs(a - b) for t, row in zip(turns, scored) for a, b in zip(t.logprobs, row)]

    step_s = totals["generate"] + totals["update"] + totals["sync"]
    flops = 6 * n_params * totals["trained"]
    figures = {
        "step_s": round(step_s / args.steps, 3),
        "generate_s": round(totals["generate"] / args.steps, 3),
        "update_s": round(totals["update"] / args.steps, 3),
        "sync_s": round(totals["sync"] / args.steps, 3),
        "generated_tokens_per_s": round(totals["generated"] / totals["generate"], 1),
        "trained_tokens_per_s": round(totals["trained"] / totals["update"], 1),
        "mfu_update": round(flops / totals["update"] / peak, 4),
        "mfu_step": round(flops / step_s / peak, 4),
        "peak_bf16_tflops": round(peak / 1e12, 1),
        "logprob_mean_abs_diff_after_sync": round(sum(gaps) / max(1, len(gaps)), 5),
        "params": n_params,
        "episodes": args.episodes,
        "max_new_tokens": args.max_new_tokens,
        "micro_batch": args.micro_batch,
        "steps": args.steps,
        "vllm_version": vllm.__version__,
        "device": torch.cuda.get_device_name(),
    }
    print(
        f"trainer step with vLLM generation on {figures['device']}: {n_params / 1e6:.0f}M non-embedding "
        f"parameters, {args.episodes} Kuhn poker episodes, {args.max_new_tokens} new tokens; "
        f"measured bf16 peak {figures['peak_bf16_tflops']} TFLOP/s\n"
    )
    print(
        f"{'step':>4} {'seqs':>5} {'gen tok':>8} {'train tok':>10} {'generate s':>11} {'update s':>9} "
        f"{'sync s':>7} {'loss':>9}"
    )
    for step, seqs, gen, trained, tg, tu, ts, loss in rows:
        label = f"{step}*" if step == 0 else str(step)
        print(f"{label:>4} {seqs:>5} {gen:>8} {trained:>10} {tg:>11.3f} {tu:>9.3f} {ts:>7.3f} {loss:>9.4f}")
    print("* warm-up, not counted\n")
    print(
        f"per step: {figures['step_s']} s = generate {figures['generate_s']} + update {figures['update_s']} "
        f"+ sync {figures['sync_s']}"
    )
    print(
        f"generated {figures['generated_tokens_per_s']} tokens/s, trained {figures['trained_tokens_per_s']} tokens/s; "
        f"MFU update {figures['mfu_update']:.1%}, step {figures['mfu_step']:.1%}"
    )
    print(
        f"after the last sync, mean |log-prob gap| engine vs trainer: {figures['logprob_mean_abs_diff_after_sync']}"
    )
    figures["seconds"] = round(time.perf_counter() - started, 2)
    return harness.emit(figures)


if __name__ == "__main__":
    main()
