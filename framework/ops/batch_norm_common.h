// batch_norm_common.h: what batch_norm (ops/nn_norm.cpp) and SyncBatchNorm
// (parallel/ddp/sync_batch_norm.cpp) share, so it is written once: the argument checks and
// the running-statistics update. They differ only in where the batch statistics come from
// (this rank's batch, or all ranks' sums, all-reduced).
// Read next: nn_norm.cpp.
#pragma once
#include <vector>

#include "framework/tensor/tensor.h"

namespace dplab {

// x is [N, C] or [N, C, H, W] float with C > 0; eps > 0; running_mean and running_var are
// given together or not at all; each given one of them, weight and bias is a [C] float
// vector on x's device. Throws Error naming `op` ("batch_norm", "sync_batch_norm").
// Returns C.
int64_t check_batch_norm_args(const char* op, const Tensor& x, const Tensor& running_mean,
                              const Tensor& running_var, const Tensor& weight, const Tensor& bias,
                              float eps);

// The dims a per-channel statistic sums over: {0} for [N, C], {0, 2, 3} for [N, C, H, W].
std::vector<int64_t> channel_reduce_dims(const Tensor& x);

// r = (1 - momentum) r + momentum * batch, in place and outside the graph; batch holds C
// values in any shape (reshaped to r's).
void update_running_stats(const Tensor& running, const Tensor& batch, float momentum);

}  // namespace dplab
