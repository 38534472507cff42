// dataset.h: what a DataLoader reads from, torch.utils.data.Dataset's map-style interface.
// A dataset has size() examples; get(i) returns one (data, target) pair without a batch
// dimension; get_batch(indices) returns them stacked along a new dim 0. The default
// get_batch calls get() per index and stacks (one small copy per example, then one more);
// datasets held in memory override it with one gather (TensorDataset: index_select).
// get and get_batch must be safe to call from the DataLoader's prefetch thread while the
// training thread runs: they read the dataset, never modify it.
// Read next: sampler.h, dataloader.h.
#pragma once
#include <cstdint>
#include <vector>

#include "framework/tensor/tensor.h"

namespace dplab::data {

struct Example {
  Tensor data;    // one example: e.g. [1, 28, 28]; a batch: [B, 1, 28, 28]
  Tensor target;  // one example: e.g. [] (int64 label); a batch: [B]
};

class Dataset {
 public:
  virtual ~Dataset() = default;
  virtual int64_t size() const = 0;
  virtual Example get(int64_t index) const = 0;
  // Default: stack(get(i) for i in indices). Throws on an empty list.
  virtual Example get_batch(const std::vector<int64_t>& indices) const;
};

// Rows of dim 0 of `data` and `targets` are the examples (PyTorch's TensorDataset with two
// tensors). get(i) is a view (no copy); get_batch is index_select on each: one copy.
class TensorDataset : public Dataset {
 public:
  // Throws unless both are defined, have >= 1 dims and the same number of rows.
  TensorDataset(Tensor data, Tensor targets);

  int64_t size() const override { return data_.size(0); }
  Example get(int64_t index) const override;
  Example get_batch(const std::vector<int64_t>& indices) const override;

  const Tensor& data() const { return data_; }
  const Tensor& targets() const { return targets_; }

 private:
  Tensor data_, targets_;
};

}  // namespace dplab::data
