#!/usr/bin/env bash
# Deploy (or update) the endpoint: pulumi up for one stack.
# Usage: scripts/deploy.sh [--skip-check] [stack] [pulumi up args...]
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
# The preflight (`qwen36 check`) runs first; the deploy goes on only when it exits 0. `--skip-check`
# (or QWEN36_SKIP_CHECK=1) skips it, e.g. when it could not read every fact (exit 12) and you know why.
#
# Exit codes are the CLI's (python -m qwen36.errors): 2 a bad argument, 3 no gcp:project, 5 no
# credentials, 6 a gcloud call refused, 8 no such stack file, 9 a missing or too old tool, 10 a gcloud
# call that failed otherwise, 11 an unusable HOME, 12 a preflight that could not read every fact,
# 130 Ctrl-C; the preflight's own code when it stops the deploy; 1 when a pulumi command fails (its
# errors are printed above the closing line).
set -Eeuo pipefail
shopt -s nullglob
cd "$(dirname "${BASH_SOURCE[0]}")/.."

USAGE="usage: scripts/deploy.sh [--skip-check] [stack] [pulumi up args...]   (stacks: the Pulumi.<stack>.yaml files here)"
# The oldest Pulumi CLI that does import-then-update, which the kept VPC, subnet and bucket need
# (pulumi/pulumi#19339, first in v3.174.0; Pulumi.yaml's refresh: always needs v3.14.0, #8071).
# qwen36/check/pulumi_version.py holds the same bound (tests/check keep the two equal).
PULUMI_MIN=3.174.0
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

# A yes/no setting from the environment: 1/true/yes or 0/false/no (or unset), nothing else.
flag() {
  case "${!1:-}" in
    1 | true | yes) return 0 ;;
    "" | 0 | false | no) return 1 ;;
    *) die 2 "$1=${!1@Q}: give 1 or 0" ;;
  esac
}
skip_check=false
flag QWEN36_SKIP_CHECK && skip_check=true
while [[ ${1-} == -* ]]; do
  case $1 in
    -h | --help)
      echo "$USAGE"
      exit 0
      ;;
    --skip-check) skip_check=true ;;
    *) die 2 "the first argument is the stack (one of: $(stack_files)); pulumi up's flags go after it. $USAGE" ;;
  esac
  shift
done
STACK=${1-dev}
shift || true
# Pulumi's rule for a stack name: letters, digits, '-', '_' and '.'.
# https://www.pulumi.com/docs/iac/concepts/stacks/#create-stack
[[ $STACK =~ ^[A-Za-z0-9._-]+$ ]] || die 2 "${STACK@Q} is not a stack name (letters, digits, '-', '_', '.'). $USAGE"

# Pulumi's state, the command's link and pip's cache live under HOME: an unusable one stops here,
# before anything is installed or created.
[[ ${HOME:-} == /* ]] || die 11 "HOME (${HOME:-unset}) is not a folder: the stack's state lives in ~/.qwen36-mtp-l4; set HOME to yours"
# The folder Pulumi.yaml's backend.url names, and where an earlier version kept a passphrase.
STATE_DIR=$HOME/.qwen36-mtp-l4
mkdir -p "$STATE_DIR/state" 2>/dev/null && chmod 700 "$STATE_DIR" 2>/dev/null \
  || die 11 "cannot create $STATE_DIR/state for the stack's state (HOME=$HOME is not writable?); set HOME to a folder of yours"

command -v pulumi >/dev/null || die 9 "the Pulumi CLI is not installed: https://www.pulumi.com/docs/install/"
pulumi_version=$(PULUMI_SKIP_UPDATE_CHECK=true pulumi version 2>/dev/null | head -n 1 || true)
if [[ $pulumi_version =~ ^v?([0-9]+)\.([0-9]+)\.([0-9]+) ]]; then
  IFS=. read -r min_major min_minor min_patch <<<"$PULUMI_MIN"
  major=${BASH_REMATCH[1]} minor=${BASH_REMATCH[2]} patch=${BASH_REMATCH[3]}
  if ((major < min_major || (major == min_major && (minor < min_minor || (minor == min_minor && patch < min_patch))))); then
    die 9 "the Pulumi CLI is $pulumi_version; the deploy needs v$PULUMI_MIN or later (import-then-update of the kept VPC, subnet and bucket): https://www.pulumi.com/docs/install/"
  fi
else
  die 9 "\`pulumi version\` printed ${pulumi_version@Q}, not a version; reinstall the Pulumi CLI: https://www.pulumi.com/docs/install/"
fi
command -v gcloud >/dev/null || die 9 "gcloud is not installed: https://cloud.google.com/sdk/docs/install"
if [[ ! -f "Pulumi.$STACK.yaml" ]]; then
  die 8 "no stack file Pulumi.$STACK.yaml; stacks: $(stack_files)"
fi
gcloud auth application-default print-access-token >/dev/null 2>&1 \
  || die 5 "no application-default credentials: run 'gcloud auth application-default login'"
# The project's venv with its pinned packages (the preflight, the health gate and Pulumi run in it)
# and the `qwen36` command the outputs print (tunnel, wake, status...), linked onto PATH so that it
# works from any shell. QWEN36_SKIP_CLI=1 skips it (a venv and command you manage yourself).
flag QWEN36_SKIP_CLI || scripts/install_cli.sh
# The preflight first (quotas, org policies, permissions: qwen36 check); only its 0 goes on.
PYTHON=.venv/bin/python && [[ -x $PYTHON ]] || PYTHON=python3
if $skip_check; then
  log "skipping the preflight (--skip-check)"
else
  check=0
  "$PYTHON" -m qwen36 check --stack "$STACK" || check=$?
  case $check in
    0) ;;
    1) die 1 "the preflight found what would stop the deploy (the BLOCK lines above); fix them, then rerun" ;;
    12) die 12 "the preflight could not read every fact (the UNREAD lines above), so it cannot say the deploy would pass; fix them and rerun, or deploy anyway: scripts/deploy.sh --skip-check $STACK" ;;
    130) die 130 "interrupted (Ctrl-C)" ;;
    *) die "$check" "the preflight stopped the deploy (its error above); fix it, then rerun" ;;
  esac
fi

# A gcloud call whose failure is one line: 6 when it was refused (a missing role), else 10.
gcloud_or_die() {
  local what=$1 err
  shift
  if ! err=$(gcloud "$@" 2>&1 >/dev/null); then
    local last
    last=$(printf '%s\n' "$err" | grep -v '^[[:space:]]*$' | tail -n 1)
    if grep -qiE 'PERMISSION_DENIED|permission|forbidden|403' <<<"$err"; then
      die 6 "$what was refused (gcloud: ${last:0:300}); ask for roles/cloudkms.admin and roles/serviceusage.serviceUsageAdmin on $project, or have an owner run: gcloud $*"
    fi
    die 10 "$what failed (gcloud: ${last:0:300}); rerun, or run it yourself: gcloud $*"
  fi
}
# A pulumi command whose failure ends in one line (its own errors are printed above it).
pulumi_or_die() {
  local code=0
  pulumi "$@" || code=$?
  ((code == 0)) && return 0
  ((code == 130)) && die 130 "interrupted (Ctrl-C)"
  die 1 "\`pulumi $1 $2\` failed (pulumi's exit $code; its errors are above); fix what they name, then rerun scripts/deploy.sh $STACK"
}

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
  gcloud_or_die "enabling the Cloud KMS API" services enable cloudkms.googleapis.com --project="$project"
  gcloud kms keyrings describe "$KMS_KEY_RING" "${kms[@]}" >/dev/null 2>&1 \
    || gcloud_or_die "creating the KMS key ring $KMS_KEY_RING" kms keyrings create "$KMS_KEY_RING" "${kms[@]}"
  gcloud_or_die "creating the KMS key $KMS_KEY" kms keys create "$KMS_KEY" --keyring="$KMS_KEY_RING" --purpose=encryption "${kms[@]}"
fi
secrets_provider="gcpkms://projects/$project/locations/$KMS_LOCATION/keyRings/$KMS_KEY_RING/cryptoKeys/$KMS_KEY"

if ! pulumi stack select "$STACK" >/dev/null 2>&1; then
  pulumi_or_die stack init "$STACK" --secrets-provider="$secrets_provider"
elif grep -q '^encryptionsalt:' "Pulumi.$STACK.yaml"; then
  # A stack made by an earlier version of this script, with a passphrase kept beside the state.
  [[ -f "$STATE_DIR/passphrase" ]] || die 1 "stack $STACK uses a passphrase and $STATE_DIR/passphrase is gone; set PULUMI_CONFIG_PASSPHRASE and run: pulumi stack change-secrets-provider '$secrets_provider'"
  log "moving stack $STACK's secrets from the passphrase to the KMS key"
  PULUMI_CONFIG_PASSPHRASE_FILE="$STATE_DIR/passphrase" pulumi_or_die stack change-secrets-provider "$secrets_provider"
fi
if ! pulumi config get gcp:project >/dev/null 2>&1; then
  pulumi_or_die config set gcp:project "$project"
fi
# The project's rules (infra/policy/) as a policy pack: a mandatory violation stops the preview
# before anything is created. The pack has its own venv (pulumi-policy pins protobuf~=5.29).
if [[ ! -x policy/.venv/bin/python ]]; then
  log "creating the policy pack's venv (policy/.venv)"
  python3 -m venv policy/.venv
  policy/.venv/bin/python -m pip install --quiet --disable-pip-version-check -r policy/requirements.txt
fi
# --yes: this script is the confirmation (pulumi up would otherwise stop at its preview's prompt);
# pulumi up's own flags follow the stack (scripts/deploy.sh dev --diff). Pulumi exits 255 on any
# failure; the closing line gives the CLI's code instead.
pulumi_or_die up --yes --policy-pack policy "$@"
