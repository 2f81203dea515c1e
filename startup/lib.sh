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

# Guest-attribute writes are rationed: GCE documents about 10 a minute with bursts of 3 a second
# and may drop the excess (manage-guest-attributes, above). The config block carries the script's
# share from infra/boot_protocol.py (GA_SCRIPT_WRITES_PER_MINUTE, one at least GA_MIN_GAP_S after
# another), which leaves room for the model download's progress (one every GA_PROGRESS_MIN_S at
# most), and DETAIL_MAX_CHARS. A ledger on disk (both parallel boot jobs write reports, and it
# outlives the ECC reboot) holds the recent writes; its windows run on the scaled clock, so the
# sandbox keeps the same ratios in less time.
: "${GA_SCRIPT_WRITES_PER_MINUTE:?}" "${GA_MIN_GAP_S:?}" "${GA_PROGRESS_MIN_S:?}" "${DETAIL_MAX_CHARS:?}"
GA_LEDGER=${QWEN36_STATE_DIR:-/var/lib/qwen36}/guest-attribute-writes
GA_LEDGER_LOCK_TIMEOUT_S=120
GA_REPORT_URL="$GA_URL/${GA_KEY_REPORT:?set by the config block}"
GA_WINDOW=$(scaled 60)
GA_GAP=$(scaled "$GA_MIN_GAP_S")
GA_PROGRESS=$(scaled "$GA_PROGRESS_MIN_S")
# The model download's progress goes to the same key, in the same format (infra/boot_protocol.py),
# so the tool it starts reads the boot id from the environment.
BOOT_ID=${QWEN36_BOOT_ID:-$(cat /proc/sys/kernel/random/boot_id 2>/dev/null || echo unknown-boot)}
export QWEN36_BOOT_ID=$BOOT_ID

put_report() {
  # Best effort: a metadata hiccup must not fail the script; the deployer's wait is bounded.
  # NOTE: guest attributes need the metadata header and enable-guest-attributes=TRUE on the VM.
  curl -fsS -o /dev/null -X PUT --max-time "$GUEST_ATTR_TIMEOUT_S" -H 'Metadata-Flavor: Google' \
    --data-raw "$1" "$GA_REPORT_URL" 2>/dev/null || log "warning: could not write the guest attribute $GA_KEY_REPORT"
}

nat_hint() {
  # The clause a failed internet fetch ends with on a VM without an external IP: it reaches the
  # internet only through the stack's Cloud NAT (infra/network.py), Google's APIs through Private
  # Google Access. The metadata server lists an interface's access configs, none without an address.
  # https://cloud.google.com/compute/docs/metadata/predefined-metadata-keys
  local ip
  ip=$(curl -fsS --max-time 5 -H 'Metadata-Flavor: Google' \
    "$METADATA_URL/computeMetadata/v1/instance/network-interfaces/0/access-configs/0/external-ip" 2>/dev/null) || ip=""
  [[ -n $ip ]] && return 0
  printf '%s' "; this VM has no external IP and reaches the internet only through the stack's Cloud NAT: check that it exists and serves this subnet (pulumi up makes it; externalIp: true gives each VM its own address instead)"
}

one_line() {
  # Whitespace and control characters to single spaces, trimmed, capped: the detail of a report
  # (infra/boot_protocol.py format_report does the same).
  local text
  text=$(printf '%s' "$1" | tr -s '[:space:][:cntrl:]' ' ')
  text=${text# }
  text=${text% }
  printf '%s' "${text:0:$DETAIL_MAX_CHARS}"
}

ga_clock() {
  # Seconds with microseconds, from bash itself: a report costs as few processes as possible.
  echo "${EPOCHREALTIME/,/.}"
}

less_than() {
  awk -v a="$1" -v b="$2" 'BEGIN { exit !(a < b) }'
}

ga_decide() {
  # ga_decide MODE PHASE: one look at the ledger, one answer: "skip", "wait SECONDS" (no room
  # this minute; MODE must only) or "write SECONDS" (write after that pause, which keeps
  # GA_MIN_GAP_S). Also leaves the ledger's writes of the last minute in $GA_LEDGER.tmp.
  awk -v now="$(ga_clock)" -v mode="$1" -v phase="$2" -v win="$GA_WINDOW" -v gap="$GA_GAP" \
    -v progress="$GA_PROGRESS" -v budget="$GA_SCRIPT_WRITES_PER_MINUTE" -v kept="$GA_LEDGER.tmp" '
    BEGIN { n = 0; last = -1; same = -1; oldest = -1 }
    now - $1 < win {
      n++; print > kept
      if (oldest < 0 || $1 < oldest) oldest = $1
      if ($1 > last) last = $1
      if ($2 == phase && $1 > same) same = $1
    }
    END {
      close(kept)
      if (n >= budget) {
        if (mode == "must") printf "wait %.3f\n", oldest + win - now
        else print "skip"
      } else if (mode == "step" && same >= 0 && now - same < progress) {
        print "skip"
      } else {
        # Never a ">" among print arguments: mawk 1.3.4 (Ubuntu'"'"'s awk) reads it as a redirection,
        # and "pause > 0 ? pause : 0" wrote the verdict to a file named 0.
        pause = last < 0 ? 0 : last + gap - now
        if (pause < 0) pause = 0
        printf "write %.3f\n", pause
      }
    }' "$GA_LEDGER"
}

ga_admit() {
  # ga_admit MODE PHASE: 0 when this report may be written now (and is entered in the ledger),
  # 1 when it is skipped. MODE "must" (a terminal report) waits for room; "step" is written when
  # there is room and its phase was not written in the last GA_PROGRESS_MIN_S, else skipped (its
  # journal line stays). Called with the ledger locked.
  local mode=$1 phase=$2 verdict pause
  for _ in 1 2 3; do
    : >"$GA_LEDGER.tmp"
    read -r verdict pause < <(ga_decide "$mode" "$phase")
    case $verdict in
      skip) return 1 ;;
      wait) sleep "$pause" ;;
      write)
        [[ $pause == 0.000 ]] || sleep "$pause"
        break
        ;;
    esac
  done
  # Three rounds: the third is reached only when the clock jumped, and a terminal report is then
  # written rather than lost.
  printf '%s %s\n' "$(ga_clock)" "$phase" >>"$GA_LEDGER.tmp"
  mv -f "$GA_LEDGER.tmp" "$GA_LEDGER"
}

phase_report() {
  # phase_report MODE PHASE DETAIL: the journal line always; the guest attribute `report`
  # (<phase> <utc-time> <boot-id> <detail>, infra/boot_protocol.py) when MODE is "must" or "step"
  # and the ration allows (ga_admit); MODE "off" is the journal only (after a failure).
  local mode=$1 phase=$2 detail now lock
  detail=$(one_line "$3")
  now=$(utc_now)
  printf '%s qwen36: phase=%s %s\n' "$now" "$phase" "$detail"
  [[ $mode != off ]] || return 0
  [[ -f $GA_LEDGER ]] || { mkdir -p "${GA_LEDGER%/*}" && : >>"$GA_LEDGER"; }
  exec {lock}>>"$GA_LEDGER.lock"
  if ! flock -w "$GA_LEDGER_LOCK_TIMEOUT_S" "$lock"; then
    log "warning: the guest-attribute ledger stayed locked; report not written"
    exec {lock}>&-
    return 0
  fi
  if ga_admit "$mode" "$phase"; then
    put_report "$phase $now $BOOT_ID $detail"
  fi
  exec {lock}>&-
}

# A power cut while dpkg unpacks (docker.io, a driver package) leaves its journal in updates/, and
# every later apt-get stops with "dpkg was interrupted, you must manually run 'dpkg --configure -a'"
# (exit 100): apt's own check (apt-pkg/deb/debsystem.cc, CheckUpdates) looks for that journal.
# https://manpages.ubuntu.com/manpages/jammy/man1/dpkg.1.html (--configure -a)
DPKG_DIR=${QWEN36_DPKG_DIR:-/var/lib/dpkg}
DPKG_RECOVER_TIMEOUT_S=900
DPKG_RECOVER_ATTEMPTS=3

dpkg_interrupted() {
  local entry
  for entry in "$DPKG_DIR"/updates/*; do
    [[ ${entry##*/} =~ ^[0-9]+$ ]] && return 0
  done
  return 1
}

recover_dpkg() {
  # Finish what the cut-off dpkg run started (configure the unpacked packages, then let apt
  # complete or reinstall a half-unpacked one); bounded, and retried while another dpkg (the
  # image's unattended-upgrades) holds the lock. A recovery that fails is logged: the apt step
  # after it then fails with apt's own message.
  dpkg_interrupted || return 0
  local attempt
  for ((attempt = 1; attempt <= DPKG_RECOVER_ATTEMPTS; attempt++)); do
    log "dpkg was interrupted (a power cut during a package install); dpkg --configure -a, attempt $attempt"
    if DEBIAN_FRONTEND=noninteractive timeout "$DPKG_RECOVER_TIMEOUT_S" dpkg --force-confdef --force-confold --configure -a &&
      DEBIAN_FRONTEND=noninteractive timeout "$DPKG_RECOVER_TIMEOUT_S" \
        apt-get -o "DPkg::Lock::Timeout=$APT_LOCK_TIMEOUT_S" -y -f install; then
      log "dpkg recovered"
      return 0
    fi
    nap "$RETRY_PAUSE_S"
  done
  log "warning: dpkg could not be recovered after $DPKG_RECOVER_ATTEMPTS attempts"
}

apt_get() {
  # apt_get LIMIT ARGS...: one bounded, non-interactive apt-get that waits for the dpkg lock,
  # after recovering an interrupted dpkg.
  local limit=$1
  shift
  recover_dpkg
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
