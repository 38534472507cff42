// nn_norm.cpp: batch normalisation and dropout, both composed from existing ops so that
// autograd derives their backward (batch norm's well-known fused formula is exactly what
// the chain rule through mean, var, sub, div and mul produces).
// Batch norm's per-channel statistics live in one small helper, channel_stats(); its
// checks and running-stats update are batch_norm_common.h's, shared with SyncBatchNorm
// (parallel/ddp/), which computes the same sums, all-reduces them, and normalises.
// Read next: the nn/ layers that own the running stats; SyncBatchNorm in parallel/ddp/.
#include <mutex>

#include "framework/ops/autocast.h"
#include "framework/ops/batch_norm_common.h"
#include "framework/ops/make_result.h"
#include "framework/ops/ops.h"
#include "framework/tensor/random.h"

namespace dplab {
namespace {

// Per-channel statistics of x: [N, C] or [N, C, H, W], each shaped [1, C] or [1, C, 1, 1]
// so they broadcast against x. Differentiable (ordinary ops).
struct ChannelStats {
  Tensor sum;         // sum over n (and h, w)
  Tensor mean;        // sum / count
  Tensor var;         // biased: mean((x - mean)^2), what normalisation uses
  int64_t count = 0;  // elements per channel: N (or N*H*W)
};

// Two passes (mean, then squares of the centred values) rather than E[x^2] - E[x]^2,
// which cancels catastrophically in float32 when |mean| >> std.
ChannelStats channel_stats(const Tensor& x) {
  ChannelStats s;
  std::vector<int64_t> dims = channel_reduce_dims(x);
  s.count = x.numel() / x.size(1);
  s.sum = sum(x, dims, /*keepdim=*/true);
  s.mean = mul_scalar(s.sum, 1.0f / static_cast<float>(s.count));
  Tensor centered = sub(x, s.mean);
  s.var = mul_scalar(sum(mul(centered, centered), dims, /*keepdim=*/true),
                     1.0f / static_cast<float>(s.count));
  return s;
}

void check_channel_vector(const char* op, const char* what, const Tensor& t, const Tensor& x) {
  check_float(op, t);
  check_same_device(op, x, t);
  DPLAB_CHECK(t.dim() == 1 && t.size(0) == x.size(1),
              "{}: {} must be [{}] for input {} (C = {}), got {}", op, what, x.size(1),
              shape_str(x.shape()), x.size(1), shape_str(t.shape()));
}

}  // namespace

std::vector<int64_t> channel_reduce_dims(const Tensor& x) {
  return x.dim() == 2 ? std::vector<int64_t>{0} : std::vector<int64_t>{0, 2, 3};
}

void update_running_stats(const Tensor& running, const Tensor& batch, float momentum) {
  NoGradGuard no_grad;
  Tensor r = running;  // a handle; mul_/add_ write into the shared storage
  r.mul_(1.0f - momentum);
  r.add_(batch.detach().reshape(running.shape()), momentum);
}

int64_t check_batch_norm_args(const char* op, const Tensor& x, const Tensor& running_mean,
                              const Tensor& running_var, const Tensor& weight, const Tensor& bias,
                              float eps) {
  check_float(op, x);
  DPLAB_CHECK(x.dim() == 2 || x.dim() == 4, "{}: expected input [N, C] or [N, C, H, W], got {}", op,
              shape_str(x.shape()));
  DPLAB_CHECK(eps > 0.0f, "{}: eps must be > 0, got {}", op, eps);
  DPLAB_CHECK(running_mean.defined() == running_var.defined(),
              "{}: give both running_mean and running_var or neither (got mean {}, var {})", op,
              running_mean.defined() ? "defined" : "undefined",
              running_var.defined() ? "defined" : "undefined");
  if (running_mean.defined()) {
    check_channel_vector(op, "running_mean", running_mean, x);
    check_channel_vector(op, "running_var", running_var, x);
  }
  if (weight.defined()) check_channel_vector(op, "weight", weight, x);
  if (bias.defined()) check_channel_vector(op, "bias", bias, x);
  DPLAB_CHECK(x.size(1) > 0, "{}: expected at least one channel, got input {}", op,
              shape_str(x.shape()));
  return x.size(1);
}

// y = (x - mean) / sqrt(var + eps) * weight + bias, per channel c = dim 1.
// Training: mean, var are the batch's (biased var); the running stats move towards them,
// with the unbiased var (count / (count - 1) times the biased one), as PyTorch does.
// Eval: mean, var are the running stats, constants for autograd.
Tensor batch_norm(const Tensor& x, const Tensor& running_mean, const Tensor& running_var,
                  const Tensor& weight, const Tensor& bias, bool training, float momentum,
                  float eps) {
  // Norms compute in float32 (autocast's float32 list; Apex keeps batch norm in float32 in
  // O2 too): a 16-bit input is cast up, and the result cast back outside autocast.
  if (amp::autocast_dtype() || is_low_precision(x.dtype()) ||
      (weight.defined() && is_low_precision(weight.dtype()))) {
    const DType t = amp::autocast_dtype() ? DType::Float32 : x.dtype();
    amp::AutocastSuspend inside;
    return cast(batch_norm(amp::to_float32(x), running_mean, running_var, amp::to_float32(weight),
                           amp::to_float32(bias), training, momentum, eps),
                t);
  }
  const int64_t C =
      check_batch_norm_args("batch_norm", x, running_mean, running_var, weight, bias, eps);
  const Shape bshape = x.dim() == 2 ? Shape{1, C} : Shape{1, C, 1, 1};
  Tensor mean_c, var_c;
  if (training) {
    ChannelStats s = channel_stats(x);
    DPLAB_CHECK(s.count > 1,
                "batch_norm: expected more than 1 value per channel when training, got input {}",
                shape_str(x.shape()));
    mean_c = s.mean;
    var_c = s.var;
    if (running_mean.defined()) {
      float unbias = static_cast<float>(s.count) / static_cast<float>(s.count - 1);
      update_running_stats(running_mean, s.mean, momentum);
      update_running_stats(running_var, mul_scalar(s.var.detach(), unbias), momentum);
    }
  } else {
    DPLAB_CHECK(running_mean.defined(),
                "batch_norm: eval mode needs running_mean and running_var, got none for input {}",
                shape_str(x.shape()));
    mean_c = reshape(running_mean.detach(), bshape);
    var_c = reshape(running_var.detach(), bshape);
  }
  // Autograd through these ops yields the textbook backward (training, per channel):
  //   xhat = (x - mean) / sigma,  gh = g * weight
  //   dx = (gh - mean(gh) - xhat * mean(gh * xhat)) / sigma
  //   dweight = sum(g * xhat),  dbias = sum(g)
  Tensor y = div(sub(x, mean_c), sqrt(add_scalar(var_c, eps)));
  if (weight.defined()) y = mul(y, reshape(weight, bshape));
  if (bias.defined()) y = add(y, reshape(bias, bshape));
  return y;
}

// y = x * mask, mask_i = 1/(1-p) with probability 1-p, else 0: E[y] = x, so eval needs
// no rescaling. The mask is drawn on the host and copied to x's device, so one seed gives
// the same mask on CPU and CUDA.
Tensor dropout(const Tensor& x, float p, bool training, Generator* gen) {
  check_floating("dropout", x);
  DPLAB_CHECK(p >= 0.0f && p < 1.0f, "dropout: p must lie in [0, 1), got {}", p);
  if (!training || p == 0.0f) return x;
  const float scale = 1.0f / (1.0f - p);
  std::vector<float> mask(static_cast<size_t>(x.numel()));
  {
    std::unique_lock<std::mutex> lock;
    if (!gen) {  // the shared default generator: hold its lock while drawing
      lock = std::unique_lock(default_generator_mutex());
      gen = &default_generator();
    }
    for (float& m : mask) m = gen->uniform() < p ? 0.0f : scale;
  }
  // d(x * mask)/dx = mask
  return mul(x, from_vector(mask, x.shape(), {.device = x.device()}).to(x.dtype()));
}

}  // namespace dplab
