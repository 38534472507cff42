// test_dataloader.cpp: DataLoader batching (counts, sizes, drop_last), seeded per-epoch
// shuffling, prefetch on and off giving the same batches, exceptions from the dataset
// reaching the loop, early break, samplers, TensorDataset and the default get_batch.
#include <doctest/doctest.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <thread>

#include "framework/data/dataloader.h"
#include "framework/ops/ops.h"

using namespace dplab;
using namespace dplab::data;

namespace {

// Rows i = [i, 10 * i] (float), target i (int64): every batch shows which rows it holds.
std::shared_ptr<TensorDataset> numbered(int64_t n) {
  std::vector<float> x;
  std::vector<int64_t> y;
  for (int64_t i = 0; i < n; ++i) {
    x.push_back(static_cast<float>(i));
    x.push_back(static_cast<float>(10 * i));
    y.push_back(i);
  }
  return std::make_shared<TensorDataset>(from_vector(x, {n, 2}),
                                         from_vector(y, {n}, {.dtype = DType::Int64}));
}

// Every epoch's order, as the targets of its batches.
std::vector<int64_t> epoch_order(DataLoader& loader) {
  std::vector<int64_t> order;
  for (auto& batch : loader)
    for (int64_t t : batch.target.to_vector<int64_t>()) order.push_back(t);
  return order;
}

// A dataset with only get() (the default get_batch stacks) that fails on one index and
// can be slowed down to widen race windows.
class Flaky : public Dataset {
 public:
  Flaky(int64_t n, int64_t bad, int sleep_us = 0) : n_(n), bad_(bad), sleep_us_(sleep_us) {}
  int64_t size() const override { return n_; }
  Example get(int64_t i) const override {
    if (sleep_us_) std::this_thread::sleep_for(std::chrono::microseconds(sleep_us_));
    DPLAB_CHECK(i != bad_, "Flaky: cannot read example {}", i);
    ++calls;
    return {from_vector(std::vector<float>{static_cast<float>(i), 1.0f}, {2}),
            from_vector(std::vector<int64_t>{i}, {}, {.dtype = DType::Int64})};
  }
  mutable std::atomic<int> calls{0};

 private:
  int64_t n_, bad_;
  int sleep_us_;
};

}  // namespace

TEST_CASE("10 rows in batches of 3: 4 batches of 3, 3, 3, 1; with drop_last 3 batches") {
  for (bool prefetch : {false, true}) {
    CAPTURE(prefetch);
    DataLoader loader(numbered(10), {.batch_size = 3, .prefetch = prefetch});
    CHECK(loader.len() == 4);
    std::vector<int64_t> sizes;
    for (auto& batch : loader) {
      CHECK(batch.data.shape() == Shape{batch.target.size(0), 2});
      sizes.push_back(batch.target.size(0));
    }
    CHECK(sizes == std::vector<int64_t>{3, 3, 3, 1});
    CHECK(epoch_order(loader) == std::vector<int64_t>{0, 1, 2, 3, 4, 5, 6, 7, 8, 9});

    DataLoader dropping(numbered(10), {.batch_size = 3, .drop_last = true, .prefetch = prefetch});
    CHECK(dropping.len() == 3);
    CHECK(epoch_order(dropping) == std::vector<int64_t>{0, 1, 2, 3, 4, 5, 6, 7, 8});
  }
  DataLoader exact(numbered(9), {.batch_size = 3, .drop_last = true});
  CHECK(exact.len() == 3);
  DataLoader one_big(numbered(5), {.batch_size = 64});
  CHECK(one_big.len() == 1);
  DataLoader none(numbered(5), {.batch_size = 64, .drop_last = true});
  CHECK(none.len() == 0);
  CHECK(epoch_order(none).empty());
}

TEST_CASE("a batch holds the rows of its indices, data and target together") {
  DataLoader loader(numbered(7), {.batch_size = 4, .shuffle = true, .seed = 3});
  for (auto& batch : loader) {
    std::vector<float> x = batch.data.to_vector<float>();
    std::vector<int64_t> y = batch.target.to_vector<int64_t>();
    for (size_t r = 0; r < y.size(); ++r) {
      CHECK(x[2 * r] == static_cast<float>(y[r]));
      CHECK(x[2 * r + 1] == static_cast<float>(10 * y[r]));
    }
  }
}

TEST_CASE("shuffling: seed + epoch decides the order; every index once per epoch") {
  DataLoader a(numbered(50), {.batch_size = 8, .shuffle = true, .seed = 7});
  DataLoader b(numbered(50), {.batch_size = 8, .shuffle = true, .seed = 7});
  DataLoader c(numbered(50), {.batch_size = 8, .shuffle = true, .seed = 8});
  std::vector<int64_t> a0 = epoch_order(a), a1 = epoch_order(a);  // epochs 0 and 1
  std::vector<int64_t> b0 = epoch_order(b), c0 = epoch_order(c);
  CHECK(a0 == b0);  // same seed, same epoch
  CHECK(a0 != a1);  // a new epoch reshuffles
  CHECK(a0 != c0);  // another seed
  std::vector<int64_t> identity(50);
  for (int64_t i = 0; i < 50; ++i) identity[i] = i;
  CHECK(a0 != identity);
  for (auto order : {a0, a1, c0}) {
    std::sort(order.begin(), order.end());
    CHECK(order == identity);
  }
  CHECK(a.epoch() == 2);
  a.set_epoch(1);
  CHECK(epoch_order(a) == a1);  // set_epoch replays an epoch
  a.set_epoch(0);
  CHECK(epoch_order(a) == a0);
  // The sampler alone gives the same order: seed + epoch, nothing else.
  RandomSampler s(50, 7);
  s.set_epoch(1);
  CHECK(s.indices() == a1);
}

TEST_CASE("prefetch on and off give identical batches") {
  DataLoader on(numbered(23), {.batch_size = 5, .shuffle = true, .seed = 11, .prefetch = true});
  DataLoader off(numbered(23), {.batch_size = 5, .shuffle = true, .seed = 11, .prefetch = false});
  for (int epoch = 0; epoch < 3; ++epoch) {
    std::vector<std::vector<float>> xs_on, xs_off;
    for (auto& batch : on) xs_on.push_back(batch.data.to_vector<float>());
    for (auto& batch : off) xs_off.push_back(batch.data.to_vector<float>());
    CHECK(xs_on.size() == 5);
    CHECK(xs_on == xs_off);
  }
}

TEST_CASE("the default get_batch stacks get(i); an exception in get reaches the loop") {
  auto ok = std::make_shared<Flaky>(7, -1);
  DataLoader loader(ok, {.batch_size = 3});
  int batches = 0;
  for (auto& batch : loader) {
    CHECK(batch.data.shape() == Shape{batch.target.size(0), 2});
    CHECK(batch.target.dtype() == DType::Int64);
    ++batches;
  }
  CHECK(batches == 3);

  for (bool prefetch : {false, true}) {
    CAPTURE(prefetch);
    DataLoader bad(std::make_shared<Flaky>(20, 7), {.batch_size = 3, .prefetch = prefetch});
    int seen = 0;
    auto run = [&] {
      for (auto& batch : bad) {
        (void)batch;
        ++seen;
      }
    };
    CHECK_THROWS_WITH_AS(run(), doctest::Contains("Flaky: cannot read example 7"), Error);
    CHECK(seen == 2);  // batches [0,1,2] and [3,4,5] arrived; [6,7,8] failed
    // The loader still works for the next epoch (the failure ended only that epoch).
    CHECK_THROWS_AS(run(), Error);
  }
}

TEST_CASE("breaking out early stops the prefetch thread without hanging") {
  auto slow = std::make_shared<Flaky>(1000, -1, 200);
  DataLoader loader(slow, {.batch_size = 2, .prefetch = true});
  for (int round = 0; round < 3; ++round) {
    int seen = 0;
    for (auto& batch : loader) {
      (void)batch;
      if (++seen == 2) break;
    }
    CHECK(seen == 2);
  }
  // The worker stayed within its queue: at most batch in use + 2 queued + 1 in progress,
  // per round, of the 500 batches an epoch has.
  CHECK(slow->calls.load() <= 3 * 2 * 5);
  // An iterator dropped right after begin() (the thread may be mid-batch) also joins.
  for (int i = 0; i < 5; ++i) (void)loader.begin();
}

TEST_CASE("a custom sampler decides the order; len() counts what it yields") {
  // Every other index, backwards: the kind of subset a DistributedSampler hands one rank.
  class EveryOther : public Sampler {
   public:
    std::vector<int64_t> indices() const override { return {8, 6, 4, 2, 0}; }
    int64_t size() const override { return 5; }
  };
  auto sampler = std::make_shared<EveryOther>();
  DataLoader loader(numbered(10), {.batch_size = 2, .sampler = sampler});
  CHECK(loader.len() == 3);
  CHECK(epoch_order(loader) == std::vector<int64_t>{8, 6, 4, 2, 0});
  CHECK(sampler->epoch() == 0);
  epoch_order(loader);
  CHECK(sampler->epoch() == 1);  // the loader tells the sampler which epoch it is
  SequentialSampler seq(4);
  CHECK(seq.indices() == std::vector<int64_t>{0, 1, 2, 3});
}

TEST_CASE("DataLoader and TensorDataset reject bad arguments") {
  CHECK_THROWS_WITH_AS(DataLoader(numbered(4), {.batch_size = 0}),
                       doctest::Contains("batch_size must be > 0"), Error);
  CHECK_THROWS_WITH_AS(
      DataLoader(numbered(4), {.shuffle = true, .sampler = std::make_shared<SequentialSampler>(4)}),
      doctest::Contains("mutually exclusive"), Error);
  CHECK_THROWS_WITH_AS(DataLoader(nullptr), doctest::Contains("nullptr"), Error);
  CHECK_THROWS_WITH_AS(TensorDataset(zeros({3, 2}), zeros({4})),
                       doctest::Contains("same number of rows"), Error);
  TensorDataset ds(zeros({3, 2}), arange(3, {.dtype = DType::Int64}));
  CHECK_THROWS_WITH_AS(ds.get(3), doctest::Contains("index 3 out of range [0, 3)"), Error);
  CHECK_THROWS_WITH_AS(ds.get_batch({0, -1}), doctest::Contains("index -1 out of range"), Error);
  Example e = ds.get(2);
  CHECK(e.data.shape() == Shape{2});
  CHECK(e.target.shape() == Shape{});
  CHECK(e.target.item_int() == 2);
}
