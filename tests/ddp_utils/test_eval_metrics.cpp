// reduce_tensor and WeightedMetrics: averages over ranks weighted by how many real examples
// each rank saw, so uneven shards (and padding left out of the counts) give the
// single-process mean, where a plain mean of the ranks' means would not.
#include <doctest/doctest.h>

#include "framework/ops/ops.h"
#include "parallel/ddp_utils/distributed_eval.h"
#include "tests/parallel/rank_harness.h"

using namespace dplab;
using namespace dplab::parallel;
using dplab::parallel::testing::run_threads;

TEST_CASE("reduce_tensor averages a copy and leaves the input alone") {
  run_threads(3, [](ProcessGroup& pg) {
    Tensor t = full({2}, static_cast<double>(pg.rank() + 1));  // 1, 2, 3
    Tensor avg = reduce_tensor(pg, t);
    CHECK(avg.to_vector<float>() == std::vector<float>{2.0f, 2.0f});
    CHECK(t.to_vector<float>() ==
          std::vector<float>{static_cast<float>(pg.rank() + 1), static_cast<float>(pg.rank() + 1)});
    CHECK(reduce_tensor(pg, t, ReduceOp::Sum).at({1}) == 6.0f);
    CHECK(reduce_tensor(pg, t, ReduceOp::Max).at({1}) == 3.0f);
    CHECK(reduce_tensor(pg, t, ReduceOp::Min).at({1}) == 1.0f);
  });
}

TEST_CASE("metrics weighted by counts equal the single-process mean on uneven shards") {
  // 13 examples with loss i (i = 0..12) and "correct" when i is even, split 4/4/4/1 like
  // SequentialDistributedSampler(13, 4) without its padding. Single process: mean loss 6,
  // accuracy 7/13. The mean of the ranks' means would be (1.5 + 5.5 + 9.5 + 12) / 4 = 7.125.
  const int64_t n = 13, world = 4, m = 4;
  run_threads(world, [&](ProcessGroup& pg) {
    WeightedMetrics metrics;
    int64_t begin = pg.rank() * m, end = std::min(n, begin + m);
    // two "batches" per rank of uneven size, as a DataLoader would give
    for (int64_t b = begin; b < end; b += 3) {
      int64_t e = std::min(end, b + 3);
      double loss = 0, correct = 0;
      for (int64_t i = b; i < e; ++i) {
        loss += static_cast<double>(i);
        correct += (i % 2 == 0);
      }
      metrics.add("loss", loss / static_cast<double>(e - b), e - b);
      metrics.add("accuracy", correct / static_cast<double>(e - b), e - b);
    }
    auto avg = metrics.reduce(pg);
    CHECK(avg.at("loss") == doctest::Approx(6.0));
    CHECK(avg.at("accuracy") == doctest::Approx(7.0 / 13.0));
    CHECK(metrics.global_count(pg, "loss") == 13);
    // the naive average of per-rank means is wrong here: that is why counts travel
    Tensor local_mean = full({1}, metrics.local("loss"));
    CHECK(reduce_tensor(pg, local_mean).item() == doctest::Approx(7.125));
  });
}

TEST_CASE("WeightedMetrics::reduce with different names on different ranks is an error") {
  CHECK_THROWS_WITH_AS(run_threads(
                           2,
                           [](ProcessGroup& pg) {
    WeightedMetrics m;
    m.add("loss", 1.0, 2);
    if (pg.rank() == 1) m.add("accuracy", 0.5, 2);
    m.reduce(pg);
                           }),
                       doctest::Contains("ranks added different metric names"), Error);
  WeightedMetrics m;
  CHECK_THROWS_WITH_AS(m.add("loss", 1.0, -1), doctest::Contains("count >= 0, got -1"), Error);
  CHECK_THROWS_WITH_AS(m.local("nope"), doctest::Contains("no metric named 'nope'"), Error);
}
