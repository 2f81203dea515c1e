#!/bin/bash
# The original write-up's boot, reconstructed from its text (scripts/provision-spot.sh's startup
# steps, /work/shared/reference/seed.md) for bench/boot_bench.py: ECC off with a reboot; docker
# install + image pull beside the model fetch (sliced `gcloud storage cp` from the same-region bucket
# to the boot disk, else `hf download`); `docker run --restart unless-stopped`; wait for /health.
# No verification of the model, no reports. It runs in the same boot sandbox as ours, with the same
# stubs and phase durations. ORIG_* come from the bench.
set -euo pipefail

MODELS="$HOME/models"
MODEL="$MODELS/$ORIG_FILE"

if [[ $(nvidia-smi --query-gpu=ecc.mode.current --format=csv,noheader) == Enabled ]]; then
  nvidia-smi -e 0
  reboot
  exit 0
fi

docker_setup() {
  if ! command -v docker >/dev/null 2>&1; then
    apt-get -y install docker.io
    nvidia-ctk runtime configure --runtime=docker
    systemctl restart docker
  fi
  docker image inspect "$ORIG_IMAGE" >/dev/null 2>&1 || docker pull -q "$ORIG_IMAGE" >/dev/null
}

model_fetch() {
  [[ ! -f $MODEL ]] || return 0
  mkdir -p "$MODELS"
  if [[ -n $ORIG_BUCKET ]] && gcloud storage cp "gs://$ORIG_BUCKET/$ORIG_OBJECT" "$MODEL"; then
    return 0
  fi
  hf download "$ORIG_REPO" "$ORIG_FILE" --local-dir "$MODELS" --quiet >/dev/null
}

docker_setup &
docker_pid=$!
model_fetch &
model_pid=$!
wait "$docker_pid"
wait "$model_pid"

# On a restart docker's restart policy has already started the container.
if ! docker inspect --format '{{.State.Running}}' llama-server >/dev/null 2>&1; then
  # shellcheck disable=SC2086  # the server arguments are one word each
  docker run -d --name llama-server --restart unless-stopped --gpus all -p 8080:8080 \
    -v "$MODELS:/models" "$ORIG_IMAGE" --model "/models/$ORIG_FILE" $ORIG_ARGS >/dev/null
fi
until curl -fsS --max-time 5 "$ORIG_HEALTH_URL" >/dev/null 2>&1; do
  sleep "$ORIG_POLL_S"
done
echo "ready"
