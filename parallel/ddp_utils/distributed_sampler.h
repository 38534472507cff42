// distributed_sampler.h: which examples each rank visits (torch.utils.data.distributed).
// DistributedSampler is for training: every rank draws the same seed+epoch permutation of
// 0..n-1, pads it (or cuts it, drop_last) to a multiple of num_replicas, and keeps every
// num_replicas-th index starting at its rank, so the ranks' shares are disjoint (up to the
// padding) and equally long: no rank waits for another at the gradient all-reduce.
// SequentialDistributedSampler is for evaluation: contiguous blocks in dataset order, so
// distributed_concat (distributed_eval.h) puts the predictions back in order.
// The folder parallel/ddp_utils/ is what a DDP training script uses beside the model, in the
// order a script meets it (start here): distributed_sampler.h, distributed_eval.h (evaluation
// over ranks), rank_utils.h (logging, seeds, rank 0 first), ddp_checkpoint.h (rank 0 saves,
// every rank loads). tutorials/20_ddp_recipe.cpp is a script built on the sampler, the
// evaluation and the checkpoints; tutorials/13_seeds_logging_barriers.cpp shows the habits.
// Read next: framework/data/sampler.h (the interface), distributed_eval.h.
#pragma once
#include <cstdint>
#include <vector>

#include "framework/data/sampler.h"

namespace dplab::parallel {

struct DistributedSamplerOptions {
  bool shuffle = true;     // a new permutation per epoch (seed + epoch); false: 0..n-1
  uint64_t seed = 0;       // must be the same on every rank, or the shares overlap
  bool drop_last = false;  // cut the tail instead of padding it
};

// PyTorch's rule, with R = num_replicas:
//   drop_last = false: per rank ceil(n / R); the order is padded to total = ceil(n/R) * R
//                      by repeating its first total - n indices (cyclically when n < R - n).
//   drop_last = true:  per rank floor(n / R); the last n - floor(n/R) * R indices are dropped.
//   rank r takes positions r, r + R, r + 2R, ... of the (shuffled) padded order.
// Example: n = 10, R = 4, no shuffle -> 0 1 2 3 4 5 6 7 8 9 0 1; rank 1 gets 1 5 9.
class DistributedSampler : public data::Sampler {
 public:
  // Throws unless n >= 0, num_replicas >= 1 and 0 <= rank < num_replicas.
  DistributedSampler(int64_t n, int num_replicas, int rank, DistributedSamplerOptions opts = {});

  std::vector<int64_t> indices() const override;
  int64_t size() const override { return num_samples_; }  // per rank
  int64_t total_size() const { return num_samples_ * num_replicas_; }
  int num_replicas() const { return num_replicas_; }
  int rank() const { return rank_; }

 private:
  int64_t n_;
  int num_replicas_;
  int rank_;
  DistributedSamplerOptions opts_;
  int64_t num_samples_;
};

// Evaluation order: rank r gets the contiguous block [r*m, (r+1)*m) of 0..n-1 with
// m = ceil(n / R); positions past n - 1 are padded with the last index (n - 1), so every
// rank returns exactly m indices and all_gather sees equal shapes. After gathering,
// rows [0, n) of the rank-ordered concatenation are the dataset in order: the padding is
// always at the end, which is what distributed_concat truncates. (Transformers' rule.)
// Example: n = 10, R = 4 -> m = 3: [0 1 2] [3 4 5] [6 7 8] [9 9 9].
class SequentialDistributedSampler : public data::Sampler {
 public:
  SequentialDistributedSampler(int64_t n, int num_replicas, int rank);

  std::vector<int64_t> indices() const override;
  int64_t size() const override { return num_samples_; }
  int64_t total_size() const { return num_samples_ * num_replicas_; }
  // How many of this rank's indices are real examples, not padding (n = 10, R = 4: 3 3 3 1).
  int64_t num_real() const;

 private:
  int64_t n_;
  int num_replicas_;
  int rank_;
  int64_t num_samples_;
};

}  // namespace dplab::parallel
