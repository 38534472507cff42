// collective_watchdog.cpp: the watch thread and the diagnosis through the store.
// The thread sleeps on a condition variable and wakes a few times per timeout; the cost
// outside a hang is one lock and a clock read per collective.
// Read next: mpi_engine.cpp.
#include "parallel/engines/collective_watchdog.h"

#include <algorithm>
#include <charconv>

#include "framework/error.h"
#include "parallel/transport/hang_report.h"

namespace dplab::parallel {

Seconds CollectiveWatchdog::grace(Seconds timeout) { return late_rank_grace(timeout); }

CollectiveWatchdog::CollectiveWatchdog(Connect connect, int rank, int size, Seconds timeout,
                                       std::function<void(const std::string&)> on_hang,
                                       Options options)
    : connect_(std::move(connect)), rank_(rank), size_(size), timeout_(timeout),
      grace_(options.grace.value_or(grace(timeout))),
      now_(options.now ? std::move(options.now) : Clock::now), on_hang_(std::move(on_hang)) {
  thread_ = std::thread([this] { watch(); });
}

CollectiveWatchdog::~CollectiveWatchdog() {
  {
    std::lock_guard<std::mutex> lock(mu_);
    stopping_ = true;
  }
  cv_.notify_all();
  thread_.join();
}

void CollectiveWatchdog::begin(const std::string& collective) {
  std::lock_guard<std::mutex> lock(mu_);
  ++number_;
  collective_ = collective;
  began_ = now_();
  in_collective_ = true;
}

void CollectiveWatchdog::end() {
  std::lock_guard<std::mutex> lock(mu_);
  in_collective_ = false;
}

void CollectiveWatchdog::watch() {
  const auto tick = std::chrono::duration_cast<Clock::duration>(
      std::clamp(timeout_ / 10, Seconds(0.01), Seconds(0.5)));
  std::unique_lock<std::mutex> lock(mu_);
  auto last_wake = now_();
  while (!stopping_) {
    cv_.wait_for(lock, tick);
    const auto now = now_();
    // Woken far later than asked: this process itself was stopped (SIGSTOP, a debugger).
    // Its collective's clock starts again, or it would blame the others when continued.
    if (now - last_wake > 2 * tick + std::chrono::seconds(1)) began_ = now;
    last_wake = now;
    if (stopping_ || !in_collective_ || now - began_ < timeout_) continue;
    const uint64_t number = number_;
    const std::string collective = collective_;
    lock.unlock();
    std::string message = diagnose(number, collective);
    on_hang_(message);  // the mpi engine aborts the job here
    return;
  }
}

std::string CollectiveWatchdog::diagnose(uint64_t number, const std::string& collective) {
  const std::string head = fmt::format("rank {}: {} #{} did not finish within {:.1f} s", rank_,
                                       collective, number, timeout_.count());
  try {
    std::shared_ptr<Store> store = connect_(grace_);
    return head + "; " + find_late_ranks(*store, "", rank_, size_, number, collective, grace_);
  } catch (const std::exception& e) {
    // rank 0 hosts the store: a store that does not answer means rank 0 is not running
    return fmt::format("{}; rank 0 stopped making progress: the rendezvous store it hosts did "
                       "not answer within {:.1f} s (rank 0 is stopped or hung; {})",
                       head, grace_.count(), e.what());
  }
}

}  // namespace dplab::parallel
