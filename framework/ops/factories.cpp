// factories.cpp: tensors made from nothing. Random ones are drawn on the host from a
// Generator (random.h) and copied to the device, so a seed gives the same numbers on
// CPU and CUDA.
#include <numeric>

#include "framework/ops/make_result.h"
#include "framework/ops/ops.h"
#include "framework/tensor/random.h"

namespace dplab {
namespace {

Tensor finish(Tensor t, const TensorOptions& o) {
  if (o.requires_grad) t.requires_grad_(true);
  return t;
}

template <typename T>
Tensor from_host(const std::vector<T>& v, const Shape& s, const TensorOptions& o) {
  DPLAB_CHECK(static_cast<int64_t>(v.size()) == shape_numel(s),
              "from_vector: {} values do not fill shape {} ({} elements)", v.size(), shape_str(s),
              shape_numel(s));
  Tensor t = Tensor::empty(s, {.dtype = dtype_of<T>(), .device = o.device});
  if (!v.empty()) {
    if (o.device.is_cpu()) std::copy(v.begin(), v.end(), t.data<T>());
    else backend_of(t).copy_from_host(o.device, t.raw_data(), v.data(), v.size() * sizeof(T));
  }
  return t;
}

// Draws n values with draw(gen) under the default generator's lock when gen is null.
template <typename T, typename Draw>
std::vector<T> draw_values(int64_t n, Generator* gen, Draw draw) {
  std::vector<T> v(static_cast<size_t>(n));
  std::unique_lock<std::mutex> lock;
  if (!gen) {
    lock = std::unique_lock(default_generator_mutex());
    gen = &default_generator();
  }
  for (auto& x : v) x = draw(*gen);
  return v;
}

}  // namespace

Tensor full(const Shape& s, double value, TensorOptions o) {
  Tensor t = Tensor::empty(s, {.dtype = o.dtype, .device = o.device});
  if (t.numel() > 0) backend_of(t).fill(o.dtype, t.raw_data(), t.numel(), value);
  return finish(t, o);
}
Tensor zeros(const Shape& s, TensorOptions o) { return full(s, 0.0, o); }
Tensor ones(const Shape& s, TensorOptions o) { return full(s, 1.0, o); }
Tensor zeros_like(const Tensor& t) { return zeros(t.shape(), t.options()); }
Tensor ones_like(const Tensor& t) { return ones(t.shape(), t.options()); }

Tensor arange(int64_t end, TensorOptions o) { return arange(0, end, 1, o); }

Tensor arange(int64_t start, int64_t end, int64_t step, TensorOptions o) {
  DPLAB_CHECK(step != 0, "arange: step must not be 0");
  int64_t n = std::max<int64_t>(0, (end - start + step - (step > 0 ? 1 : -1)) / step);
  if (o.dtype == DType::Int64) {
    std::vector<int64_t> v(n);
    for (int64_t i = 0; i < n; ++i) v[i] = start + i * step;
    return finish(from_host(v, {n}, o), o);
  }
  std::vector<float> v(n);
  for (int64_t i = 0; i < n; ++i) v[i] = static_cast<float>(start + i * step);
  return finish(from_host(v, {n}, o), o);
}

Tensor from_vector(const std::vector<float>& v, const Shape& s, TensorOptions o) {
  return finish(from_host(v, s, o), o);
}
Tensor from_vector(const std::vector<int64_t>& v, const Shape& s, TensorOptions o) {
  return finish(from_host(v, s, o), o);
}

Tensor randn(const Shape& s, TensorOptions o, Generator* gen) {
  return finish(
      from_host(draw_values<float>(shape_numel(s), gen, [](Generator& g) { return g.normal(); }), s,
                o),
      o);
}

Tensor rand(const Shape& s, TensorOptions o, Generator* gen) {
  return finish(
      from_host(draw_values<float>(shape_numel(s), gen, [](Generator& g) { return g.uniform(); }),
                s, o),
      o);
}

Tensor uniform(const Shape& s, float low, float high, TensorOptions o, Generator* gen) {
  auto draw = [low, high](Generator& g) { return low + (high - low) * g.uniform(); };
  return finish(from_host(draw_values<float>(shape_numel(s), gen, draw), s, o), o);
}

Tensor randint(int64_t low, int64_t high, const Shape& s, TensorOptions o, Generator* gen) {
  DPLAB_CHECK(low < high, "randint: expected low < high, got [{}, {})", low, high);
  auto v = draw_values<int64_t>(shape_numel(s), gen,
                                [low, high](Generator& g) { return g.randint(low, high); });
  return from_host(v, s, {.dtype = DType::Int64, .device = o.device});
}

// Fisher-Yates, drawing from the generator: the same permutation on every platform.
Tensor randperm(int64_t n, Generator* gen) {
  std::vector<int64_t> v(static_cast<size_t>(n));
  std::iota(v.begin(), v.end(), 0);
  std::unique_lock<std::mutex> lock;
  if (!gen) {
    lock = std::unique_lock(default_generator_mutex());
    gen = &default_generator();
  }
  for (int64_t i = n - 1; i > 0; --i) std::swap(v[i], v[gen->randint(0, i + 1)]);
  return from_host(v, {n}, {.dtype = DType::Int64});
}

}  // namespace dplab
