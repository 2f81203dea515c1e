#!/usr/bin/env bash
# Deploy (or update) the endpoint: pulumi up for one stack, with a local file state backend unless
# you already chose one (PULUMI_BACKEND_URL or `pulumi login`). Usage: scripts/deploy.sh [stack] [pulumi up args...]
# Stacks: dev (us-central1), europe-west4, asia-southeast1. Tear down with: pulumi destroy -s <stack>.
set -Eeuo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."

STACK=${1:-dev}
shift || true
STATE_DIR=${QWEN36_STATE_DIR:-$HOME/.qwen36-mtp-l4}
log() { printf '%s [deploy] %s\n' "$(date -u +%H:%M:%S)" "$*"; }
die() { log "error: $*"; exit 1; }

command -v pulumi >/dev/null || die "the Pulumi CLI is not installed: https://www.pulumi.com/docs/install/"
command -v gcloud >/dev/null || die "gcloud is not installed: https://cloud.google.com/sdk/docs/install"
if [[ ! -f "Pulumi.$STACK.yaml" ]]; then
  stacks=(Pulumi.*.yaml)
  stacks=("${stacks[@]#Pulumi.}")
  die "no stack file Pulumi.$STACK.yaml; stacks: ${stacks[*]%.yaml}"
fi
gcloud auth application-default print-access-token >/dev/null 2>&1 \
  || die "no application-default credentials: run 'gcloud auth application-default login'"

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
  project=$(gcloud config get-value project 2>/dev/null)
  [[ -n "$project" ]] || die "set a project: pulumi config set gcp:project <id> -s $STACK"
  log "using gcloud's project $project (pulumi config set gcp:project ... to change)"
  pulumi config set gcp:project "$project"
fi
# The project's rules (infra/policy.py) as a policy pack: a mandatory violation stops the preview
# before anything is created. The pack has its own venv (pulumi-policy pins protobuf~=5.29).
if [[ ! -x policy/.venv/bin/python ]]; then
  log "creating the policy pack's venv (policy/.venv)"
  python3 -m venv policy/.venv
  policy/.venv/bin/python -m pip install --quiet --disable-pip-version-check -r policy/requirements.txt
fi
exec pulumi up --yes --policy-pack policy "$@"
