// distributed_sampler.cpp: the padded strided share (training) and the padded contiguous
// block (evaluation). Both are pure index arithmetic over one permutation; no communication.
// Read next: distributed_eval.cpp.
#include "parallel/ddp_utils/distributed_sampler.h"

#include <algorithm>
#include <numeric>

#include "framework/error.h"
#include "framework/ops/ops.h"
#include "framework/tensor/random.h"

namespace dplab::parallel {

namespace {
void check_args(const char* who, int64_t n, int num_replicas, int rank) {
  DPLAB_CHECK(n >= 0, "{}: expected a dataset size >= 0, got {}", who, n);
  DPLAB_CHECK(num_replicas >= 1, "{}: expected num_replicas >= 1, got {}", who, num_replicas);
  DPLAB_CHECK(rank >= 0 && rank < num_replicas, "{}: expected a rank in [0, {}), got {}", who,
              num_replicas, rank);
}
}  // namespace

DistributedSampler::DistributedSampler(int64_t n, int num_replicas, int rank,
                                       DistributedSamplerOptions opts)
    : n_(n), num_replicas_(num_replicas), rank_(rank), opts_(opts) {
  check_args("DistributedSampler", n, num_replicas, rank);
  int64_t r = num_replicas;
  num_samples_ = opts.drop_last ? n / r : (n + r - 1) / r;
}

std::vector<int64_t> DistributedSampler::indices() const {
  if (num_samples_ == 0) return {};
  // Every rank computes the same order: the generator depends only on (seed, epoch), never
  // on the rank, so the strided shares below partition one permutation.
  std::vector<int64_t> order;
  if (opts_.shuffle) {
    Generator gen(opts_.seed + static_cast<uint64_t>(epoch_));
    order = randperm(n_, &gen).to_vector<int64_t>();
  } else {
    order.resize(static_cast<size_t>(n_));
    std::iota(order.begin(), order.end(), int64_t{0});
  }
  const int64_t total = total_size();
  if (total > n_) {
    // Pad with the head of the order, repeated as often as needed (n < padding is possible
    // when there are fewer examples than ranks: n = 2, R = 5 -> 0 1 0 1 0).
    order.reserve(static_cast<size_t>(total));
    for (int64_t i = n_; i < total; ++i) order.push_back(order[static_cast<size_t>(i % n_)]);
  } else {
    order.resize(static_cast<size_t>(total));  // drop_last: the tail is never visited
  }
  std::vector<int64_t> mine;
  mine.reserve(static_cast<size_t>(num_samples_));
  for (int64_t i = rank_; i < total; i += num_replicas_)
    mine.push_back(order[static_cast<size_t>(i)]);
  return mine;
}

SequentialDistributedSampler::SequentialDistributedSampler(int64_t n, int num_replicas, int rank)
    : n_(n), num_replicas_(num_replicas), rank_(rank) {
  check_args("SequentialDistributedSampler", n, num_replicas, rank);
  num_samples_ = (n + num_replicas - 1) / num_replicas;
}

std::vector<int64_t> SequentialDistributedSampler::indices() const {
  std::vector<int64_t> mine;
  if (n_ == 0) return mine;
  mine.reserve(static_cast<size_t>(num_samples_));
  const int64_t begin = rank_ * num_samples_;
  for (int64_t i = begin; i < begin + num_samples_; ++i) mine.push_back(std::min(i, n_ - 1));
  return mine;
}

int64_t SequentialDistributedSampler::num_real() const {
  const int64_t begin = rank_ * num_samples_;
  return std::clamp<int64_t>(n_ - begin, 0, num_samples_);
}

}  // namespace dplab::parallel
