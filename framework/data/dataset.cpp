// dataset.cpp: the default batch path (stack of single examples) and TensorDataset's
// fast one (a gather of rows, index_select, on the tensors' own device).
// Read next: sampler.cpp.
#include "framework/data/dataset.h"

#include "framework/autograd/grad_mode.h"
#include "framework/ops/ops.h"

namespace dplab::data {

Example Dataset::get_batch(const std::vector<int64_t>& indices) const {
  DPLAB_CHECK(!indices.empty(), "Dataset::get_batch: expected at least one index");
  NoGradGuard no_grad;  // batching is data preparation, never part of a graph
  std::vector<Tensor> data, targets;
  data.reserve(indices.size());
  targets.reserve(indices.size());
  for (int64_t i : indices) {
    Example e = get(i);
    data.push_back(e.data);
    targets.push_back(e.target);
  }
  return {stack(data), stack(targets)};
}

TensorDataset::TensorDataset(Tensor data, Tensor targets)
    : data_(std::move(data)), targets_(std::move(targets)) {
  DPLAB_CHECK(data_.defined() && targets_.defined(),
              "TensorDataset: expected two defined tensors (data, targets)");
  DPLAB_CHECK(data_.dim() >= 1 && targets_.dim() >= 1,
              "TensorDataset: expected tensors with a row dimension, got data {} and targets {}",
              shape_str(data_.shape()), shape_str(targets_.shape()));
  DPLAB_CHECK(data_.size(0) == targets_.size(0),
              "TensorDataset: data and targets must have the same number of rows, got data {} "
              "and targets {}",
              shape_str(data_.shape()), shape_str(targets_.shape()));
}

namespace {
// Row i of t without its row dimension: [N, a, b] -> [a, b]; [N] -> [] (a view).
Tensor row(const Tensor& t, int64_t i) {
  Shape rest(t.shape().begin() + 1, t.shape().end());
  return t.narrow(i, 1).reshape(rest);
}
}  // namespace

Example TensorDataset::get(int64_t index) const {
  DPLAB_CHECK(index >= 0 && index < size(), "TensorDataset::get: index {} out of range [0, {})",
              index, size());
  NoGradGuard no_grad;
  return {row(data_, index), row(targets_, index)};
}

Example TensorDataset::get_batch(const std::vector<int64_t>& indices) const {
  DPLAB_CHECK(!indices.empty(), "TensorDataset::get_batch: expected at least one index");
  for (int64_t i : indices)
    DPLAB_CHECK(i >= 0 && i < size(), "TensorDataset::get_batch: index {} out of range [0, {})", i,
                size());
  NoGradGuard no_grad;
  const Shape n{static_cast<int64_t>(indices.size())};
  // The index list is made on each tensor's device, so a dataset held on a GPU gathers there.
  Tensor data_idx = from_vector(indices, n, {.dtype = DType::Int64, .device = data_.device()});
  Tensor target_idx =
      targets_.device() == data_.device()
          ? data_idx
          : from_vector(indices, n, {.dtype = DType::Int64, .device = targets_.device()});
  return {index_select(data_, data_idx), index_select(targets_, target_idx)};
}

}  // namespace dplab::data
