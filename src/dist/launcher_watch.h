#pragma once
// The ranks outlive no launcher. When mpirun (or the node's orted, or Slurm's slurmstepd) dies,
// say by kill -9, Open MPI leaves its ranks running: they still reach each other, and went on
// training and saving checkpoints for 1.5-3 s after mpirun was killed (measured), long enough
// to race a requeued job for the run's lock. A rank notices that its launcher has gone by its
// parent process changing (the kernel gives an orphan to init or to a subreaper), and ends
// itself at once with one error line and status 1: no further step, no checkpoint (the last
// one written stays the newest). The watch is a thread that looks every 50 ms, plus a check
// that the trainer makes before each step, so that not even a short step starts once the
// launcher is known gone.
namespace collage {

// Starts the watch (once per process; later calls do nothing). Call it in a process that a
// launcher started, while its parent is still that launcher. No watch when the parent is
// already init (pid 1).
void start_launcher_watch();

// Ends this process (status 1, after an error line naming the launcher's pid) when the watch
// runs and the launcher has gone; returns at once otherwise.
void stop_if_launcher_gone();

}  // namespace collage
