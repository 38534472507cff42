// sync_batch_norm.cpp: the sync_batch_norm op with its explicit backward, the SyncBatchNorm
// layer, and convert_sync_batchnorm (see sync_batch_norm.h).
// Statistics travel as sums, in one all_reduce each way, so a layer costs (2C+1) floats of
// forward traffic and 2C of backward traffic per step whatever the batch and image size.
// Read next: tests/ddp_extensions/test_sync_batch_norm.cpp (SyncBN on N ranks == BN on one).
#include "parallel/ddp/sync_batch_norm.h"

#include <cmath>
#include <optional>

#include "framework/autograd/grad_mode.h"
#include "framework/ops/batch_norm_common.h"
#include "framework/ops/make_result.h"
#include "framework/ops/ops.h"
#include "parallel/comm/init.h"

namespace dplab::parallel {
namespace {

// Per-channel sums of a (detached) tensor, on the host.
std::vector<float> channel_sums(const Tensor& t, const std::vector<int64_t>& dims) {
  return sum(t, dims).to_vector<float>();
}

}  // namespace

// Forward, per channel c, over the M rows of ALL ranks (M = sum of per-rank counts):
//   mean = S / M,  var = Q / M - mean^2   (S = sum x, Q = sum x^2, all-reduced)
//   xhat = (x - mean) * invstd,  invstd = 1 / sqrt(var + eps),  y = xhat * w + b
// Backward: with gh = g * w, and sums over all ranks' rows (all-reduced),
//   dx = w * invstd * (g - sum(g) / M - xhat * sum(g * xhat) / M)
//   dw = sum(g * xhat),  db = sum(g)     over THIS rank's rows: DDP averages them
// Because the all-reduced sums add every rank's upstream gradient, dx is the gradient of the
// SUM of the ranks' losses; DDP's objective is their mean, whose parameter gradients are
// what DDP's averaging produces (see the test for the exact correspondence).
Tensor sync_batch_norm(const Tensor& x, const Tensor& running_mean, const Tensor& running_var,
                       const Tensor& weight, const Tensor& bias, float momentum, float eps,
                       ProcessGroup& pg) {
  const int64_t C =
      check_batch_norm_args("sync_batch_norm", x, running_mean, running_var, weight, bias, eps);
  const Shape bshape = x.dim() == 2 ? Shape{1, C} : Shape{1, C, 1, 1};
  const std::vector<int64_t> dims = channel_reduce_dims(x);
  const auto uC = static_cast<size_t>(C);

  // The forward is computed outside the graph (record() below attaches the explicit backward);
  // the guard ends before record(), which only records while grad mode is on.
  std::optional<NoGradGuard> no_grad(std::in_place);
  Tensor xd = x.detach();
  // One message: [S (C), Q (C), count]. A count as a float is exact below 2^24 rows.
  std::vector<float> packed(2 * uC + 1, 0.0f);
  if (x.numel() > 0) {
    std::vector<float> s = channel_sums(xd, dims), q = channel_sums(mul(xd, xd), dims);
    std::copy(s.begin(), s.end(), packed.begin());
    std::copy(q.begin(), q.end(), packed.begin() + C);
  }
  packed[2 * uC] = static_cast<float>(x.numel() / C);
  Tensor msg = from_vector(packed, {2 * C + 1});
  pg.all_reduce(msg, ReduceOp::Sum);
  packed = msg.to_vector<float>();
  const double M = packed[2 * uC];
  DPLAB_CHECK(M > 1.0,
              "sync_batch_norm: expected more than 1 value per channel over all {} ranks, "
              "got {} (this rank's input is {})",
              pg.size(), M, shape_str(x.shape()));

  // E[x^2] - E[x]^2 in double: the sums are float32, but the subtraction is where precision
  // is lost, and double keeps it for activations of moderate mean.
  std::vector<float> mean(uC), invstd(uC), unbiased(uC);
  for (size_t c = 0; c < uC; ++c) {
    double m = packed[c] / M;
    double v = std::max(0.0, packed[uC + c] / M - m * m);
    mean[c] = static_cast<float>(m);
    invstd[c] = static_cast<float>(1.0 / std::sqrt(v + eps));
    unbiased[c] = static_cast<float>(v * M / (M - 1.0));
  }
  if (running_mean.defined()) {
    update_running_stats(running_mean, from_vector(mean, {C}, {.device = x.device()}), momentum);
    update_running_stats(running_var, from_vector(unbiased, {C}, {.device = x.device()}), momentum);
  }
  Tensor mean_t = from_vector(mean, bshape, {.device = x.device()});
  Tensor invstd_t = from_vector(invstd, bshape, {.device = x.device()});
  Tensor xhat = mul(sub(xd, mean_t), invstd_t);
  Tensor y = xhat;
  Tensor w = weight.defined() ? reshape(weight.detach(), bshape) : Tensor();
  if (weight.defined()) y = mul(y, w);
  if (bias.defined()) y = add(y, reshape(bias.detach(), bshape));

  no_grad.reset();
  std::vector<Tensor> inputs{x};
  if (weight.defined()) inputs.push_back(weight);
  if (bias.defined()) inputs.push_back(bias);
  const bool has_w = weight.defined(), has_b = bias.defined();
  ProcessGroup* group = &pg;
  return record(y, "SyncBatchNormBackward", inputs, [=](const Tensor& g) {
    NoGradGuard inner;
    std::vector<float> sum_dy(uC, 0.0f), sum_dy_xhat(uC, 0.0f);
    if (g.numel() > 0) {
      sum_dy = channel_sums(g, dims);
      sum_dy_xhat = channel_sums(mul(g, xhat), dims);
    }
    std::vector<float> both(sum_dy);
    both.insert(both.end(), sum_dy_xhat.begin(), sum_dy_xhat.end());
    Tensor msg2 = from_vector(both, {2 * C});
    group->all_reduce(msg2, ReduceOp::Sum);
    both = msg2.to_vector<float>();
    std::vector<float> mean_dy(uC), mean_dy_xhat(uC);
    for (size_t c = 0; c < uC; ++c) {
      mean_dy[c] = static_cast<float>(both[c] / M);
      mean_dy_xhat[c] = static_cast<float>(both[uC + c] / M);
    }
    Tensor a = from_vector(mean_dy, bshape, {.device = g.device()});
    Tensor b = from_vector(mean_dy_xhat, bshape, {.device = g.device()});
    Tensor dx = mul(sub(sub(g, a), mul(xhat, b)), invstd_t);
    if (has_w) dx = mul(dx, w);
    std::vector<Tensor> grads{dx};
    const Shape cshape{C};
    if (has_w) grads.push_back(from_vector(sum_dy_xhat, cshape, {.device = g.device()}));
    if (has_b) grads.push_back(from_vector(sum_dy, cshape, {.device = g.device()}));
    return grads;
  });
}

SyncBatchNorm::SyncBatchNorm(int64_t num_features, nn::BatchNormOptions options,
                             std::shared_ptr<ProcessGroup> pg)
    : nn::BatchNorm("SyncBatchNorm", {2, 3, 4}, num_features, options),
      process_group(std::move(pg)) {}

Tensor SyncBatchNorm::forward(const Tensor& x) {
  // Eval: plain BatchNorm, no communication (running statistics; this rank's batch statistics
  // when none are kept, as torch.nn.SyncBatchNorm does).
  if (!is_training()) return nn::BatchNorm::forward(x);
  check_input(x);
  ProcessGroup* pg = process_group.get();
  if (!pg) {
    DPLAB_CHECK(is_initialized(), "SyncBatchNorm: no process group: call init_process_group() "
                                  "or give one to the constructor / convert_sync_batchnorm()");
    pg = &default_process_group();
  }
  if (track_running_stats) {
    NoGradGuard no_grad;
    num_batches_tracked.fill_(static_cast<double>(num_batches_tracked.item_int() + 1));
  }
  const bool is_3d = x.dim() == 3;
  Tensor in = is_3d ? reshape(x, {x.size(0), x.size(1), x.size(2), 1}) : x;
  Tensor y = sync_batch_norm(in, running_mean, running_var, weight, bias,
                             static_cast<float>(momentum), static_cast<float>(eps), *pg);
  return is_3d ? reshape(y, x.shape()) : y;
}

std::shared_ptr<nn::Module> SyncBatchNorm::make_empty_copy() const {
  return std::make_shared<SyncBatchNorm>(num_features, options(), process_group);
}

namespace {

std::shared_ptr<SyncBatchNorm> convert_one(const std::shared_ptr<nn::BatchNorm>& bn,
                                           const std::shared_ptr<ProcessGroup>& pg) {
  auto s = std::make_shared<SyncBatchNorm>(
      bn->num_features,
      nn::BatchNormOptions{.eps = bn->eps,
                           .momentum = bn->momentum,
                           .affine = bn->affine,
                           .track_running_stats = bn->track_running_stats},
      pg);
  // Rebind to the very same tensors: weights, running stats and any optimizer state carry over.
  s->weight = bn->weight;
  s->bias = bn->bias;
  s->running_mean = bn->running_mean;
  s->running_var = bn->running_var;
  s->num_batches_tracked = bn->num_batches_tracked;
  for (auto& [n, t] : s->own_parameters()) t = bn->parameter(n);
  for (auto& [n, t] : s->own_buffers()) t = bn->buffer(n);
  s->train(bn->is_training());
  return s;
}

bool is_plain_batch_norm(const nn::Module* m) {
  return dynamic_cast<const nn::BatchNorm*>(m) && !dynamic_cast<const SyncBatchNorm*>(m);
}

// Checked over the whole tree BEFORE anything is replaced, so an error leaves it untouched.
// A child's only owner should be its parent's children list; another owner is a typed member
// (or a handle the caller kept) that would still run the unsynchronised layer.
void check_replaceable(nn::Module& m, const std::string& path) {
  for (auto& [name, child] : m.own_children()) {
    std::string child_path = path.empty() ? name : path + "." + name;
    if (is_plain_batch_norm(child.get())) {
      // Owners: the children list, plus a typed member when the parent can rebind it.
      const long expected = 1 + (m.rebind_child(name, child) ? 1 : 0);
      DPLAB_CHECK(
          child.use_count() == expected,
          "convert_sync_batchnorm: '{}' ({}) is also held outside the module tree ({} other "
          "owners, expected {}), e.g. by a typed member its parent's forward calls and cannot "
          "rebind; that forward would keep using plain BatchNorm. Override rebind_child() in the "
          "parent, register it through a Sequential, or drop the extra handle before converting",
          child_path, child->name(), child.use_count() - 1, expected - 1);
    } else {
      check_replaceable(*child, child_path);
    }
  }
}

void convert_children(nn::Module& m, const std::shared_ptr<ProcessGroup>& pg) {
  for (auto& [name, child] : m.own_children()) {
    if (is_plain_batch_norm(child.get())) {
      child = convert_one(std::static_pointer_cast<nn::BatchNorm>(child), pg);
      m.rebind_child(name, child);  // the typed member, if the parent keeps one
    } else convert_children(*child, pg);
  }
}

}  // namespace

std::shared_ptr<nn::Module> convert_sync_batchnorm(std::shared_ptr<nn::Module> module,
                                                   std::shared_ptr<ProcessGroup> pg) {
  DPLAB_CHECK(module != nullptr, "convert_sync_batchnorm: the module is null");
  if (is_plain_batch_norm(module.get()))
    return convert_one(std::static_pointer_cast<nn::BatchNorm>(module), pg);
  check_replaceable(*module, "");
  convert_children(*module, pg);
  return module;
}

}  // namespace dplab::parallel
