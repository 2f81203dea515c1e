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
# infra/bake_script.py prepends the shebang, the shell-quoted config block and startup/lib.sh
# (shell options, the bounds, logging, guest-attribute reports, apt and docker helpers); this file
# is appended verbatim. The QWEN36_* environment overrides exist only for the test sandbox.

: "${SERVER_IMAGE:?rendered by infra/bake_script.py}"
: "${GA_NAMESPACE:?rendered by infra/bake_script.py}"
: "${GA_KEY_REPORT:?}" "${PHASE_READY:?}" "${PHASE_FAILED:?}"
: "${DRIVER_BRANCH?rendered by infra/bake_script.py}" "${DRIVER_MARKER:?rendered by infra/bake_script.py}"
MARKER=${QWEN36_STATE_DIR:-${DRIVER_MARKER%/*}}/${DRIVER_MARKER##*/}

CURRENT_PHASE=bake-start

report() {
  # Terminal reports wait for room under the guest-attribute ration (startup/lib.sh); steps are
  # best effort.
  local mode=step
  if [[ $1 == "$PHASE_READY" || $1 == "$PHASE_FAILED" ]]; then
    mode=must
  else
    CURRENT_PHASE=$1
  fi
  phase_report "$mode" "$1" "$2"
}

on_error() {
  local status=$1 line=$2
  trap - ERR
  report "$PHASE_FAILED" "$CURRENT_PHASE failed (exit $status at line $line)"
  exit "$status"
}
trap 'on_error $? $LINENO' ERR

install_docker() {
  report bake-docker "docker engine"
  if command -v docker >/dev/null 2>&1; then
    log "docker is installed"
  else
    # The DLVM base ships the NVIDIA driver and container toolkit but no docker engine.
    apt_get "$APT_TIMEOUT_S" update
    apt_get "$APT_TIMEOUT_S" install --no-install-recommends docker.io
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
  pull_image "$SERVER_IMAGE" :
}

record_driver() {
  mkdir -p "${MARKER%/*}" && printf '%s\n' "$1" >"$MARKER"
  log "signed NVIDIA modules: $1"
}

install_signed_driver() {
  # Secure Boot loads only modules signed by a key the UEFI db or shim trusts; the image's DKMS build
  # is signed with a key of its own. Canonical's precompiled modules for this kernel are signed by
  # Canonical (infra/shielded.py has the sources), with user-space of the same branch. Whether they
  # work on an L4 is decided by the GPU test on the candidate image, never here (no GPU on the
  # builder); what cannot be installed is recorded, and the image then keeps its DKMS driver.
  report bake-driver "signed NVIDIA modules (branch ${DRIVER_BRANCH:-unknown})"
  local kernel version
  if [[ -z $DRIVER_BRANCH ]]; then
    record_driver "the base image family names no NVIDIA driver branch"
    return 0
  fi
  kernel=$(uname -r)
  local packages=(
    "linux-modules-nvidia-${DRIVER_BRANCH}-server-open-${kernel}"
    "nvidia-utils-${DRIVER_BRANCH}-server"
    "libnvidia-compute-${DRIVER_BRANCH}-server"
  )
  apt_get "$APT_TIMEOUT_S" update
  # A dry run first: a kernel Canonical has no build for, or a conflict apt cannot resolve, leaves
  # the image as it was.
  if ! apt_get "$APT_TIMEOUT_S" install -s --no-install-recommends "${packages[@]}" >/dev/null; then
    record_driver "no installable ${packages[0]} (or its user-space) for kernel $kernel"
    return 0
  fi
  # The DKMS build would shadow the signed module (updates/ comes first in depmod's search order).
  if command -v dkms >/dev/null 2>&1; then
    for version in $(dkms status nvidia 2>/dev/null | sed -n 's|^nvidia/\([^,]*\),.*|\1|p' | sort -u); do
      dkms remove "nvidia/$version" --all || true
    done
  fi
  apt_get "$APT_TIMEOUT_S" install --no-install-recommends "${packages[@]}"
  depmod -a "$kernel" || true
  record_driver installed
}

clean_up() {
  # Downloaded .debs only; the package lists stay so that the server's own apt steps (a driver
  # rebuild after a kernel upgrade) work without an update first.
  report bake-clean "apt cache"
  apt_get "$APT_TIMEOUT_S" clean
  sync
}

main() {
  local started=$SECONDS
  report bake-start "baking docker and $SERVER_IMAGE"
  install_docker
  configure_nvidia_runtime
  pull_server_image
  install_signed_driver
  clean_up
  report "$PHASE_READY" "baked docker and $SERVER_IMAGE in $((SECONDS - started)) s"
}

main "$@"
