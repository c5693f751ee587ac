#!/usr/bin/env bash
# Install everything, run the whole test suite (GPU tests skip without a GPU), then the static
# checks (ruff and mypy as configured in pyproject.toml: scripts/lint.sh). CI runs exactly this.
# The checks run after pytest so a failing test is reported first; extra arguments go to pytest.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/install.sh
.venv/bin/python -m pytest -q "$@"
exec bash scripts/lint.sh
