#!/usr/bin/env bash
# The main job: install, start parrot-serve from policies.yaml, run the chain-summary example
# against it, print the result and the end-to-end time, stop the server.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/install.sh
exec .venv/bin/python scripts/demo.py "$@"
