// sync_batch_norm.h: SyncBatchNorm, batch normalisation whose statistics are those of the
// GLOBAL batch (all ranks' rows), as torch.nn.SyncBatchNorm.
//
// With DDP each rank sees only its slice of the batch; plain BatchNorm then normalises with
// per-rank statistics, which are noisy when slices are small (2-8 rows per GPU is common for
// detection / segmentation). SyncBatchNorm exchanges per-channel SUMS, never activations:
//   forward : all_reduce [sum x (C), sum x^2 (C), count (1)]  -> 2C+1 floats per layer
//   backward: all_reduce [sum dy (C), sum dy*xhat (C)]         -> 2C floats per layer
// so the traffic is independent of the batch size and of H*W. Eval mode is plain BatchNorm.
// Read next: sync_batch_norm.cpp (the op and its explicit backward), ops/nn_norm.cpp (the
// single-device version), tutorials/10_sync_batchnorm.md.
#pragma once
#include <memory>

#include "framework/nn/layers.h"
#include "parallel/comm/process_group.h"

namespace dplab::parallel {

// The op: training-mode batch norm of x ([N, C] or [N, C, H, W]) with statistics over every
// rank's x. Updates running_mean / running_var (when defined) with the global mean and the
// global UNBIASED variance. weight / bias may be undefined. Every rank must call it (it is a
// collective); a rank may hold any number of rows, even a different number from the others.
Tensor sync_batch_norm(const Tensor& x, const Tensor& running_mean, const Tensor& running_var,
                       const Tensor& weight, const Tensor& bias, float momentum, float eps,
                       ProcessGroup& pg);

class SyncBatchNorm : public nn::BatchNorm {
 public:
  // pg: the group whose ranks share statistics; null means default_process_group() at
  // forward time. Accepts [N, C], [N, C, L] and [N, C, H, W].
  explicit SyncBatchNorm(int64_t num_features, nn::BatchNormOptions options = {},
                         std::shared_ptr<ProcessGroup> pg = nullptr);
  Tensor forward(const Tensor& x) override;
  std::shared_ptr<nn::Module> make_empty_copy() const override;

  std::shared_ptr<ProcessGroup> process_group;
};

// Replaces every BatchNorm1d / BatchNorm2d in the tree (the root included) by a SyncBatchNorm
// holding the SAME weight, bias and running-stat tensors (so an optimizer built before still
// updates them) and the same eps / momentum. Returns the converted root.
// Replacement goes through the module tree (own_children()); a parent that calls a
// BatchNorm through a typed member of its own (models/resnet.h's bn1) is asked to rebind
// that member (Module::rebind_child). A layer held anywhere else (a handle the caller kept,
// a parent that cannot rebind) would keep running unsynchronised: that is an error, raised
// before anything is replaced.
std::shared_ptr<nn::Module> convert_sync_batchnorm(std::shared_ptr<nn::Module> module,
                                                   std::shared_ptr<ProcessGroup> pg = nullptr);

}  // namespace dplab::parallel
