#!/usr/bin/env bash
# The paper's experiments live on ONE H200: builtin engine, LLaMA-7B shape, random weights,
# bf16 (configs/live_h200_llama7b.yaml); chain summary, concurrent chains, map-reduce (3 apps),
# copilot (32 and 64 users; no sharing, sharing, static sharing) and multi_agent (8 files;
# the paper's 16 files with `--only multi_agent_16`, on an engine with 8,192 positions);
# then gpts and mixed on two engines sharing the H200 (configs/live_h200_two_engines_llama7b.yaml).
# One set of engine processes serves every run of its group; a warm-up pass runs each shape
# before timing. Writes $OUT/results.json and $OUT/table.txt and prints the table; ~12 minutes
# wall for everything, ~6-7 for `--only gpts,mixed`.
#
#   OUT=/tmp/live bench/live_paper.sh [--only KEY1,KEY2] [--tokenizer DIR]
#   PARROT_LIVE_SMOKE=1 OUT=/tmp/smoke bench/live_paper.sh   # tiny model on the CPU
set -euo pipefail
cd "$(dirname "$0")/.."
PYTHON="${PYTHON:-python}"
OUT="${OUT:-live_out}"
mkdir -p "$OUT"
exec "$PYTHON" bench/paper/live.py --out "$OUT" "$@"
