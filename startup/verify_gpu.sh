# shellcheck shell=bash
#
# The bake's GPU test (infra/tooling_image.py): the startup script of a short-lived L4 VM booted from
# the candidate tooling image, first with Secure Boot on, then (only if that verdict is not "on") again
# with Secure Boot off. It writes one verdict per pass as a guest attribute, which the deployer reads
# through the Compute API: under ${GA_NAMESPACE}/${KEY_SECURE_BOOT} with Secure Boot on ("on" or a
# reason code of infra/shielded.py OFF_REASONS, then the evidence), under ${GA_NAMESPACE}/${KEY_PLAIN}
# with it off ("ok" or the reason the GPU fails even then).
# https://cloud.google.com/compute/docs/metadata/manage-guest-attributes
#
# The checks, in order: Secure Boot's state (mokutil --sb-state), the L4 seen by nvidia-smi (the
# module loaded), the module's signer (modinfo -F signer), and the pinned llama.cpp container finding
# the CUDA device (llama-server --list-devices initialises CUDA as a serving run does).
# infra/bake_script.py prepends the shebang and the shell-quoted block (SERVER_IMAGE, GA_NAMESPACE,
# KEY_SECURE_BOOT, KEY_PLAIN, DRIVER_MARKER); the QWEN36_* overrides exist only for the tests.

: "${SERVER_IMAGE:?rendered by infra/bake_script.py}"
: "${GA_NAMESPACE:?}" "${KEY_SECURE_BOOT:?}" "${KEY_PLAIN:?}" "${DRIVER_MARKER:?}"
set -uo pipefail

METADATA_URL=${QWEN36_METADATA_URL:-http://metadata.google.internal}
MARKER=${QWEN36_STATE_DIR:-${DRIVER_MARKER%/*}}/${DRIVER_MARKER##*/}
CHECK_TIMEOUT_S=120
# The container's first run on this disk starts the image that the bake pulled: no network needed.
CONTAINER_TIMEOUT_S=300

one_line() { tr '\n' ' ' <<<"$1" | tr -s ' ' | cut -c1-400; }

verdict() {
  # verdict KEY CODE EVIDENCE: the serial console's line, then the guest attribute (bounded retries:
  # the metadata server can be slow to answer right after boot).
  local key=$1 value i
  value="$2 $(one_line "$3")"
  printf 'qwen36: gpu-test %s=%s\n' "$key" "$value"
  for i in 1 2 3 4 5; do
    curl -fsS --max-time 10 -X PUT --data "$value" -H 'Metadata-Flavor: Google' \
      "$METADATA_URL/computeMetadata/v1/instance/guest-attributes/$GA_NAMESPACE/$key" >/dev/null && return 0
    sleep "$i"
  done
  printf 'qwen36: could not write the guest attribute %s\n' "$key"
  return 1
}

main() {
  local sb key smi signer devices driver
  sb=$(timeout "$CHECK_TIMEOUT_S" mokutil --sb-state 2>&1 || true)
  if grep -q 'SecureBoot enabled' <<<"$sb"; then key=$KEY_SECURE_BOOT; else key=$KEY_PLAIN; fi
  driver=$(cat "$MARKER" 2>/dev/null || echo "no record of the driver swap ($MARKER)")
  if [[ $key == "$KEY_SECURE_BOOT" && $driver != installed ]]; then
    verdict "$key" no-signed-driver "the bake did not install Canonical's signed modules: $driver"
    return 0
  fi
  if ! smi=$(timeout "$CHECK_TIMEOUT_S" nvidia-smi -L 2>&1) || ! grep -q 'NVIDIA L4' <<<"$smi"; then
    verdict "$key" no-gpu "nvidia-smi -L: $smi"
    return 0
  fi
  if [[ $key == "$KEY_SECURE_BOOT" ]]; then
    signer=$(timeout "$CHECK_TIMEOUT_S" modinfo -F signer nvidia 2>&1 || true)
    if [[ -z ${signer//[[:space:]]/} ]]; then
      verdict "$key" unsigned "modinfo -F signer nvidia printed nothing; mokutil: $sb"
      return 0
    fi
  fi
  if ! devices=$(timeout "$CONTAINER_TIMEOUT_S" docker run --rm --gpus all "$SERVER_IMAGE" --list-devices 2>&1) ||
    ! grep -qE 'CUDA[0-9]+: NVIDIA L4' <<<"$devices"; then
    verdict "$key" no-cuda "$SERVER_IMAGE --list-devices: $devices"
    return 0
  fi
  if [[ $key == "$KEY_SECURE_BOOT" ]]; then
    verdict "$key" on "$sb; signer: $signer; $smi"
  else
    verdict "$key" ok "$smi"
  fi
}

main "$@"
