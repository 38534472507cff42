// zero.h: hw5, ZeRO stage 1 (optimizer-state sharding) for SGD with momentum. You write
// Zero1SGD::step() in zero.cpp; the flattening helpers are given (support.cpp).
// The library's own (parallel/zero/zero_redundancy_optimizer.h) does stages 1 and 2, SGD and
// Adam: read it when you are done. Read the handout (README.md) first.
#pragma once
#include <cstdint>
#include <memory>
#include <vector>

#include "framework/tensor/tensor.h"
#include "parallel/comm/process_group.h"

namespace hw5 {

using dplab::Tensor;
using dplab::parallel::ProcessGroup;

// Every parameter's .grad (or its value), laid end to end in one flat tensor of `padded`
// floats, zeros after the last element: [p0 | p1 | ... | 0 0].
Tensor flatten_grads(const std::vector<Tensor>& params, int64_t padded);
Tensor flatten_values(const std::vector<Tensor>& params, int64_t padded);
// Copies the first elements of `flat` back into the parameters' values, in order.
void unflatten_values(const Tensor& flat, const std::vector<Tensor>& params);

class Zero1SGD {
 public:
  // The parameters (the same list on every rank), the group, and SGD's lr and momentum.
  // The flat vector is padded to a multiple of N, so that every rank owns a shard of the same
  // size: rank r owns elements [r*shard, (r+1)*shard). Only that shard's momentum is kept.
  Zero1SGD(std::vector<Tensor> params, std::shared_ptr<ProcessGroup> pg, float lr, float momentum);

  // After backward (each rank's .grad holds its own gradient): the average gradient of my
  // shard (reduce-scatter), my shard's update with momentum, then every shard everywhere
  // (all-gather): every rank ends with the same parameters as one SGD step on the average.
  void step();

  int64_t shard_size() const { return shard_; }
  int64_t state_floats() const { return momentum_buffer_.defined() ? momentum_buffer_.numel() : 0; }

 private:
  std::vector<Tensor> params_;
  std::shared_ptr<ProcessGroup> pg_;
  float lr_, momentum_;
  int64_t shard_ = 0;        // elements per rank
  Tensor momentum_buffer_;   // [shard_]: my shard's momentum only (undefined before step 1)
};

}  // namespace hw5
