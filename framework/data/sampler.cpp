// sampler.cpp: the sequential and the seeded random order.
// Read next: dataloader.cpp.
#include "framework/data/sampler.h"

#include <numeric>

#include "framework/error.h"
#include "framework/ops/ops.h"
#include "framework/tensor/random.h"

namespace dplab::data {

SequentialSampler::SequentialSampler(int64_t n) : n_(n) {
  DPLAB_CHECK(n >= 0, "SequentialSampler: expected a size >= 0, got {}", n);
}

std::vector<int64_t> SequentialSampler::indices() const {
  std::vector<int64_t> out(static_cast<size_t>(n_));
  std::iota(out.begin(), out.end(), int64_t{0});
  return out;
}

RandomSampler::RandomSampler(int64_t n, uint64_t seed) : n_(n), seed_(seed) {
  DPLAB_CHECK(n >= 0, "RandomSampler: expected a size >= 0, got {}", n);
}

std::vector<int64_t> RandomSampler::indices() const {
  if (n_ == 0) return {};
  // A private generator: the order depends only on (seed, epoch), not on how many random
  // numbers the model's initialisation or dropout drew from the global one.
  Generator gen(seed_ + static_cast<uint64_t>(epoch_));
  return randperm(n_, &gen).to_vector<int64_t>();
}

}  // namespace dplab::data
