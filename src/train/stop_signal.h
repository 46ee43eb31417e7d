#pragma once
// Preemption: what a cluster sends before it kills a job — SIGTERM (Slurm, Kubernetes),
// SIGUSR1 (Slurm's --signal), SIGINT (Ctrl-C) — asks the run to stop cleanly: the trainer
// finishes the current step, writes a checkpoint, flushes its logs and exits with
// kExitStopped. A second SIGINT aborts at once (exit 130, no checkpoint). Under mpirun the
// ranks agree on the step to stop at (the trainer all-reduces the request after every step), so
// every rank saves the same step, whichever rank the signal reached.
namespace collage {

// `collage train`'s exit status after a clean stop on a signal: EX_TEMPFAIL, "try again" —
// the checkpoint is written; `--resume` continues bit for bit.
constexpr int kExitStopped = 75;

// Installs the handlers (for the life of the process; idempotent).
void install_stop_signals();
// The signal that asked to stop (SIGTERM, SIGINT, SIGUSR1), or 0.
int stop_signal_received();
// For tests: forget a received signal.
void clear_stop_signal();

}  // namespace collage
