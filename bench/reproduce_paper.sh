#!/usr/bin/env bash
# Regenerate the simulated half of docs/RESULTS.md: every experiment of the paper on the
# simulated cluster (profile h200_llama7b), JSON + tables + plots under docs/results/paper/,
# and the table between the paper-table markers of docs/RESULTS.md; then the same experiments
# with the caps calibrated to the profile, under docs/results/paper_calibrated/
# Deterministic (seed 0). About 5 minutes on 2 cores (JOBS=2); the page records the last
# measured times.
#
#   bench/reproduce_paper.sh            # PYTHON=... to pick the interpreter, JOBS=N
set -euo pipefail
cd "$(dirname "$0")/.."
PYTHON="${PYTHON:-python}"
rm -rf docs/results/paper docs/results/paper_calibrated
"$PYTHON" -m bench.paper.reproduce --out docs/results/paper --page docs/RESULTS.md \
    --jobs "${JOBS:-2}"
# the same experiments with the caps calibrated to the profile (docs/RESULTS.md); the page
# links only the main table's plots, so this one keeps its tables and summaries alone
exec "$PYTHON" -m bench.paper.reproduce --calibrate --no-plots \
    --out docs/results/paper_calibrated --jobs "${JOBS:-2}"
