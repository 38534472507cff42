// collective_watchdog.h: NCCL's watchdog idea for engines whose collectives block inside a
// library (MPI): a thread per group that notices a collective running past the timeout,
// finds out which rank is late, and hands a message naming it to on_hang (the mpi engine
// prints it and aborts the job, since a rank blocked in MPI cannot be interrupted).
// How the late rank is found: every rank whose collective timed out files "<number> <name>"
// in the rendezvous store, then waits a grace period for the others. A rank that files
// nothing is not stuck in a collective: it is stopped, dead, or busy elsewhere, and is the
// late one; ranks that filed an older collective number are behind. If the store itself
// does not answer, its host (rank 0) is the one that stopped.
// Read next: collective_watchdog.cpp; mpi_engine.cpp uses it.
#pragma once
#include <chrono>
#include <condition_variable>
#include <functional>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <thread>

#include "parallel/rendezvous/store.h"
#include "parallel/transport/hang_report.h"  // find_late_ranks: the method, for any waiter

namespace dplab::parallel {

class CollectiveWatchdog {
 public:
  // connect() gives the watchdog a store of its own (its own connection, a short timeout),
  // made only when a collective hangs: a view whose keys are the watchdog's alone
  // (PrefixStore "dplab/pg0/watchdog"), one per rank ("0", "1", ...).
  using Connect = std::function<std::shared_ptr<Store>(Seconds timeout)>;
  using Clock = std::chrono::steady_clock;
  struct Options {
    // How long a rank whose collective timed out waits for the others to file theirs
    // (default grace(timeout)). A rank that files later is named as the late one, so where
    // the watch threads may run late (a loaded machine) a longer grace keeps that honest.
    std::optional<Seconds> grace;
    // The clock collectives are timed on (default Clock::now). A test passes one it moves
    // itself, so that a collective times out when the test says, not when the scheduler
    // happens to pause the thread between begin() and end().
    std::function<Clock::time_point()> now;
  };
  CollectiveWatchdog(Connect connect, int rank, int size, Seconds timeout,
                     std::function<void(const std::string&)> on_hang, Options options = {});
  ~CollectiveWatchdog();
  CollectiveWatchdog(const CollectiveWatchdog&) = delete;
  CollectiveWatchdog& operator=(const CollectiveWatchdog&) = delete;

  // Brackets one collective: begin() starts its clock, end() stops it.
  void begin(const std::string& collective);
  void end();

  // Seconds other ranks get to file their reports once one rank's collective timed out
  // (late_rank_grace).
  static Seconds grace(Seconds timeout);

 private:
  void watch();
  std::string diagnose(uint64_t number, const std::string& collective);

  Connect connect_;
  int rank_, size_;
  Seconds timeout_, grace_;
  std::function<Clock::time_point()> now_;
  std::function<void(const std::string&)> on_hang_;

  std::mutex mu_;
  std::condition_variable cv_;
  bool stopping_ = false;
  bool in_collective_ = false;
  uint64_t number_ = 0;  // collectives begun: the current one is #number_
  std::string collective_;
  Clock::time_point began_;
  std::thread thread_;
};

}  // namespace dplab::parallel
