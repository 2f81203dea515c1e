#!/usr/bin/env bash
# A stand-in for the gcloud commands scripts/deploy.sh runs: records each call in $GCLOUD_STUB_LOG,
# keeps the KMS key ring and key it creates under $GCLOUD_STUB_STATE, answers the rest.
set -u
printf '%s\n' "$*" >>"${GCLOUD_STUB_LOG:-/dev/null}"
state=${GCLOUD_STUB_STATE:?}
mkdir -p "$state"
case "$1 $2" in
  "auth application-default")
    [[ -f $HOME/.config/gcloud/application_default_credentials.json ]] && { echo ya29.stub; exit 0; }
    echo "ERROR: (gcloud.auth.application-default.print-access-token) no credentials" >&2; exit 1 ;;
  "config get-value") echo "${GCLOUD_STUB_PROJECT:-}" ;;
  "services enable") touch "$state/kms-api" ;;
  "kms keyrings")
    case $3 in
      describe) [[ -f $state/keyring-$4 ]] ;;
      create) [[ -f $state/kms-api ]] || exit 1; touch "$state/keyring-$4" ;;
    esac ;;
  "kms keys")
    case $3 in
      describe) [[ -f $state/key-$4 ]] ;;
      create) [[ -f $state/kms-api ]] || exit 1; touch "$state/key-$4" ;;
    esac ;;
  *) echo "gcloud stub: unknown command: $*" >&2; exit 2 ;;
esac
