#!/usr/bin/env bash
# The build without the CUDA toolkit: configure with -DCOLLAGE_WITH_CUDA=OFF (nvcc and
# cuda_bf16.h ignored, as on a machine without the toolkit), build the executable and the cuda
# backend's tests, and run those under the emulator (the g++-only build of the kernels, with
# collage's own bf16 type). CI runs it after the main suite.
set -euo pipefail
cd "$(dirname "$0")/.."
build=${1:-build-cpu-only}
cmake -S . -B "$build" -DCMAKE_BUILD_TYPE=Release -DCOLLAGE_WITH_CUDA=OFF >/dev/null
cmake --build "$build" -j"$(nproc)" --target collage test_cuda
"$build/collage" --version
# cuda is refused with a message saying why; the emulated kernels match the cpu backend.
message=$("$build/collage" bench configs/demo/gpt-tiny.yaml --set parallel.backend=cuda 2>&1) &&
  { echo "check-cpu-only-build: parallel.backend=cuda ran in a build without CUDA" >&2; exit 1; }
grep -q "built without CUDA" <<<"$message" ||
  { echo "check-cpu-only-build: unexpected message: $message" >&2; exit 1; }
(cd "$build/tests" && ./test_cuda --gtest_filter='-*Training*' --gtest_brief=1)
