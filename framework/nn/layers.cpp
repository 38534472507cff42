// layers.cpp: Linear, Conv2d, the pools and the stateless layers (see layers.h).
// Each forward is one op from ops.h; the layer only owns the parameters, their PyTorch
// initialisation and the repr. BatchNorm is in layers_norm.cpp, Sequential and describe()
// in layers_container.cpp.
#include <cmath>

#include "framework/nn/init.h"
#include "framework/nn/layers.h"
#include "framework/ops/ops.h"

namespace dplab::nn {

// ---------------------------------------------------------------------------- Linear

Linear::Linear(int64_t in, int64_t out, LinearOptions opts)
    : in_features(in), out_features(out), options(opts) {
  DPLAB_CHECK(in > 0 && out > 0,
              "Linear: expected positive in_features and out_features, got {} and {}", in, out);
  weight = register_parameter("weight", init::new_tensor({out, in}));
  if (options.bias) bias = register_parameter("bias", init::new_tensor({out}));
  reset_parameters();
}

void Linear::reset_parameters() {
  // kaiming_uniform_(a = sqrt(5)): bound = sqrt(2/6) * sqrt(3/in) = 1/sqrt(in).
  init::kaiming_uniform_(weight, std::sqrt(5.0));
  if (bias.defined()) {
    const double bound = 1.0 / std::sqrt(static_cast<double>(in_features));
    init::uniform_(bias, -bound, bound);
  }
}

Tensor Linear::forward(const Tensor& x) {
  DPLAB_CHECK(x.dim() >= 1 && x.size(-1) == in_features,
              "Linear(in_features={}): expected input [..., {}], got {}", in_features, in_features,
              shape_str(x.shape()));
  if (x.dim() == 2) return linear(x, weight, bias);
  // [..., in] -> [M, in] -> [M, out] -> [..., out]: one GEMM whatever the leading dims.
  Shape out_shape = x.shape();
  out_shape.back() = out_features;
  return reshape(linear(reshape(x, {-1, in_features}), weight, bias), out_shape);
}

std::string Linear::name() const {
  return fmt::format("Linear(in_features={}, out_features={}, bias={})", in_features, out_features,
                     options.bias);
}

std::shared_ptr<Module> Linear::make_empty_copy() const {
  return std::make_shared<Linear>(in_features, out_features, options);
}

// ---------------------------------------------------------------------------- Conv2d

Conv2d::Conv2d(int64_t in, int64_t out, int64_t k, Conv2dOptions opts)
    : in_channels(in), out_channels(out), kernel_size(k), options(opts) {
  DPLAB_CHECK(in > 0 && out > 0 && k > 0,
              "Conv2d: expected positive in_channels, out_channels and kernel_size, got {}, {}, {}",
              in, out, k);
  DPLAB_CHECK(opts.stride > 0 && opts.padding >= 0,
              "Conv2d: expected stride > 0 and padding >= 0, got stride {} and padding {}",
              opts.stride, opts.padding);
  weight = register_parameter("weight", init::new_tensor({out, in, k, k}));
  if (options.bias) bias = register_parameter("bias", init::new_tensor({out}));
  reset_parameters();
}

void Conv2d::reset_parameters() {
  init::kaiming_uniform_(weight, std::sqrt(5.0));  // bound 1/sqrt(in * k * k)
  if (bias.defined()) {
    const double bound = 1.0 / std::sqrt(static_cast<double>(init::fan_in(weight.shape())));
    init::uniform_(bias, -bound, bound);
  }
}

Tensor Conv2d::forward(const Tensor& x) {
  DPLAB_CHECK(x.dim() == 4 && x.size(1) == in_channels,
              "Conv2d(in_channels={}): expected input [N, {}, H, W], got {}", in_channels,
              in_channels, shape_str(x.shape()));
  return conv2d(x, weight, bias, options.stride, options.padding);
}

std::string Conv2d::name() const {
  std::string s =
      fmt::format("Conv2d({}, {}, kernel_size=({}, {}), stride=({}, {})", in_channels, out_channels,
                  kernel_size, kernel_size, options.stride, options.stride);
  if (options.padding != 0)
    s += fmt::format(", padding=({}, {})", options.padding, options.padding);
  if (!options.bias) s += ", bias=false";
  return s + ")";
}

std::shared_ptr<Module> Conv2d::make_empty_copy() const {
  return std::make_shared<Conv2d>(in_channels, out_channels, kernel_size, options);
}

// ---------------------------------------------------------------------------- pools

namespace {
std::string pool_name(const char* kind, int64_t k, const Pool2dOptions& o) {
  return fmt::format("{}(kernel_size={}, stride={}, padding={})", kind, k,
                     o.stride == 0 ? k : o.stride, o.padding);
}
void check_pool(const char* kind, int64_t k, const Pool2dOptions& o) {
  DPLAB_CHECK(k > 0 && o.stride >= 0 && o.padding >= 0 && 2 * o.padding <= k,
              "{}: expected kernel_size > 0, stride >= 0 (0 = kernel_size) and padding <= "
              "kernel_size/2, got kernel_size {}, stride {}, padding {}",
              kind, k, o.stride, o.padding);
}
}  // namespace

MaxPool2d::MaxPool2d(int64_t k, Pool2dOptions opts) : kernel_size(k), options(opts) {
  check_pool("MaxPool2d", k, opts);
}
Tensor MaxPool2d::forward(const Tensor& x) {
  return max_pool2d(x, kernel_size, options.stride, options.padding);
}
std::string MaxPool2d::name() const { return pool_name("MaxPool2d", kernel_size, options); }
std::shared_ptr<Module> MaxPool2d::make_empty_copy() const {
  return std::make_shared<MaxPool2d>(kernel_size, options);
}

AvgPool2d::AvgPool2d(int64_t k, Pool2dOptions opts) : kernel_size(k), options(opts) {
  check_pool("AvgPool2d", k, opts);
}
Tensor AvgPool2d::forward(const Tensor& x) {
  return avg_pool2d(x, kernel_size, options.stride, options.padding);
}
std::string AvgPool2d::name() const { return pool_name("AvgPool2d", kernel_size, options); }
std::shared_ptr<Module> AvgPool2d::make_empty_copy() const {
  return std::make_shared<AvgPool2d>(kernel_size, options);
}

// ---------------------------------------------------------------------------- stateless

Tensor ReLU::forward(const Tensor& x) { return relu(x); }
std::shared_ptr<Module> ReLU::make_empty_copy() const { return std::make_shared<ReLU>(); }

Dropout::Dropout(double p_, Generator* gen) : p(p_), generator(gen) {
  DPLAB_CHECK(p >= 0.0 && p < 1.0, "Dropout: p must lie in [0, 1), got {}", p);
}
Tensor Dropout::forward(const Tensor& x) {
  return dropout(x, static_cast<float>(p), is_training(), generator);
}
std::string Dropout::name() const { return fmt::format("Dropout(p={})", p); }
std::shared_ptr<Module> Dropout::make_empty_copy() const {
  return std::make_shared<Dropout>(p, generator);
}

Flatten::Flatten(int64_t start, int64_t end) : start_dim(start), end_dim(end) {}
Tensor Flatten::forward(const Tensor& x) {
  const int64_t n = x.dim();
  const int64_t s = start_dim < 0 ? start_dim + n : start_dim;
  const int64_t e = end_dim < 0 ? end_dim + n : end_dim;
  DPLAB_CHECK(s >= 0 && e < n && s <= e,
              "Flatten(start_dim={}, end_dim={}): the dims do not fit an input of shape {}",
              start_dim, end_dim, shape_str(x.shape()));
  // [d0, ..., ds, ..., de, ...] -> [d0, ..., ds*...*de, ...], through the differentiable reshape.
  Shape out;
  for (int64_t i = 0; i < s; ++i) out.push_back(x.size(i));
  int64_t merged = 1;
  for (int64_t i = s; i <= e; ++i) merged *= x.size(i);
  out.push_back(merged);
  for (int64_t i = e + 1; i < n; ++i) out.push_back(x.size(i));
  return reshape(x, out);
}
std::string Flatten::name() const {
  return fmt::format("Flatten(start_dim={}, end_dim={})", start_dim, end_dim);
}
std::shared_ptr<Module> Flatten::make_empty_copy() const {
  return std::make_shared<Flatten>(start_dim, end_dim);
}

}  // namespace dplab::nn
