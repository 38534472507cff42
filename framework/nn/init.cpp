// init.cpp: parameter initialisation (see init.h). Values are drawn on the host by the
// random factories in ops.h and copied into the tensor, wherever it lives, so a seed gives
// the same model on cpu:k and cuda:k.
#include "framework/nn/init.h"

#include <cmath>

#include "framework/autograd/grad_mode.h"
#include "framework/ops/ops.h"

namespace dplab::nn::init {

namespace {
thread_local bool t_clone_active = false;
thread_local Device t_clone_device{};

void check_float(const Tensor& t, const char* what) {
  DPLAB_CHECK(t.defined(), "init::{}: the tensor is undefined", what);
  DPLAB_CHECK(t.dtype() == DType::Float32, "init::{}: expected a float32 tensor, got {}", what,
              dtype_name(t.dtype()));
}

// Receptive field: product of the dims after the first two (1 for a Linear weight).
int64_t receptive_field(const Shape& s) {
  int64_t r = 1;
  for (size_t i = 2; i < s.size(); ++i) r *= s[i];
  return r;
}

// Copies host-drawn values into t without autograd seeing an in-place update of a leaf.
void assign(Tensor& t, const Tensor& values) {
  NoGradGuard no_grad;
  t.copy_(values);
}
}  // namespace

int64_t fan_in(const Shape& s) {
  DPLAB_CHECK(s.size() >= 2, "init::fan_in: expected a weight with at least 2 dims, got {}",
              shape_str(s));
  return s[1] * receptive_field(s);
}

int64_t fan_out(const Shape& s) {
  DPLAB_CHECK(s.size() >= 2, "init::fan_out: expected a weight with at least 2 dims, got {}",
              shape_str(s));
  return s[0] * receptive_field(s);
}

double leaky_relu_gain(double a) { return std::sqrt(2.0 / (1.0 + a * a)); }

void uniform_(Tensor& t, double low, double high, Generator* gen) {
  check_float(t, "uniform_");
  DPLAB_CHECK(low <= high, "init::uniform_: expected low <= high, got [{}, {})", low, high);
  if (t_clone_active) return;
  assign(t, uniform(t.shape(), static_cast<float>(low), static_cast<float>(high), {}, gen));
}

void normal_(Tensor& t, double mean, double std, Generator* gen) {
  check_float(t, "normal_");
  DPLAB_CHECK(std >= 0.0, "init::normal_: expected std >= 0, got {}", std);
  if (t_clone_active) return;
  Tensor v = add_scalar(mul_scalar(randn(t.shape(), {}, gen), static_cast<float>(std)),
                        static_cast<float>(mean));
  assign(t, v);
}

void constant_(Tensor& t, double value) {
  DPLAB_CHECK(t.defined(), "init::constant_: the tensor is undefined");
  if (t_clone_active) return;
  NoGradGuard no_grad;
  t.fill_(value);
}

void zeros_(Tensor& t) { constant_(t, 0.0); }
void ones_(Tensor& t) { constant_(t, 1.0); }

void kaiming_uniform_(Tensor& t, double a, Generator* gen) {
  check_float(t, "kaiming_uniform_");
  // Var(U(-b, b)) = b^2 / 3, and He's rule wants Var = gain^2 / fan_in.
  const double bound = leaky_relu_gain(a) * std::sqrt(3.0 / static_cast<double>(fan_in(t.shape())));
  uniform_(t, -bound, bound, gen);
}

void xavier_uniform_(Tensor& t, double gain, Generator* gen) {
  check_float(t, "xavier_uniform_");
  const double fans = static_cast<double>(fan_in(t.shape()) + fan_out(t.shape()));
  const double bound = gain * std::sqrt(6.0 / fans);
  uniform_(t, -bound, bound, gen);
}

Tensor new_tensor(const Shape& shape, DType dtype) {
  return Tensor::empty(shape, {.dtype = dtype, .device = construction_device()});
}

Device construction_device() { return t_clone_active ? t_clone_device : Device{}; }
bool in_clone_scope() { return t_clone_active; }

CloneScope::CloneScope(Device device) : prev_device_(t_clone_device), prev_active_(t_clone_active) {
  t_clone_device = device;
  t_clone_active = true;
}

CloneScope::~CloneScope() {
  t_clone_device = prev_device_;
  t_clone_active = prev_active_;
}

}  // namespace dplab::nn::init
