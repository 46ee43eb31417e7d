#pragma once
// The rank watchdog: ends an MPI job within a timeout when one of its ranks stops running,
// with a message naming that rank, instead of leaving the others blocked in a collective
// forever.
//
// A rank that dies is reported by mpirun itself ("mpirun noticed that process rank 1 ... exited
// on signal 9"), which then ends the job (measured: about 1 s, Open MPI 4.1). A rank that is
// stopped (SIGSTOP, a suspended or frozen process, a node that stops answering) is not: the
// other ranks wait in their next collective forever. So each rank runs a heartbeat thread on
// its own duplicate of MPI_COMM_WORLD: every rank sends rank 0 a heartbeat every
// min(2 s, timeout / 5) and rank 0 sends every rank one. Rank 0 watches every rank, every rank
// watches rank 0; the first to hear nothing from a peer for `timeout` prints
//   collage: error: rank R (of N, on host H) has sent no heartbeat for S s: it died or is
//   stalled; ending the job
// and calls MPI_Abort, which ends every rank (stopped ones too) with a non-zero exit status.
//
// What it does not catch: the heartbeats come from their own thread, so a rank whose process
// runs but whose main thread makes no progress (a long GEMM, a checkpoint being written, but
// also a deadlock or a hung GPU) keeps heartbeating. Long work is never mistaken for a stall;
// a live rank that never returns is not detected.
//
// Cost: one thread per rank that wakes every heartbeat interval and exchanges 4-byte messages
// (rank 0: 2·(N - 1) of them per interval); MPI must be initialised with MPI_THREAD_MULTIPLE,
// which MpiSession (src/dist/mpi_comm.h) requests.

namespace collage {

// Starts the watchdog on every rank: collective over MPI_COMM_WORLD, after MPI is initialised.
// timeout_seconds ≥ 1 is how long a rank may be silent (parallel.comm_timeout); 0 turns the
// watchdog off (nothing starts), e.g. to stop a rank in a debugger. Fails (collage::Error) on
// other timeouts, when MPI gives less than MPI_THREAD_MULTIPLE, or when the watchdog is
// already running.
void start_rank_watchdog(double timeout_seconds);

// Stops the watchdog: collective. Every rank keeps heartbeating and watching until every rank
// has called it (a rank that finishes early is not mistaken for a dead one, and a rank that
// stalls before getting here is still reported), then all stop together. MpiSession's
// destructor calls it right before MPI_Finalize (and the rendezvous that bounds the gap between
// the two, src/dist/mpi_comm.h); nothing else needs to. Does nothing when the watchdog is not
// running.
void stop_rank_watchdog();

// Stops this rank's heartbeat thread alone, without the handshake: for a rank that is failing
// (MpiSession's destructor during an exception) and exits without MPI_Finalize, after which
// mpirun ends the job. Does nothing when the watchdog is not running.
void abandon_rank_watchdog();

bool rank_watchdog_running();

// The timeout of the watchdog last started on this rank, 0 if none ever was: MpiSession bounds
// MPI_Finalize by it.
double rank_watchdog_timeout();

}  // namespace collage
