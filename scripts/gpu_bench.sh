#!/usr/bin/env bash
# On a machine with a CUDA GPU: the GPU benchmarks (full settings) and the vLLM tests, one after the other,
# with vLLM's CUDA build. Everything they print goes to $OUT (default runs/gpu); the JSON lines end each .txt.
# Usage: bash scripts/gpu_bench.sh                 # PYTHON=... names an interpreter that already has vLLM
# Without vLLM in $PYTHON it installs vllm (which brings its CUDA torch) into .venv-gpu, where a registry is reachable.
set -euo pipefail
cd "$(dirname "$0")/.."
OUT=${OUT:-runs/gpu}
mkdir -p "$OUT"
nvidia-smi > "$OUT/nvidia-smi.txt" 2>&1 || { echo "gpu_bench: no CUDA GPU here (nvidia-smi failed)" >&2; exit 1; }
PY=${PYTHON:-python3}
if ! "$PY" -c "import vllm" 2>/dev/null; then
    [ -x .venv-gpu/bin/python ] || "$PY" -m venv .venv-gpu
    PY=.venv-gpu/bin/python
    "$PY" -m pip install -q "vllm>=0.10.2" -e ".[llm,dev]"
fi
export PYTHONPATH=$PWD
"$PY" -c "import torch, vllm; assert torch.cuda.is_available(), 'torch sees no CUDA GPU'; \
print('vllm', vllm.__version__, 'torch', torch.__version__, torch.cuda.get_device_name())" | tee "$OUT/versions.txt"
status=0
for script in gpu_policies gpu_train vllm_throughput; do
    echo "== $script"
    timeout 600 "$PY" -m "benchmarks.$script" > "$OUT/$script.txt" 2> "$OUT/$script.err" || status=$?
    tail -1 "$OUT/$script.txt"
done
LLM_ZOO_REQUIRE_VLLM=1 timeout 900 "$PY" -m pytest -q -p no:cacheprovider -m vllm tests/policies/test_vllm.py \
    tests/trainers/test_grpo_vllm.py tests/test_benchmarks_vllm.py > "$OUT/tests.txt" 2>&1 || status=$?
timeout 900 "$PY" -m pytest -q -p no:cacheprovider tests/test_benchmarks_gpu.py >> "$OUT/tests.txt" 2>&1 || status=$?
tail -3 "$OUT/tests.txt"
exit "$status"
