#!/usr/bin/env bash
# Runs an mpirun command so that the signal a scheduler or container runtime sends to stop a job
# ends `collage train` with a checkpoint and exit status 75, at a step every rank agrees on:
#
#   scripts/launch/stop-signals.sh mpirun -np 16 ... collage train CONFIG [args...]
#   # or, from another bash script (mpirun-p4d.sh does this):
#   source scripts/launch/stop-signals.sh && run_with_stop_signals mpirun -np 16 ...
#
# Why: Open MPI 4.1's mpirun answers SIGTERM, SIGINT and SIGHUP by killing the ranks: SIGTERM,
# then SIGKILL a second or two later (odls_base_sigkill_timeout), and it exits 1. A rank whose
# step takes longer than that is killed before it can write its checkpoint; one with short
# steps writes it, but the job still exits 1, and a requeue cannot tell that apart from a crash.
# SIGUSR1 and SIGUSR2 it forwards to every rank untouched, and collage stops on SIGUSR1 like on
# SIGTERM (src/train/stop_signal.h). So this script starts the command in the background and
# turns SIGTERM, SIGINT, SIGHUP, SIGUSR1 and SIGUSR2 into SIGUSR1 for mpirun: every rank
# finishes its step, the ranks agree on it, write one checkpoint and exit 75, and mpirun and
# this script exit with that status. A second SIGINT (Ctrl-C twice) sends SIGTERM to mpirun
# instead: Open MPI ends the job at once, without a checkpoint, as collage's own second SIGINT
# does.
#
# Send the stop signal to this script, never to mpirun itself: make it the container's main
# process (docker stop and Kubernetes send SIGTERM to that one only), or its caller's main
# process (slurm-p4d.sbatch forwards Slurm's --signal to it). mpirun runs in a session of its
# own, so a terminal's Ctrl-C reaches this script only.
# Exit status: the command's (75 after a stop with a checkpoint).

# run_with_stop_signals COMMAND [ARGS...]: runs it as above; returns its exit status.
run_with_stop_signals() {
  _stop_signals_interrupts=0 _stop_signals_child="" _stop_signals_pending=""
  local signal
  for signal in TERM INT HUP USR1 USR2; do
    # shellcheck disable=SC2064 # the signal's name, fixed now
    trap "_stop_signals_forward $signal" "$signal"
  done
  # setsid: a session of its own, out of the terminal's process group (Ctrl-C reaches this
  # shell only). A background child of a shell without job control never leads a process
  # group, so setsid(1) does not fork and $! is the command's own pid.
  setsid "$@" &
  _stop_signals_child=$!
  # A signal that came while the command was starting.
  [[ -z $_stop_signals_pending ]] || kill -"$_stop_signals_pending" "$_stop_signals_child" 2>/dev/null
  local status=0
  while :; do
    # wait returns early (status > 128) when a trap ran; the command may still be running.
    wait "$_stop_signals_child" && status=0 || status=$?
    kill -0 "$_stop_signals_child" 2>/dev/null || break
  done
  trap - TERM INT HUP USR1 USR2
  return "$status"
}

# The trap: $1 is the signal this shell received.
_stop_signals_forward() {
  local to=USR1
  if [[ $1 == INT ]] && ((_stop_signals_interrupts++ > 0)); then
    to=TERM
    echo "stop-signals: a second SIGINT: ending the job at once, without a checkpoint (SIGTERM to mpirun)" >&2
  else
    echo "stop-signals: SIG$1 received: every rank stops after its current step with a checkpoint (SIGUSR1 to mpirun)" >&2
  fi
  if [[ -z $_stop_signals_child ]]; then
    _stop_signals_pending=$to # not started yet
  else
    kill -"$to" "$_stop_signals_child" 2>/dev/null || true
  fi
}

# Run as a command rather than sourced.
if [[ ${BASH_SOURCE[0]} == "$0" ]]; then
  set -uo pipefail
  if [[ $# -eq 0 || $1 == -h || $1 == --help ]]; then
    sed -n '2,/^# Exit status/p' "$0" | sed 's/^# \{0,1\}//'
    [[ $# -gt 0 ]] && exit 0
    exit 2
  fi
  run_with_stop_signals "$@"
  exit $?
fi
