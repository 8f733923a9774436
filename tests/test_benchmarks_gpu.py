"""Smoke tests of benchmarks/gpu_policies.py and benchmarks/gpu_train.py, run as scripts.

Without vLLM or a CUDA GPU each must say what it needs, end with ``{"skipped": ...}`` and exit 0.
With both, the ``--quick`` setting runs for real and ends with its figures.
"""

from __future__ import annotations

import importlib.util
import json
import subprocess
import sys
from pathlib import Path

import pytest

BENCHMARKS = Path(__file__).resolve().parents[1] / "benchmarks"


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
