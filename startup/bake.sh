# shellcheck shell=bash
#
# Bakes the tooling image: the startup script of the short-lived builder VM (infra/tooling_image.py).
#
# It installs the docker engine, registers the NVIDIA container runtime with docker and pulls the
# pinned llama.cpp server image, so a server VM booted from the resulting image skips ~170 s of
# its cold start: the boot script (startup/boot.sh) makes the same checks and finds the work done.
# Every step checks before it acts, so a rerun does only what is missing. Progress goes to the
# journal/serial console with UTC timestamps and to guest attributes, which the deployer follows
# through the Compute API: https://cloud.google.com/compute/docs/metadata/manage-guest-attributes
#
# infra/bake_script.py prepends the shebang and the shell-quoted config block; this file is
# appended verbatim. The QWEN36_* environment overrides exist only for the test sandbox.
set -Eeuo pipefail
umask 022

: "${SERVER_IMAGE:?rendered by infra/bake_script.py}"
: "${GA_NAMESPACE:?rendered by infra/bake_script.py}"
: "${KEY_PHASE:?}" "${KEY_DETAIL:?}" "${KEY_TIME:?}" "${PHASE_READY:?}" "${PHASE_FAILED:?}"

METADATA_URL=${QWEN36_METADATA_URL:-http://metadata.google.internal}
# Multiplies every pause (the sandbox runs at a fraction of real time).
TIME_SCALE=${QWEN36_TIME_SCALE:-1}
GA_URL="$METADATA_URL/computeMetadata/v1/instance/guest-attributes/$GA_NAMESPACE"

# Bounds: every wait below is one of these. The DLVM image runs unattended-upgrades right after
# boot, which holds the dpkg lock for a while; apt waits for it (DPkg::Lock::Timeout) rather than
# failing or having the lock removed under it.
APT_LOCK_TIMEOUT_S=600
APT_TIMEOUT_S=900
DOCKER_CMD_TIMEOUT_S=120
DOCKER_READY_POLLS=30
DOCKER_READY_POLL_S=2
PULL_ATTEMPTS=3
PULL_TIMEOUT_S=1200
RETRY_PAUSE_S=10
GUEST_ATTR_TIMEOUT_S=5
DETAIL_MAX_CHARS=900

CURRENT_PHASE=bake-start

nap() {
  sleep "$(awk -v s="$1" -v k="$TIME_SCALE" 'BEGIN { printf "%.3f", s * k }')"
}

utc_now() {
  date -u +%Y-%m-%dT%H:%M:%SZ
}

log() {
  printf '%s qwen36: %s\n' "$(utc_now)" "$*"
}

put_attr() {
  # NOTE: guest attributes need the metadata header and enable-guest-attributes=TRUE on the VM.
  curl -fsS -X PUT --max-time "$GUEST_ATTR_TIMEOUT_S" -H 'Metadata-Flavor: Google' \
    --data-binary "$2" "$GA_URL/$1" >/dev/null 2>&1 || log "warning: could not write guest attribute $1"
}

# Reports are best effort: a metadata hiccup must not fail the bake; the deployer's wait is bounded.
report() {
  local phase=$1 detail=${2:0:$DETAIL_MAX_CHARS} now
  now=$(utc_now)
  CURRENT_PHASE=$phase
  printf '%s qwen36: phase=%s %s\n' "$now" "$phase" "$detail"
  put_attr "$KEY_DETAIL" "$detail"
  put_attr "$KEY_TIME" "$now"
  put_attr "$KEY_PHASE" "$phase"
}

on_error() {
  local status=$1 line=$2
  trap - ERR
  report "$PHASE_FAILED" "$CURRENT_PHASE failed (exit $status at line $line)"
  exit "$status"
}
trap 'on_error $? $LINENO' ERR

apt_get() {
  DEBIAN_FRONTEND=noninteractive timeout "$APT_TIMEOUT_S" \
    apt-get -o "DPkg::Lock::Timeout=$APT_LOCK_TIMEOUT_S" -y "$@"
}

docker_ready() {
  local poll
  for ((poll = 1; poll <= DOCKER_READY_POLLS; poll++)); do
    if timeout "$DOCKER_CMD_TIMEOUT_S" docker info >/dev/null 2>&1; then
      return 0
    fi
    if ((poll == 1)); then
      systemctl start docker || true
    fi
    nap "$DOCKER_READY_POLL_S"
  done
  log "docker did not answer after $DOCKER_READY_POLLS polls, $DOCKER_READY_POLL_S s apart"
  return 1
}

has_nvidia_runtime() {
  local runtimes
  runtimes=$(timeout "$DOCKER_CMD_TIMEOUT_S" docker info --format '{{json .Runtimes}}')
  [[ $runtimes == *'"nvidia"'* ]]
}

install_docker() {
  report bake-docker "docker engine"
  if command -v docker >/dev/null 2>&1; then
    log "docker is installed"
  else
    # The DLVM base ships the NVIDIA driver and container toolkit but no docker engine.
    apt_get update
    apt_get install --no-install-recommends docker.io
  fi
  docker_ready
}

configure_nvidia_runtime() {
  report bake-runtime "nvidia container runtime"
  if has_nvidia_runtime; then
    log "docker already has the nvidia runtime"
    return 0
  fi
  # nvidia-ctk (from the DLVM image) only edits /etc/docker/daemon.json: no GPU needed.
  # https://docs.nvidia.com/datacenter/cloud-native/container-toolkit/latest/install-guide.html
  nvidia-ctk runtime configure --runtime=docker
  systemctl restart docker
  docker_ready
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
    if timeout "$PULL_TIMEOUT_S" docker pull -q "$SERVER_IMAGE" >/dev/null; then
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
  # Downloaded .debs only; the package lists stay so that the server's own apt steps (a driver
  # rebuild after a kernel upgrade) work without an update first.
  report bake-clean "apt cache"
  apt_get clean
  sync
}

main() {
  local started=$SECONDS
  report bake-start "baking docker and $SERVER_IMAGE"
  install_docker
  configure_nvidia_runtime
  pull_server_image
  clean_up
  report "$PHASE_READY" "baked docker and $SERVER_IMAGE in $((SECONDS - started)) s"
}

main "$@"
