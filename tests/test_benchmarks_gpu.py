"""Smoke tests of the GPU benchmarks (benchmarks/gpu_*.py), run as scripts, and of scripts/gpu_bench.sh.

Without vLLM or a CUDA GPU gpu_policies and gpu_train must say what they need, end with ``{"skipped": ...}`` and
exit 0; with both, their ``--quick`` setting runs for real and ends with its figures. gpu_pretrained runs its
``--quick`` setting on a CPU here (``--device cpu``, a tiny model built in code), and on a GPU where there is one.
"""

from __future__ import annotations

import importlib.util
import json
import math
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

BENCHMARKS = Path(__file__).resolve().parents[1] / "benchmarks"
GPU_BENCH = BENCHMARKS.parent / "scripts" / "gpu_bench.sh"


def _has_cuda() -> bool:
    if importlib.util.find_spec("torch") is None:
        return False
    import torch

    return torch.cuda.is_available()


def _has_gpu_and_vllm() -> bool:
    if importlib.util.find_spec("vllm") is None or importlib.util.find_spec("torch") is None:
        return False
    import torch

    return torch.cuda.is_available()


@pytest.mark.parametrize(
    ("script", "keys"),
    [
        ("gpu_policies.py", ("vllm_tokens_per_s", "transformers_tokens_per_s", "logprob_mean_abs_diff_bf16")),
        (
            "gpu_train.py",
            ("step_s", "generate_s", "update_s", "mfu_update", "logprob_mean_abs_diff_after_sync"),
        ),
    ],
)
def test_script_exits_0_and_ends_with_its_json_line(script, keys):
    run = subprocess.run(
        [sys.executable, "-m", f"benchmarks.{Path(script).stem}", "--quick"], cwd=BENCHMARKS.parent,
        capture_output=True, text=True, timeout=900
    )
    assert run.returncode == 0, run.stderr[-2000:]
    lines = run.stdout.strip().splitlines()
    figures = json.loads(lines[-1])
    if _has_gpu_and_vllm():
        assert all(figures[key] >= 0 for key in keys), figures
    else:
        assert list(figures) == ["skipped"]
        assert "CUDA GPU" in figures["skipped"]  # what it needs, whichever is missing
        assert len(lines) == 2 and "skipped" in lines[0] and "needs" in lines[0]


# ---- gpu_pretrained: the trainer on a pretrained model ------------------------------------------

# a byte-level tiny model spells Kuhn's prompt (with its rules) in about 900 tokens: over the preset's 384 for SmolLM2
TINY_PROMPTS = ["--set", "max_prompt_tokens=2048", "--set", "max_forward_tokens=8192"]
CELL_FIELDS = ("step_s", "rollout_s", "update_s", "generated_tokens_per_s", "trained_tokens_per_s", "mfu_update",
               "mfu_step", "generated_tokens", "trained_tokens", "peak_gib", "estimated_gib", "flops_per_token")


def _pretrained(*args: str) -> tuple[dict, list[str]]:
    run = subprocess.run([sys.executable, "-m", "benchmarks.gpu_pretrained", *args], cwd=BENCHMARKS.parent,
                         capture_output=True, text=True, timeout=900)
    assert run.returncode == 0, run.stderr[-3000:]
    lines = run.stdout.strip().splitlines()
    return json.loads(lines[-1]), lines


def _check_ok_cell(row: dict, steps: int) -> None:
    assert row["status"] == "ok", row
    assert all(isinstance(row[k], (int, float)) and math.isfinite(row[k]) for k in CELL_FIELDS), row
    assert row["rollout_s"] > 0 and row["update_s"] > 0
    assert math.isclose(row["step_s"], row["rollout_s"] + row["update_s"], abs_tol=2e-3), row
    # Kuhn's replies are a move each; the update runs prompt and completion of every sample
    assert row["generated_tokens"] > 0 and row["trained_tokens"] > row["generated_tokens"], row
    assert row["skipped_samples"] == 0, row  # entropy_coef: the update runs every sample, whatever its advantage
    # the row rounds rollout_s to 1 ms a step (a tiny model's rollout is not far above it) and tokens/s to 0.1
    fastest = row["generated_tokens"] / (max(row["rollout_s"] - 5e-4, 1e-9) * steps)
    slowest = row["generated_tokens"] / ((row["rollout_s"] + 5e-4) * steps)
    assert slowest * 0.999 - 0.05 <= row["generated_tokens_per_s"] <= fastest * 1.001 + 0.05, row
    assert 0 < row["mfu_step"] < row["mfu_update"], row  # the step's seconds include the update's
    assert row["peak_gib"] > 0 and row["estimated_gib"] > 0


@pytest.mark.torch
def test_pretrained_quick_on_a_cpu_trains_lora_and_full_and_reports_the_vllm_cells_as_skipped(tiny_model_dir):
    model = tiny_model_dir("pretrained", shape="smallest")
    figures, lines = _pretrained("--quick", "--device", "cpu", "--model", str(model), *TINY_PROMPTS)
    assert figures["device"] and figures["peak_tflops"] > 0 and figures["peak_source"].startswith("measured")
    assert figures["random_weights"] is False and figures["source"] == str(model)
    assert figures["steps"] == 1 and figures["warmup"] == 0 and figures["seconds"] > 0
    cells = {(c["env"], c["update"], c["generation"]): c for c in figures["cells"]}
    assert list(cells) == [("kuhn_poker_v0", "lora", "transformers"), ("kuhn_poker_v0", "full", "transformers"),
                           ("kuhn_poker_v0", "full", "vllm"), ("kuhn_poker_v0", "lora", "vllm")]
    lora, full = cells["kuhn_poker_v0", "lora", "transformers"], cells["kuhn_poker_v0", "full", "transformers"]
    for row in (lora, full):
        _check_ok_cell(row, steps=1)
        assert row["episodes_per_step"] == 4
    assert lora["lora_r"] == 16 and full["lora_r"] == 0
    n = figures["params_n"]
    assert full["flops_per_token"] == 6 * n and lora["flops_per_token"] > 4 * n  # 4N + 6A, A > 0
    # a CUDA-only cell is a row that says why it did not run, never counted with the ones that did
    for key in (("kuhn_poker_v0", "full", "vllm"), ("kuhn_poker_v0", "lora", "vllm")):
        assert cells[key]["status"] == "skipped" and "--device cuda" in cells[key]["reason"]
        assert "step_s" not in cells[key]
    assert figures["ok"] == 2 and figures["errors"] == 0
    assert any(line.startswith("| kuhn_poker_v0 | lora") for line in lines)  # the table, one row per cell


@pytest.mark.torch
def test_pretrained_random_weights_need_only_the_config_and_tokenizer(tiny_model_dir, tmp_path):
    model = tiny_model_dir("shape", shape="smallest")
    shape = tmp_path / "shape"
    shape.mkdir()
    for path in model.iterdir():
        if "safetensors" not in path.name and not path.name.endswith(".bin"):
            shutil.copy(path, shape / path.name)
    assert not any(shape.glob("*.safetensors"))
    figures, _ = _pretrained("--quick", "--device", "cpu", "--model", str(shape), "--random-weights", "--updates",
                             "full", "--generations", "transformers", *TINY_PROMPTS)
    assert figures["random_weights"] is True and figures["source"] is None
    [row] = figures["cells"]
    _check_ok_cell(row, steps=1)
    assert figures["params_n"] > 0 and row["flops_per_token"] == 6 * figures["params_n"]


@pytest.mark.torch
def test_pretrained_flops_count_the_adapters_peft_trains(tiny_model_dir):
    from benchmarks.gpu_pretrained import flops_per_token, model_flops
    from llm_zoo.models import add_lora, load_pretrained

    folder = tiny_model_dir("flops", shape="smallest")
    _, model = load_pretrained(folder)
    embedding = model.get_input_embeddings().weight.numel()
    n, none = model_flops(str(folder), lora_r=0)
    assert none == 0 and n == sum(p.numel() for p in model.parameters()) - embedding  # its output layer is untied
    _, adapters = model_flops(str(folder), lora_r=4)
    peft_model = add_lora(model, folder, r=4, alpha=8.0, dropout=0.0)
    assert adapters == sum(p.numel() for p in peft_model.parameters() if p.requires_grad) > 0
    assert flops_per_token(n, adapters, "full") == 6 * n and flops_per_token(n, adapters, "lora") == 4 * n + 6 * adapters


def test_pretrained_peak_table_matches_a_variant_before_its_family():
    from benchmarks.gpu_pretrained import PEAK_BF16_TFLOPS

    def peak(name: str) -> float | None:
        return next((tflops for part, tflops in PEAK_BF16_TFLOPS if part in name), None)

    assert peak("NVIDIA H200") == 989.0 and peak("NVIDIA H200 NVL") == 835.0
    assert peak("NVIDIA H100 PCIe") == 756.0 and peak("NVIDIA H100 80GB HBM3") == 989.0
    assert peak("NVIDIA GeForce RTX 4090") is None  # measured instead


def test_pretrained_without_a_gpu_says_what_it_needs():
    if _has_cuda():
        pytest.skip("a CUDA GPU is here: test_pretrained_quick_on_a_gpu_... runs the GPU setting instead")
    figures, lines = _pretrained("--quick")
    assert list(figures) == ["skipped"] and "CUDA GPU" in figures["skipped"] and "--device cpu" in figures["skipped"]
    assert len(lines) == 2 and "skipped" in lines[0]


@pytest.mark.torch
def test_pretrained_quick_on_a_gpu_measures_every_cell_or_says_why_not(tiny_model_dir):
    if not _has_cuda():
        pytest.skip("needs a CUDA GPU: torch.cuda.is_available() is False (the CPU setting is tested above)")
    # heads of 64, as vLLM's attention kernels take (the smallest shape's heads of 8 they may refuse)
    model = tiny_model_dir("pretrained_gpu", hidden_size=256, num_layers=2, num_heads=4)
    figures, _ = _pretrained("--quick", "--updates", "full", "lora", "--model", str(model), *TINY_PROMPTS)
    assert figures["peak_tflops"] > 0
    cells = {(c["update"], c["generation"]): c for c in figures["cells"]}
    for key in (("lora", "transformers"), ("full", "transformers")):
        _check_ok_cell(cells[key], steps=1)
        assert cells[key]["device_used_gib"] >= cells[key]["peak_gib"] > 0
    for key in (("full", "vllm"), ("lora", "vllm")):  # an error row says what failed; a crash would fail above
        assert cells[key]["status"] == "ok" or cells[key]["error"], cells[key]
    if _has_gpu_and_vllm():
        _check_ok_cell(cells["full", "vllm"], steps=1)


# ---- scripts/gpu_bench.sh -----------------------------------------------------------------------


def test_gpu_bench_parses_and_runs_the_pretrained_benchmark_with_its_fallback():
    text = GPU_BENCH.read_text()
    check = subprocess.run(["bash", "-n", str(GPU_BENCH)], capture_output=True, text=True)
    assert check.returncode == 0, check.stderr
    if shutil.which("shellcheck"):
        lint = subprocess.run(["shellcheck", str(GPU_BENCH)], capture_output=True, text=True)
        assert lint.returncode == 0, lint.stdout
    assert "benchmarks.gpu_pretrained --model \"$MODEL\"" in text
    assert "MODEL=${MODEL:-HuggingFaceTB/SmolLM2-135M-Instruct}" in text and "MODEL=smollm2-135m" in text
    assert "CATALOGUE['smollm2-135m'].install" in text  # the catalogue's own install line, never a copy of it
    assert 'MODEL=$MODEL_SHAPE' in text and "random_weights=--random-weights" in text  # the last fallback
    # every benchmark in benchmarks/gpu_*.py runs, each as a step under the budget's timeout
    for script in sorted(BENCHMARKS.glob("gpu_*.py")):
        assert re.search(rf"^\s*step {script.stem} \d+ ", text, re.M), f"gpu_bench.sh does not run {script.stem}"
    steps = re.findall(r"^\s*step (\S+) (\d+) ", text, re.M)
    assert len(steps) >= 6 and all(int(cap) <= 600 for _, cap in steps)
    assert 'timeout "$cap" "$@"' in text and "BUDGET_S=${BUDGET_S:-780}" in text
