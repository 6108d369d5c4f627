#!/usr/bin/env bash
# Set everything up (scripts/setup.sh) and run the whole test suite (unit, smoke, slow tiers).
# Usage: bash scripts/test.sh [extra pytest args]
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh
export RAY_AUTH_MODE=disabled PYTHONHASHSEED=0
.venv/bin/python -m pytest -q -p no:cacheprovider "$@"
