#!/usr/bin/env bash
# Set up (scripts/setup.sh), lint (ruff), type-check (mypy) and run the whole test suite (all tiers).
# ruff and mypy settings are in pyproject.toml (mypy checks algorithms/, rollout/, training/, config/).
# Usage: bash scripts/test.sh [extra pytest args]
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh
export RAY_AUTH_MODE=disabled PYTHONHASHSEED=0
.venv/bin/ruff check .
.venv/bin/mypy
.venv/bin/python -m pytest -q -p no:cacheprovider "$@"
