// tests_hidden.cpp: the hw5 tests kept for grading: 1 to 4 ranks with shards that do not
// divide the parameters, memory per rank, and the collectives' bytes and calls against the
// textbook (reduce-scatter + all-gather move what one all-reduce moves, 2(N-1)/N of the data).
// In the grader the bytes are the broker's count of what each rank's process sent.
#include "grading.h"

using namespace hw5;
using namespace hw5::grading;

TEST_SUITE("hidden") {

TEST_CASE("1 to 4 ranks with uneven shards train like one process (30 points)") {
  for (int n = 1; n <= 4; ++n)
    if (!check_equal_to_one_process(n, 4)) return;
}

TEST_CASE("the momentum takes 1/N of the memory: ceil(P/N) floats per rank (10 points)") {
  for (int n : {3, 4}) {
    const auto runs = run_all(n, draw(n, 1));
    const int64_t want = (total_params() + n - 1) / n;
    for (int r = 0; r < n; ++r)
      CHECK_MESSAGE(runs[r].state_floats == want,
                    fmt::format("rank {} of {} holds {} floats of momentum; 1/N of the {} parameters (rounded up) is "
                                "{}", r, n, runs[r].state_floats, total_params(), want));
  }
}

TEST_CASE("per step one reduce-scatter and one all-gather and no all-reduce (20 points)") {
  const int n = 3;
  for (const RankRun& run : run_all(n, draw(n, 2)))
    for (const StepCalls& calls : run.calls)
      CHECK_MESSAGE((calls.reduce_scatter == 1 && calls.all_gather == 1 && calls.all_reduce == 0),
                    fmt::format("a step ran {} reduce-scatter, {} all-gather and {} all-reduce; ZeRO-1 needs exactly "
                                "one reduce-scatter (gradients) and one all-gather (parameters)",
                                calls.reduce_scatter, calls.all_gather, calls.all_reduce));
}

TEST_CASE("the bytes of one all-reduce: 2(N-1)/N of the padded parameters per rank (20 points)") {
  for (int n : {2, 3, 4}) {
    const int64_t shard = (total_params() + n - 1) / n, padded_bytes = 4 * shard * n;
    const int64_t want = 2 * (n - 1) * shard * 4;  // = 2(N-1)/N x padded bytes
    const auto runs = run_all(n, draw(n, 1));
    for (int r = 0; r < n; ++r) {
      const int64_t sent = runs[r].bytes_sent;
      CHECK_MESSAGE(sent == want, fmt::format("rank {} of {} sent {} bytes in a step; reduce-scatter plus all-gather of "
                                              "{} padded bytes send 2(N-1)/N of them: {}", r, n, sent, padded_bytes,
                                              want));
    }
  }
}

}  // TEST_SUITE
