#!/usr/bin/env bash
# ruff and mypy as configured in pyproject.toml ([tool.ruff], [tool.mypy]); lists every finding
# of each (file:line, code, message) with their count, and fails if either has any.
# scripts/test.sh runs it after pytest.
set -uo pipefail
cd "$(dirname "$0")/.."
PY=${PYTHON:-.venv/bin/python}
if ! "$PY" -c "import ruff, mypy" 2>/dev/null; then
  echo "ruff/mypy missing: $PY -m pip install -e '.[lint]'" >&2
  exit 2
fi
"$PY" -m ruff check --output-format concise .
ruff_rc=$?
"$PY" -m mypy
mypy_rc=$?
exit $(( ruff_rc != 0 || mypy_rc != 0 ))
