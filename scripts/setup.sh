#!/usr/bin/env bash
# Create .venv (if missing) and install the project with everything it needs, CPU-only.
# Usage: bash scripts/setup.sh        (idempotent; re-running only checks the installs, ~15 s)
set -euo pipefail
cd "$(dirname "$0")/.."
PY=${PYTHON:-python3}
say() { printf '[setup %4ss] %s\n' "$SECONDS" "$*"; }
# pip's own lines that say what it fetches and installs (not "Requirement already satisfied")
progress() { { grep -E --line-buffered '^(Collecting|Installing collected|Successfully installed)' || true; } \
             | sed -u -e 's/^/    /' -e 's/^\(.\{150\}\).*/\1 .../'; }
PIP=(.venv/bin/python -m pip install --disable-pip-version-check --progress-bar off)

say "installing into .venv: CPU torch, numpy, matplotlib, ray, transformers/trl/peft, tensorboard, pytest"
say "a new .venv takes ~1.5 min on 2 idle cores with pip's cache warm (2 GB unpacked; minutes more to download, or on busy cores); an existing one ~15 s"
if [ ! -x .venv/bin/python ]; then
  say "creating .venv with $("$PY" --version 2>&1)"
  "$PY" -m venv .venv
fi
LOG=.venv/setup.log
: > "$LOG"
pip_step() {    # pip with its fetch/install lines shown; on failure the log's tail, then exit 1
  if ! "${PIP[@]}" "$@" 2>&1 | tee -a "$LOG" | progress; then
    say "pip failed; last lines of $LOG:"; tail -n 20 "$LOG"; exit 1
  fi
}
say "1/4 pip itself"
"${PIP[@]}" -q --upgrade pip >/dev/null 2>&1 || true
say "2/4 torch==2.13.0, the CPU build (pinned: an unpinned torch pulls gigabytes of CUDA packages)"
pip_step torch==2.13.0
say "3/4 requirements.txt (pinned: ray, transformers, trl, peft, tensorboard, matplotlib, safetensors, pytest, ...)"
pip_step -r requirements.txt
say "4/4 this package, editable (src/ is what runs)"
pip_step -e . --no-deps
.venv/bin/python -c "import torch, noma_prorl_bench as p; print('[setup] ok: noma_prorl_bench', p.__version__, \
'| torch', torch.__version__, '| CUDA', torch.cuda.is_available())"
say "done. Try: .venv/bin/prorl-bench suite --preset smoke --outdir runs/smoke   (about a minute)"
