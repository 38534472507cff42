// layers.h: the layers of dplab::nn, each a Module with PyTorch's parameter names and
// layouts (Linear.weight is [out_features, in_features]; Conv2d.weight is
// [out_channels, in_channels, k, k]; BatchNorm has weight, bias, running_mean, running_var,
// num_batches_tracked) so state dicts line up with PyTorch's key for key.
// Options are plain structs meant for designated initializers:
//   nn::Linear(784, 10, {.bias = false});  nn::Conv2d(1, 16, 5, {.padding = 2});
// Forward passes only call ops from ops/ops.h; autograd does the rest.
// Read next: layers.cpp (Linear, Conv2d), layers_norm.cpp (BatchNorm), init.h.
#pragma once
#include <cstdint>
#include <initializer_list>
#include <memory>
#include <string>
#include <vector>

#include "framework/nn/module.h"

namespace dplab {
class Generator;
}

namespace dplab::nn {

// ---- Linear: y = x W^T + b.  x: [B, in]  W: [out, in]  b: [out]  y: [B, out] ----
// (x may have more leading dims: [..., in] -> [..., out].)
struct LinearOptions {
  bool bias = true;
};

class Linear : public Module {
 public:
  Linear(int64_t in_features, int64_t out_features, LinearOptions options = {});
  Tensor forward(const Tensor& x) override;
  std::string name() const override;
  std::shared_ptr<Module> make_empty_copy() const override;
  void reset_parameters();  // W, b ~ U(-1/sqrt(in), 1/sqrt(in)), PyTorch's default

  int64_t in_features, out_features;
  LinearOptions options;
  Tensor weight, bias;  // bias undefined when options.bias is false
};

// ---- Conv2d.  x: [N, C, H, W]  W: [O, C, k, k]  b: [O]  y: [N, O, oh, ow] ----
// oh = (H + 2*padding - k) / stride + 1, and the same for ow.
struct Conv2dOptions {
  int64_t stride = 1;
  int64_t padding = 0;
  bool bias = true;
};

class Conv2d : public Module {
 public:
  Conv2d(int64_t in_channels, int64_t out_channels, int64_t kernel_size,
         Conv2dOptions options = {});
  Tensor forward(const Tensor& x) override;
  std::string name() const override;
  std::shared_ptr<Module> make_empty_copy() const override;
  void reset_parameters();  // fan_in = in_channels * k * k

  int64_t in_channels, out_channels, kernel_size;
  Conv2dOptions options;
  Tensor weight, bias;
};

// ---- pooling over k x k windows; stride 0 means stride = kernel_size (PyTorch's None) ----
struct Pool2dOptions {
  int64_t stride = 0;
  int64_t padding = 0;
};

class MaxPool2d : public Module {
 public:
  explicit MaxPool2d(int64_t kernel_size, Pool2dOptions options = {});
  Tensor forward(const Tensor& x) override;
  std::string name() const override;
  std::shared_ptr<Module> make_empty_copy() const override;
  int64_t kernel_size;
  Pool2dOptions options;
};

class AvgPool2d : public Module {
 public:
  explicit AvgPool2d(int64_t kernel_size, Pool2dOptions options = {});
  Tensor forward(const Tensor& x) override;
  std::string name() const override;
  std::shared_ptr<Module> make_empty_copy() const override;
  int64_t kernel_size;
  Pool2dOptions options;
};

// ---- BatchNorm: y = (x - mean) / sqrt(var + eps) * weight + bias, per channel ----
// Training: batch statistics, and (track_running_stats) running = (1-momentum)*running +
// momentum*batch with the unbiased variance, num_batches_tracked += 1.
// Eval: the running statistics (or batch statistics when there are none).
// Members are public so that SyncBatchNorm can reuse or replace them.
struct BatchNormOptions {
  double eps = 1e-5;
  double momentum = 0.1;
  bool affine = true;               // learnable weight (ones) and bias (zeros)
  bool track_running_stats = true;  // running_mean (zeros), running_var (ones), counter
};

class BatchNorm : public Module {
 public:
  Tensor forward(const Tensor& x) override;
  std::string name() const override;
  void reset_running_stats();
  void reset_parameters();  // running stats and weight = 1, bias = 0

  int64_t num_features;
  double eps, momentum;
  bool affine, track_running_stats;
  Tensor weight, bias;               // [C] each, undefined unless affine
  Tensor running_mean, running_var;  // [C] each, undefined unless track_running_stats
  Tensor num_batches_tracked;        // int64 scalar, undefined unless track_running_stats

 protected:
  // kind: "BatchNorm1d" or "BatchNorm2d"; input_dims: the input ranks the layer accepts.
  BatchNorm(const char* kind, std::vector<int64_t> input_dims, int64_t num_features,
            BatchNormOptions options);
  BatchNormOptions options() const;
  // x, checked: the rank is one of input_dims_ and dim 1 has num_features channels.
  void check_input(const Tensor& x) const;

  const char* kind_;
  std::vector<int64_t> input_dims_;
};

// x: [N, C] or [N, C, L]
class BatchNorm1d : public BatchNorm {
 public:
  explicit BatchNorm1d(int64_t num_features, BatchNormOptions options = {});
  std::shared_ptr<Module> make_empty_copy() const override;
};

// x: [N, C, H, W]
class BatchNorm2d : public BatchNorm {
 public:
  explicit BatchNorm2d(int64_t num_features, BatchNormOptions options = {});
  std::shared_ptr<Module> make_empty_copy() const override;
};

// ---- stateless layers ----
class ReLU : public Module {
 public:
  Tensor forward(const Tensor& x) override;
  std::string name() const override { return "ReLU()"; }
  std::shared_ptr<Module> make_empty_copy() const override;
};

// Zeroes elements with probability p in training, scales the rest by 1/(1-p); identity in
// eval. gen (not owned) gives seeded, per-rank masks; nullptr draws from the default one.
// A Generator is not thread-safe: replicas that share one must not run concurrently.
class Dropout : public Module {
 public:
  explicit Dropout(double p = 0.5, Generator* gen = nullptr);
  Tensor forward(const Tensor& x) override;
  std::string name() const override;
  std::shared_ptr<Module> make_empty_copy() const override;
  double p;
  Generator* generator;
};

// [N, C, H, W] -> [N, C*H*W] with the defaults: dims start_dim..end_dim become one (a view).
class Flatten : public Module {
 public:
  explicit Flatten(int64_t start_dim = 1, int64_t end_dim = -1);
  Tensor forward(const Tensor& x) override;
  std::string name() const override;
  std::shared_ptr<Module> make_empty_copy() const override;
  int64_t start_dim, end_dim;
};

// ---- Sequential: children "0", "1", ... applied in order ----
class Sequential : public Module {
 public:
  Sequential() = default;
  Sequential(std::initializer_list<std::shared_ptr<Module>> modules);
  explicit Sequential(const std::vector<std::shared_ptr<Module>>& modules);

  void push_back(std::shared_ptr<Module> m);  // registered as std::to_string(size())
  size_t size() const { return named_children().size(); }
  std::shared_ptr<Module> operator[](size_t i) const;

  Tensor forward(const Tensor& x) override;
  std::string name() const override { return "Sequential"; }
  // A Sequential of each child's make_empty_copy(). Subclasses with a constructor of their
  // own (models/mlp.h) override it.
  std::shared_ptr<Module> make_empty_copy() const override;
};

// The module tree as PyTorch's print(model) shows it:
//   Sequential(
//     (0): Linear(in_features=784, out_features=256, bias=true)
//     (1): ReLU()
//   )
std::string describe(const Module& m);

}  // namespace dplab::nn
