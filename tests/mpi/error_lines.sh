#!/usr/bin/env bash
# Ranks that fail together keep their error lines apart (core/error_lines.h): `collage train`
# under mpirun -np 3 with a global batch that 3 data-parallel ranks cannot split, so every rank
# reports the same config error at the same moment. Each stderr line that holds
# "collage: error" must hold it once, at its start, with the rank: one line per rank. Five
# trials, since lines written in pieces run together only when the ranks race.
#
#   error_lines.sh MPIEXEC COLLAGE CONFIG
set -u
if [[ $# -ne 3 ]]; then
  echo "usage: $0 MPIEXEC COLLAGE CONFIG" >&2
  exit 2
fi
mpiexec=$1 collage=$2 config=$3
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
line='^collage: error: rank ([0-2]) of 3: the config at 3 ranks = .*data-parallel size 3$'
failed=0
for trial in 1 2 3 4 5; do
  timeout 120 "$mpiexec" --allow-run-as-root --oversubscribe -np 3 -x OPENBLAS_NUM_THREADS=1 \
    "$collage" train "$config" --set parallel.backend=cpu --set training.global_batch_size=4 \
    --set training.micro_batch_size=2 --set logging.dir="$work/log$trial" \
    >"$work/out" 2>"$work/err"
  status=$?
  errors=$(grep -c 'collage: error' "$work/err")
  whole=$(grep -cE "$line" "$work/err")
  ranks=$(grep -E "$line" "$work/err" | sed -E "s/$line/\\1/" | sort -u | tr -d '\n')
  if [[ $status -eq 0 || $errors -ne 3 || $whole -ne 3 || $ranks != 012 ]] ||
     [[ $(grep -o 'collage: error' "$work/err" | wc -l) -ne 3 ]]; then
    echo "trial $trial: exit $status, $errors lines with 'collage: error', $whole whole, ranks '$ranks':"
    cat "$work/err"
    failed=1
  fi
done
[[ $failed -eq 0 ]] && echo "error_lines: 5 trials, 3 whole lines each (ranks 0, 1, 2)"
exit $failed
