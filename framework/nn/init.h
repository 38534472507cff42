// init.h: how layers fill their parameters at construction, PyTorch's defaults.
// Linear and Conv2d draw weights with kaiming_uniform_(a = sqrt(5)), i.e. U(-b, b) with
// b = 1/sqrt(fan_in), and biases from the same bound, all from the default generator, so
// manual_seed(s) before building a model makes it reproducible.
// CloneScope is what Module::clone_to uses: inside it layers allocate on the target device
// and the init functions draw nothing (the values are copied in afterwards).
// Read next: layers.h.
#pragma once
#include <cstdint>

#include "framework/tensor/tensor.h"

namespace dplab {
class Generator;
}

namespace dplab::nn::init {

// weight [out, in] or [out, in, kh, kw]: fan_in = in * kh * kw, fan_out = out * kh * kw.
int64_t fan_in(const Shape& weight_shape);
int64_t fan_out(const Shape& weight_shape);

// std / bound gain of a nonlinearity after a layer: leaky_relu with slope a -> sqrt(2/(1+a^2)).
double leaky_relu_gain(double a);

// In place, never recorded by autograd. gen = nullptr draws from the default generator.
void uniform_(Tensor& t, double low, double high, Generator* gen = nullptr);
void normal_(Tensor& t, double mean, double std, Generator* gen = nullptr);
void constant_(Tensor& t, double value);
void zeros_(Tensor& t);
void ones_(Tensor& t);
// U(-b, b), b = gain * sqrt(3 / fan_in), gain = leaky_relu_gain(a). With a = sqrt(5) this is
// b = 1/sqrt(fan_in): PyTorch's default for Linear and Conv2d weights.
void kaiming_uniform_(Tensor& t, double a = 0.0, Generator* gen = nullptr);
// U(-b, b), b = gain * sqrt(6 / (fan_in + fan_out)).
void xavier_uniform_(Tensor& t, double gain = 1.0, Generator* gen = nullptr);

// A new tensor for a layer's parameter or buffer: on construction_device(), uninitialised.
Tensor new_tensor(const Shape& shape, DType dtype = DType::Float32);
Device construction_device();  // cpu:0, or the device of the innermost CloneScope
bool in_clone_scope();

// While alive on this thread: new_tensor() allocates on `device` and the init functions
// above do nothing. Module::clone_to opens one around make_empty_copy(), so building a
// replica neither allocates on cpu:0 nor advances the default generator.
class CloneScope {
 public:
  explicit CloneScope(Device device);
  ~CloneScope();
  CloneScope(const CloneScope&) = delete;
  CloneScope& operator=(const CloneScope&) = delete;

 private:
  Device prev_device_;
  bool prev_active_;
};

}  // namespace dplab::nn::init
