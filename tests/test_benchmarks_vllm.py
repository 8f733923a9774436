"""Smoke tests of benchmarks/vllm_throughput.py and vllm_kuhn.py at their --quick settings, run as scripts.

With vLLM (the vLLM stage of scripts/test.sh) vllm_throughput must measure both backends, the push
and the disk reload, with log-probs that agree, and vllm_kuhn must train and evaluate both
generations; without vLLM each must say so and end with ``{"skipped": ...}``, and under
``LLM_ZOO_REQUIRE_VLLM=1`` a missing vLLM fails the test instead.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

pytest.importorskip("torch")
pytest.importorskip("transformers")

from llm_zoo.policies.vllm import missing_requirements  # noqa: E402

SCRIPT = Path(__file__).resolve().parents[1] / "benchmarks" / "vllm_throughput.py"


@pytest.mark.vllm
def test_quick_run_measures_both_backends_and_the_push():
    missing = missing_requirements(gpu=False)
    if missing is not None and os.environ.get("LLM_ZOO_REQUIRE_VLLM") == "1":
        pytest.fail(f"LLM_ZOO_REQUIRE_VLLM=1 (scripts/test.sh's vLLM stage) but this environment {missing}")
    run = subprocess.run([sys.executable, "-m", "benchmarks.vllm_throughput", "--quick"], cwd=SCRIPT.parents[1],
                         capture_output=True, text=True, timeout=600)
    assert run.returncode == 0, run.stderr[-3000:]
    lines = run.stdout.strip().splitlines()
    figures = json.loads(lines[-1])
    if missing is not None:
        assert figures == {"skipped": missing} and "skipped" in lines[0]
        return
    for key in ("vllm_tokens_per_s", "transformers_tokens_per_s", "push_s", "disk_reload_s"):
        assert figures[key] > 0, figures
    ratio = figures["vllm_tokens_per_s"] / figures["transformers_tokens_per_s"]
    assert figures["ratio"] == pytest.approx(ratio, rel=0.01, abs=1e-3)  # both sides rounded
    assert figures["logprob_max_abs_diff"] < 1e-3 and figures["logprob_max_abs_diff_after_push"] < 1e-3, figures
    assert figures["batch"] == 8 and figures["max_new_tokens"] == 8 and figures["rounds"] == 1
    assert any(line.startswith("vllm ") for line in lines) and any("in place (sync_from)" in line for line in lines)


@pytest.mark.vllm
def test_kuhn_quick_run_trains_and_evaluates_both_generations():
    missing = missing_requirements(gpu=False)
    if missing is not None and os.environ.get("LLM_ZOO_REQUIRE_VLLM") == "1":
        pytest.fail(f"LLM_ZOO_REQUIRE_VLLM=1 (scripts/test.sh's vLLM stage) but this environment {missing}")
    run = subprocess.run([sys.executable, "-m", "benchmarks.vllm_kuhn", "--quick"], cwd=SCRIPT.parents[1],
                         capture_output=True, text=True, timeout=600)
    assert run.returncode == 0, run.stderr[-3000:]
    lines = run.stdout.strip().splitlines()
    figures = json.loads(lines[-1])
    if missing is not None:
        assert figures == {"skipped": missing}
        return
    assert figures["steps"] == 4 and figures["seeds"] == 1
    for generation in ("transformers", "vllm"):
        (value,) = figures[f"{generation}_exploitability"]
        assert 0 < value < 0.5 and figures[f"{generation}_step_s"] > 0, figures  # the uniform policy: 0.458
    assert figures["mean_gap"] == pytest.approx(figures["vllm_mean"] - figures["transformers_mean"], abs=2e-4)
    assert sum(line.startswith(("transformers ", "vllm ")) for line in lines) == 2  # a table row per run


def test_bad_setting_is_refused():
    run = subprocess.run([sys.executable, "-m", "benchmarks.vllm_throughput", "--batch", "0"], cwd=SCRIPT.parents[1],
                         capture_output=True, text=True, timeout=120)
    assert run.returncode == 2 and "--batch must be >= 1" in run.stderr


def test_bench_runs_the_script_with_the_interpreter_its_comment_names(tmp_path):
    from llm_zoo import bench

    venv_python = bench.ROOT / ".venv-vllm" / "bin" / "python"
    assert bench._python(SCRIPT) == (str(venv_python) if venv_python.is_file() else sys.executable)
    plain = tmp_path / "plain.py"
    plain.write_text('"""No interpreter named."""\n')
    assert bench._python(plain) == sys.executable
    missing = tmp_path / "missing.py"
    missing.write_text("# bench-python: .no-such-venv/bin/python\n")
    assert bench._python(missing) == sys.executable  # named but absent: this interpreter, which then skips
