// tests_hidden.cpp: the hw4 tests kept for grading: bucket edge cases, 2 to 4 ranks and
// several bucket sizes against one process, one all-reduce per bucket per step, no_sync
// (nothing sent inside, the accumulated gradient averaged at the next synchronised step),
// and overlap (buckets launched while backward still runs).
#include "harness.h"
#include "training.h"

using namespace hw4;
using namespace hw4::grading;

namespace {

// The MLP's parameters: 48, 8, 24 and 3 floats.
std::vector<Tensor> mlp_params() { return make_model()->parameters(); }

// Whether the buckets hold each of the `count` parameters once (fewer buckets than that are
// no fewer all-reduces when some gradient is in none); says which does not.
bool holds_each_once(const std::vector<std::vector<size_t>>& buckets, size_t count, int64_t cap) {
  std::vector<int> seen(count, 0);
  for (const std::vector<size_t>& b : buckets)
    for (size_t p : b)
      if (p < count) ++seen[p];
  for (size_t p = 0; p < count; ++p) {
    CHECK_MESSAGE(seen[p] == 1, fmt::format("with {}-byte buckets your assign_buckets gives {}: {} is in {} buckets; "
                                            "every parameter belongs to exactly one, or its gradient {}", cap,
                                            buckets_str(buckets), param_name(p), seen[p],
                                            seen[p] ? "is averaged more than once" : "is never averaged"));
    if (seen[p] != 1) return false;
  }
  return true;
}

}  // namespace

TEST_SUITE("hidden") {

TEST_CASE("buckets: a parameter bigger than the cap and a cap that takes everything (10 points)") {
  const auto params = mlp_params();  // 192, 32, 96 and 12 bytes
  struct Case {
    int64_t cap;
    std::vector<std::vector<size_t>> want;
  };
  for (const Case& c : {Case{100, {{3}, {2}, {1}, {0}}}, Case{110, {{3, 2}, {1}, {0}}},
                        Case{1 << 20, {{3, 2, 1, 0}}}, Case{4, {{3}, {2}, {1}, {0}}}}) {
    const auto got = assign_buckets(params, c.cap);
    CHECK_MESSAGE(got == c.want, fmt::format("parameters of 192, 32, 96, 12 bytes with a {}-byte cap: got {}, "
                                             "expected {}", c.cap, buckets_str(got), buckets_str(c.want)));
  }
}

TEST_CASE("2 to 4 ranks and several bucket sizes train like one process (20 points)") {
  for (int n : {2, 3, 4})
    for (int64_t cap : {int64_t{4}, int64_t{110}, int64_t{1} << 20})
      if (!check_equal_to_one_process(n, 3, 12, cap)) return;
}

TEST_CASE("one all-reduce per bucket per step (15 points)") {
  const int n = 3, steps = 3;
  for (int64_t cap : {int64_t{4}, int64_t{110}, int64_t{1} << 20}) {
    const std::vector<std::vector<size_t>> assigned = assign_buckets(mlp_params(), cap);
    if (!holds_each_once(assigned, mlp_params().size(), cap)) continue;
    const size_t buckets = assigned.size();
    const std::vector<RankRun> runs = run_ddp(n, steps, 12, cap);
    for (int r = 0; r < n; ++r) {
      int64_t ran = 0;
      for (size_t s = 0; s < runs[r].all_reduces_per_step.size(); ++s) {
        const int64_t calls = runs[r].all_reduces_per_step[s];
        ran += calls;
        CHECK_MESSAGE(calls == static_cast<int64_t>(buckets),
                      (calls < 0 ? fmt::format("rank {} in a step with {}-byte buckets: {}", r, cap,
                                               runs[r].traffic_words[s])
                                 : fmt::format("rank {} ran {} all-reduces in a step with {}-byte buckets; there are "
                                               "{} buckets: one all-reduce per bucket", r, calls, cap, buckets)));
      }
      CHECK_MESSAGE(runs[r].launched == static_cast<int64_t>(buckets) * steps,
                    fmt::format("rank {}: all_reduces_launched() says {}, {} {}", r, runs[r].launched, counted_by(),
                                ran < 0 ? static_cast<int64_t>(buckets) * steps : ran));
    }
  }
}

TEST_CASE("no_sync: nothing sent inside and the accumulated gradient averaged after (20 points)") {
  const int n = 2, steps = 2, micro = 3;
  const std::vector<RankRun> runs = run_ddp(n, steps, 8, 110, micro);
  const size_t buckets = assign_buckets(mlp_params(), 110).size();
  for (int r = 0; r < n; ++r)
    for (size_t s = 0; s < runs[r].all_reduces_per_step.size(); ++s) {
      const int64_t calls = runs[r].all_reduces_per_step[s];
      CHECK_MESSAGE(calls == static_cast<int64_t>(buckets),
                    fmt::format("rank {} {} in a step of {} micro-batches ({} inside no_sync); only the last "
                                "backward may reduce: {} buckets", r,
                                calls < 0 ? runs[r].traffic_words[s] : fmt::format("ran {} all-reduces", calls), micro,
                                micro - 1, buckets));
    }
  check_equal_to_one_process(n, steps, 8, 110, micro);
}

TEST_CASE("overlap: buckets are launched while backward still runs (15 points)") {
  const int n = 2;
  // the first all-reduce is held until backward produces its last gradient: a reducer that
  // waits for it inside a gradient hook keeps backward from getting there, and the hold
  // lets go after kStall without a hook event; time for that and the rest of the test. (In
  // the grader, the buckets launched by the last gradient are those whose bytes the broker
  // saw from the rank while it waited there: remote.h's kLastGradient.)
  course::harness::ask_for_time(2.0 * kStall.count());
  const std::vector<RankRun> runs = run_ddp(n, 2, 8, 100, 1, true);
  for (int r = 0; r < n; ++r) {
    CHECK_MESSAGE(!runs[r].held_in_vain,
                  fmt::format("rank {} waited for bucket 0's all-reduce inside a gradient hook (a blocking all-reduce): "
                              "backward could not go on to its last gradient until the reduction was done. Launch each "
                              "bucket with all_reduce_async and wait for them all in the callback queued for the end "
                              "of backward", r));
    CHECK_MESSAGE(runs[r].launched_before_last_gradient >= 3,
                  fmt::format("rank {}: when the last gradient of a backward arrived, {} of the 4 buckets had been "
                              "launched; the 3 buckets already full should be on their way (launch a bucket as "
                              "soon as its last gradient arrives, not at the end of backward)", r,
                              runs[r].launched_before_last_gradient));
  }
}

}  // TEST_SUITE
