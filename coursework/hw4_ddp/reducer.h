// reducer.h: hw4, the gradient reducer at the heart of DistributedDataParallel. You write
// assign_buckets() and the GradientReducer in reducer.cpp; the tests use only what is here.
// The library's own (parallel/ddp/reducer.h) does the same and more: read it when you are done.
// Read the handout (README.md) first.
#pragma once
#include <cstdint>
#include <memory>
#include <vector>

#include "framework/tensor/tensor.h"
#include "parallel/comm/process_group.h"

namespace hw4 {

using dplab::Tensor;
using dplab::parallel::ProcessGroup;

// Which parameters share a bucket: indices into params, the buckets filled in REVERSE
// parameter order (the last layer's gradient is ready first in backward), a new bucket begun
// whenever the next parameter would take the current one past cap_bytes of float32
// gradients. A parameter larger than the cap gets a bucket of its own.
std::vector<std::vector<size_t>> assign_buckets(const std::vector<Tensor>& params, int64_t cap_bytes);

class Reducer {
 public:
  virtual ~Reducer() = default;
  // false inside no_sync(): backward only accumulates into .grad, nothing is sent.
  virtual void set_require_sync(bool on) = 0;
  // All-reduces started since construction (one per bucket per synchronised backward).
  virtual int64_t all_reduces_launched() const = 0;
};

// Registers a hook on every parameter; from then on every backward leaves each parameter's
// .grad averaged over pg's ranks, its bucket all-reduced as soon as the bucket is full.
// The reducer must outlive the backward passes it serves.
std::unique_ptr<Reducer> make_reducer(std::vector<Tensor> params, std::shared_ptr<ProcessGroup> pg,
                                      int64_t cap_bytes);

}  // namespace hw4
