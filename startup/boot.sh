# shellcheck shell=bash
# shellcheck disable=SC2154  # SERVER_*, MODEL_*, GA_*, PHASE_* ... are set by the rendered config block.
# shellcheck disable=SC2034  # the model state (SERVE_*, GCS_STATE, ...) is shared with startup/model.sh.
#
# The server VM's boot body. GCE runs the startup script on every boot (first boot, the ECC reboot,
# each restart after a spot preemption, possibly on another host), as a oneshot unit whose failure
# is never retried, so every step checks the machine's state before acting on it and every wait is
# bounded. https://cloud.google.com/compute/docs/instances/startup-scripts/linux
#
# infra/boot_script.py prepends the config block (image, server arguments, model, bucket, secret,
# guest-attribute names), the model fetch tool and startup/lib.sh (shell options, shared bounds,
# logging, guest-attribute reports, apt and docker helpers); this file is appended verbatim, never
# edited by the renderer.
shopt -s inherit_errexit
# On Ubuntu images gcloud may be a snap; a oneshot unit's PATH is not guaranteed to hold /snap/bin.
PATH="$PATH:/snap/bin"

# Every location can be moved so the sandbox tests run the real script inside a temp dir.
STATE_DIR=${QWEN36_STATE_DIR:-/var/lib/qwen36}
MODEL_DIR=${QWEN36_MODEL_DIR:-$STATE_DIR/models}
# The key lives on the boot disk, not in /run: docker restarts the container at boot before this
# script runs, and a bind-mount source that vanished with /run would stop it from starting.
SECRETS_DIR=${QWEN36_SECRETS_DIR:-$STATE_DIR/secrets}
HEALTH_URL=${QWEN36_HEALTH_URL:-http://127.0.0.1:$SERVER_PORT/health}

# Bounds: every wait below is one of these or one of lib.sh's (apt, docker, image pull, retry
# pause, guest attributes).
LOCK_TIMEOUT_S=60
NVIDIA_SMI_TIMEOUT_S=60
DRIVER_INSTALL_TIMEOUT_S=1200   # dkms compiles the kernel module
SECRET_ATTEMPTS=5               # a freshly granted secretAccessor role can take a minute to apply
SECRET_TIMEOUT_S=60
HEALTH_POLLS=180
HEALTH_POLL_S=5
# The first minute is polled every second: a 22 GB load from tmpfs takes ~16 s, and a 5 s poll
# would add 2.5 s on average to every boot's time to ready.
HEALTH_FAST_POLLS=60
HEALTH_FAST_POLL_S=1
HEALTH_FAST_POLL_STRIDE=5
HEALTH_PROBE_TIMEOUT_S=5
# Docker restarts a crashed container forever (--restart unless-stopped), so a load that always
# fails (CUDA out of memory: a ctxSize too large for the L4) would show only as the whole health
# bound. Its pause before a restart starts at 100 ms and doubles, and moby's restartmanager resets
# it once the container ran 10 s (a 22 GB load does): this many restarts since the wait began cost
# about as many loads. One or two may be a transient fault that a restart cures.
# https://docs.docker.com/reference/api/engine/version/v1.57/schemas/RestartPolicy/
CRASH_RESTARTS=3
LOG_TAIL_LINES=20

CONTAINER_NAME=llama-server
SPEC_LABEL=qwen36.spec
# tmpfs, mounted by the model step (startup/model.sh says why and how big).
MODEL_RAM_DIR=${QWEN36_MODEL_RAM_DIR:-/run/qwen36-model}
RAM_MODEL="$MODEL_RAM_DIR/$MODEL_NAME"
RAM_MARKER="$MODEL_RAM_DIR/.sha256-checked"
DISK_MODEL="$MODEL_DIR/$MODEL_NAME"
# shellcheck disable=SC2034  # read by startup/model.sh, pasted before this file
DISK_MARKER="$DISK_MODEL.verified"
KEY_FILE="$SECRETS_DIR/llama-api-key"
RUN_DIR="$STATE_DIR/run"
FAILED_FLAG="$RUN_DIR/failed"
ECC_MARKER="$STATE_DIR/ecc-reboot-requested"

MODEL_REFRESHED="$RUN_DIR/model-refreshed"
MODEL_STATE="$RUN_DIR/model.env"
KEY_CHANGED_FLAG="$RUN_DIR/key-changed"
MAIN_PID=$BASHPID
CURRENT_PHASE=$PHASE_BOOT
DEGRADED=0
KEY_CHANGED=0

report() {
  # Once a step has failed, the failure stays the last word even while a parallel step finishes.
  local publish=1
  if [[ -e $FAILED_FLAG && $1 != "$PHASE_FAILED" ]]; then
    publish=0
  fi
  phase_report "$publish" "$1" "$2"
}

fail() {
  : >"$FAILED_FLAG"
  report "$PHASE_FAILED" "$CURRENT_PHASE: $1"
  exit 1
}

on_error() {
  local rc=$1 line=$2 cmd=$3
  # Only the main shell and the two parallel jobs speak; a failing $(...) leaves that to its caller.
  if [[ $BASHPID != "$MAIN_PID" && $BASHPID != "${JOB_PID:-}" ]]; then
    exit "$rc"
  fi
  trap - ERR
  : >"$FAILED_FLAG"
  report "$PHASE_FAILED" "$CURRENT_PHASE: '$cmd' exited $rc (line $line)"
  exit "$rc"
}
trap 'on_error $? $LINENO "$BASH_COMMAND"' ERR

seconds_since_boot() {
  if [[ -n ${QWEN36_BOOT_EPOCH:-} ]]; then
    echo $(($(date +%s) - QWEN36_BOOT_EPOCH))
  else
    local up
    read -r up _ </proc/uptime
    echo "${up%%.*}"
  fi
}

apt_install() {
  # A stale package index is the usual cause of "Unable to locate package" on a fresh image.
  local limit=$1
  shift
  if apt_get "$limit" -q install "$@"; then
    return 0
  fi
  apt_get "$APT_TIMEOUT_S" -q update
  apt_get "$limit" -q install "$@"
}

nvsmi() {
  timeout "$NVIDIA_SMI_TIMEOUT_S" nvidia-smi "$@"
}

gpu_query() {
  local value
  value=$(nvsmi --query-gpu="$1" --format=csv,noheader 2>/dev/null | head -n 1 || true)
  value=${value#"${value%%[![:space:]]*}"}
  echo "${value%"${value##*[![:space:]]}"}"
}

step_driver() {
  CURRENT_PHASE=$PHASE_DRIVER
  if nvsmi >/dev/null 2>&1; then
    report "$PHASE_DRIVER" "GPU visible: $(gpu_query name), driver $(gpu_query driver_version)"
    return 0
  fi
  # A kernel upgrade on reboot can leave the prebuilt module behind; dkms rebuilds it for the
  # running kernel. Nothing else is tried: a GPU that stays invisible is a failed boot, not a loop.
  [[ -n $NVIDIA_DRIVER_BRANCH ]] || fail "nvidia-smi fails and the driver branch is unknown"
  local package="nvidia-dkms-$NVIDIA_DRIVER_BRANCH-server-open"
  report "$PHASE_DRIVER" "nvidia-smi fails; reinstalling $package"
  apt_install "$DRIVER_INSTALL_TIMEOUT_S" "$package" || log "apt-get could not install $package"
  modprobe nvidia || log "modprobe nvidia failed"
  if nvsmi >/dev/null 2>&1; then
    report "$PHASE_DRIVER" "driver recovered with $package: $(gpu_query name)"
    return 0
  fi
  fail "no GPU: nvidia-smi still fails after installing $package and loading the module"
}

step_ecc() {
  CURRENT_PHASE=$PHASE_ECC
  local info mode gpu asked
  # One nvidia-smi for both: each call costs a driver round trip on the critical path.
  info=$(gpu_query uuid,ecc.mode.current)
  gpu=${info%%,*}
  mode=${info##*, }
  if [[ $mode != Enabled ]]; then
    # The marker only guards the reboot it asked for; a later host starts afresh.
    if [[ -f $ECC_MARKER ]] && asked=$(sed -n 's/^epoch=//p' "$ECC_MARKER") && [[ -n $asked ]]; then
      log "ECC reboot path: from the reboot request to this boot's ECC check took $(($(date +%s) - asked)) s"
    fi
    rm -f "$ECC_MARKER"
    report "$PHASE_ECC" "ECC $mode on $gpu"
    return 0
  fi
  if [[ -f $ECC_MARKER ]] && grep -qxF "gpu=$gpu" "$ECC_MARKER"; then
    DEGRADED=1
    report "$PHASE_ECC" "degraded: ECC still enabled on $gpu after the reboot this script asked for; serving with ctx-size $DEGRADED_CTX_SIZE"
    return 0
  fi
  if ! nvsmi -e 0 >/dev/null; then
    DEGRADED=1
    report "$PHASE_ECC" "degraded: nvidia-smi -e 0 was refused on $gpu; serving with ctx-size $DEGRADED_CTX_SIZE"
    return 0
  fi
  if ecc_reset "$gpu"; then
    return 0
  fi
  # The marker is written after -e 0 took: a boot cut off in between reboots into ECC off anyway.
  printf 'reboot requested for ECC\ngpu=%s\nat=%s\nepoch=%s\n' "$gpu" "$(utc_now)" "$(date +%s)" >"$ECC_MARKER.tmp"
  mv -f "$ECC_MARKER.tmp" "$ECC_MARKER"
  sync
  report "$PHASE_ECC" "ECC disabled for the next boot on $gpu; rebooting"
  reboot
  exit 0
}

ecc_reset() {
  # A pending ECC change applies at the next reboot (30-90 s on GCE) or, where the driver allows
  # it, at a GPU reset, which needs a GPU no process holds. 0: ECC is off now.
  # https://docs.nvidia.com/deploy/nvidia-smi/index.html (-r, --gpu-reset)
  local gpu=$1 holders started mode
  # The container docker restarted at boot cannot serve (its model was in tmpfs): it goes first.
  stop_stale_server
  holders=$(nvsmi --query-compute-apps=pid --format=csv,noheader 2>/dev/null | grep -c . || true)
  if ((holders > 0)); then
    log "GPU reset skipped: $holders process(es) hold $gpu; rebooting instead"
    return 1
  fi
  started=$SECONDS
  if ! nvsmi -r >/dev/null 2>&1; then
    log "GPU reset refused on $gpu after $((SECONDS - started)) s; rebooting instead"
    return 1
  fi
  mode=$(gpu_query ecc.mode.current)
  if [[ $mode != Disabled ]]; then
    log "GPU reset took $((SECONDS - started)) s but ECC reads $mode; rebooting instead"
    return 1
  fi
  report "$PHASE_ECC" "ECC disabled on $gpu by a GPU reset in $((SECONDS - started)) s, no reboot"
}

prepare_docker() {
  CURRENT_PHASE=$PHASE_PREPARE
  report "$PHASE_PREPARE" "checking docker and $SERVER_IMAGE"
  if ! command -v docker >/dev/null 2>&1; then
    report "$PHASE_PREPARE" "installing docker.io"
    apt_install "$APT_TIMEOUT_S" docker.io
  fi
  docker_ready || fail "docker daemon not answering"
  local runtime=0
  has_nvidia_runtime || runtime=$?
  ((runtime != 2)) || fail "docker info could not list the runtimes"
  if ((runtime == 1)); then
    # The Deep Learning VM ships nvidia-container-toolkit but not docker, so the runtime is
    # registered here, once: https://docs.nvidia.com/datacenter/cloud-native/container-toolkit/latest/install-guide.html
    command -v nvidia-ctk >/dev/null 2>&1 || apt_install "$APT_TIMEOUT_S" nvidia-container-toolkit
    nvidia-ctk runtime configure --runtime=docker
    systemctl restart docker
    docker_ready || fail "docker daemon not answering after adding the nvidia runtime"
  fi
  if docker image inspect "$SERVER_IMAGE" >/dev/null 2>&1; then
    report "$PHASE_PREPARE" "docker ready; $SERVER_IMAGE already present"
    return 0
  fi
  pull_image "$SERVER_IMAGE" announce_pull || fail "could not pull $SERVER_IMAGE after $IMAGE_PULL_ATTEMPTS attempts"
  report "$PHASE_PREPARE" "docker ready; pulled $SERVER_IMAGE"
}

announce_pull() {
  report "$PHASE_PREPARE" "pulling $SERVER_IMAGE (attempt $1/$IMAGE_PULL_ATTEMPTS)"
}

stop_stale_server() {
  # Docker's restart policy starts the container at boot, before this script, on a model directory
  # that no longer holds a proven file (tmpfs is empty after a boot): it is stopped until the
  # model is in place again.
  command -v docker >/dev/null 2>&1 || return 0
  local running
  running=$(timeout "$DOCKER_CMD_TIMEOUT_S" docker inspect --format '{{.State.Running}}' \
    "$CONTAINER_NAME" 2>/dev/null || true)
  if [[ $running == true ]]; then
    report "$PHASE_MODEL" "stopping $CONTAINER_NAME until the model is in place and checked"
    timeout "$DOCKER_CMD_TIMEOUT_S" docker stop "$CONTAINER_NAME" >/dev/null || true
  fi
}

pick_model_dir() {
  # FETCH_DIR: tmpfs when the RAM budget allows (see startup/model.sh), else the boot disk.
  local bytes=$1
  if ((bytes > 0)) && ram_dir_ready "$bytes"; then
    FETCH_DIR=$MODEL_RAM_DIR
  else
    mkdir -p "$MODEL_DIR"
    FETCH_DIR=$MODEL_DIR
    log "fetching to the boot disk $MODEL_DIR"
  fi
  rm -f "$FETCH_DIR/$MODEL_NAME"
}

save_model_state() {
  # Plain assignments (not declare -p): sourced inside a function, declare would make them local.
  local name
  for name in SERVE_DIR SERVE_FROM EXPECTED_SHA OBJ_SIZE OBJ_CRC OBJ_SHA OBJ_GEN GCS_STATE; do
    printf '%s=%q\n' "$name" "${!name}"
  done >"$MODEL_STATE.tmp"
  mv -f "$MODEL_STATE.tmp" "$MODEL_STATE"
}

prepare_model() {
  CURRENT_PHASE=$PHASE_MODEL
  if [[ -f $RAM_MARKER && -f $RAM_MODEL ]] && [[ $(<"$RAM_MARKER") == "${MODEL_SHA256:-$(<"$RAM_MARKER")}" ]]; then
    # The startup script run again in the same boot: the RAM copy already passed its hash.
    SERVE_DIR=$MODEL_RAM_DIR SERVE_FROM=ram EXPECTED_SHA=$(<"$RAM_MARKER")
    report "$PHASE_MODEL" "model already in RAM and checked: $RAM_MODEL"
    save_model_state
    return 0
  fi
  : >"$MODEL_REFRESHED"
  # Stopping the container docker restarted overlaps the object lookup; it is done before any byte
  # is written where the container could load it.
  stop_stale_server &
  local stopper=$! rc=3
  if ((SKIP_GCS == 0)) && [[ -n $MODEL_BUCKET ]]; then
    rc=0
    gcs_describe || rc=$?
    wait "$stopper" || true
    if ((rc == 0)) && gcs_judge; then
      pick_model_dir "$OBJ_SIZE"
      rc=0
      fetch_from_gcs "$FETCH_DIR" || rc=$?
      if ((rc == 0)); then
        SERVE_DIR=$FETCH_DIR SERVE_FROM=gcs
        report "$PHASE_MODEL" "fetched from the GCS cache into $FETCH_DIR (CRC32C $OBJ_CRC checked; sha256 $EXPECTED_SHA checked once served)"
        save_model_state
        return 0
      fi
    elif ((rc == 3)); then
      GCS_STATE=missing
      log "cache miss: $GCS_URL"
    elif ((rc == 0)); then
      log "the cache object is unusable; taking another source"
    else
      GCS_STATE=error
    fi
  fi
  wait "$stopper" 2>/dev/null || true
  if disk_copy_usable; then
    SERVE_DIR=$MODEL_DIR SERVE_FROM=disk
    report "$PHASE_MODEL" "serving the disk copy kept after a hub download: $DISK_MODEL (sha256 checked once served)"
    save_model_state
    return 0
  fi
  hub_head
  local size=$MODEL_SIZE_BYTES
  ((size != 0)) || size=$HUB_SIZE
  pick_model_dir "$size"
  fetch_from_hub "$FETCH_DIR"
  SERVE_DIR=$FETCH_DIR SERVE_FROM=hub
  report "$PHASE_MODEL" "fetched from HuggingFace into $FETCH_DIR (sha256 checked once served)"
  save_model_state
}

key_job() {
  # The secret read in its own job: its result crosses back as a flag file.
  step_api_key
  if ((KEY_CHANGED)); then
    : >"$KEY_CHANGED_FLAG"
  fi
}

prepare_in_parallel() {
  # The image pull (~170 s), the model fetch (~13 s from GCS into RAM, minutes from HuggingFace)
  # and the secret read share nothing, so the boot costs the longest of them, not their sum.
  # WITH_KEY ($1) is 0 on a refetch after a failed post-serve hash (the key is in place by then).
  local with_key=$1 key_pid="" key_rc=0
  (JOB_PID=$BASHPID && prepare_docker) &
  local docker_pid=$!
  (JOB_PID=$BASHPID && prepare_model) &
  local model_pid=$!
  if ((with_key)); then
    (JOB_PID=$BASHPID && key_job) &
    key_pid=$!
  fi
  local docker_rc=0 model_rc=0
  wait "$docker_pid" || docker_rc=$?
  wait "$model_pid" || model_rc=$?
  [[ -z $key_pid ]] || wait "$key_pid" || key_rc=$?
  if ((docker_rc != 0 || model_rc != 0 || key_rc != 0)); then
    CURRENT_PHASE=$PHASE_PREPARE
    [[ -e $FAILED_FLAG ]] && exit 1
    fail "docker preparation exited $docker_rc, model preparation exited $model_rc, the key read exited $key_rc"
  fi
  if [[ -e $KEY_CHANGED_FLAG ]]; then
    KEY_CHANGED=1
  fi
}

step_api_key() {
  CURRENT_PHASE=$PHASE_API_KEY
  if [[ -z $API_KEY_SECRET ]]; then
    report "$PHASE_API_KEY" "no API key (apiKey is false)"
    return 0
  fi
  report "$PHASE_API_KEY" "reading secret $API_KEY_SECRET"
  install -d -m 0700 "$SECRETS_DIR"
  local tmp="$SECRETS_DIR/.llama-api-key.tmp" attempt ok=0
  for ((attempt = 1; attempt <= SECRET_ATTEMPTS; attempt++)); do
    # The value only ever goes to a root-only file: never to stdout, the journal or a command line.
    if (umask 077 && timeout "$SECRET_TIMEOUT_S" gcloud secrets versions access latest \
      --secret="$API_KEY_SECRET" --project="$GCP_PROJECT" --quiet >"$tmp") && [[ -s $tmp ]]; then
      ok=1
      break
    fi
    nap "$RETRY_PAUSE_S"
  done
  ((ok == 1)) || { rm -f "$tmp"; fail "could not read secret $API_KEY_SECRET after $SECRET_ATTEMPTS attempts"; }
  chmod 0600 "$tmp"
  if [[ -f $KEY_FILE ]] && cmp -s "$tmp" "$KEY_FILE"; then
    rm -f "$tmp"
  else
    # A file bind mount pins the old inode, so a rotated key needs a new container.
    mv -f "$tmp" "$KEY_FILE"
    KEY_CHANGED=1
  fi
  report "$PHASE_API_KEY" "API key in place (root-only file)"
}

step_server() {
  CURRENT_PHASE=$PHASE_SERVER
  local -a args opts
  if ((DEGRADED)); then
    args=("${SERVER_ARGS_DEGRADED[@]}")
  else
    args=("${SERVER_ARGS[@]}")
  fi
  opts=(--restart unless-stopped --gpus all -p "$SERVER_PORT:$SERVER_PORT"
    -v "$SERVE_DIR:$CONTAINER_MODEL_DIR:ro")
  if [[ -n $API_KEY_SECRET ]]; then
    opts+=(-v "$KEY_FILE:$CONTAINER_API_KEY_FILE:ro")
  fi
  local spec state
  spec=$(printf '%s\0' "$SERVER_IMAGE" "${opts[@]}" "${args[@]}" | sha256sum | cut -c1-32)
  state=$(timeout "$DOCKER_CMD_TIMEOUT_S" docker inspect \
    --format "{{.State.Running}} {{index .Config.Labels \"$SPEC_LABEL\"}}" "$CONTAINER_NAME" 2>/dev/null || true)
  # The model directory is bind-mounted by path and resolved at each start, so a new model file
  # needs a (re)start, not a new container; a rotated key does (a file mount pins its inode).
  if ((KEY_CHANGED == 0)); then
    case $state in
      "true $spec")
        if [[ -e $MODEL_REFRESHED ]]; then
          report "$PHASE_SERVER" "restarting $CONTAINER_NAME on the new model file"
          timeout "$DOCKER_CMD_TIMEOUT_S" docker restart "$CONTAINER_NAME" >/dev/null
          return 0
        fi
        report "$PHASE_SERVER" "container $CONTAINER_NAME already runs the wanted image and arguments; left alone"
        return 0
        ;;
      "false $spec")
        report "$PHASE_SERVER" "starting the existing container $CONTAINER_NAME"
        timeout "$DOCKER_CMD_TIMEOUT_S" docker start "$CONTAINER_NAME" >/dev/null
        return 0
        ;;
    esac
  fi
  if [[ -n $state ]]; then
    report "$PHASE_SERVER" "replacing container $CONTAINER_NAME (its image, arguments, key or model changed)"
    timeout "$DOCKER_CMD_TIMEOUT_S" docker rm -f "$CONTAINER_NAME" >/dev/null
  fi
  report "$PHASE_SERVER" "starting $SERVER_IMAGE"
  timeout "$DOCKER_CMD_TIMEOUT_S" docker run -d --name "$CONTAINER_NAME" \
    --label "$SPEC_LABEL=$spec" "${opts[@]}" "$SERVER_IMAGE" "${args[@]}" >/dev/null
}

container_state() {
  # "RESTARTS STATUS EXITCODE"; timeout's 124 when docker did not answer in time.
  timeout "$DOCKER_CMD_TIMEOUT_S" docker inspect \
    --format '{{.RestartCount}} {{.State.Status}} {{.State.ExitCode}}' "$CONTAINER_NAME" 2>/dev/null
}

log_tail() {
  # The container's last log lines on one line, after a hint when they show the GPU out of memory.
  local lines key=$CTX_SIZE_KEY
  lines=$(timeout "$DOCKER_CMD_TIMEOUT_S" docker logs --tail "$LOG_TAIL_LINES" "$CONTAINER_NAME" 2>&1 || true)
  if grep -qiE 'out of memory|cudaMalloc failed|failed to allocate' <<<"$lines"; then
    ((DEGRADED == 0)) || key=$DEGRADED_CTX_SIZE_KEY
    printf 'the GPU ran out of memory loading the model: lower %s; ' "$key"
  fi
  printf 'last log lines: %s' "$(tr '\n' '|' <<<"$lines")"
}

step_ready() {
  CURRENT_PHASE=$PHASE_SERVER
  report "$PHASE_SERVER" "waiting for $HEALTH_URL"
  local i pause fast state rc restarts status code crashes why baseline="" watch=1
  pause=$(scaled "$HEALTH_POLL_S")
  fast=$(scaled "$HEALTH_FAST_POLL_S")
  for ((i = 0; i < HEALTH_FAST_POLLS + HEALTH_POLLS; i++)); do
    if curl -fsS --max-time "$HEALTH_PROBE_TIMEOUT_S" "$HEALTH_URL" >/dev/null 2>&1; then
      local detail
      detail="llama-server healthy $(seconds_since_boot) s after boot"
      if ((DEGRADED)); then
        detail+="; degraded: ECC is enabled, ctx-size $DEGRADED_CTX_SIZE"
      fi
      report "$PHASE_READY" "$detail"
      return 0
    fi
    state="" restarts=""
    # The container's state every poll once polls are 5 s apart; every fifth of the 1 s ones.
    if ((watch)) && ((i >= HEALTH_FAST_POLLS || i % HEALTH_FAST_POLL_STRIDE == 0)); then
      rc=0
      state=$(container_state) || rc=$?
      # A docker that hung once is not asked again, so the wait stays within the health bound
      # plus one docker timeout.
      ((rc != 124)) || watch=0
    fi
    read -r restarts status code _ <<<"$state" || true
    if [[ $restarts =~ ^[0-9]+$ ]]; then
      # Counted from the first look: a container left running may carry restarts from long ago.
      baseline=${baseline:-$restarts}
      if [[ $status == exited || $status == dead ]]; then
        fail "llama-server exited (exit code $code) and docker does not restart it; $(log_tail)"
      fi
      crashes=$((restarts - baseline))
      if ((crashes >= CRASH_RESTARTS)); then
        why="exit code $code, restarted $crashes times by docker, $(seconds_since_boot) s after boot"
        fail "llama-server keeps exiting ($why); $(log_tail)"
      fi
    fi
    if ((i < HEALTH_FAST_POLLS)); then
      sleep "$fast"
    else
      sleep "$pause"
    fi
  done
  fail "not healthy after $((HEALTH_FAST_POLLS * HEALTH_FAST_POLL_S + HEALTH_POLLS * HEALTH_POLL_S)) s; $(log_tail)"
}

serve_and_check() {
  # The model, the server, readiness, then the full sha256 of the served file after the server is
  # up. A file that fails it took the server out of service; it is fetched again from another
  # source, a bounded number of times.
  local attempt
  for ((attempt = 1; ; attempt++)); do
    prepare_in_parallel $((attempt == 1))
    # shellcheck source=/dev/null  # written by prepare_model in its parallel job
    source "$MODEL_STATE"
    step_server
    step_ready
    CURRENT_PHASE=$PHASE_MODEL
    if post_serve_verify; then
      [[ $SERVE_DIR != "$MODEL_RAM_DIR" ]] || printf '%s' "$EXPECTED_SHA" >"$RAM_MARKER"
      return 0
    fi
    ((attempt < MODEL_ATTEMPTS)) || fail "the served model failed its sha256 check after $MODEL_ATTEMPTS fetches"
  done
}

main() {
  install -d -m 0755 "$STATE_DIR" "$RUN_DIR"
  # A second copy (someone re-running the startup script by hand) waits for the first.
  exec 9>"$RUN_DIR/boot.lock"
  flock -w "$LOCK_TIMEOUT_S" 9 || { log "another boot script holds the lock"; exit 1; }
  rm -f "$FAILED_FLAG" "$MODEL_REFRESHED" "$MODEL_STATE" "$KEY_CHANGED_FLAG"
  report "$PHASE_BOOT" "boot script started $(seconds_since_boot) s after boot"
  step_driver
  step_ecc
  serve_and_check
  complete_metadata
  keep_disk_copy
  self_stage
}

main "$@"
