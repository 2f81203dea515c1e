#!/usr/bin/env bash
# Deploy (or update) the endpoint: pulumi up for one stack. Usage: scripts/deploy.sh [stack] [pulumi up args...]
# Stacks: dev (us-central1), europe-west4, asia-southeast1. Tear down with: pulumi destroy -s <stack>.
#
# Everything set up here outlives the script, so every later pulumi command in this folder, in any
# new shell, reaches the same stack with no extra step:
# - the state backend is Pulumi.yaml's `backend.url` (a folder in your home), not an exported variable;
# - the stack's secrets (the API key) are encrypted with a Cloud KMS key of the project (Pulumi's
#   gcpkms secrets provider), which every later command opens with your application-default
#   credentials: no passphrase to keep in an environment variable.
#   https://www.pulumi.com/docs/iac/concepts/secrets/#configuring-secrets-encryption
#
# Exit codes are the CLI's (python -m qwen36.errors): 2 a bad argument, 3 no gcp:project, 5 no
# credentials, 8 no such stack file, 9 a missing tool, 130 Ctrl-C; otherwise the preflight's or pulumi's.
set -Eeuo pipefail
shopt -s nullglob
cd "$(dirname "${BASH_SOURCE[0]}")/.."

USAGE="usage: scripts/deploy.sh [stack] [pulumi up args...]   (stacks: the Pulumi.<stack>.yaml files here)"
# The folder Pulumi.yaml's backend.url names, and where an earlier version kept a passphrase.
STATE_DIR=$HOME/.qwen36-mtp-l4
KMS_LOCATION=global
KMS_KEY_RING=qwen36-mtp-l4
KMS_KEY=pulumi-secrets
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
# The project's venv with its pinned packages (the preflight, the health gate and Pulumi run in it)
# and the `qwen36` command the outputs print (tunnel, wake, status...), linked onto PATH so that it
# works from any shell. QWEN36_SKIP_CLI=1 skips it (a venv and command you manage yourself).
[[ -n "${QWEN36_SKIP_CLI:-}" ]] || scripts/install_cli.sh
# The preflight first (quotas, org policies, permissions: qwen36 check); QWEN36_SKIP_CHECK=1 skips it.
PYTHON=.venv/bin/python && [[ -x $PYTHON ]] || PYTHON=python3
[[ -n "${QWEN36_SKIP_CHECK:-}" ]] || "$PYTHON" -m qwen36 check --stack "$STACK" \
  || die 1 "the preflight found what would stop the deploy (the BLOCK lines above); fix them, then rerun"

mkdir -p "$STATE_DIR/state" && chmod 700 "$STATE_DIR"

# The project: the stack's own gcp:project if the stack exists, else gcloud's.
project=""
if pulumi stack select "$STACK" >/dev/null 2>&1; then
  project=$(pulumi config get gcp:project 2>/dev/null || true)
fi
if [[ -z "$project" ]]; then
  project=$(gcloud config get-value project 2>/dev/null || true)
  # gcloud prints "(unset)" for a property that has no value.
  [[ -n "$project" && "$project" != "(unset)" ]] \
    || die 3 "no project: run 'gcloud config set project <id>' (or: pulumi config set gcp:project <id> -s $STACK)"
  log "using gcloud's project $project (pulumi config set gcp:project ... to change)"
fi

# The secrets key: a key ring and key in the project, made once (KMS keys cannot be deleted, only
# their versions destroyed; one key version costs ~$0.06 a month). https://cloud.google.com/kms/pricing
kms=(--project="$project" --location="$KMS_LOCATION")
if ! gcloud kms keys describe "$KMS_KEY" --keyring="$KMS_KEY_RING" "${kms[@]}" >/dev/null 2>&1; then
  log "creating the Cloud KMS key $KMS_KEY_RING/$KMS_KEY for the stack's secrets"
  gcloud services enable cloudkms.googleapis.com --project="$project"
  gcloud kms keyrings describe "$KMS_KEY_RING" "${kms[@]}" >/dev/null 2>&1 \
    || gcloud kms keyrings create "$KMS_KEY_RING" "${kms[@]}"
  gcloud kms keys create "$KMS_KEY" --keyring="$KMS_KEY_RING" --purpose=encryption "${kms[@]}"
fi
secrets_provider="gcpkms://projects/$project/locations/$KMS_LOCATION/keyRings/$KMS_KEY_RING/cryptoKeys/$KMS_KEY"

if ! pulumi stack select "$STACK" >/dev/null 2>&1; then
  pulumi stack init "$STACK" --secrets-provider="$secrets_provider"
elif grep -q '^encryptionsalt:' "Pulumi.$STACK.yaml"; then
  # A stack made by an earlier version of this script, with a passphrase kept beside the state.
  [[ -f "$STATE_DIR/passphrase" ]] || die 1 "stack $STACK uses a passphrase and $STATE_DIR/passphrase is gone; set PULUMI_CONFIG_PASSPHRASE and run: pulumi stack change-secrets-provider '$secrets_provider'"
  log "moving stack $STACK's secrets from the passphrase to the KMS key"
  PULUMI_CONFIG_PASSPHRASE_FILE="$STATE_DIR/passphrase" pulumi stack change-secrets-provider "$secrets_provider"
fi
if ! pulumi config get gcp:project >/dev/null 2>&1; then
  pulumi config set gcp:project "$project"
fi
# The project's rules (infra/policy/) as a policy pack: a mandatory violation stops the preview
# before anything is created. The pack has its own venv (pulumi-policy pins protobuf~=5.29).
if [[ ! -x policy/.venv/bin/python ]]; then
  log "creating the policy pack's venv (policy/.venv)"
  python3 -m venv policy/.venv
  policy/.venv/bin/python -m pip install --quiet --disable-pip-version-check -r policy/requirements.txt
fi
exec pulumi up --yes --policy-pack policy "$@"
