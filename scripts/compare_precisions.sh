#!/usr/bin/env bash
# Train the same model on the same data and seed under every precision strategy, then write
# a Markdown table and a PNG figure comparing them (scripts/precision_report.py).
#
#   scripts/compare_precisions.sh CONFIG [OUT_DIR] [-- extra `collage train` args]
#   e.g. scripts/compare_precisions.sh configs/demo/gpt-demo.yaml runs/compare \
#          -- --set optimizer.lr=1e-4 --set training.max_steps=100
#
# Each strategy trains into OUT_DIR/<strategy>/ (default OUT_DIR: runs/compare); the report
# is OUT_DIR/report.md and OUT_DIR/precisions.png, each run's console output
# OUT_DIR/<strategy>.log. STRATEGIES="bf16 collage-plus" limits the set;
# COLLAGE=path/to/collage picks the binary (default build/collage).
set -euo pipefail
cd "$(dirname "$0")/.."
if [[ $# -lt 1 || "$1" == -h || "$1" == --help ]]; then
  sed -n '2,12p' "$0" | sed 's/^# \{0,1\}//'
  exit 0
fi
config=$1; shift
out=runs/compare
if [[ $# -gt 0 && "$1" != -- ]]; then out=$1; shift; fi
[[ $# -gt 0 && "$1" == -- ]] && shift
collage=${COLLAGE:-build/collage}
[[ -x "$collage" ]] || { echo "compare_precisions: $collage not found; build first (cmake --build build)" >&2; exit 1; }
strategies=${STRATEGIES:-"fp32-master collage-plus collage-light kahan stochastic bf16"}
mkdir -p "$out"

for s in $strategies; do
  echo "== $s"
  rm -rf "${out:?}/$s"
  if ! "$collage" train "$config" "$@" --overwrite --set optimizer.precision="$s" \
      --set logging.dir="$out/$s" --set checkpoint.interval=0 --set logging.progress=off \
      >"$out/$s.log" 2>&1; then
    tail -n 5 "$out/$s.log" >&2
    echo "compare_precisions: training with $s failed (log: $out/$s.log)" >&2
    exit 1
  fi
  grep -E "step .*val loss" "$out/$s.log" | tail -n 1
done
python3 scripts/precision_report.py "$out" $strategies
