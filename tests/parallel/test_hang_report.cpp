// test_hang_report.cpp: naming the rank that stopped making progress. The diagnosis itself
// on hand-made snapshots (chains of waits, a stopped process, a silent wait, a cycle, ranks
// a collective behind), then ranks as threads where one rank skips a collective: every
// other rank's error must name it, not the neighbour it happened to wait on; the mpi
// engine's watchdog, which names the rank that never reports being stuck. And the
// timeout's environment variables, DPLAB_TIMEOUT and DPLAB_RENDEZVOUS_TIMEOUT.
// Read next: tests/faults/test_faults.cpp (the same with real processes and SIGSTOP).
#include <doctest/doctest.h>
#include <stdlib.h>

#include <atomic>
#include <latch>
#include <mutex>
#include <thread>

#include "framework/tensor/tensor.h"
#include "parallel/comm/init.h"
#include "parallel/comm/process_group.h"
#include "parallel/engines/collective_watchdog.h"
#include "parallel/rendezvous/hash_store.h"
#include "parallel/rendezvous/prefix_store.h"
#include "parallel/transport/hang_report.h"
#include "tests/parallel/collective_test_util.h"
#include "tests/parallel/rank_harness.h"

using namespace dplab;
using namespace dplab::parallel;
using dplab::parallel::testing::make;
using dplab::parallel::testing::run_threads;

namespace {

// n ranks all in collective #seq of `name`, each waiting on waits[r] (-1: not waiting).
std::vector<RankProgress> snapshot(const std::vector<int>& waits, uint64_t seq = 58,
                                   const std::string& name = "all_reduce(ring)") {
  std::vector<RankProgress> ranks(waits.size());
  for (size_t r = 0; r < waits.size(); ++r) ranks[r] = {seq, name, waits[r], 'S', 0.0};
  return ranks;
}

bool has(const std::string& s, const std::string& part) {
  return s.find(part) != std::string::npos;
}

}  // namespace

TEST_CASE("rank_ranges folds runs of consecutive ranks") {
  CHECK(rank_ranges({3, 1, 2}) == "1-3");
  CHECK(rank_ranges({0, 2}) == "0, 2");
  CHECK(rank_ranges({0, 1, 3, 5, 6, 7}) == "0-1, 3, 5-7");
  CHECK(rank_ranges({4}) == "4");
}

TEST_CASE("describe_hang follows the waits to the rank that waits on nobody") {
  // rank 2 timed out waiting on 1; 1 waits on 0; 0 is busy elsewhere
  std::string s = describe_hang(2, 1, snapshot({-1, 0, 1, 2}));
  CAPTURE(s);
  CHECK(has(s, "rank 0 stopped making progress in all_reduce(ring) #58"));
  CHECK(has(s, "waits on no rank"));
  CHECK(has(s, "rank 2 waits on rank 1, rank 1 waits on rank 0"));
  CHECK_FALSE(has(s, "Out of step"));
}

TEST_CASE("a stopped process or a silent wait ends the chain even while it 'waits'") {
  // rank 0 was stopped inside its own wait on rank 3: its filed wait is stale
  auto ranks = snapshot({3, 0, 1, 2});
  ranks[0].process_state = 'T';
  std::string s = describe_hang(2, 1, ranks);
  CAPTURE(s);
  CHECK(has(s, "rank 0 stopped making progress"));
  CHECK(has(s, "its process is stopped"));
  // no process state (ranks on other machines, threads): the wait's heartbeat tells
  ranks = snapshot({3, 0, 1, 2});
  for (auto& r : ranks) r.process_state = '?';
  ranks[0].silent_s = 4.0;
  s = describe_hang(1, 0, ranks);
  CAPTURE(s);
  CHECK(has(s, "rank 0 stopped making progress"));
  CHECK(has(s, "has not woken up for 4.0 s"));
}

TEST_CASE("past a silent rank, a stopped process further down its waits is the one named") {
  // rank 1 timed out on 0; 0 has not run for 2.9 s (4 jobs on 2 cores), but its filed wait
  // leads through 3 to rank 2, whose process a signal stopped: rank 2 is named
  auto ranks = snapshot({3, 0, -1, 2});
  ranks[0].silent_s = 2.9;
  ranks[2].process_state = 'T';
  std::string s = describe_hang(1, 0, ranks);
  CAPTURE(s);
  CHECK(has(s, "rank 2 stopped making progress"));
  CHECK(has(s, "its process is stopped"));
  CHECK(has(s, "rank 1 waits on rank 0, rank 0 waits on rank 3, rank 3 waits on rank 2"));
  // leading only to a rank that waits on nobody (busy, or as starved): the silent one stays
  ranks[2].process_state = 'S';
  s = describe_hang(1, 0, ranks);
  CAPTURE(s);
  CHECK(has(s, "rank 0 stopped making progress"));
  CHECK(has(s, "has not woken up for 2.9 s"));
  CHECK(has(s, "(rank 1 waits on rank 0)"));
}

TEST_CASE("waits that close a cycle are reported as a deadlock, not as one rank's fault") {
  std::string s = describe_hang(0, 1, snapshot({1, 2, 0}));
  CAPTURE(s);
  CHECK(has(s, "cycle"));
  CHECK(has(s, "rank 0 waits on rank 1, rank 1 waits on rank 2, rank 2 waits on rank 0"));
  CHECK_FALSE(has(s, "stopped making progress"));
}

TEST_CASE("ranks a collective behind the others are listed as out of step, NCCL-style") {
  auto ranks = snapshot({-1, 0, 1, 2});
  ranks[0].collectives = 57;
  std::string s = describe_hang(3, 2, ranks);
  CAPTURE(s);
  CHECK(has(s, "rank 0 stopped making progress in all_reduce(ring) #57"));
  CHECK(has(
      s, "Out of step: rank 0 is at all_reduce(ring) #57; ranks 1-3 are at all_reduce(ring) #58"));
}

TEST_CASE("threads: a rank that skips a collective is named by every rank that waited on it") {
  // Ranks 1-3 wait for rank 0 in all_reduce #2, which rank 0 never calls. The report is
  // right only if all three are inside #2 when the first one times out: a latch lets them
  // start #2 together, and the timeout (3 s, which also covers making the group and #1)
  // is far longer than the moment from the latch into the collective, whatever the load.
  for (Algorithm algo : {Algorithm::Ring, Algorithm::Star}) {
    CAPTURE(algorithm_name(algo));
    constexpr int kRanks = 4;
    std::vector<std::string> messages(kRanks);
    std::atomic<int> finished{0};
    std::latch at_second(kRanks - 1);
    run_threads(
        kRanks,
        [&](ProcessGroup& pg) {
      Tensor t = make<float>(pg.rank(), 1000);
      pg.all_reduce(t, ReduceOp::Sum, algo);  // #1 on every rank
      if (pg.rank() == 0) {  // skips #2: alive, but busy elsewhere until the others gave up
        while (finished < kRanks - 1) std::this_thread::sleep_for(std::chrono::milliseconds(5));
        return;
      }
      at_second.arrive_and_wait();
      try {
        pg.all_reduce(t, ReduceOp::Sum, algo);
      } catch (const CommError& e) {
        messages[pg.rank()] = e.what();
      }
      ++finished;
        },
        {.engine = "ring", .timeout = Seconds(3.0)});
    for (int r = 1; r < kRanks; ++r) {
      CAPTURE(messages[r]);
      CHECK(has(messages[r], "rank 0 stopped making progress"));
      CHECK(has(messages[r], "Out of step: rank 0 is at all_reduce"));
      CHECK(has(messages[r], "ranks 1-3 are at all_reduce"));
    }
  }
}

namespace {

// n watchdogs over one HashStore, as the ranks of an mpi group would have; messages[r] gets
// what rank r's watchdog reports (the mpi engine would print it and abort). Their clock is
// the test's: it stands still until time_out() moves it past the 0.3 s timeout, so only the
// collectives the test leaves open time out, however long the scheduler pauses the test
// between a begin() and its end(). A rank whose collective timed out then waits kGrace for
// the others to file theirs: 5 s, not the 1 s grace(0.3 s) would give, so that a stuck
// rank's watch thread that runs late still files in time and only the rank that is not
// stuck at all is named. Ranks that all file end the wait at once.
constexpr Seconds kGrace{5.0};
struct Watchdogs {
  using Clock = CollectiveWatchdog::Clock;
  std::shared_ptr<HashStore> store = std::make_shared<HashStore>();
  std::vector<std::string> messages;
  std::mutex mu;
  const Clock::time_point start = Clock::now();
  std::atomic<Clock::rep> moved{0};  // how far time_out() moved the clock
  std::vector<std::unique_ptr<CollectiveWatchdog>> dogs;
  Watchdogs(int n, CollectiveWatchdog::Connect connect = nullptr) : messages(n) {
    // the watchdogs' own view of the store, as create_process_group gives them
    auto view = std::make_shared<PrefixStore>("pg0/watchdog", store);
    if (!connect) connect = [view](Seconds) -> std::shared_ptr<Store> { return view; };
    auto now = [this] { return start + Clock::duration(moved.load()); };
    for (int r = 0; r < n; ++r)
      dogs.push_back(std::make_unique<CollectiveWatchdog>(
          connect, r, n, Seconds(0.3),
          [this, r](const std::string& why) {
        std::lock_guard<std::mutex> lock(mu);
        messages[r] = why;
          },
          CollectiveWatchdog::Options{.grace = kGrace, .now = now}));
  }
  // Every collective open now has run past the timeout.
  void time_out() { moved += std::chrono::duration_cast<Clock::duration>(Seconds(0.31)).count(); }
  std::string message(int r) {
    std::lock_guard<std::mutex> lock(mu);
    return messages[r];
  }
  // waits until the given ranks have reported (a watch tick, then at most kGrace); the
  // deadline only guards against a hang
  void wait_for(std::vector<int> ranks) {
    auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(30);
    for (int r : ranks)
      while (message(r).empty() && std::chrono::steady_clock::now() < deadline)
        std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
};

}  // namespace

TEST_CASE("watchdog (mpi engine): the rank that never reports being stuck is the late one") {
  Watchdogs w(3);
  for (auto& d : w.dogs) {  // collective #1 completes everywhere
    d->begin("all_reduce");
    d->end();
  }
  w.dogs[1]->begin("all_reduce");  // ranks 1 and 2 block in #2; rank 0 is busy elsewhere
  w.dogs[2]->begin("all_reduce");
  w.time_out();
  w.wait_for({1, 2});
  for (int r : {1, 2}) {
    CAPTURE(w.message(r));
    CHECK(has(w.message(r), fmt::format("rank {}: all_reduce #2 did not finish within 0.3 s", r)));
    CHECK(has(w.message(r), "rank 0 stopped making progress: it did not report"));
    CHECK(has(w.message(r), "in a collective within 5.0 s"));  // the grace it was given
  }
  CHECK(w.message(0).empty());  // not in a collective when the clock moved
  // the reports went under the watchdogs' own keys: the view's prefix, then the rank
  CHECK(w.store->check({"pg0/watchdog/1", "pg0/watchdog/2"}));
}

TEST_CASE("watchdog: ranks in different collectives are reported out of step") {
  Watchdogs w(3);
  w.dogs[0]->begin("broadcast");
  w.dogs[1]->begin("all_reduce");
  w.dogs[2]->begin("all_reduce");
  w.time_out();
  w.wait_for({0, 1, 2});
  for (int r = 0; r < 3; ++r) {
    CAPTURE(w.message(r));
    CHECK(has(w.message(r), "every rank is stuck in a collective"));
    CHECK(has(w.message(r),
              "Out of step: ranks 1-2 are at all_reduce #1; rank 0 is at broadcast #1"));
  }
}

TEST_CASE("watchdog: a store that does not answer names its host, rank 0") {
  Watchdogs w(2, [](Seconds) -> std::shared_ptr<Store> {
    throw CommError("connecting to 127.0.0.1:1 timed out");
  });
  w.dogs[1]->begin("barrier");
  w.time_out();
  w.wait_for({1});
  CAPTURE(w.message(1));
  CHECK(has(w.message(1),
            "rank 0 stopped making progress: the rendezvous store it hosts did not answer"));
}

TEST_CASE("DPLAB_TIMEOUT decides when no timeout is given; a given one wins; junk is refused") {
  ::unsetenv("DPLAB_TIMEOUT");
  CHECK(resolve_timeout(std::nullopt).count() == doctest::Approx(60.0));
  ::setenv("DPLAB_TIMEOUT", "2.5", 1);
  CHECK(resolve_timeout(std::nullopt).count() == doctest::Approx(2.5));
  CHECK(resolve_timeout(Seconds(7.0)).count() == doctest::Approx(7.0));
  // a given 60 s is a given value too: the variable does not replace it
  CHECK(resolve_timeout(kDefaultTimeout).count() == doctest::Approx(60.0));
  for (const char* bad : {"abc", "-1", "0", "5s", "inf", "1e308", "604801"}) {
    ::setenv("DPLAB_TIMEOUT", bad, 1);
    const std::string expected =
        fmt::format("DPLAB_TIMEOUT='{}' is not a number of seconds in (0, 604800]", bad);
    CHECK_THROWS_WITH_AS(resolve_timeout(std::nullopt), doctest::Contains(expected.c_str()), Error);
  }
  ::unsetenv("DPLAB_TIMEOUT");
  CHECK_THROWS_WITH_AS(resolve_timeout(Seconds(1e308)),
                       doctest::Contains("timeout must be a number "
                                         "of seconds in (0, 604800], got 1e+308"),
                       Error);
}

TEST_CASE(
    "the rendezvous has its own timeout: given, else DPLAB_RENDEZVOUS_TIMEOUT, else the timeout") {
  ::unsetenv("DPLAB_RENDEZVOUS_TIMEOUT");
  CHECK(resolve_rendezvous_timeout(std::nullopt, Seconds(3.0)).count() == doctest::Approx(3.0));
  ::setenv("DPLAB_RENDEZVOUS_TIMEOUT", "90", 1);
  CHECK(resolve_rendezvous_timeout(std::nullopt, Seconds(3.0)).count() == doctest::Approx(90.0));
  CHECK(resolve_rendezvous_timeout(Seconds(5.0), Seconds(3.0)).count() == doctest::Approx(5.0));
  ::setenv("DPLAB_RENDEZVOUS_TIMEOUT", "nan", 1);
  CHECK_THROWS_WITH_AS(
      resolve_rendezvous_timeout(std::nullopt, Seconds(3.0)),
      doctest::Contains("DPLAB_RENDEZVOUS_TIMEOUT='nan' is not a number of seconds in (0, 604800]"),
      Error);
  ::unsetenv("DPLAB_RENDEZVOUS_TIMEOUT");
  CHECK_THROWS_WITH_AS(resolve_rendezvous_timeout(Seconds(-1.0), Seconds(3.0)),
                       doctest::Contains("rendezvous_timeout must be a number of seconds"), Error);
}
