#!/usr/bin/env bash
# Create .venv (if missing) and install the project with pinned versions, then the Python client
# (clients/python, its own distribution), both editable. Idempotent.
set -euo pipefail
cd "$(dirname "$0")/.."
PYTHON="${PYTHON:-python3.11}"
command -v "$PYTHON" >/dev/null 2>&1 || PYTHON=python3
if [ ! -x .venv/bin/python ]; then
  "$PYTHON" -m venv .venv
fi
stamp=.venv/.installed-$(cat pyproject.toml constraints.txt clients/python/pyproject.toml \
  | sha256sum | cut -c1-16)
if [ ! -f "$stamp" ]; then
  .venv/bin/python -m pip install --quiet --upgrade pip
  .venv/bin/python -m pip install --quiet -c constraints.txt -e '.[dev]'
  .venv/bin/python -m pip install --quiet -c constraints.txt -e './clients/python'
  rm -f .venv/.installed-*
  touch "$stamp"
fi
