// The rank watchdog (rank_watchdog.h): a heartbeat thread per rank that ends the job, naming the
// rank, when a rank falls silent.
#include "dist/rank_watchdog.h"

#include <fmt/format.h>
#include <mpi.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <condition_variable>
#include <cstdio>
#include <cstring>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "core/error.h"
#include "dist/mpi_comm.h"

namespace collage {
namespace {

using Clock = std::chrono::steady_clock;
using Seconds = std::chrono::duration<double>;

// Every watchdog message is one int saying what it is. kAlive: a heartbeat. kDone: the sender
// has called stop_rank_watchdog (to rank 0 only). kBye: the sender's last message to the
// receiver.
enum Kind : int { kAlive = 0, kDone = 1, kBye = 2 };
// MPI_Isend reads its buffer until the send completes: constants never change under it.
const int kKinds[3] = {kAlive, kDone, kBye};
constexpr int kTag = 0;  // the watchdog's communicator carries nothing else

// While stopping, the handshake's messages are waited for at this period instead of the
// heartbeat interval, so the ranks stop within milliseconds of the last one asking to.
constexpr auto kHandshakePoll = std::chrono::milliseconds(5);

// A rank this one exchanges heartbeats with (rank 0: every other rank; the others: rank 0).
struct Peer {
  int rank = 0;
  int received = kAlive;  // MPI_Irecv's buffer: the kind of the last message
  MPI_Request receive = MPI_REQUEST_NULL;
  Clock::time_point last_heard;
  bool done = false;      // rank 0 only: this peer has called stop_rank_watchdog
  bool said_bye = false;  // it sent its last message: no longer watched
};

class RankWatchdog {
 public:
  // Collective over MPI_COMM_WORLD (duplicates it); starts the thread.
  explicit RankWatchdog(double timeout_seconds) {
    check_mpi(MPI_Comm_dup(MPI_COMM_WORLD, &comm_), "MPI_Comm_dup (rank watchdog)");
    check_mpi(MPI_Comm_rank(comm_, &rank_), "MPI_Comm_rank");
    check_mpi(MPI_Comm_size(comm_, &size_), "MPI_Comm_size");
    gather_host_names();
    timeout_ = std::chrono::duration_cast<Clock::duration>(Seconds(timeout_seconds));
    // Several heartbeats per timeout, so one late heartbeat (a busy machine) is no alarm.
    interval_ =
        std::chrono::duration_cast<Clock::duration>(Seconds(std::min(2.0, timeout_seconds / 5)));
    // Rank 0 exchanges heartbeats with every other rank, every other rank with rank 0.
    for (int r = 0; r < size_; ++r) {
      if ((rank_ == 0) == (r == 0)) continue;
      Peer peer;
      peer.rank = r;
      peers_.push_back(peer);
    }
    thread_ = std::thread([this] { run(); });
  }
  ~RankWatchdog() { abandon(); }
  RankWatchdog(const RankWatchdog&) = delete;
  RankWatchdog& operator=(const RankWatchdog&) = delete;

  // Collective: returns once every rank has asked to stop (stop_rank_watchdog).
  void stop() {
    {
      std::lock_guard<std::mutex> lock(mutex_);
      stopping_ = true;
    }
    wake_.notify_one();
    thread_.join();
    check_mpi(MPI_Comm_free(&comm_), "MPI_Comm_free (rank watchdog)");
  }

  // Local: ends the thread at once; the communicator is left to the exiting process.
  void abandon() {
    if (!thread_.joinable()) return;
    {
      std::lock_guard<std::mutex> lock(mutex_);
      abandoning_ = true;
    }
    wake_.notify_one();
    thread_.join();
  }

 private:
  void gather_host_names() {
    char name[MPI_MAX_PROCESSOR_NAME] = {};
    int length = 0;
    check_mpi(MPI_Get_processor_name(name, &length), "MPI_Get_processor_name");
    std::vector<char> names(size_t(size_) * MPI_MAX_PROCESSOR_NAME);  // (N, MPI_MAX_PROCESSOR_NAME)
    check_mpi(MPI_Allgather(name, MPI_MAX_PROCESSOR_NAME, MPI_CHAR, names.data(),
                            MPI_MAX_PROCESSOR_NAME, MPI_CHAR, comm_),
              "MPI_Allgather (host names)");
    for (int r = 0; r < size_; ++r) {
      const char* host = names.data() + size_t(r) * MPI_MAX_PROCESSOR_NAME;
      hosts_.emplace_back(host, strnlen(host, MPI_MAX_PROCESSOR_NAME));
    }
  }

  // The thread. An exception here (an MPI call failing) would otherwise end in std::terminate
  // without saying which rank: say it, and end the job.
  void run() {
    try {
      watch();
    } catch (const std::exception& e) {
      fmt::print(stderr, "collage: error: rank {} (of {}): rank watchdog: {}; ending the job\n",
                 rank_, size_, e.what());
      std::fflush(stderr);
      MPI_Abort(MPI_COMM_WORLD, 1);
    }
  }

  void watch() {
    for (Peer& peer : peers_) {
      peer.last_heard = Clock::now();
      post_receive(peer);
    }
    bool sent_done = false, sent_bye = false;
    Clock::time_point next_heartbeat = Clock::now();
    while (true) {
      bool stopping = false;
      {
        std::lock_guard<std::mutex> lock(mutex_);
        // The process is exiting without MPI_Finalize (abandon_rank_watchdog): leave MPI alone.
        if (abandoning_) return;
        stopping = stopping_;
      }
      const Clock::time_point now = Clock::now();
      receive_everything(now);

      // The closing handshake: every rank tells rank 0 it is done; once all have (rank 0
      // too), rank 0 says bye to every rank and each says bye back. Bye is each side's last
      // message to the other and MPI keeps a pair's messages in order, so once both byes are
      // received every message has been, and nothing is left pending on the communicator.
      if (stopping && !sent_done) {
        if (rank_ != 0) send(peers_[0], kDone);
        sent_done = true;
      }
      const bool may_say_bye = rank_ == 0
                                   ? sent_done && std::all_of(peers_.begin(), peers_.end(),
                                                              [](const Peer& p) { return p.done; })
                                   : peers_[0].said_bye;
      if (!sent_bye && may_say_bye) {
        for (Peer& peer : peers_) send(peer, kBye);
        sent_bye = true;
      }
      const bool all_said_bye =
          std::all_of(peers_.begin(), peers_.end(), [](const Peer& p) { return p.said_bye; });
      if (sent_bye && all_said_bye) break;

      if (!sent_bye && now >= next_heartbeat) {
        for (Peer& peer : peers_) send(peer, kAlive);
        next_heartbeat = now + interval_;
      }
      for (const Peer& peer : peers_) {
        if (!peer.said_bye && now - peer.last_heard > timeout_) {
          end_job(peer, Seconds(now - peer.last_heard).count());
        }
      }
      forget_completed_sends();

      std::unique_lock<std::mutex> lock(mutex_);
      const Clock::duration wait = stopping ? Clock::duration(kHandshakePoll) : interval_;
      wake_.wait_for(lock, wait, [&] { return abandoning_ || stopping_ != stopping; });
    }
    check_mpi(MPI_Waitall(int(sends_.size()), sends_.data(), MPI_STATUSES_IGNORE),
              "MPI_Waitall (rank watchdog sends)");
  }

  void post_receive(Peer& peer) {
    check_mpi(MPI_Irecv(&peer.received, 1, MPI_INT, peer.rank, kTag, comm_, &peer.receive),
              "MPI_Irecv (rank watchdog)");
  }

  // Takes every message that has arrived (several if this thread was held up).
  void receive_everything(Clock::time_point now) {
    for (Peer& peer : peers_) {
      while (!peer.said_bye) {
        int arrived = 0;
        check_mpi(MPI_Test(&peer.receive, &arrived, MPI_STATUS_IGNORE), "MPI_Test (rank watchdog)");
        if (!arrived) break;
        peer.last_heard = now;
        if (peer.received == kDone) peer.done = true;
        if (peer.received == kBye) {
          peer.said_bye = true;  // its last message: no receive to post
        } else {
          post_receive(peer);
        }
      }
    }
  }

  void send(const Peer& peer, Kind kind) {
    MPI_Request request;
    check_mpi(MPI_Isend(&kKinds[kind], 1, MPI_INT, peer.rank, kTag, comm_, &request),
              "MPI_Isend (rank watchdog)");
    sends_.push_back(request);
  }

  // 4-byte sends complete at once (eagerly), unless the receiver stopped: keep them until done.
  void forget_completed_sends() {
    int all_completed = 0;
    check_mpi(MPI_Testall(int(sends_.size()), sends_.data(), &all_completed, MPI_STATUSES_IGNORE),
              "MPI_Testall (rank watchdog sends)");
    if (all_completed) sends_.clear();
  }

  [[noreturn]] void end_job(const Peer& silent, double seconds) {
    fmt::print(stderr,
               "collage: error: rank {} (of {}, on host {}) has sent no heartbeat for {:.1f} s: "
               "it died or is stalled; ending the job\n",
               silent.rank, size_, hosts_[size_t(silent.rank)], seconds);
    std::fflush(stderr);
    MPI_Abort(MPI_COMM_WORLD, 1);  // ends every rank; mpirun exits with status 1
    std::abort();                  // MPI_Abort does not return
  }

  MPI_Comm comm_ = MPI_COMM_NULL;  // a duplicate of MPI_COMM_WORLD, for the watchdog only
  int rank_ = 0, size_ = 1;
  std::vector<std::string> hosts_;  // (N) each rank's host, for the message
  Clock::duration timeout_{}, interval_{};
  std::vector<Peer> peers_;         // used by the thread only
  std::vector<MPI_Request> sends_;  // used by the thread only, until they complete
  std::mutex mutex_;                // guards stopping_ and abandoning_
  std::condition_variable wake_;    // tells the thread one of them changed
  bool stopping_ = false, abandoning_ = false;
  std::thread thread_;
};

// The running watchdog (main thread only), and the last timeout started.
std::unique_ptr<RankWatchdog> running_watchdog;
double last_timeout_seconds = 0;

}  // namespace

void start_rank_watchdog(double timeout_seconds) {
  // Below a second the heartbeat thread would wake every few milliseconds, for no use.
  COLLAGE_CHECK(timeout_seconds == 0 || (std::isfinite(timeout_seconds) && timeout_seconds >= 1),
                "rank watchdog: timeout {} s must be 0 (off) or at least 1 s "
                "(parallel.comm_timeout)",
                timeout_seconds);
  COLLAGE_CHECK(!running_watchdog, "rank watchdog: already running");
  if (timeout_seconds == 0) return;
  int initialized = 0;
  check_mpi(MPI_Initialized(&initialized), "MPI_Initialized");
  COLLAGE_CHECK(initialized, "rank watchdog: MPI must be initialised first (launch with mpirun)");
  int level = MPI_THREAD_SINGLE;
  check_mpi(MPI_Query_thread(&level), "MPI_Query_thread");
  COLLAGE_CHECK(level == MPI_THREAD_MULTIPLE,
                "rank watchdog: the MPI library gives thread level {}, the heartbeat thread needs "
                "MPI_THREAD_MULTIPLE ({}); set parallel.comm_timeout: 0 to run without it",
                level, MPI_THREAD_MULTIPLE);
  running_watchdog = std::make_unique<RankWatchdog>(timeout_seconds);
  last_timeout_seconds = timeout_seconds;
}

void stop_rank_watchdog() {
  if (!running_watchdog) return;
  running_watchdog->stop();
  running_watchdog.reset();
}

void abandon_rank_watchdog() {
  if (!running_watchdog) return;
  running_watchdog->abandon();
  running_watchdog.reset();  // makes no MPI call: the communicator is left to the exiting process
}

bool rank_watchdog_running() { return running_watchdog != nullptr; }

double rank_watchdog_timeout() { return last_timeout_seconds; }

}  // namespace collage
