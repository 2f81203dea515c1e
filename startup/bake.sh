# shellcheck shell=bash
#
# Bakes the tooling image: the startup script of the short-lived builder VM (infra/tooling_image.py).
#
# It installs the docker engine, points docker at the NVIDIA container runtime and pulls the
# pinned llama.cpp server image, so a server VM booted from the resulting image skips ~170 s of
# its cold start (its boot script finds the work done and moves on). Every step checks before it
# acts, so a rerun does only what is missing. Progress goes to the journal/serial console with
# UTC timestamps and to guest attributes, which the deployer follows through the Compute API:
# https://cloud.google.com/compute/docs/metadata/manage-guest-attributes
#
# infra/bake_script.py prepends the shebang and the shell-quoted config block; this file is
# appended verbatim. The QWEN36_* environment overrides exist only for the test sandbox.
set -Eeuo pipefail
umask 022

: "${SERVER_IMAGE:?rendered by infra/bake_script.py}"
: "${GA_NAMESPACE:?rendered by infra/bake_script.py}"
: "${KEY_PHASE:?}" "${KEY_DETAIL:?}" "${KEY_TIME:?}" "${PHASE_READY:?}" "${PHASE_FAILED:?}"

METADATA_URL="${QWEN36_METADATA_URL:-http://metadata.google.internal}"
APT_LISTS_DIR="${QWEN36_APT_LISTS_DIR:-/var/lib/apt/lists}"
# Multiplies every pause (the sandbox runs at a fraction of real time).
TIME_SCALE="${QWEN36_TIME_SCALE:-1}"
GA_URL="$METADATA_URL/computeMetadata/v1/instance/guest-attributes/$GA_NAMESPACE"

# Bounds for every wait. The DLVM image runs unattended-upgrades on first boot, which holds the
# dpkg lock for a while; apt waits for it (DPkg::Lock::Timeout) instead of failing or having its
# lock removed.
APT_LOCK_TIMEOUT_S=600
APT_TIMEOUT_S=900
DOCKER_READY_POLLS=30
DOCKER_READY_POLL_S=2
PULL_ATTEMPTS=3
RETRY_PAUSE_S=10
PULL_TIMEOUT_S=1200
METADATA_TIMEOUT_S=5

CURRENT_PHASE="start"

nap() {
  sleep "$(awk -v s="$1" -v k="$TIME_SCALE" 'BEGIN { printf "%.3f", s * k }')"
}

log() {
  printf '%s qwen36-bake: %s\n' "$(date -u +%Y-%m-%dT%H:%M:%SZ)" "$*"
}

put_attribute() {
  curl --silent --show-error --fail --max-time "$METADATA_TIMEOUT_S" --retry 3 \
    -X PUT -H 'Metadata-Flavor: Google' --data-binary "$2" \
    "$GA_URL/$1" >/dev/null
}

# Reports are best effort: a metadata hiccup must not fail the bake, the deployer's wait is bounded.
report() {
  local phase="$1" detail="${2:-}"
  CURRENT_PHASE="$phase"
  log "phase $phase${detail:+: $detail}"
  put_attribute "$KEY_DETAIL" "$detail" || log "warning: could not report the detail of $phase"
  put_attribute "$KEY_TIME" "$(date -u +%Y-%m-%dT%H:%M:%SZ)" || log "warning: could not report the time"
  put_attribute "$KEY_PHASE" "$phase" || log "warning: could not report phase $phase"
}

on_error() {
  local status="$1" line="$2"
  trap - ERR
  report "$PHASE_FAILED" "$CURRENT_PHASE failed (exit $status at line $line)"
  exit "$status"
}
trap 'on_error $? $LINENO' ERR

apt_get() {
  DEBIAN_FRONTEND=noninteractive timeout "$APT_TIMEOUT_S" \
    apt-get -o "DPkg::Lock::Timeout=$APT_LOCK_TIMEOUT_S" -y "$@"
}

wait_for_docker() {
  local poll
  for ((poll = 1; poll <= DOCKER_READY_POLLS; poll++)); do
    if docker info >/dev/null 2>&1; then
      return 0
    fi
    nap "$DOCKER_READY_POLL_S"
  done
  log "docker did not answer after $DOCKER_READY_POLLS polls, $DOCKER_READY_POLL_S s apart"
  return 1
}

install_docker() {
  report bake-docker "docker engine"
  if command -v dockerd >/dev/null 2>&1; then
    log "docker engine present: $(docker --version)"
  else
    # The DLVM base ships the NVIDIA driver and container toolkit but no docker engine.
    apt_get update
    apt_get install --no-install-recommends docker.io
  fi
  systemctl enable --now docker
  wait_for_docker
}

has_nvidia_runtime() {
  local runtimes
  runtimes="$(docker info --format '{{json .Runtimes}}')"
  [[ $runtimes == *'"nvidia"'* ]]
}

configure_nvidia_runtime() {
  report bake-runtime "nvidia container runtime"
  if has_nvidia_runtime; then
    log "docker already knows the nvidia runtime"
    return 0
  fi
  # nvidia-ctk (from the DLVM image) only edits /etc/docker/daemon.json; it needs no GPU.
  nvidia-ctk runtime configure --runtime=docker
  systemctl restart docker
  wait_for_docker
  has_nvidia_runtime || {
    log "nvidia-ctk ran, yet docker lists no nvidia runtime"
    return 1
  }
}

pull_server_image() {
  report bake-pull "$SERVER_IMAGE"
  if docker image inspect "$SERVER_IMAGE" >/dev/null 2>&1; then
    log "image already pulled: $SERVER_IMAGE"
    return 0
  fi
  local attempt
  for ((attempt = 1; attempt <= PULL_ATTEMPTS; attempt++)); do
    if timeout "$PULL_TIMEOUT_S" docker pull --quiet "$SERVER_IMAGE"; then
      return 0
    fi
    log "pull attempt $attempt of $PULL_ATTEMPTS failed"
    if ((attempt < PULL_ATTEMPTS)); then
      nap "$RETRY_PAUSE_S"
    fi
  done
  return 1
}

clean_up() {
  report bake-clean "apt caches"
  apt_get clean
  find "$APT_LISTS_DIR" -type f -not -name lock -delete
  sync
}

main() {
  local started
  started="$(date +%s)"
  report bake-start "building the tooling image"
  install_docker
  configure_nvidia_runtime
  pull_server_image
  clean_up
  report "$PHASE_READY" "baked $SERVER_IMAGE in $(($(date +%s) - started)) s"
}

main "$@"
