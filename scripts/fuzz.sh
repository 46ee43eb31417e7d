#!/usr/bin/env bash
# Build the libFuzzer targets of tests/fuzz (clang, AddressSanitizer + UBSan) and run each for
# SECONDS (default 600) from its checked-in seed corpus, as many at once as there are cores
# (FUZZ_JOBS=N to choose; FUZZ_FORK=1 for fork mode, below). Prints CPU time, executions,
# coverage and findings per target; exits 1 if any target found anything (the inputs are in
# build-fuzz/findings/TARGET/, to add to tests/fuzz/regressions/ once fixed; earlier runs'
# findings stay there and are not counted).
#   scripts/fuzz.sh [SECONDS] [TARGET...]
# A finding: a crash, a sanitizer report, a leak, an input slower than 1 s or above 1 GB.
set -euo pipefail
cd "$(dirname "$0")/.."
seconds=${1:-600}
shift || true
build=build-fuzz
targets=("$@")
if ((${#targets[@]} == 0)); then
  targets=(indexed_dataset gpt_dataset config checkpoint gpt2_tokenizer gpt2_tokenizer_files
           document_reader wordpiece_tokenizer bert_hdf5)
fi
generator=()  # Ninja for a new build directory, as scripts/test.sh
[[ ! -f $build/CMakeCache.txt ]] && command -v ninja >/dev/null && generator=(-G Ninja)
CC=clang CXX=clang++ cmake -S . -B "$build" "${generator[@]}" -DCMAKE_BUILD_TYPE=Fuzz \
  -DCOLLAGE_FUZZ=ON -DCOLLAGE_WITH_CUDA=OFF -DCOLLAGE_BUILD_TESTS=OFF >/dev/null
cmake --build "$build" -j"$(nproc)" --target "${targets[@]/#/fuzz_}"

# One target's run: its log, CPU time, findings and summary row in $build (fuzz-TARGET.*).
run_target() {
  local target=$1
  local corpus="$build/corpus/$target" findings="$build/findings/$target"
  mkdir -p "$corpus" "$findings"
  # The checked-in seeds (and regressions) start the corpus; the run's own additions stay in
  # the build directory.
  for seeds in tests/fuzz/corpus/"$target" tests/fuzz/regressions/"$target"; do
    [[ -d $seeds ]] && cp -n "$seeds"/* "$corpus"/ 2>/dev/null || true
  done
  local options=(-max_total_time="$seconds" -timeout=1 -rss_limit_mb=1024 -malloc_limit_mb=1024
                 -artifact_prefix="$findings/" -print_final_stats=1)
  [[ -f tests/fuzz/$target.dict ]] && options+=(-dict="tests/fuzz/$target.dict")
  # FUZZ_FORK=1: libFuzzer's fork mode, which saves each finding and keeps going (to collect
  # the findings of a target that has many, rather than stop at the first).
  [[ ${FUZZ_FORK:-0} == 1 ]] && options+=(-fork=1 -ignore_crashes=1 -ignore_ooms=1 -ignore_timeouts=1)
  # A target that reads through a library not built here may name what that library does on
  # its own (tests/fuzz/TARGET.lsan, and TARGET.asan for AddressSanitizer options).
  local environment=()
  [[ -f tests/fuzz/$target.lsan ]] &&
    environment+=("LSAN_OPTIONS=suppressions=$PWD/tests/fuzz/$target.lsan:print_suppressions=0")
  [[ -f tests/fuzz/$target.asan ]] &&
    environment+=("ASAN_OPTIONS=$(grep -v '^#' "tests/fuzz/$target.asan" | paste -sd:)")
  local log="$build/fuzz-$target.log" status
  touch "$build/fuzz-$target.start"
  echo "fuzz: $target for ${seconds}s ..."
  set +e
  # The outer timeout ends a fuzzer that cannot end itself (libFuzzer's alarm handler can
  # deadlock in the sanitizer's allocator when a slow input is interrupted mid-malloc).
  # CPU seconds (user + system) the fuzzer got: less than its wall time on a busy machine.
  /usr/bin/time -f '%U %S' -o "$build/fuzz-$target.cpu" timeout --kill-after=10 $((seconds + 60)) \
    env "${environment[@]}" "$build/fuzz/fuzz_$target" "$corpus" "${options[@]}" >"$log" 2>&1
  status=$?
  set -e
  local cpu executions coverage count
  cpu=$(awk 'END {printf "%d", $1 + $2}' "$build/fuzz-$target.cpu" 2>/dev/null || echo "?")
  # The final statistics, or in fork mode the last progress line (#EXECUTIONS: cov: ...).
  executions=$(grep -o 'stat::number_of_executed_units: *[0-9]*' "$log" | grep -o '[0-9]*$' ||
               grep -oE '^#[0-9]+' "$log" | tail -1 | tr -d '#' || echo "?")
  coverage=$(grep -o 'cov: [0-9]*' "$log" | tail -1 | grep -o '[0-9]*' || echo "?")
  count=$(find "$findings" -type f -newer "$build/fuzz-$target.start" | wc -l)
  if ((status != 0 || count > 0)); then
    echo "fuzz: $target: FINDING (exit $status), see $log and $findings/"
    grep -m3 -E "ERROR: |runtime error|SUMMARY" "$log" || true
    ((count > 0)) || count=1  # a fuzzer that died without leaving its input still found something
  fi
  printf '| %s | %s | %s | %s | %s | %s | %s |\n' "$target" "$seconds" "$cpu" "$executions" \
    "$coverage" "$(find "$corpus" -type f | wc -l)" "$count" >"$build/fuzz-$target.row"
  echo "fuzz: $target done"
}

# As many targets at once as there are cores, each fuzzer being one process on one core.
jobs=${FUZZ_JOBS:-$(nproc)}
for target in "${targets[@]}"; do
  while (($(jobs -rp | wc -l) >= jobs)); do wait -n || true; done
  rm -f "$build/fuzz-$target.row"
  run_target "$target" &
done
wait

found=0
summary="$build/fuzz-summary.md"
printf '\n| target | seconds | CPU seconds | executions | coverage | corpus | findings |\n|---|---|---|---|---|---|---|\n' \
  >"$summary"
for target in "${targets[@]}"; do
  if [[ -f $build/fuzz-$target.row ]]; then
    cat "$build/fuzz-$target.row" >>"$summary"
    [[ $(awk -F'|' '{gsub(/ /, "", $8); print $8}' "$build/fuzz-$target.row") == 0 ]] || found=1
  else
    found=1
    echo "| $target | $seconds | ? | ? | ? | ? | did not finish |" >>"$summary"
  fi
done
cat "$summary"
exit $found
