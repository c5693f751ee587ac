#!/usr/bin/env bash
# The main job: install, start parrot-serve from policies.yaml, run the chain-summary example
# against it twice (as Parrot's DAG and as a request-level client), print both end-to-end
# times and their ratio, stop the server.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/install.sh
exec .venv/bin/python scripts/demo.py "$@"
