// DistributedSampler and SequentialDistributedSampler: index sets and the padding rule
// (pure arithmetic, no ranks needed), then distributed_concat over 1-4 thread ranks giving
// back exactly the single-process order for sizes that do not divide by the world size.
#include <doctest/doctest.h>

#include <algorithm>
#include <map>
#include <set>

#include "framework/data/dataloader.h"
#include "framework/ops/ops.h"
#include "parallel/ddp_utils/distributed_eval.h"
#include "parallel/ddp_utils/distributed_sampler.h"
#include "tests/parallel/rank_harness.h"

using namespace dplab;
using namespace dplab::parallel;
using dplab::parallel::testing::run_threads;

namespace {
std::vector<std::vector<int64_t>> shares(int64_t n, int world, DistributedSamplerOptions o,
                                         int64_t epoch = 0) {
  std::vector<std::vector<int64_t>> out;
  for (int r = 0; r < world; ++r) {
    DistributedSampler s(n, world, r, o);
    s.set_epoch(epoch);
    out.push_back(s.indices());
    CHECK(static_cast<int64_t>(out.back().size()) == s.size());
  }
  return out;
}
}  // namespace

TEST_CASE("DistributedSampler without shuffle follows PyTorch's padding rule exactly") {
  // n = 10, R = 4: order 0..9 padded with 0 1 -> rank r takes positions r, r+4, r+8.
  auto s = shares(10, 4, {.shuffle = false});
  CHECK(s[0] == std::vector<int64_t>{0, 4, 8});
  CHECK(s[1] == std::vector<int64_t>{1, 5, 9});
  CHECK(s[2] == std::vector<int64_t>{2, 6, 0});
  CHECK(s[3] == std::vector<int64_t>{3, 7, 1});
  // drop_last: floor(10 / 4) = 2 each, indices 8 and 9 never visited
  auto d = shares(10, 4, {.shuffle = false, .drop_last = true});
  CHECK(d[0] == std::vector<int64_t>{0, 4});
  CHECK(d[3] == std::vector<int64_t>{3, 7});
  // fewer examples than ranks: the head repeats cyclically (n = 2, R = 5 -> 0 1 0 1 0)
  auto tiny = shares(2, 5, {.shuffle = false});
  CHECK(tiny == std::vector<std::vector<int64_t>>{{0}, {1}, {0}, {1}, {0}});
  CHECK(shares(2, 5, {.shuffle = false, .drop_last = true})[4].empty());
}

TEST_CASE(
    "shuffled shares cover every index, have equal counts, and pad with the permutation's head") {
  for (int world = 1; world <= 4; ++world)
    for (int64_t n : {1, 7, 10, 33}) {
      CAPTURE(world);
      CAPTURE(n);
      auto s = shares(n, world, {.shuffle = true, .seed = 5});
      const int64_t per = (n + world - 1) / world;
      std::map<int64_t, int> seen;
      for (auto& share : s) {
        CHECK(static_cast<int64_t>(share.size()) == per);
        for (int64_t i : share) {
          CHECK(i >= 0);
          CHECK(i < n);
          ++seen[i];
        }
      }
      CHECK(static_cast<int64_t>(seen.size()) == n);  // the union is every index
      // Interleave the shares back into the padded order: its tail repeats its head.
      std::vector<int64_t> padded(static_cast<size_t>(per * world));
      for (int r = 0; r < world; ++r)
        for (int64_t k = 0; k < per; ++k) padded[static_cast<size_t>(k * world + r)] = s[r][k];
      for (int64_t i = n; i < per * world; ++i) CHECK(padded[i] == padded[i % n]);
      std::set<int64_t> head(padded.begin(), padded.begin() + n);
      CHECK(static_cast<int64_t>(head.size()) == n);  // the first n are a permutation
    }
}

TEST_CASE("drop_last shares are disjoint and floor(n / R) long") {
  auto s = shares(33, 4, {.shuffle = true, .seed = 1, .drop_last = true});
  std::set<int64_t> all;
  for (auto& share : s) {
    CHECK(share.size() == 8);
    all.insert(share.begin(), share.end());
  }
  CHECK(all.size() == 32);
}

TEST_CASE("set_epoch changes the order deterministically; the seed must match across ranks") {
  auto e0 = shares(20, 2, {.seed = 3}, 0);
  auto e0_again = shares(20, 2, {.seed = 3}, 0);
  auto e1 = shares(20, 2, {.seed = 3}, 1);
  CHECK(e0 == e0_again);
  CHECK(e0 != e1);
  // seed + epoch: (seed 3, epoch 1) is the order of (seed 4, epoch 0)
  CHECK(e1 == shares(20, 2, {.seed = 4}, 0));
  // A DataLoader takes it and counts batches from its size: ceil(ceil(10/3) / 2) = 2.
  auto ds = std::make_shared<data::TensorDataset>(arange(10).reshape({10, 1}),
                                                  arange(10, {.dtype = DType::Int64}));
  auto sampler =
      std::make_shared<DistributedSampler>(10, 3, 1, DistributedSamplerOptions{.shuffle = false});
  data::DataLoader loader(ds, {.batch_size = 2, .prefetch = false, .sampler = sampler});
  CHECK(loader.len() == 2);
  std::vector<int64_t> got;
  for (auto& b : loader)
    for (int64_t v : b.target.to_vector<int64_t>()) got.push_back(v);
  CHECK(got == std::vector<int64_t>{1, 4, 7, 0});
}

TEST_CASE("bad sampler arguments are errors that say what was expected") {
  CHECK_THROWS_WITH_AS(DistributedSampler(10, 0, 0), doctest::Contains("num_replicas >= 1, got 0"),
                       Error);
  CHECK_THROWS_WITH_AS(DistributedSampler(10, 2, 2), doctest::Contains("rank in [0, 2), got 2"),
                       Error);
  CHECK_THROWS_WITH_AS(SequentialDistributedSampler(-1, 2, 0),
                       doctest::Contains("size >= 0, got -1"), Error);
}

TEST_CASE(
    "SequentialDistributedSampler: contiguous blocks, padded at the end with the last index") {
  std::vector<std::vector<int64_t>> blocks;
  std::vector<int64_t> real;
  for (int r = 0; r < 4; ++r) {
    SequentialDistributedSampler s(10, 4, r);
    blocks.push_back(s.indices());
    real.push_back(s.num_real());
  }
  CHECK(blocks == std::vector<std::vector<int64_t>>{{0, 1, 2}, {3, 4, 5}, {6, 7, 8}, {9, 9, 9}});
  CHECK(real == std::vector<int64_t>{3, 3, 3, 1});
  // 5 examples on 4 ranks: m = 2, the last rank holds padding only
  SequentialDistributedSampler last(5, 4, 3);
  CHECK(last.indices() == std::vector<int64_t>{4, 4});
  CHECK(last.num_real() == 0);
}

TEST_CASE(
    "SequentialDistributedSampler + distributed_concat equals single-process order, N = 1..4") {
  for (int world = 1; world <= 4; ++world)
    for (int64_t n : {1, 5, 11, 13}) {
      CAPTURE(world);
      CAPTURE(n);
      // "predictions": row i is [i, 10*i] as float, and a label per row as int64
      Tensor rows = arange(n * 2).reshape({n, 2}).to(DType::Float32);
      run_threads(world, [&](ProcessGroup& pg) {
        SequentialDistributedSampler s(n, pg.size(), pg.rank());
        Tensor idx = from_vector(s.indices(), {s.size()});
        Tensor mine = index_select(rows, idx);
        Tensor all = distributed_concat(pg, mine, n);
        REQUIRE(all.shape() == rows.shape());
        CHECK(all.to_vector<float>() == rows.to_vector<float>());
        Tensor labels = distributed_concat(pg, idx, n);
        CHECK(labels.to_vector<int64_t>() ==
              arange(n, {.dtype = DType::Int64}).to_vector<int64_t>());
      });
    }
}

TEST_CASE("distributed_concat rejects ranks with different row counts and a bad total") {
  CHECK_THROWS_WITH_AS(run_threads(
                           2,
                           [](ProcessGroup& pg) {
    distributed_concat(pg, zeros({pg.rank() + 2, 3}), 3);
                           }),
                       doctest::Contains("ranks passed different tensors: rows from 2 to 3"),
                       Error);
  CHECK_THROWS_WITH_AS(run_threads(
                           2,
                           [](ProcessGroup& pg) {
    distributed_concat(pg, zeros({2, 3}), 5);
                           }),
                       doctest::Contains("num_total_examples must be in [0, 4]"), Error);
}
