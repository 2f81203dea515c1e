#!/usr/bin/env bash
# Deploy (or update) the endpoint: pulumi up for one stack, with a local file state backend unless
# you already chose one (PULUMI_BACKEND_URL or `pulumi login`). Usage: scripts/deploy.sh [stack] [pulumi up args...]
# Stacks: dev (us-central1), europe-west4, asia-southeast1. Tear down with: pulumi destroy -s <stack>.
# Exit codes are the CLI's (python -m qwen36.errors): 2 a bad argument, 3 no gcp:project, 5 no
# credentials, 8 no such stack file, 9 a missing tool, 130 Ctrl-C; otherwise pulumi's own.
set -Eeuo pipefail
shopt -s nullglob
cd "$(dirname "${BASH_SOURCE[0]}")/.."

USAGE="usage: scripts/deploy.sh [stack] [pulumi up args...]   (stacks: the Pulumi.<stack>.yaml files here)"
STATE_DIR=${QWEN36_STATE_DIR:-$HOME/.qwen36-mtp-l4}
log() { printf '%s [deploy] %s\n' "$(date -u +%H:%M:%S)" "$*"; }
die() {
  local code=$1
  shift
  log "error: $*" >&2
  exit "$code"
}
trap 'log "error: interrupted (Ctrl-C)" >&2; exit 130' INT

stack_files() {
  local files=(Pulumi.*.yaml) names=() f
  for f in "${files[@]}"; do names+=("${f#Pulumi.}"); done
  printf '%s' "${names[*]%.yaml}"
}

case "${1-}" in
  -h | --help)
    echo "$USAGE"
    exit 0
    ;;
  -*) die 2 "the first argument is the stack (one of: $(stack_files)); pulumi up's flags go after it. $USAGE" ;;
esac
STACK=${1-dev}
shift || true
# Pulumi's rule for a stack name: letters, digits, '-', '_' and '.'.
# https://www.pulumi.com/docs/iac/concepts/stacks/#create-stack
[[ $STACK =~ ^[A-Za-z0-9._-]+$ ]] || die 2 "${STACK@Q} is not a stack name (letters, digits, '-', '_', '.'). $USAGE"

command -v pulumi >/dev/null || die 9 "the Pulumi CLI is not installed: https://www.pulumi.com/docs/install/"
command -v gcloud >/dev/null || die 9 "gcloud is not installed: https://cloud.google.com/sdk/docs/install"
if [[ ! -f "Pulumi.$STACK.yaml" ]]; then
  die 8 "no stack file Pulumi.$STACK.yaml; stacks: $(stack_files)"
fi
gcloud auth application-default print-access-token >/dev/null 2>&1 \
  || die 5 "no application-default credentials: run 'gcloud auth application-default login'"

# A local state backend: no Pulumi Cloud account needed. Secrets (the API key) are encrypted with a
# passphrase kept beside the state, readable by you only.
mkdir -p "$STATE_DIR" && chmod 700 "$STATE_DIR"
if [[ -z "${PULUMI_BACKEND_URL:-}" ]] && ! pulumi whoami >/dev/null 2>&1; then
  export PULUMI_BACKEND_URL="file://$STATE_DIR/state"
  mkdir -p "$STATE_DIR/state"
fi
if [[ -z "${PULUMI_CONFIG_PASSPHRASE:-}${PULUMI_CONFIG_PASSPHRASE_FILE:-}" ]]; then
  if [[ ! -f "$STATE_DIR/passphrase" ]]; then
    (umask 077 && head -c 32 /dev/urandom | base64 >"$STATE_DIR/passphrase")
  fi
  export PULUMI_CONFIG_PASSPHRASE_FILE="$STATE_DIR/passphrase"
fi

pulumi stack select "$STACK" 2>/dev/null || pulumi stack init "$STACK"
if ! pulumi config get gcp:project >/dev/null 2>&1; then
  project=$(gcloud config get-value project 2>/dev/null || true)
  # gcloud prints "(unset)" for a property that has no value.
  [[ -n "$project" && "$project" != "(unset)" ]] || die 3 "set a project: pulumi config set gcp:project <id> -s $STACK"
  log "using gcloud's project $project (pulumi config set gcp:project ... to change)"
  pulumi config set gcp:project "$project"
fi
exec pulumi up --yes "$@"
