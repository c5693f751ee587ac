#!/usr/bin/env bash
# The paper's experiments live on ONE H200: builtin engine, LLaMA-7B shape, random weights,
# bf16 (configs/live_h200_llama7b.yaml); chain summary, concurrent chains, map-reduce (3 apps),
# copilot (32 and 64 users; no sharing, sharing, static sharing) and multi_agent (8 files).
# One engine process serves every run; a warm-up pass runs each shape before timing.
# Writes $OUT/results.json and $OUT/table.txt and prints the table; ~6-8 minutes wall.
#
#   OUT=/tmp/live scripts/live_paper.sh
#   PARROT_LIVE_SMOKE=1 OUT=/tmp/smoke scripts/live_paper.sh   # tiny model on the CPU
set -euo pipefail
cd "$(dirname "$0")/.."
PYTHON="${PYTHON:-python}"
OUT="${OUT:-live_out}"
mkdir -p "$OUT"
exec "$PYTHON" scripts/live_paper.py --out "$OUT" "$@"
