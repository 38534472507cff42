// ps.h: hw2, one training step of a parameter server (torch.nn.DataParallel) over logical
// devices. You write chunk_sizes() and ps_step() in ps.cpp; copy_to() is given (support.cpp)
// and counts every byte that crosses from one device to another.
// The library's own (parallel/dp/data_parallel.h) does the same inside autograd and with a
// thread per device: read it when you are done. Read the handout (README.md) first.
#pragma once
#include <cstdint>
#include <map>
#include <memory>
#include <vector>

#include "framework/nn/module.h"
#include "framework/optim/optimizer.h"
#include "framework/tensor/tensor.h"

namespace hw2 {

using dplab::Device;
using dplab::Tensor;

// Bytes each device sent and received, by device index.
struct Traffic {
  std::map<int, int64_t> sent, received;
};

// A copy of t on device `to` (the same tensor when it is there already, counting nothing),
// counting t's bytes as sent by t's device and received by `to`. The copy is a new leaf: it
// does not take part in t's autograd graph.
Tensor copy_to(const Tensor& t, Device to, Traffic& traffic);

// How torch.chunk splits `batch` rows over n devices: chunks of ceil(batch / n) rows, the last
// one shorter, and fewer than n chunks when there are not enough rows (7 over 3: 3, 3, 1;
// 2 over 3: 1, 1).
std::vector<int64_t> chunk_sizes(int64_t batch, int n);

// One step of the parameter server. replicas[i] lives on devices[i] (the same architecture);
// replicas[0] is the master, and `opt` steps the master's parameters. x: the batch on the
// master, y: its int64 labels on the master. Afterwards the master's parameters are those of
// one SGD step on the whole batch with the mean cross-entropy loss; returns that loss.
float ps_step(const std::vector<std::shared_ptr<dplab::nn::Module>>& replicas,
              const std::vector<Device>& devices, const Tensor& x, const Tensor& y,
              dplab::optim::Optimizer& opt, Traffic& traffic);

}  // namespace hw2
