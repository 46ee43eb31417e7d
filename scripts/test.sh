#!/usr/bin/env bash
# Install, build and run the whole test suite (the README's test command).
#   scripts/test.sh [CTEST_ARGS...]             release build in build/ (with nvcc when present)
#   scripts/test.sh --sanitize [CTEST_ARGS...]  the same suite built with AddressSanitizer and
#       UndefinedBehaviorSanitizer in build-sanitize/ (g++, no GPU code, the cuda backend
#       emulated): any report fails its test (tests/sanitizers/README.md). Tests labelled
#       plain-only (end-to-end jobs and schedule variants; README.md, "Testing") are left out.
# CTEST_ARGS go to ctest, e.g. -R Optimizer to run some tests only.
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/install-deps.sh
build=build
cmake_args=(-DCMAKE_BUILD_TYPE=Release)
ctest_args=()
if [[ ${1:-} == --sanitize ]]; then
  shift
  build=build-sanitize
  cmake_args+=(-DCOLLAGE_SANITIZE=ON)
  ctest_args+=(-LE plain-only)
  # Read by every sanitized process, the ones mpirun and the Python tests start included.
  sanitizers="$PWD/tests/sanitizers"
  export ASAN_OPTIONS="strict_string_checks=1:detect_stack_use_after_return=1:check_initialization_order=1"
  export LSAN_OPTIONS="suppressions=$sanitizers/lsan.supp:print_suppressions=0"
  export UBSAN_OPTIONS="print_stacktrace=1:halt_on_error=1"
elif ! command -v nvcc >/dev/null && [[ -x "${CUDA_HOME:-/usr/local/cuda}/bin/nvcc" ]]; then
  # The CUDA toolkit's nvcc, when installed but not on PATH: CMake then builds the cuda backend
  # too (a kernel that does not compile fails the build).
  export PATH="${CUDA_HOME:-/usr/local/cuda}/bin:$PATH"
fi
# A new build directory is generated for Ninja: it compiles a target's files as soon as their
# own inputs exist, where make first waits for every library the target links, and leaves a
# core idle whenever one target's last file is the only work left. (An existing directory keeps
# the generator it was made with.)
if [[ ! -f $build/CMakeCache.txt ]] && command -v ninja >/dev/null; then
  cmake_args+=(-G Ninja)
fi
cmake -S . -B "$build" "${cmake_args[@]}"
cmake --build "$build" -j"$(nproc)"
ctest --test-dir "$build" --output-on-failure -j"$(nproc)" "${ctest_args[@]}" "$@"
