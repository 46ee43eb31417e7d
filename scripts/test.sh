#!/usr/bin/env bash
# Install, build and run the whole test suite (the README's test command).
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/install-deps.sh
# The CUDA toolkit's nvcc, when installed but not on PATH: CMake then builds the cuda backend
# too (a kernel that does not compile fails the build).
if ! command -v nvcc >/dev/null && [[ -x "${CUDA_HOME:-/usr/local/cuda}/bin/nvcc" ]]; then
  export PATH="${CUDA_HOME:-/usr/local/cuda}/bin:$PATH"
fi
cmake -S . -B build -DCMAKE_BUILD_TYPE=Release
cmake --build build -j"$(nproc)"
ctest --test-dir build --output-on-failure -j"$(nproc)" "$@"
