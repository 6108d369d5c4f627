#!/usr/bin/env bash
# Create .venv (if missing) and install the project with everything it needs, CPU-only.
# Usage: bash scripts/setup.sh        (idempotent; re-running only checks the installs)
set -euo pipefail
cd "$(dirname "$0")/.."
PY=${PYTHON:-python3}
if [ ! -x .venv/bin/python ]; then
  "$PY" -m venv .venv
fi
.venv/bin/python -m pip install -q --upgrade pip >/dev/null 2>&1 || true
# torch first and pinned: an unpinned torch pulls gigabytes of CUDA packages.
.venv/bin/python -m pip install -q torch==2.13.0
.venv/bin/python -m pip install -q -r requirements.txt
.venv/bin/python -m pip install -q -e . --no-deps
.venv/bin/python -c "import torch, noma_prorl_bench; print('setup ok: torch', torch.__version__)"
