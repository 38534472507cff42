// layers_norm.cpp: BatchNorm1d / BatchNorm2d (see layers.h). The arithmetic, including the
// in-place running-statistics update, is the batch_norm op (ops/nn_norm.cpp); this layer
// owns the parameters and buffers under PyTorch's names and decides, as PyTorch does,
// whether batch or running statistics are used:
//   batch statistics  iff  training, or no running statistics are kept.
// SyncBatchNorm (parallel/ddp) reuses the public members.
#include <algorithm>

#include "framework/autograd/grad_mode.h"
#include "framework/nn/init.h"
#include "framework/nn/layers.h"
#include "framework/ops/ops.h"

namespace dplab::nn {

BatchNorm::BatchNorm(const char* kind, std::vector<int64_t> input_dims, int64_t num_features_,
                     BatchNormOptions o)
    : num_features(num_features_), eps(o.eps), momentum(o.momentum), affine(o.affine),
      track_running_stats(o.track_running_stats), kind_(kind), input_dims_(std::move(input_dims)) {
  DPLAB_CHECK(num_features > 0, "{}: expected num_features > 0, got {}", kind_, num_features);
  DPLAB_CHECK(eps > 0.0, "{}: expected eps > 0, got {}", kind_, eps);
  DPLAB_CHECK(momentum >= 0.0 && momentum <= 1.0, "{}: expected momentum in [0, 1], got {}", kind_,
              momentum);
  // Registration order is PyTorch's, so state_dict keys come out as weight, bias,
  // running_mean, running_var, num_batches_tracked.
  if (affine) {
    weight = register_parameter("weight", init::new_tensor({num_features}));
    bias = register_parameter("bias", init::new_tensor({num_features}));
  }
  if (track_running_stats) {
    running_mean = register_buffer("running_mean", init::new_tensor({num_features}));
    running_var = register_buffer("running_var", init::new_tensor({num_features}));
    num_batches_tracked =
        register_buffer("num_batches_tracked", init::new_tensor({}, DType::Int64));
  }
  reset_parameters();
}

void BatchNorm::reset_running_stats() {
  if (!track_running_stats) return;
  init::zeros_(running_mean);
  init::ones_(running_var);
  init::zeros_(num_batches_tracked);
}

void BatchNorm::reset_parameters() {
  reset_running_stats();
  if (affine) {
    init::ones_(weight);
    init::zeros_(bias);
  }
}

BatchNormOptions BatchNorm::options() const {
  return {.eps = eps,
          .momentum = momentum,
          .affine = affine,
          .track_running_stats = track_running_stats};
}

void BatchNorm::check_input(const Tensor& x) const {
  const bool rank_ok =
      std::find(input_dims_.begin(), input_dims_.end(), x.dim()) != input_dims_.end();
  DPLAB_CHECK(rank_ok && x.size(1) == num_features,
              "{}({}): expected input {} with {} channels in dim 1, got {}", kind_, num_features,
              input_dims_.size() == 1 ? "[N, C, H, W]" : "[N, C] or [N, C, L]", num_features,
              shape_str(x.shape()));
}

Tensor BatchNorm::forward(const Tensor& x) {
  check_input(x);
  const bool use_batch_stats = is_training() || !running_mean.defined();
  if (is_training() && track_running_stats) {
    // One host round trip per step (item_int), which a counter read once in a while can afford.
    NoGradGuard no_grad;
    num_batches_tracked.fill_(static_cast<double>(num_batches_tracked.item_int() + 1));
  }
  // The op takes [N, C] or [N, C, H, W]; [N, C, L] is normalised as [N, C, L, 1] (a view).
  const bool is_3d = x.dim() == 3;
  Tensor in = is_3d ? reshape(x, {x.size(0), x.size(1), x.size(2), 1}) : x;
  Tensor y = batch_norm(in, running_mean, running_var, weight, bias, use_batch_stats,
                        static_cast<float>(momentum), static_cast<float>(eps));
  return is_3d ? reshape(y, x.shape()) : y;
}

std::string BatchNorm::name() const {
  return fmt::format("{}({}, eps={}, momentum={}, affine={}, track_running_stats={})", kind_,
                     num_features, eps, momentum, affine, track_running_stats);
}

BatchNorm1d::BatchNorm1d(int64_t num_features, BatchNormOptions options)
    : BatchNorm("BatchNorm1d", {2, 3}, num_features, options) {}

std::shared_ptr<Module> BatchNorm1d::make_empty_copy() const {
  return std::make_shared<BatchNorm1d>(num_features, options());
}

BatchNorm2d::BatchNorm2d(int64_t num_features, BatchNormOptions options)
    : BatchNorm("BatchNorm2d", {4}, num_features, options) {}

std::shared_ptr<Module> BatchNorm2d::make_empty_copy() const {
  return std::make_shared<BatchNorm2d>(num_features, options());
}

}  // namespace dplab::nn
