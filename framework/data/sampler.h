// sampler.h: which example indices an epoch visits, and in what order
// (torch.utils.data.Sampler). The DataLoader calls set_epoch(e) and then indices() once
// per epoch, and cuts the list into batches.
// Extension point: DistributedSampler (a later issue) is one more subclass. It takes
// num_replicas and rank, pads or drops so every rank gets ceil(n / num_replicas) indices,
// and returns rank's strided share of the same seed+epoch permutation; size() is that
// share, which is what DataLoader::len() counts, so nothing else needs to change.
// Read next: dataloader.h.
#pragma once
#include <cstdint>
#include <vector>

namespace dplab::data {

class Sampler {
 public:
  virtual ~Sampler() = default;
  // The indices of the current epoch, each in [0, dataset size).
  virtual std::vector<int64_t> indices() const = 0;
  // How many indices indices() returns (per rank, for a distributed sampler).
  virtual int64_t size() const = 0;
  // Shuffling samplers draw a new order per epoch; deterministic for a given epoch.
  virtual void set_epoch(int64_t epoch) { epoch_ = epoch; }
  int64_t epoch() const { return epoch_; }

 protected:
  int64_t epoch_ = 0;
};

// 0, 1, ..., n-1 every epoch.
class SequentialSampler : public Sampler {
 public:
  explicit SequentialSampler(int64_t n);
  std::vector<int64_t> indices() const override;
  int64_t size() const override { return n_; }

 private:
  int64_t n_;
};

// A permutation of 0..n-1 drawn by randperm with a Generator seeded by seed + epoch:
// the same seed and epoch give the same order on every run and every platform.
class RandomSampler : public Sampler {
 public:
  explicit RandomSampler(int64_t n, uint64_t seed = 0);
  std::vector<int64_t> indices() const override;
  int64_t size() const override { return n_; }
  uint64_t seed() const { return seed_; }

 private:
  int64_t n_;
  uint64_t seed_;
};

}  // namespace dplab::data
