// rank_utils: ZeroFirst really lets rank 0 finish before any other rank starts, rank-0
// logging filters info but not warnings, and per-rank seeds give different draws per rank.
#include <doctest/doctest.h>

#include <atomic>
#include <chrono>
#include <mutex>
#include <sstream>
#include <thread>

#include "framework/io/log.h"
#include "framework/ops/ops.h"
#include "framework/tensor/random.h"
#include "parallel/ddp_utils/rank_utils.h"
#include "tests/parallel/rank_harness.h"

using namespace dplab;
using namespace dplab::parallel;
using dplab::parallel::testing::run_threads;
using Clock = std::chrono::steady_clock;

TEST_CASE("ZeroFirst: rank 0's body finishes before any other rank's body starts") {
  for (int world : {2, 4}) {
    CAPTURE(world);
    std::mutex mu;
    std::vector<Clock::time_point> start(world), finish(world);
    std::atomic<int> prepared{0};  // how many bodies finished
    std::vector<int> prepared_at_entry(world, -1);
    run_threads(world, [&](ProcessGroup& pg) {
      int r = pg.rank();
      {
        ZeroFirst z(pg);
        prepared_at_entry[r] = prepared.load();
        {
          std::lock_guard<std::mutex> lock(mu);
          start[r] = Clock::now();
        }
        // rank 0 "prepares the dataset" slowly; if the others did not wait they would start now
        if (r == 0) std::this_thread::sleep_for(std::chrono::milliseconds(100));
        std::lock_guard<std::mutex> lock(mu);
        finish[r] = Clock::now();
        prepared++;
      }
      pg.barrier();
      CHECK(prepared.load() == world);  // after the scope, every rank has run the body
    });
    CHECK(prepared_at_entry[0] == 0);
    for (int r = 1; r < world; ++r) {
      CHECK(prepared_at_entry[r] >= 1);  // rank 0's body was already done
      CHECK(start[r] >= finish[0]);
    }
  }
}

TEST_CASE("ZeroFirst does not release the others when rank 0's body throws") {
  ProcessGroupOptions opts{.timeout = Seconds(1.0)};
  std::atomic<int> others_ran{0};
  CHECK_THROWS_AS(run_threads(
                      2,
                      [&](ProcessGroup& pg) {
    ZeroFirst z(pg);
    if (pg.rank() == 0) throw Error("rank 0 could not prepare the data");
    others_ran++;
                      },
                      opts),
                  Error);
  CHECK(others_ran.load() == 0);  // rank 1 timed out in the barrier instead of running on
}

TEST_CASE("rank-0 logging: info on rank 0 only, warnings on every rank, with the rank prefix") {
  std::ostringstream out;
  set_log_stream(&out);
  set_log_level(LogLevel::Info);
  setup_rank_logging(1);
  log_info("epoch {} done", 1);
  log_warning("loss is {}", "nan");
  setup_rank_logging(0);
  log_info("epoch {} done", 2);
  reset_rank_logging();
  log_info("plain");
  set_log_stream(nullptr);
  std::string s = out.str();
  CHECK(s.find("epoch 1 done") == std::string::npos);
  CHECK(s.find("[rank 1] WARNING: loss is nan") != std::string::npos);
  CHECK(s.find("[rank 0] INFO: epoch 2 done") != std::string::npos);
  CHECK(s.find("INFO: plain") != std::string::npos);
  CHECK(s.find("] INFO: plain") == std::string::npos);
  CHECK_THROWS_WITH_AS(setup_rank_logging(-1), doctest::Contains("rank >= 0, got -1"), Error);
}

TEST_CASE("per-rank seeds: the same seed gives every rank the same noise, seed + rank does not") {
  CHECK(per_rank_seed(42, 0) == 42);
  CHECK(per_rank_seed(42, 3) == 45);
  auto noise = [](uint64_t seed) {
    Generator g(seed);
    return randn({8}, {}, &g).to_vector<float>();
  };
  CHECK(noise(42) == noise(42));                                      // the bug: ranks agree
  CHECK(noise(per_rank_seed(42, 0)) != noise(per_rank_seed(42, 1)));  // the fix
}
