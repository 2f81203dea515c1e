# shellcheck shell=bash
# shellcheck disable=SC2034,SC2154  # the bodies use the bounds; GA_* are set by the rendered config block.
#
# Helpers shared by the server VM's boot body (startup/boot.sh) and the tooling-image bake body
# (startup/bake.sh). Nothing sources this file at run time: infra/boot_script.py and
# infra/bake_script.py paste it verbatim between the generated config block and the body, so each
# startup script stays one self-contained metadata value.
set -Eeuo pipefail
umask 022

# The QWEN36_* overrides exist only so the sandbox tests run the real scripts against local fakes.
METADATA_URL=${QWEN36_METADATA_URL:-http://metadata.google.internal}
# Multiplies every pause (the sandbox tests and the boot benchmark run at a fraction of real time);
# timeouts are upper bounds and stay as they are.
TIME_SCALE=${QWEN36_TIME_SCALE:-1}
GA_URL="$METADATA_URL/computeMetadata/v1/instance/guest-attributes/${GA_NAMESPACE:?set by the config block}"

# Bounds shared by both scripts; every wait in the helpers below is one of these. The DLVM image
# runs unattended-upgrades right after boot, which holds the dpkg lock for a while; apt waits for
# it (DPkg::Lock::Timeout) rather than failing or having the lock removed under it.
APT_LOCK_TIMEOUT_S=600
APT_TIMEOUT_S=900
DOCKER_CMD_TIMEOUT_S=120
DOCKER_READY_POLLS=30
DOCKER_READY_POLL_S=2
IMAGE_PULL_ATTEMPTS=3
IMAGE_PULL_TIMEOUT_S=1200
RETRY_PAUSE_S=10
GUEST_ATTR_TIMEOUT_S=5
DETAIL_MAX_CHARS=900

scaled() {
  awk -v s="$1" -v k="$TIME_SCALE" 'BEGIN { printf "%.3f", s * k }'
}

nap() {
  sleep "$(scaled "$1")"
}

utc_now() {
  date -u +%Y-%m-%dT%H:%M:%SZ
}

log() {
  printf '%s qwen36: %s\n' "$(utc_now)" "$*"
}

put_attrs() {
  # One curl for all the keys (--next starts the next request), so a report costs one process.
  # Best effort: a metadata hiccup must not fail the script; the deployer's wait is bounded.
  # NOTE: guest attributes need the metadata header and enable-guest-attributes=TRUE on the VM.
  # https://cloud.google.com/compute/docs/metadata/manage-guest-attributes
  local -a requests=() keys=()
  while (($# >= 2)); do
    ((${#requests[@]} == 0)) || requests+=(--next)
    requests+=(-fsS -o /dev/null -X PUT --max-time "$GUEST_ATTR_TIMEOUT_S" -H 'Metadata-Flavor: Google'
      --data-raw "$2" "$GA_URL/$1")
    keys+=("$1")
    shift 2
  done
  curl "${requests[@]}" 2>/dev/null || log "warning: could not write guest attributes ${keys[*]}"
}

phase_report() {
  # phase_report PUBLISH PHASE DETAIL: the journal line always, the guest attributes when PUBLISH
  # is 1 (the boot body withholds them once a step has failed).
  local publish=$1 phase=$2 detail=${3:0:$DETAIL_MAX_CHARS} now
  now=$(utc_now)
  printf '%s qwen36: phase=%s %s\n' "$now" "$phase" "$detail"
  if ((publish == 1)); then
    put_attrs "$GA_KEY_DETAIL" "$detail" "$GA_KEY_TIME" "$now" "$GA_KEY_PHASE" "$phase"
  fi
}

apt_get() {
  # apt_get LIMIT ARGS...: one bounded, non-interactive apt-get that waits for the dpkg lock.
  local limit=$1
  shift
  DEBIAN_FRONTEND=noninteractive timeout "$limit" apt-get -o "DPkg::Lock::Timeout=$APT_LOCK_TIMEOUT_S" -y "$@"
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
  # 0: docker lists the nvidia runtime; 1: it does not; 2: docker info itself failed.
  local runtimes
  runtimes=$(timeout "$DOCKER_CMD_TIMEOUT_S" docker info --format '{{json .Runtimes}}') || return 2
  [[ $runtimes == *'"nvidia"'* ]]
}

pull_image() {
  # pull_image IMAGE ANNOUNCE: at most IMAGE_PULL_ATTEMPTS pulls of at most IMAGE_PULL_TIMEOUT_S
  # each, RETRY_PAUSE_S apart; ANNOUNCE (a command) gets the attempt number before each pull.
  local image=$1 announce=$2 attempt
  for ((attempt = 1; attempt <= IMAGE_PULL_ATTEMPTS; attempt++)); do
    "$announce" "$attempt"
    if timeout "$IMAGE_PULL_TIMEOUT_S" docker pull -q "$image" >/dev/null; then
      return 0
    fi
    log "pull attempt $attempt of $IMAGE_PULL_ATTEMPTS failed"
    if ((attempt < IMAGE_PULL_ATTEMPTS)); then
      nap "$RETRY_PAUSE_S"
    fi
  done
  return 1
}
