#!/usr/bin/env bash
# Install everything the test suite needs into .venv (and bubblewrap, for the sandbox tests), then run it.
# Usage: bash scripts/test.sh [pytest args...]
set -euo pipefail
cd "$(dirname "$0")/.."

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

PY=${PYTHON:-python3}
[ -x .venv/bin/python ] || "$PY" -m venv .venv
.venv/bin/python -m pip install -q --upgrade pip >/dev/null 2>&1 || true
# torch==2.13.0: a CPU build where the machine has one on disk, and no multi-GB CUDA download.
.venv/bin/python -m pip install -q "torch==2.13.0" -e ".[all]" 2>&1 | grep -v "^WARNING: Location" || true
.venv/bin/python -c "import llm_zoo, torch, transformers, pettingzoo" # fail early if the install did not take
exec .venv/bin/python -m pytest -q -p no:cacheprovider "$@"
