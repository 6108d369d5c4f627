#!/usr/bin/env bash
# The GPU study (benchmarks/studies/gpu_study.py, docs/gpu.md).
#   bash scripts/gpu_study.sh prepare [flags]   here: wheels + the model's GGUF in parts into .gpu_carry/, the calls
#   bash scripts/gpu_study.sh device [flags]    on the GPU machine: the phases within --budget_s, resumable
# `device` uses python3 (the device image's torch) unless PY is set, and results go to $OUT.
set -euo pipefail
cd "$(dirname "$0")/.."
cmd=${1:-}
[ $# -gt 0 ] && shift
export PYTHONPATH="$PWD/src${PYTHONPATH:+:$PYTHONPATH}" PYTHONUNBUFFERED=1 PYTHONHASHSEED=0 RAY_AUTH_MODE=disabled \
  HF_HUB_OFFLINE=1 TOKENIZERS_PARALLELISM=false TRANSFORMERS_VERBOSITY=error
case "$cmd" in
  prepare) exec "${PY:-.venv/bin/python}" benchmarks/studies/gpu_study.py prepare "$@" ;;
  device)
    mkdir -p runs/gpu_study
    "${PY:-python3}" benchmarks/studies/gpu_study.py device "$@" 2>&1 | tee -a runs/gpu_study/study.log
    exit "${PIPESTATUS[0]}" ;;
  *) echo "usage: scripts/gpu_study.sh {prepare|device} [flags]  (allowed: prepare, device)" >&2; exit 2 ;;
esac
