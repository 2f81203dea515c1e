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
# The VM agents the boot starts (the idle watcher, the load publisher) are written here.
BIN_DIR=${QWEN36_BIN_DIR:-$STATE_DIR/bin}
HEALTH_URL=${QWEN36_HEALTH_URL:-http://127.0.0.1:$SERVER_PORT/health}

# Bounds: every wait below is one of these or one of lib.sh's (apt, docker, image pull, retry
# pause, guest attributes).
LOCK_TIMEOUT_S=60
NVIDIA_SMI_TIMEOUT_S=60
DRIVER_INSTALL_TIMEOUT_S=1200   # dkms compiles the kernel module
SECRET_ATTEMPTS=5               # errors other than a denial (network, 5xx)
SECRET_TIMEOUT_S=60
# IAM documents that a grant usually applies within 2 minutes and can take 7 or more; the grant
# is made seconds before the VM, so a denial is "not yet" this long after the first one.
# https://cloud.google.com/iam/docs/access-change-propagation
SECRET_IAM_WAIT_S=480
SECRET_BACKOFF_FIRST_S=10
SECRET_BACKOFF_MAX_S=60
HEALTH_POLLS=180
HEALTH_POLL_S=5
# The first minute is polled every second: a 22 GB load from tmpfs takes ~6.5 s, and a 5 s poll
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
SYSTEMCTL_TIMEOUT_S=30
PUBLISHER_RESTART_S=10
# A job stopped by SIGTERM is usually gone within milliseconds; the fine poll keeps a stop (before
# each ECC reboot) from costing half a second per look, the 10 s grace is for what ignores it.
STOP_JOB_POLLS=100
STOP_JOB_POLL_S=0.1
LOG_TAIL_LINES=20

CONTAINER_NAME=llama-server
SPEC_LABEL=qwen36.spec
IDLE_WATCH_TOOL="$BIN_DIR/idle_watch.py"
VM_AGENT_LIB="$BIN_DIR/vm_agent.py" # the module both agents import (startup/vm_agent.py)
IDLE_UNIT=qwen36-idle-watch
IDLE_METRICS_URL=${QWEN36_METRICS_URL:-http://127.0.0.1:$SERVER_PORT/metrics}
IDLE_RESTART_S=30 # systemd's pause before it restarts a failed watcher

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
EARLY_PIDS=() # the model and key jobs started beside a GPU reset (start_early_jobs)
GPU_NAME="" GPU_DRIVER="" GPU_UUID="" GPU_ECC="" # read_gpu
LOAD_STARTED="" # when step_server (re)started the container, for the ready report's load time

report() {
  # Terminal reports wait for room under the guest-attribute ration; steps are best effort. Once
  # a step has failed, nothing but the failure is published.
  local mode=step
  if [[ $1 == "$PHASE_READY" || $1 == "$PHASE_FAILED" ]]; then
    mode=must
  fi
  if [[ -e $FAILED_FLAG && $1 != "$PHASE_FAILED" ]]; then
    mode=off
  fi
  phase_report "$mode" "$1" "$2"
}

give_up() {
  # give_up RC WHY: the failure, then exit. A parallel job only records it (journal and flag
  # file): the main shell first stops the other job and everything it started (the download
  # writes progress), then publishes the recorded reason, so the failure is the last report.
  local rc=$1 why="$CURRENT_PHASE: $2"
  printf '%s\n' "$why" >"$FAILED_FLAG"
  if [[ $BASHPID != "$MAIN_PID" ]]; then
    phase_report off "$PHASE_FAILED" "$why"
  else
    report "$PHASE_FAILED" "$why"
  fi
  exit "$rc"
}

fail() {
  give_up 1 "$1"
}

on_error() {
  local rc=$1 line=$2 cmd=$3
  # Only the main shell and the two parallel jobs speak; a failing $(...) leaves that to its caller.
  if [[ $BASHPID != "$MAIN_PID" && $BASHPID != "${JOB_PID:-}" ]]; then
    exit "$rc"
  fi
  trap - ERR
  give_up "$rc" "'$cmd' exited $rc (line $line)"
}
trap 'on_error $? $LINENO "$BASH_COMMAND"' ERR

seconds_since_boot() {
  local up
  up=$(uptime_raw)
  echo "${up%%.*}"
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
  trimmed "$value"
}

trimmed() {
  local value=$1
  value=${value#"${value%%[![:space:]]*}"}
  echo "${value%"${value##*[![:space:]]}"}"
}

read_gpu() {
  # read_gpu: GPU_NAME, GPU_DRIVER, GPU_UUID and GPU_ECC from one nvidia-smi; 1 when it fails (no
  # GPU). One call, not one per field: each is a driver round trip on every boot's critical path.
  local info name driver uuid ecc
  info=$(nvsmi --query-gpu=name,driver_version,uuid,ecc.mode.current --format=csv,noheader 2>/dev/null | head -n 1) ||
    return 1
  [[ -n $info ]] || return 1
  IFS=, read -r name driver uuid ecc <<<"$info"
  GPU_NAME=$(trimmed "$name")
  GPU_DRIVER=$(trimmed "$driver")
  GPU_UUID=$(trimmed "$uuid")
  GPU_ECC=$(trimmed "$ecc")
}

step_driver() {
  CURRENT_PHASE=$PHASE_DRIVER
  if read_gpu; then
    report "$PHASE_DRIVER" "GPU visible: $GPU_NAME, driver $GPU_DRIVER"
    return 0
  fi
  # A kernel upgrade on reboot can leave the prebuilt module behind; dkms rebuilds it for the
  # running kernel. Nothing else is tried: a GPU that stays invisible is a failed boot, not a loop.
  [[ -n $NVIDIA_DRIVER_BRANCH ]] || fail "nvidia-smi fails and the driver branch is unknown"
  local package="nvidia-dkms-$NVIDIA_DRIVER_BRANCH-server-open"
  if [[ $(cat "$STATE_DIR/signed-driver" 2>/dev/null) == installed ]]; then
    # The bake put Canonical's signed module in place (startup/bake.sh): under Secure Boot a DKMS
    # build would not load, so the recovery is Canonical's build for the running kernel.
    package="linux-modules-nvidia-$NVIDIA_DRIVER_BRANCH-server-open-$(uname -r)"
  fi
  report "$PHASE_DRIVER" "nvidia-smi fails; reinstalling $package"
  apt_install "$DRIVER_INSTALL_TIMEOUT_S" "$package" || log "apt-get could not install $package"
  modprobe nvidia || log "modprobe nvidia failed"
  if read_gpu; then
    report "$PHASE_DRIVER" "driver recovered with $package: $GPU_NAME"
    return 0
  fi
  fail "no GPU: nvidia-smi still fails after installing $package and loading the module"
}

step_ecc() {
  CURRENT_PHASE=$PHASE_ECC
  local mode=$GPU_ECC gpu=$GPU_UUID asked
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
  # The model and the key need no GPU: they start now and run beside the reset, which a reboot
  # would otherwise have to wait out. They are stopped again if the reboot comes after all.
  start_early_jobs
  started=$SECONDS
  if ! nvsmi -r >/dev/null 2>&1; then
    log "GPU reset refused on $gpu after $((SECONDS - started)) s; rebooting instead"
    stop_early_jobs
    return 1
  fi
  mode=$(gpu_query ecc.mode.current)
  if [[ $mode != Disabled ]]; then
    log "GPU reset took $((SECONDS - started)) s but ECC reads $mode; rebooting instead"
    stop_early_jobs
    return 1
  fi
  report "$PHASE_ECC" "ECC disabled on $gpu by a GPU reset in $((SECONDS - started)) s, no reboot"
}

prepare_docker() {
  CURRENT_PHASE=$PHASE_PREPARE
  report "$PHASE_PREPARE" "checking docker and $SERVER_IMAGE"
  if ! command -v docker >/dev/null 2>&1; then
    report "$PHASE_PREPARE" "installing docker.io"
    local rc=0
    apt_install "$APT_TIMEOUT_S" docker.io || rc=$?
    ((rc == 0)) || fail "apt-get install docker.io exited $rc (the stock image's path)$(nat_hint)"
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
  pull_image "$SERVER_IMAGE" announce_pull || fail "could not pull $SERVER_IMAGE after $IMAGE_PULL_ATTEMPTS attempts$(nat_hint)"
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
  for name in SERVE_DIR SERVE_FROM EXPECTED_SHA OBJ_SIZE OBJ_CRC OBJ_SHA OBJ_GEN GCS_STATE FETCH_S FETCH_BYTES FETCH_SLICES; do
    printf '%s=%q\n' "$name" "${!name}"
  done >"$MODEL_STATE.tmp"
  mv -f "$MODEL_STATE.tmp" "$MODEL_STATE"
}

prepare_model() {
  CURRENT_PHASE=$PHASE_MODEL
  FETCH_S="" FETCH_BYTES="" FETCH_SLICES=""
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

process_tree() {
  # process_tree PID: PID and every process below it, parents first (from /proc, no procps).
  local stat line pid ppid rest
  local -A children=()
  for stat in /proc/[0-9]*/stat; do
    { read -r line <"$stat"; } 2>/dev/null || continue
    pid=${line%% *}
    rest=${line##*) }
    read -r _ ppid _ <<<"$rest"
    children[$ppid]+=" $pid"
  done
  local -a queue=("$1")
  local i=0 child
  while ((i < ${#queue[@]})); do
    for child in ${children[${queue[i]}]:-}; do
      queue+=("$child")
    done
    i=$((i + 1))
  done
  echo "${queue[*]}"
}

stop_job() {
  # stop_job PID...: parallel jobs and all they started (timeout gives its child a process group of
  # its own, so the trees are walked, not the groups signalled), under one grace; SIGKILL for what
  # outlives the polls.
  local -a tree=() job
  local pid
  for pid in "$@"; do
    read -r -a job <<<"$(process_tree "$pid")"
    tree+=("${job[@]}")
  done
  log "stopping the other parallel job: processes ${tree[*]}"
  kill -TERM "${tree[@]}" 2>/dev/null || true
  local poll
  for ((poll = 0; poll < STOP_JOB_POLLS; poll++)); do
    any_running "${tree[@]}" || break
    nap "$STOP_JOB_POLL_S"
  done
  if any_running "${tree[@]}"; then
    log "processes ${tree[*]} outlived SIGTERM ($STOP_JOB_POLLS polls, $STOP_JOB_POLL_S s apart): SIGKILL"
    kill -KILL "${tree[@]}" 2>/dev/null || true
  fi
  wait "$@" 2>/dev/null || true
}

any_running() {
  # any_running PID...: one of them runs. A job's child that outlives the job's subshell by a moment
  # is orphaned and stays a zombie until a reaper waits for it (late or never where PID 1 does not
  # reap), and `kill -0` still reaches a zombie, so that test would keep the whole grace period on
  # every stop; /proc/PID/stat says Z.
  local pid line
  for pid in "$@"; do
    { read -r line <"/proc/$pid/stat"; } 2>/dev/null || continue
    line=${line##*) }
    [[ ${line%% *} == Z ]] || return 0
  done
  return 1
}

start_early_jobs() {
  # The model and key jobs of the first prepare_in_parallel, started ahead of it.
  (JOB_PID=$BASHPID && prepare_model) &
  EARLY_PIDS=($!)
  (JOB_PID=$BASHPID && key_job) &
  EARLY_PIDS+=($!)
}

stop_early_jobs() {
  # Before a reboot: nothing half-done races the shutdown (tmpfs goes with it, and a partial disk
  # file keeps gcloud's temporary name).
  stop_job "${EARLY_PIDS[@]}"
  EARLY_PIDS=()
}

prepare_in_parallel() {
  # The image pull (~170 s), the model fetch (~13 s from GCS into RAM, minutes from HuggingFace)
  # and the secret read share nothing, so the boot costs the longest of them, not their sum.
  # WITH_KEY ($1) is 0 on a refetch after a failed post-serve hash (the key is in place by then).
  # The first job to fail stops the others and everything they started (the download writes
  # progress): a boot that has failed does no more work, and its reason is the last report.
  local with_key=$1 pid first rc
  local -a pids=("${EARLY_PIDS[@]}")
  (JOB_PID=$BASHPID && prepare_docker) &
  pids+=($!)
  if ((${#EARLY_PIDS[@]} == 0)); then
    (JOB_PID=$BASHPID && prepare_model) &
    pids+=($!)
    if ((with_key)); then
      (JOB_PID=$BASHPID && key_job) &
      pids+=($!)
    fi
  fi
  EARLY_PIDS=()
  while ((${#pids[@]} > 0)); do
    rc=0
    first=""
    wait -n -p first "${pids[@]}" || rc=$?
    local -a rest=()
    for pid in "${pids[@]}"; do
      [[ $pid == "$first" ]] || rest+=("$pid")
    done
    pids=("${rest[@]}")
    if ((rc != 0)); then
      ((${#pids[@]} == 0)) || stop_job "${pids[@]}"
      CURRENT_PHASE=$PHASE_PREPARE
      local why="a preparation job failed (exit $rc)"
      if [[ -s $FAILED_FLAG ]]; then
        why=$(<"$FAILED_FLAG")
      fi
      report "$PHASE_FAILED" "$why"
      exit 1
    fi
  done
  if [[ -e $KEY_CHANGED_FLAG ]]; then
    KEY_CHANGED=1
  fi
}

secret_denied() {
  # 0 when gcloud's error is Secret Manager's 401/403: the VM's account may not read the secret
  # (yet). https://cloud.google.com/secret-manager/docs/reference/rest/v1/projects.secrets.versions/access
  grep -qE 'PERMISSION_DENIED|UNAUTHENTICATED|\b40[13]\b' "$1"
}

withdraw_key() {
  # A key that can no longer be read is not served: the container docker restarted at boot with
  # the old key is stopped (so its restart policy leaves it down) and the old key file removed.
  rm -f "$KEY_FILE"
  command -v docker >/dev/null 2>&1 || return 0
  if timeout "$DOCKER_CMD_TIMEOUT_S" docker inspect --format '{{.State.Running}}' "$CONTAINER_NAME" >/dev/null 2>&1; then
    log "stopping $CONTAINER_NAME: its API key can no longer be read"
    timeout "$DOCKER_CMD_TIMEOUT_S" docker stop "$CONTAINER_NAME" >/dev/null || log "warning: could not stop $CONTAINER_NAME"
  fi
}

read_secret() {
  # read_secret TMP: the secret's latest version into TMP. A denial is "not yet" for
  # SECRET_IAM_WAIT_S after the first one (a grant made seconds before the VM takes minutes to
  # apply: https://cloud.google.com/iam/docs/access-change-propagation), retried with backoff
  # and reported; other errors get SECRET_ATTEMPTS tries. Sets READ_FAILURE on failure.
  local tmp=$1 err="$SECRETS_DIR/.gcloud-error" attempt=0 pause=$SECRET_BACKOFF_FIRST_S first_denial="" waited
  READ_FAILURE=""
  while true; do
    # The value only ever goes to a root-only file: never to stdout, the journal or a command line.
    if (umask 077 && timeout "$SECRET_TIMEOUT_S" gcloud secrets versions access latest \
      --secret="$API_KEY_SECRET" --project="$GCP_PROJECT" --quiet >"$tmp" 2>"$err") && [[ -s $tmp ]]; then
      rm -f "$err"
      return 0
    fi
    if secret_denied "$err"; then
      first_denial=${first_denial:-$(ga_clock)}
      waited=$(awk -v a="$(ga_clock)" -v b="$first_denial" 'BEGIN { printf "%.3f", a - b }')
      if ! less_than "$waited" "$(scaled "$SECRET_IAM_WAIT_S")"; then
        READ_FAILURE="permission denied on secret $API_KEY_SECRET in project $GCP_PROJECT for ${SECRET_IAM_WAIT_S} s, longer than IAM takes to apply a grant: the VM's service account needs roles/secretmanager.secretAccessor on it ($(one_line "$(head -c 300 "$err")"))"
        break
      fi
      report "$PHASE_API_KEY" "secret $API_KEY_SECRET: permission denied, as while a fresh IAM grant applies (up to ~7 min); retrying for up to ${SECRET_IAM_WAIT_S} s"
      nap "$pause"
      pause=$((pause * 2 > SECRET_BACKOFF_MAX_S ? SECRET_BACKOFF_MAX_S : pause * 2))
      continue
    fi
    attempt=$((attempt + 1))
    if ((attempt >= SECRET_ATTEMPTS)); then
      READ_FAILURE="could not read secret $API_KEY_SECRET after $SECRET_ATTEMPTS attempts ($(one_line "$(head -c 300 "$err")"))"
      break
    fi
    nap "$RETRY_PAUSE_S"
  done
  rm -f "$tmp" "$err"
  return 1
}

step_api_key() {
  CURRENT_PHASE=$PHASE_API_KEY
  if [[ -z $API_KEY_SECRET ]]; then
    report "$PHASE_API_KEY" "no API key (apiKey is false)"
    return 0
  fi
  report "$PHASE_API_KEY" "reading secret $API_KEY_SECRET"
  install -d -m 0700 "$SECRETS_DIR"
  local tmp="$SECRETS_DIR/.llama-api-key.tmp"
  if ! read_secret "$tmp"; then
    withdraw_key
    fail "$READ_FAILURE"
  fi
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
  # The calibration's choice (step_calibrate): one of the rendered argument lists, and its env.
  ((${#CALIB_ARGS[@]} == 0)) || args=("${CALIB_ARGS[@]}")
  opts=(--restart unless-stopped --gpus all -p "$SERVER_PORT:$SERVER_PORT"
    -v "$SERVE_DIR:$CONTAINER_MODEL_DIR:ro" "${CALIB_ENV_OPTS[@]}")
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
          LOAD_STARTED=$(ga_clock)
          return 0
        fi
        report "$PHASE_SERVER" "container $CONTAINER_NAME already runs the wanted image and arguments; left alone"
        LOAD_STARTED=""
        return 0
        ;;
      "false $spec")
        report "$PHASE_SERVER" "starting the existing container $CONTAINER_NAME"
        timeout "$DOCKER_CMD_TIMEOUT_S" docker start "$CONTAINER_NAME" >/dev/null
        LOAD_STARTED=$(ga_clock)
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
  LOAD_STARTED=$(ga_clock)
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

ready_figures() {
  # READY_FIGURES: the cold start as this boot measured it, name=value words (infra/boot_protocol.py
  # FIGURES) for the ready report: where the file came from, the fetch's rate, slices and time,
  # the load (from the container's start to this first /health 200, so up to one poll late) and
  # the time since the kernel started. Real seconds: the sandbox's time scale does not apply.
  READY_FIGURES="$FIGURE_FETCH_FROM=$SERVE_FROM"
  if [[ -n $FETCH_S && -n $FETCH_BYTES ]]; then
    READY_FIGURES+=" $FIGURE_FETCH_MB_S=$(awk -v b="$FETCH_BYTES" -v s="$FETCH_S" 'BEGIN { r = 0; if (s > 0) r = b / 1e6 / s; printf "%.1f", r }')"
    [[ -z $FETCH_SLICES ]] || READY_FIGURES+=" $FIGURE_FETCH_SLICES=$FETCH_SLICES"
    READY_FIGURES+=" $FIGURE_FETCH_S=$(awk -v s="$FETCH_S" 'BEGIN { printf "%.1f", s }')"
  fi
  [[ -z $LOAD_STARTED ]] || READY_FIGURES+=" $FIGURE_LOAD_S=$(awk -v s="$(seconds_since "$LOAD_STARTED")" 'BEGIN { printf "%.1f", s }')"
  READY_FIGURES+=" $FIGURE_READY_S=$(uptime_s)"
}

uptime_s() {
  # Seconds since the kernel started, one decimal.
  awk -v u="$(uptime_raw)" 'BEGIN { printf "%.1f", u }'
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
      ready_figures
      detail="llama-server healthy $(seconds_since_boot) s after boot; $READY_FIGURES"
      [[ -z $CALIB_FIELDS ]] || detail+="; $CALIB_FIELDS"
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

# ------------------------------------------------------------------ the first-boot calibration
# startup/calibrate.py: the verdict next to the model in the bucket decides the server's lossless
# options (MTP n-max or off, CUDA fusion, GPU sampling); a boot that finds none for its key (build,
# model sha256, GPU, driver, ECC mode, ctx size) measures them first, within CALIB_BUDGET_S, while
# nothing is served yet: each candidate is a server of its own that needs the whole L4. A failed
# or cut calibration is a warning: the stack config's own flags are served.
CALIBRATE_TOOL="$BIN_DIR/calibrate.py"
ACCEPT_GUARD_TOOL="$BIN_DIR/accept_guard.py"
CALIB_DIR="$RUN_DIR/calibration"
CALIB_PORT=${QWEN36_CALIB_PORT:-$((SERVER_PORT + 10))}
CALIB_SLACK_S=60 # docker's starts and stops around the measurement's own bound
CALIB_CONTAINER=qwen36-calibrate
ACCEPT_UNIT=qwen36-accept-guard
ACCEPT_POLL_S=60
CALIB_ARGS=() CALIB_ENV_OPTS=() CALIB_FIELDS=""

step_calibrate() {
  CURRENT_PHASE=$PHASE_CALIBRATE
  local ctx=$CTX_SIZE budget rc=0 started=$SECONDS line
  local -a key=() gpu=()
  ((DEGRADED == 0)) || ctx=$DEGRADED_CTX_SIZE
  # The sandbox runs real servers at full speed: its override is in real seconds, not scaled.
  budget=${QWEN36_CALIB_BUDGET_S:-$(scaled "$CALIB_BUDGET_S")}
  # A GPU reset may have turned ECC off since step_driver read it; the key needs the mode now.
  if read_gpu; then
    gpu=(--gpu-name "$GPU_NAME" --driver-version "$GPU_DRIVER" --ecc-mode "$GPU_ECC")
  fi
  [[ -z $API_KEY_SECRET ]] || key=(--key-file "$KEY_FILE" --container-key-file "$CONTAINER_API_KEY_FILE")
  install_agent qwen36_calibrate_tool "$CALIBRATE_TOOL"
  rm -rf "$CALIB_DIR"
  qwen36_calibration_candidates >"$CALIB_DIR.candidates.json"
  timeout "$(awk -v b="$budget" -v s="$CALIB_SLACK_S" 'BEGIN { printf "%d", b + s + 1 }')" \
    python3 "$CALIBRATE_TOOL" run --candidates "$CALIB_DIR.candidates.json" --out "$CALIB_DIR" \
    --llama-cpp-build "$LLAMA_CPP_BUILD" --model-sha256 "$EXPECTED_SHA" --ctx-size "$ctx" "${gpu[@]}" \
    --bucket "$MODEL_BUCKET" --verdict-object "$VERDICT_OBJECT" --metadata-url "$METADATA_URL" \
    --writer "boot $BOOT_ID" --budget "$budget" --port "$CALIB_PORT" --image "$SERVER_IMAGE" \
    --model-dir "$SERVE_DIR" --container-model-dir "$CONTAINER_MODEL_DIR" "${key[@]}" --defer-store || rc=$?
  # A run cut short may leave its server holding the GPU.
  if ((rc != 0)); then
    timeout "$DOCKER_CMD_TIMEOUT_S" docker rm -f "$CALIB_CONTAINER" >/dev/null 2>&1 || true
  fi
  if ((rc != 0)) || [[ ! -s $CALIB_DIR/server-args || ! -f $CALIB_DIR/choice.env ]]; then
    CALIB_FIELDS="$FIELD_VERDICT=default $FIELD_CALIBRATE_S=$((SECONDS - started))"
    report "$PHASE_CALIBRATE" "calibration failed (exit $rc) after $((SECONDS - started)) s: serving the stack config's flags"
    return 0
  fi
  # shellcheck source=/dev/null  # written by calibrate.py: shell-quoted assignments
  source "$CALIB_DIR/choice.env"
  mapfile -d '' -t CALIB_ARGS <"$CALIB_DIR/server-args"
  while IFS= read -r line; do
    [[ -z $line ]] || CALIB_ENV_OPTS+=(-e "$line")
  done <"$CALIB_DIR/docker-env"
  CALIB_FIELDS="$FIELD_FLAGS=$CALIB_CHOICE $FIELD_VERDICT=$CALIB_SOURCE $FIELD_CALIBRATE_S=$((SECONDS - started))"
  [[ -z $CALIB_TOK_S ]] || CALIB_FIELDS+=" $FIELD_DECODE_TPS=$CALIB_TOK_S"
  [[ -z $CALIB_ACCEPTANCE ]] || CALIB_FIELDS+=" $FIELD_ACCEPTANCE=$CALIB_ACCEPTANCE"
  [[ -z $CALIB_PINNED ]] || CALIB_FIELDS+=" $FIELD_PINNED=$CALIB_PINNED"
  report "$PHASE_CALIBRATE" "$CALIB_DETAIL; $((SECONDS - started)) s"
}

store_verdict() {
  # A verdict this boot measured goes to the bucket only once the served file passed its sha256.
  [[ -f $CALIB_DIR/pending-verdict.json ]] || return 0
  # With the cold start this boot measured (the ready report's figures), so the verdict of a first
  # boot says what its fetch and load took.
  local -a facts=()
  local word
  for word in ${READY_FIGURES:-}; do
    facts+=(--boot-fact "$word")
  done
  timeout "$CALIB_SLACK_S" python3 "$CALIBRATE_TOOL" store --out "$CALIB_DIR" --bucket "$MODEL_BUCKET" \
    --verdict-object "$VERDICT_OBJECT" --metadata-url "$METADATA_URL" "${facts[@]}" \
    || log "warning: the verdict was not stored"
}

start_accept_guard() {
  # startup/accept_guard.py: live acceptance against the verdict's (it marks the verdict stale when
  # it stays far below), and the acceptance and decode-rate metrics. A supervised unit; one that
  # cannot start is a warning.
  [[ -f $CALIB_DIR/expect.json ]] || { log "no calibration choice: the acceptance guard is not started"; return 0; }
  if ! command -v systemd-run >/dev/null 2>&1; then
    log "warning: no systemd-run; the acceptance guard is not running"
    return 0
  fi
  install_agent qwen36_vm_agent_lib "$VM_AGENT_LIB"
  install_agent qwen36_calibrate_tool "$CALIBRATE_TOOL"
  install_agent qwen36_accept_guard_tool "$ACCEPT_GUARD_TOOL"
  local -a key=()
  [[ -z $API_KEY_SECRET ]] || key=(--key-file "$KEY_FILE")
  if timeout "$SYSTEMCTL_TIMEOUT_S" systemctl is-active --quiet "$ACCEPT_UNIT"; then
    timeout "$SYSTEMCTL_TIMEOUT_S" systemctl stop "$ACCEPT_UNIT" || log "warning: could not stop $ACCEPT_UNIT"
  fi
  if timeout "$SYSTEMCTL_TIMEOUT_S" systemd-run --quiet --collect --unit="$ACCEPT_UNIT" -p Restart=on-failure \
    -p RestartSec="$IDLE_RESTART_S" "$(command -v python3)" "$ACCEPT_GUARD_TOOL" --metrics-url "$IDLE_METRICS_URL" \
    "${key[@]}" --expect-file "$CALIB_DIR/expect.json" --key-json "$CALIB_DIR/key.json" \
    --bucket "$MODEL_BUCKET" --verdict-object "$VERDICT_OBJECT" --metadata-url "$METADATA_URL" \
    --acceptance-metric "$ACCEPTANCE_METRIC_TYPE" --decode-metric "$DECODE_RATE_METRIC_TYPE" \
    --poll-seconds "$ACCEPT_POLL_S" --report-interval-seconds "$ACCEPT_REPORT_INTERVAL_S"; then
    log "acceptance guard $ACCEPT_UNIT started"
  else
    log "warning: could not start the acceptance guard $ACCEPT_UNIT"
  fi
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
    ((attempt > 1)) || step_calibrate
    step_server
    step_ready
    CURRENT_PHASE=$PHASE_MODEL
    if post_serve_verify; then
      [[ $SERVE_DIR != "$MODEL_RAM_DIR" ]] || printf '%s' "$EXPECTED_SHA" >"$RAM_MARKER"
      return 0
    fi
    rm -f "$CALIB_DIR/pending-verdict.json" # measured on the file that failed its hash: never stored
    ((attempt < MODEL_ATTEMPTS)) || fail "the served model failed its sha256 check after $MODEL_ATTEMPTS fetches"
  done
}

install_agent() {
  # Writes the embedded file that function $1 prints to $2 through a rename, so a unit (re)started
  # meanwhile never reads half a file. The agents import vm_agent.py from their own directory:
  # `python3 $BIN_DIR/<agent>.py` puts $BIN_DIR first on sys.path, so no unit needs a PYTHONPATH.
  install -d -m 0755 "$BIN_DIR"
  "$1" >"$2.tmp"
  mv -f "$2.tmp" "$2"
}

start_metrics_publisher() {
  # An autoscaled fleet sizes itself on each member's requests in flight (infra/fleet.py): a
  # transient systemd unit that systemd restarts on failure, never a background job of this
  # oneshot script. A unit left from an earlier run of this script is replaced.
  ((LOAD_METRIC_PUBLISH == 1)) || return 0
  local tool="$BIN_DIR/metrics_publisher.py" unit=qwen36-metrics-publisher
  local -a key_args=()
  install_agent qwen36_vm_agent_lib "$VM_AGENT_LIB"
  install_agent qwen36_metrics_publisher "$tool"
  if timeout "$SYSTEMCTL_TIMEOUT_S" systemctl is-active --quiet "$unit"; then
    timeout "$SYSTEMCTL_TIMEOUT_S" systemctl stop "$unit" || log "warning: could not stop $unit"
  fi
  timeout "$SYSTEMCTL_TIMEOUT_S" systemctl reset-failed "$unit" >/dev/null 2>&1 || true
  [[ -z $API_KEY_SECRET ]] || key_args=(--key-file "$KEY_FILE")
  if timeout "$SYSTEMCTL_TIMEOUT_S" systemd-run --unit="$unit" --description="qwen36 load metric publisher" \
    -p Restart=on-failure -p RestartSec="$PUBLISHER_RESTART_S" \
    python3 "$tool" --metrics-url "http://127.0.0.1:$SERVER_PORT/metrics" "${key_args[@]}" \
    --metric-type "$LOAD_METRIC_TYPE" --interval "$LOAD_METRIC_INTERVAL_S"; then
    log "started $unit ($LOAD_METRIC_TYPE every $LOAD_METRIC_INTERVAL_S s)"
  else
    # The server serves without it; the autoscaler then sees no load from this member.
    log "warning: could not start $unit; this server's load is not published"
  fi
}

start_idle_watch() {
  # Idle autostop (startup/idle_watch.py): resizes this VM's group to 0 after IDLE_STOP_MINUTES
  # without a request. A supervised unit restarts it on failure; one already running (this script
  # run again by hand) is left alone. Autostop saves money but the server does not need it, so a
  # watcher that cannot start is a warning, not a failed boot.
  if ((IDLE_STOP_MINUTES == 0)); then
    log "idle autostop is off (idleStopMinutes is 0)"
    return 0
  fi
  install_agent qwen36_vm_agent_lib "$VM_AGENT_LIB"
  install_agent qwen36_idle_watch_tool "$IDLE_WATCH_TOOL"
  if ! command -v systemd-run >/dev/null 2>&1; then
    log "warning: no systemd-run; idle autostop is not running"
    return 0
  fi
  if systemctl is-active --quiet "$IDLE_UNIT"; then
    log "idle watcher $IDLE_UNIT already running; left alone"
    return 0
  fi
  local -a key=() door=()
  [[ -z $API_KEY_SECRET ]] || key=(--key-file "$KEY_FILE")
  # With a front door, the door stops the group (it holds the only grant that can: infra/autostop.py).
  [[ -z $IDLE_STOP_DOOR_URL ]] || door=(--door-url "$IDLE_STOP_DOOR_URL")
  # --collect unloads the unit once it ends, failed or not, so the next boot can reuse its name.
  if systemd-run --quiet --collect --unit="$IDLE_UNIT" -p Restart=on-failure -p RestartSec="$IDLE_RESTART_S" \
    "$(command -v python3)" "$IDLE_WATCH_TOOL" --metrics-url "$IDLE_METRICS_URL" \
    --idle-minutes "$IDLE_STOP_MINUTES" "${key[@]}" "${door[@]}"; then
    log "idle watcher $IDLE_UNIT started: the group is resized to 0 after $IDLE_STOP_MINUTES idle minutes"
  else
    log "warning: could not start the idle watcher $IDLE_UNIT; the server stays up until stopped by hand"
  fi
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
  store_verdict
  start_metrics_publisher
  start_idle_watch
  start_accept_guard
  complete_metadata
  keep_disk_copy
  self_stage
}

main "$@"
