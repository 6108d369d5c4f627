#!/usr/bin/env bash
# Set up (scripts/setup.sh), lint (ruff), type-check (mypy) and run the test suite: the unit, smoke,
# slow and ray tiers, less the `study` tests (benchmarks/studies scripts run end to end, minutes each).
# ruff (lint and format) and mypy settings are in pyproject.toml (mypy checks every package).
# Usage: bash scripts/test.sh [extra pytest args]    (a -m among them replaces the default -m 'not study';
#   bash scripts/test.sh -m study runs only the study tests)
# The tests run in one pytest-xdist worker per core, at most 4 (`--dist loadgroup`: the tests that start
# Ray clusters share one worker, tests/conftest.py); PRORL_TEST_WORKERS=N sets N workers, 0 runs them in
# this one process, and a -n among the extra args replaces both.
#   PRORL_TEST_SKIP_SETUP=1 bash scripts/test.sh ...   skip setup, ruff and mypy (pytest only)
# One Ctrl-C (SIGINT) or a SIGTERM to this script stops everything it started: pytest gets the SIGINT
# (its "KeyboardInterrupt" summary; the file PRORL_TEST_STOP_FILE, created first, tells tests/conftest.py
# to report the test being run as interrupted, not failed, even where a command run in-process caught
# the SIGINT itself), then every process of this command still alive after 15 s (pytest's workers
# report to it first, slower on a loaded machine) gets SIGTERM, after 5 s more SIGKILL. "Of this
# command" means: started under it, found by the PRORL_TEST_TREE variable in its environment, so
# runs, suites and Ray workers that tests start in their own sessions (which a terminal's Ctrl-C never
# reaches) are found too. Exit 130 / 143.
set -euo pipefail
cd "$(dirname "$0")/.."
set -m                     # each step in its own process group: a Ctrl-C reaches this script, which relays it
export RAY_AUTH_MODE=disabled PYTHONHASHSEED=0 PRORL_TEST_TREE="test.sh-$$-$RANDOM"
export PRORL_TEST_STOP_FILE="${TMPDIR:-/tmp}/prorl-$PRORL_TEST_TREE.stop"
trap 'rm -f "$PRORL_TEST_STOP_FILE"' EXIT
step=""

tagged() {    # pids of the processes whose environment carries PRORL_TEST_TREE (not grep's: env -u)
  local f
  for f in $(env -u PRORL_TEST_TREE grep -lzxF "PRORL_TEST_TREE=$PRORL_TEST_TREE" /proc/[0-9]*/environ 2>/dev/null); do
    f=${f#/proc/}
    echo "${f%/environ}"
  done
}

settle() {    # wait up to $1 tenths of a second for every tagged process to end; 0 when none is left
  local i
  for ((i = 0; i < $1; i++)); do
    [ -z "$(tagged)" ] && return 0
    sleep 0.1
  done
  [ -z "$(tagged)" ]
}

stop() {      # $1: exit code. SIGINT to the running step's group, then SIGTERM, then SIGKILL to all tagged
  trap '' INT TERM         # a second Ctrl-C does not cut the clean-up short
  : >"$PRORL_TEST_STOP_FILE" 2>/dev/null || true
  [ -n "$step" ] && kill -INT -- "-$step" 2>/dev/null || true
  settle 150 || { kill -TERM $(tagged) 2>/dev/null || true; settle 50; } \
    || { kill -KILL $(tagged) 2>/dev/null || true; settle 50; } || true
  echo "scripts/test.sh: stopped (exit $1)" >&2
  exit "$1"
}
trap 'stop 130' INT
trap 'stop 143' TERM

run() {       # a step in the background (its own process group) and wait for it; set -e sees its status
  "$@" &
  step=$!
  wait "$step" || { local rc=$?; step=""; return "$rc"; }
  step=""
}

if [ -z "${PRORL_TEST_SKIP_SETUP:-}" ]; then
  run bash scripts/setup.sh
  run .venv/bin/ruff check .
  run .venv/bin/ruff format --check .
  run .venv/bin/mypy
fi
status=0
select=(-m "not study")
workers=${PRORL_TEST_WORKERS:-$(($(nproc) < 4 ? $(nproc) : 4))}
dist=(-n "$workers" --dist loadgroup)
[ "$workers" = 0 ] && dist=()
for a in "$@"; do
  [[ "$a" == -m || "$a" == -m* ]] && select=()
  [[ "$a" == -n || "$a" == -n* || "$a" == --numprocesses* ]] && dist=()
done
run .venv/bin/python -m pytest -q -p no:cacheprovider "${dist[@]}" "${select[@]}" "$@" || status=$?
kill -KILL $(tagged) 2>/dev/null || true      # nothing a test started outlives the suite
exit "$status"
