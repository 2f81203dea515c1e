# shellcheck shell=bash
# shellcheck disable=SC2034,SC2154  # shared with boot.sh (pasted after this file) and the config block.
#
# The model path of the boot body: fetch the pinned model straight into RAM (tmpfs) with the tools
# the image already has (`gcloud storage cp`: sliced ranged reads checked against the object's
# CRC32C; `hf download` for the hub), serve it from there with `--load-mode none`, and prove it is
# the pinned model with a full sha256 after the server is up, at idle priority.
#
# Why RAM and not the boot disk: a 100 GB pd-ssd writes and reads ~288 MiB/s (240 MiB/s + 0.48 MiB/s
# per GiB), ~73 s for 22 GB each way, and the page cache is empty after every boot; the NIC does
# 16 Gbps (~11-13 s for 22 GB with enough parallel reads) and tmpfs loads at GB/s.
# https://cloud.google.com/compute/docs/disks/performance
#
# RAM budget of a g2-standard-8 (32 GB): the model file (~22 GB, tmpfs pages are the page cache,
# so neither the load nor the post-serve hash copies it), llama-server ~0.7 GiB RSS with
# `--load-mode none` (measured, facts.md), dockerd + containerd ~0.3 GiB, `gcloud storage cp`'s
# worker processes ~1 GiB while fetching only, the kernel and the guest agents ~1 GiB. What is
# left (~6 GiB) is RAM_RESERVE_MIB: the check below refuses tmpfs when it would not remain, and the
# model is then fetched to the boot disk instead (the old, slower path, never a crash).
#
# Sourced by nothing at run time: infra/boot_script.py pastes it between lib.sh and boot.sh.

MEMINFO=${QWEN36_MEMINFO:-/proc/meminfo}
RAM_RESERVE_MIB=6144
# Slack above the file in the tmpfs size: gcloud's temporary name and hf's lock/metadata files.
TMPFS_SLACK_MIB=256
# Sliced download: gcloud storage runs the slices over its process x thread pool; 32 ranged reads
# of >= 256 MiB keep a 16 Gbps NIC busy where one stream gives ~200 MiB/s.
# https://cloud.google.com/storage/docs/sliced-object-downloads
GCS_COMPONENTS=32
GCS_COMPONENT_MIB=256
# Set rather than left to gcloud, so the slice count the boot reports is the one gcloud used: it
# slices an object above this size into min(ceil(size / component size), max components) ranges
# (googlecloudsdk/command_lib/storage/tasks/cp/file_download_task.py and copy_component_util.py).
GCS_SLICE_THRESHOLD_MIB=150
GCS_PROCESSES=8
GCS_THREADS=4
GCS_FETCH_TIMEOUT_S=900
GCS_FETCH_ATTEMPTS=2
GCS_CMD_TIMEOUT_S=60
# IAM grants take 2-7 minutes or more to apply, and the bucket grant is made seconds before the VM
# boots: a 401/403 this early is "not yet", retried with backoff up to this bound (counted from
# the VM's boot), then a clear failure. https://cloud.google.com/iam/docs/access-change-propagation
GCS_DENIED_BOUND_S=480
GCS_DENIED_PAUSE_S=10
GCS_DENIED_PAUSE_MAX_S=60
HUB_FETCH_TIMEOUT_S=3600
HUB_HEAD_TIMEOUT_S=30
HF_INSTALL_TIMEOUT_S=300
HF_HUB_VERSION=2.4.0
# The post-serve hash: a full sha256 (~40 s for 22 GB on one Cascade Lake core, which has no SHA
# extensions) at the lowest CPU and I/O priority, after the server is up.
VERIFY_TIMEOUT_S=1800
COPY_TIMEOUT_S=1800
SELF_STAGE_TIMEOUT_S=3600
MODEL_ATTEMPTS=2

MODEL_NAME=${MODEL_FILE##*/}
GCS_URL="gs://$MODEL_BUCKET/$MODEL_OBJECT"

# Set by prepare_model for the steps after it.
SERVE_DIR=""          # the directory the container mounts
SERVE_FROM=""         # gcs | hub | disk
EXPECTED_SHA=""       # what the post-serve hash must equal (pinned, the object's, or the hub's)
OBJ_SIZE="" OBJ_CRC="" OBJ_SHA="" OBJ_GEN="" OBJ_META_SIZE=""
HUB_SHA="" HUB_SIZE=0
HF_BIN=""             # set by hf_tool
# The fetch of the served file, for the ready report's figures (infra/boot_protocol.py FIGURES).
FETCH_S="" FETCH_BYTES="" FETCH_SLICES=""
GCS_SLICES=1          # set by gcs_copy
FETCH_DIR=""
GCS_STATE=""          # ok | missing | no-sha | bad | error: what the cache object is
SKIP_GCS=0            # set after the cached copy failed its post-serve hash

uptime_raw() {
  # Seconds since the kernel started, as /proc/uptime gives them (the sandbox: since its boot epoch).
  if [[ -n ${QWEN36_BOOT_EPOCH:-} ]]; then
    awk -v n="$(date +%s.%N)" -v e="$QWEN36_BOOT_EPOCH" 'BEGIN { print n - e }'
  else
    local up
    read -r up _ </proc/uptime
    echo "$up"
  fi
}

boot_age_s() {
  # Seconds since the VM booted, in the script's time (TIME_SCALE: the sandbox runs faster).
  awk -v u="$(uptime_raw)" -v k="$TIME_SCALE" 'BEGIN { printf "%d", u / k }'
}

seconds_since() {
  # seconds_since START: real seconds (3 decimals) since START, a ga_clock reading.
  awk -v now="$(ga_clock)" -v start="$1" 'BEGIN { printf "%.3f", now - start }'
}

mib_of() {
  echo $((($1 + 1048575) / 1048576))
}

ram_total_mib() {
  local kib
  kib=$(awk '$1 == "MemTotal:" { print $2 }' "$MEMINFO")
  echo $((kib / 1024))
}

ram_dir_ready() {
  # ram_dir_ready BYTES: a tmpfs big enough for the file, when the machine can spare it.
  local need total
  need=$(($(mib_of "$1") + TMPFS_SLACK_MIB))
  total=$(ram_total_mib)
  if ((need + RAM_RESERVE_MIB > total)); then
    log "tmpfs refused: the model needs $need MiB, $RAM_RESERVE_MIB MiB stay reserved, the VM has $total MiB"
    return 1
  fi
  mkdir -p "$MODEL_RAM_DIR"
  if ! mountpoint -q "$MODEL_RAM_DIR"; then
    mount -t tmpfs -o "size=${need}m,mode=0755" qwen36-model "$MODEL_RAM_DIR"
  fi
}

progress_watch() {
  # progress_watch LABEL TOTAL DIR: a report every PROGRESS_MIN_INTERVAL_S (the guest-attribute
  # budget), from the bytes in DIR; it stops by itself once the boot has failed.
  local label=$1 total=$2 dir=$3 started=$SECONDS bytes
  while sleep "$(scaled "$PROGRESS_MIN_INTERVAL_S")"; do
    [[ ! -e $FAILED_FLAG ]] || return 0
    bytes=$(du -sB1 "$dir" 2>/dev/null | cut -f1 || echo 0)
    report "$PHASE_MODEL" "$label: $(awk -v b="${bytes:-0}" -v t="$total" \
      'BEGIN { printf "%.1f of %.1f GB", b / 1e9, t / 1e9 }') after $((SECONDS - started)) s"
  done
}

with_progress() {
  # with_progress LABEL TOTAL DIR COMMAND...: run COMMAND with a progress watcher beside it.
  local label=$1 total=$2 dir=$3 rc=0 watcher
  shift 3
  progress_watch "$label" "$total" "$dir" &
  watcher=$!
  "$@" || rc=$?
  kill "$watcher" 2>/dev/null || true
  wait "$watcher" 2>/dev/null || true
  return "$rc"
}

# ------------------------------------------------------------------------------------ the GCS cache

gcs_describe() {
  # Reads OBJ_SIZE OBJ_CRC OBJ_SHA OBJ_GEN. 0 found, 3 no such object, 1 another error. A 401/403
  # early in the VM's life is retried until GCS_DENIED_BOUND_S after boot; later it fails the boot
  # with the role and the bucket named: never a silent switch to the 22 GB hub download.
  local out rc pause=$GCS_DENIED_PAUSE_S since last_said=-1000
  while true; do
    rc=0
    # A non-blank separator: empty fields (no metadata) must not collapse as tabs would.
    out=$(timeout "$GCS_CMD_TIMEOUT_S" gcloud storage objects describe "$GCS_URL" \
      --format='value[separator="|"](size,crc32c_hash,generation,custom_fields.sha256,custom_fields.size)' 2>&1) || rc=$?
    if ((rc == 0)); then
      IFS='|' read -r OBJ_SIZE OBJ_CRC OBJ_GEN OBJ_SHA OBJ_META_SIZE <<<"$out" || true
      return 0
    fi
    if grep -qiE 'HTTPError 404|not found|No URLs matched' <<<"$out"; then
      return 3
    fi
    if ! grep -qiE 'HTTPError 40[13]|does not have storage\.|Permission .* denied|PERMISSION_DENIED' <<<"$out"; then
      log "gcloud storage objects describe $GCS_URL failed (exit $rc): $(tr '\n' ' ' <<<"$out")"
      return 1
    fi
    since=$(boot_age_s)
    if ((since >= GCS_DENIED_BOUND_S)); then
      fail "access denied to $GCS_URL for $since s after boot (past the ${GCS_DENIED_BOUND_S} s IAM propagation bound): grant the VM's service account roles/storage.objectViewer on gs://$MODEL_BUCKET; $(tail -n 1 <<<"$out")"
    fi
    if ((since - last_said >= PROGRESS_MIN_INTERVAL_S)); then
      report "$PHASE_MODEL" "gs://$MODEL_BUCKET answers 403 $since s after boot: waiting for the new IAM grant to apply (up to ${GCS_DENIED_BOUND_S} s after boot)"
      last_said=$since
    fi
    nap "$pause"
    pause=$((pause * 2 > GCS_DENIED_PAUSE_MAX_S ? GCS_DENIED_PAUSE_MAX_S : pause * 2))
  done
}

gcs_judge() {
  # Whether the object may be fetched, from its metadata alone; sets GCS_STATE and EXPECTED_SHA.
  if [[ -n $MODEL_SHA256 && -n $OBJ_SHA && $OBJ_SHA != "$MODEL_SHA256" ]]; then
    GCS_STATE=bad
    log "cache object $GCS_URL holds sha256 $OBJ_SHA, the stack pins $MODEL_SHA256"
    return 1
  fi
  if [[ -n $OBJ_META_SIZE && $OBJ_META_SIZE != "$OBJ_SIZE" ]]; then
    GCS_STATE=bad
    log "cache object $GCS_URL holds $OBJ_SIZE bytes, its metadata says $OBJ_META_SIZE (a truncated upload)"
    return 1
  fi
  if ((MODEL_SIZE_BYTES != 0 && OBJ_SIZE != MODEL_SIZE_BYTES)); then
    GCS_STATE=bad
    log "cache object $GCS_URL holds $OBJ_SIZE bytes, the stack pins $MODEL_SIZE_BYTES (a truncated upload)"
    return 1
  fi
  EXPECTED_SHA=${MODEL_SHA256:-$OBJ_SHA}
  if [[ -z $OBJ_SHA ]]; then
    # An object without the sha256 that `stage` records: served once CRC32C-checked and tied to the
    # pinned or the hub's LFS sha256 by the post-serve hash, which then completes its metadata.
    GCS_STATE=no-sha
    hub_head
    EXPECTED_SHA=${MODEL_SHA256:-$HUB_SHA}
    if [[ -z $EXPECTED_SHA ]]; then
      GCS_STATE=bad
      log "cache object $GCS_URL has no sha256 metadata and the hub's sha256 is unknown"
      return 1
    fi
    log "cache object $GCS_URL has no sha256 metadata; checking it against sha256 $EXPECTED_SHA once served"
    return 0
  fi
  GCS_STATE=ok
}

gcs_copy() {
  # gcs_copy DEST: one sliced download of the described generation. gcloud validates the CRC32C
  # of every slice and of the whole; if_fast_else_fail turns a missing compiled crc32c (which
  # silently means one stream and no sliced download) into an error, and the download is then made
  # on purpose in one stream, hashed in Python (slow, still checked), with the reason in the log.
  # 0 in place; 2 the whole object arrived and its CRC32C does not match (a bad object); 1 else.
  local dest=$1 rc=0 out check=if_fast_else_fail
  out=$(gcs_cp "$check" "$dest") || rc=$?
  if ((rc != 0)) && grep -qi 'crc32c' <<<"$out"; then
    log "no compiled crc32c for gcloud: a single-stream download with a Python CRC32C instead of ${GCS_COMPONENTS} slices (install the google-cloud-cli's gcloud-crc32c): $(tr '\n' ' ' <<<"$out")"
    check=always rc=0
    out=$(gcs_cp "$check" "$dest") || rc=$?
  fi
  if ((rc != 0)); then
    log "gcloud storage cp $GCS_URL failed (exit $rc): $(tr '\n' ' ' <<<"$out")"
    rm -f "$dest" "${dest}_.gstmp"
    # gcloud compares the CRC32C of what it wrote with the object's once the whole object is in
    # (googlecloudsdk/command_lib/storage/hash_util.py, validate_object_hashes_match: "Source hash
    # ... does not match destination hash ..."); a cut transfer fails otherwise. Over HTTPS the
    # wire is checked record by record, so whole bytes that differ are the object's, and another
    # download of the same generation gets them again.
    if grep -qE 'HashMismatchError|does not match destination hash' <<<"$out"; then
      return 2
    fi
    return 1
  fi
  local size
  size=$(stat -c %s "$dest")
  if ((size != OBJ_SIZE)); then
    log "gcloud storage cp wrote $size bytes of $OBJ_SIZE; refusing the file"
    rm -f "$dest"
    return 1
  fi
  gcs_slices "$size" "$check"
}

gcs_slices() {
  # gcs_slices BYTES CHECK_HASHES: GCS_SLICES, the ranges gcloud split the download into. Without a
  # compiled crc32c (the "always" fallback) it does no sliced download.
  # https://cloud.google.com/storage/docs/sliced-object-downloads
  local size=$1 piece=$((GCS_COMPONENT_MIB * 1048576))
  GCS_SLICES=1
  if [[ $2 == if_fast_else_fail ]] && ((size > GCS_SLICE_THRESHOLD_MIB * 1048576)); then
    GCS_SLICES=$(((size + piece - 1) / piece))
    ((GCS_SLICES <= GCS_COMPONENTS)) || GCS_SLICES=$GCS_COMPONENTS
  fi
}

gcs_cp() {
  # gcs_cp CHECK_HASHES DEST
  CLOUDSDK_STORAGE_CHECK_HASHES=$1 \
    CLOUDSDK_STORAGE_SLICED_OBJECT_DOWNLOAD_MAX_COMPONENTS=$GCS_COMPONENTS \
    CLOUDSDK_STORAGE_SLICED_OBJECT_DOWNLOAD_COMPONENT_SIZE="${GCS_COMPONENT_MIB}M" \
    CLOUDSDK_STORAGE_SLICED_OBJECT_DOWNLOAD_THRESHOLD="${GCS_SLICE_THRESHOLD_MIB}M" \
    CLOUDSDK_STORAGE_PROCESS_COUNT=$GCS_PROCESSES CLOUDSDK_STORAGE_THREAD_COUNT=$GCS_THREADS \
    timeout "$GCS_FETCH_TIMEOUT_S" gcloud storage cp --no-user-output-enabled \
    "$GCS_URL#$OBJ_GEN" "$2" 2>&1
}

fetch_from_gcs() {
  # fetch_from_gcs DIR: the described object into DIR, CRC32C-checked. 0 in place, 1 not. An
  # object whose CRC32C does not match is bad like one that fails its sha256: not fetched again,
  # the hub instead, and self-staging replaces exactly this generation (else every boot would pay
  # two 22 GB downloads for it, and nothing would ever repair it).
  local dir=$1 attempt rc started
  for ((attempt = 1; attempt <= GCS_FETCH_ATTEMPTS; attempt++)); do
    report "$PHASE_MODEL" "fetching $GCS_URL ($(awk -v b="$OBJ_SIZE" 'BEGIN { printf "%.1f GB", b / 1e9 }'), up to $GCS_COMPONENTS slices, attempt $attempt/$GCS_FETCH_ATTEMPTS)"
    rc=0 started=$(ga_clock)
    with_progress "from GCS" "$OBJ_SIZE" "$dir" gcs_copy "$dir/$MODEL_NAME" || rc=$?
    if ((rc == 0)); then
      FETCH_S=$(seconds_since "$started") FETCH_BYTES=$OBJ_SIZE FETCH_SLICES=$GCS_SLICES
      return 0
    fi
    if ((rc == 2)); then
      GCS_STATE=bad
      report "$PHASE_MODEL" "cache object $GCS_URL generation $OBJ_GEN failed its CRC32C check after a complete download: a bad object; taking another source, and self-staging replaces it"
      return 1
    fi
  done
  GCS_STATE=error
  return 1
}

# ------------------------------------------------------------------------------------------ the hub

hub_head() {
  # HUB_SHA and HUB_SIZE: the file's LFS sha256 and size from the hub's resolve answer
  # (X-Linked-Etag, X-Linked-Size), without following the redirect to the CDN.
  # https://huggingface.co/docs/hub/en/api
  local endpoint=${HF_ENDPOINT:-https://huggingface.co} headers
  [[ -z $HUB_SHA ]] || return 0
  headers=$(curl -sSI --max-time "$HUB_HEAD_TIMEOUT_S" \
    "$endpoint/$MODEL_REPO/resolve/$MODEL_REVISION/$MODEL_FILE" 2>/dev/null | tr -d '\r"' || true)
  HUB_SHA=$(awk -F': ' 'tolower($1) == "x-linked-etag" { print $2 }' <<<"$headers" | grep -xE '[0-9a-f]{64}' || true)
  HUB_SIZE=$(awk -F': ' 'tolower($1) == "x-linked-size" { print $2 }' <<<"$headers" | grep -xE '[0-9]+' || echo 0)
}

hf_tool() {
  # HF_BIN: the hub client, huggingface_hub's `hf` (with hf_xet), installed in a venv the first time
  # the hub path is taken (the Deep Learning VM's python3 has neither it nor the package). It sets a
  # variable rather than printing the path: it reports the install, and a report is a journal line
  # on stdout, which a $(hf_tool) would have taken into the path (exit 127 on every first deploy).
  local venv="$STATE_DIR/hf-venv" rc=0
  if command -v hf >/dev/null 2>&1; then
    HF_BIN=hf
    return 0
  fi
  if [[ ! -x $venv/bin/hf ]]; then
    report "$PHASE_MODEL" "installing huggingface_hub $HF_HUB_VERSION for the hub download"
    rm -rf "$venv"
    timeout "$HF_INSTALL_TIMEOUT_S" python3 -m venv "$venv" >/dev/null || rc=$?
    ((rc != 0)) || timeout "$HF_INSTALL_TIMEOUT_S" "$venv/bin/pip" install -q \
      "huggingface_hub[hf_xet]==$HF_HUB_VERSION" >/dev/null || rc=$?
    if ((rc != 0)) || [[ ! -x $venv/bin/hf ]]; then
      rm -rf "$venv"
      fail "could not install huggingface_hub $HF_HUB_VERSION for the hub download (exit $rc); pip's error is in the journal above$(nat_hint)"
    fi
  fi
  HF_BIN=$venv/bin/hf
}

fetch_from_hub() {
  # 0 in place under DIR ($1); its sha256 is checked after the server is up (EXPECTED_SHA).
  local dir=$1 rc=0 started
  hub_head
  if [[ -n $MODEL_SHA256 && -n $HUB_SHA && $HUB_SHA != "$MODEL_SHA256" ]]; then
    fail "the hub's $MODEL_REPO/$MODEL_FILE@$MODEL_REVISION has sha256 $HUB_SHA, the stack pins $MODEL_SHA256 (modelSha256)"
  fi
  EXPECTED_SHA=${MODEL_SHA256:-$HUB_SHA}
  [[ -n $EXPECTED_SHA ]] || fail "the hub did not give the sha256 of $MODEL_REPO/$MODEL_FILE@$MODEL_REVISION and modelSha256 is not set$(nat_hint)"
  hf_tool
  report "$PHASE_MODEL" "fetching $MODEL_REPO/$MODEL_FILE@$MODEL_REVISION from HuggingFace"
  started=$(ga_clock)
  with_progress "from HuggingFace" "$HUB_SIZE" "$dir" \
    timeout "$HUB_FETCH_TIMEOUT_S" "$HF_BIN" download "$MODEL_REPO" "$MODEL_FILE" --revision "$MODEL_REVISION" \
    --local-dir "$dir" --quiet >/dev/null 2>&1 || rc=$?
  if ((rc != 0)); then
    fail "HuggingFace download failed (exit $rc)$(nat_hint)"
  fi
  FETCH_S=$(seconds_since "$started") FETCH_SLICES=""
  if [[ "$dir/$MODEL_FILE" != "$dir/$MODEL_NAME" ]]; then
    mv -f "$dir/$MODEL_FILE" "$dir/$MODEL_NAME"
  fi
  rm -rf "$dir/.cache"
  local size
  size=$(stat -c %s "$dir/$MODEL_NAME")
  if ((MODEL_SIZE_BYTES != 0 && size != MODEL_SIZE_BYTES)); then
    rm -f "$dir/$MODEL_NAME"
    fail "the hub download holds $size bytes, the stack pins $MODEL_SIZE_BYTES (modelSizeBytes)"
  fi
  FETCH_BYTES=$size
}

# ------------------------------------------------------------------------------- the disk copy

disk_copy_usable() {
  # The disk copy exists for one purpose: after a hub download with no cache object, a restart
  # reads it back (~73 s) instead of the hub (300-480 s). Its marker names the sha256 the last
  # post-serve hash proved; size and mtime only say it was not rewritten since, and the post-serve
  # hash proves the bytes again after every serve (a flipped byte keeps size and mtime).
  [[ -f $DISK_MODEL && -f $DISK_MARKER ]] || return 1
  local size mtime sha
  read -r size mtime sha <"$DISK_MARKER" || return 1
  [[ "$(stat -c %s "$DISK_MODEL") $(date -u -r "$DISK_MODEL" +%s.%N)" == "$size $mtime" ]] || return 1
  [[ -z $MODEL_SHA256 || $sha == "$MODEL_SHA256" ]] || return 1
  EXPECTED_SHA=$sha
}

write_disk_marker() {
  printf '%s %s %s\n' "$(stat -c %s "$DISK_MODEL")" "$(date -u -r "$DISK_MODEL" +%s.%N)" "$1" >"$DISK_MARKER.tmp"
  mv -f "$DISK_MARKER.tmp" "$DISK_MARKER"
}

# ------------------------------------------------------------------------------ after the serve

served_file() {
  echo "$SERVE_DIR/$MODEL_NAME"
}

post_serve_verify() {
  # The full sha256 of the file being served, at idle priority. 0: it is the pinned model. 1: it is
  # not, and the server has been taken out of service (the container stopped, /health gone).
  local file actual
  file=$(served_file)
  actual=$(timeout "$VERIFY_TIMEOUT_S" nice -n 19 ionice -c 3 sha256sum "$file" | cut -d ' ' -f 1) || true
  if [[ $actual == "$EXPECTED_SHA" ]]; then
    log "post-serve sha256 of $file matches $EXPECTED_SHA"
    return 0
  fi
  timeout "$DOCKER_CMD_TIMEOUT_S" docker stop "$CONTAINER_NAME" >/dev/null 2>&1 || true
  report "$PHASE_MODEL" "served file failed its sha256 check (from $SERVE_FROM: ${actual:-no hash}, expected $EXPECTED_SHA): server taken out of service, fetching again"
  rm -f "$file"
  case $SERVE_FROM in
    gcs) SKIP_GCS=1 GCS_STATE=bad ;;
    disk) rm -f "$DISK_MODEL" "$DISK_MARKER" ;;
  esac
  return 1
}

keep_disk_copy() {
  # After a hub download only: a copy on the boot disk at idle priority, for the restart that finds
  # no cache object. Written to a temporary name and renamed, so a cut copy is never taken.
  [[ $SERVE_FROM == hub && $SERVE_DIR != "$MODEL_DIR" ]] || return 0
  mkdir -p "$MODEL_DIR"
  if timeout "$COPY_TIMEOUT_S" nice -n 19 ionice -c 3 cp "$(served_file)" "$DISK_MODEL.partial"; then
    mv -f "$DISK_MODEL.partial" "$DISK_MODEL"
    write_disk_marker "$EXPECTED_SHA"
    log "kept a disk copy at $DISK_MODEL for restarts without a cache object"
  else
    rm -f "$DISK_MODEL.partial"
    log "warning: could not keep a disk copy of the model"
  fi
}

complete_metadata() {
  # A cache object without sha256 metadata, now proven by the post-serve hash: record it, so later
  # boots tie the object to the model without asking the hub.
  [[ $SERVE_FROM == gcs && $GCS_STATE == no-sha && $SELF_STAGE == 1 ]] || return 0
  if timeout "$GCS_CMD_TIMEOUT_S" gcloud storage objects update "$GCS_URL" --if-generation-match="$OBJ_GEN" \
    --update-custom-metadata="sha256=$EXPECTED_SHA,size=$OBJ_SIZE" >/dev/null 2>&1; then
    log "completed the metadata of $GCS_URL: sha256 $EXPECTED_SHA"
  else
    log "warning: could not complete the metadata of $GCS_URL"
  fi
}

self_stage() {
  # After a hub download, fill (or repair) the cache for the next VM from the verified file. The
  # generation precondition replaces exactly the object this boot judged missing (0) or bad.
  [[ $SELF_STAGE == 1 && -n $MODEL_BUCKET && ($SERVE_FROM == hub || $SERVE_FROM == disk) ]] || return 0
  [[ $GCS_STATE == missing || $GCS_STATE == bad ]] || return 0
  local match=0
  [[ $GCS_STATE == missing ]] || match=$OBJ_GEN
  log "self-staging the model to $GCS_URL (replacing generation $match)"
  # One object, never a parallel composite upload: gcloud makes one of a file over 150 MiB when it
  # can read the bucket (storage/parallel_composite_upload_enabled unset), writing temporary objects under
  # gcloud/tmp/parallel_composite_uploads/, which the VM's grant (this object's name only,
  # infra/identity.py) does not cover. https://cloud.google.com/storage/docs/parallel-composite-uploads
  if CLOUDSDK_STORAGE_PARALLEL_COMPOSITE_UPLOAD_ENABLED=False \
    timeout "$SELF_STAGE_TIMEOUT_S" gcloud storage cp --no-user-output-enabled --if-generation-match="$match" \
    --custom-metadata="sha256=$EXPECTED_SHA,size=$(stat -c %s "$(served_file)")" \
    "$(served_file)" "$GCS_URL" >/dev/null 2>&1; then
    log "self-staged $GCS_URL"
  else
    log "warning: self-staging failed; the next boot tries again"
  fi
}
