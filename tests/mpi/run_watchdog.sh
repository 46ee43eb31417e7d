#!/usr/bin/env bash
# Runs test_mpi_watchdog (tests/mpi/watchdog_main.cpp) under mpirun and checks how the job ends.
#
#   run_watchdog.sh MPIEXEC BINARY RANKS SCENARIO CHOSEN_RANK TIMEOUT_SECONDS ends-in-error REGEX
#     mpirun must exit non-zero within 60 s of wall time, its output matching REGEX (grep -E).
#   run_watchdog.sh MPIEXEC BINARY RANKS SCENARIO CHOSEN_RANK TIMEOUT_SECONDS ends-cleanly
#     mpirun must exit 0 with every rank finished and no watchdog alarm in its output.
#
# Prints the job's output and how long it took. A job still running after 60 s is killed (with
# its ranks, stopped ones included) and fails the test.
set -u
if [[ $# -lt 7 ]]; then
  echo "usage: $0 MPIEXEC BINARY RANKS SCENARIO CHOSEN_RANK TIMEOUT_SECONDS ends-in-error REGEX | ends-cleanly" >&2
  exit 2
fi
mpiexec=$1 binary=$2 ranks=$3 scenario=$4 chosen=$5 timeout_seconds=$6 expect=$7
pattern=${8:-}
limit_seconds=60

log=$(mktemp)
trap 'rm -f "$log"' EXIT
start=$(date +%s.%N)
# mpirun in its own session, so a job that hangs can be ended as a whole below.
setsid "$mpiexec" --allow-run-as-root --oversubscribe -np "$ranks" -x OPENBLAS_NUM_THREADS=1 \
  "$binary" "$scenario" "$chosen" "$timeout_seconds" >"$log" 2>&1 &
job=$!
while kill -0 "$job" 2>/dev/null; do
  if awk -v s="$start" -v now="$(date +%s.%N)" -v limit="$limit_seconds" \
       'BEGIN { exit !(now - s > limit) }'; then
    echo "run_watchdog: still running after ${limit_seconds} s: ending the job (a hang)"
    kill -CONT -- "-$job" 2>/dev/null   # stopped ranks cannot act on SIGKILL's cleanup otherwise
    kill -KILL -- "-$job" 2>/dev/null
    break
  fi
  sleep 0.2
done
wait "$job"
status=$?
elapsed=$(awk -v s="$start" -v now="$(date +%s.%N)" 'BEGIN { printf "%.1f", now - s }')

cat "$log"
echo "run_watchdog: $scenario (rank $chosen of $ranks, watchdog timeout ${timeout_seconds} s):" \
  "mpirun exited with status $status after $elapsed s"

case $expect in
  ends-in-error)
    if [[ $status -eq 0 ]]; then
      echo "FAIL: the job ended with status 0, expected an error"; exit 1
    fi
    if ! awk -v e="$elapsed" -v limit="$limit_seconds" 'BEGIN { exit !(e < limit) }'; then
      echo "FAIL: the job took $elapsed s to end, more than $limit_seconds s"; exit 1
    fi
    if ! grep -Eq -- "$pattern" "$log"; then
      echo "FAIL: no line of the output matches: $pattern"; exit 1
    fi
    ;;
  ends-cleanly)
    if [[ $status -ne 0 ]]; then
      echo "FAIL: the job ended with status $status, expected 0"; exit 1
    fi
    if ! grep -q "test_mpi_watchdog: $scenario: all $ranks ranks finished" "$log"; then
      echo "FAIL: rank 0 did not report every rank finished"; exit 1
    fi
    if grep -Eq "has sent no heartbeat|MPI_Finalize has waited|MPI_Finalize has not returned" "$log"; then
      echo "FAIL: the watchdog raised an alarm"; exit 1
    fi
    ;;
  *)
    echo "run_watchdog: unknown expectation '$expect'" >&2; exit 2
    ;;
esac
echo "run_watchdog: ok"
