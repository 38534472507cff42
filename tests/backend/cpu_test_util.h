// cpu_test_util.h: helpers shared by the CPU kernel tests: the backend under test, random
// data, layouts (contiguous, broadcast, permuted) and an llm.c-style closeness check
// |a - b| <= atol + rtol * |ref|. References in the tests are naive loops, written to be
// obviously right rather than fast. Read next: test_cpu_kernels.cpp.
#pragma once
#include <doctest/doctest.h>

#include <cmath>
#include <cstdint>
#include <random>
#include <vector>

#include "framework/backend/backend.h"

namespace dplab::test {

inline Backend& cpu() { return backend_for(Device("cpu")); }

inline std::vector<float> random_vec(int64_t n, uint32_t seed, float lo = -1.0f, float hi = 1.0f) {
  std::mt19937 gen(seed);
  std::uniform_real_distribution<float> dist(lo, hi);
  std::vector<float> v(static_cast<std::size_t>(n));
  for (float& x : v) x = dist(gen);
  return v;
}

inline Strided contiguous(std::initializer_list<int64_t> shape) {
  Strided s;
  for (int64_t d : shape) s.shape[s.ndim++] = d;
  int64_t stride = 1;
  for (int d = s.ndim - 1; d >= 0; --d) {
    s.strides[d] = stride;
    stride *= s.shape[d];
  }
  return s;
}

// The layout of a contiguous tensor of shape `in` (right-aligned, NumPy rules) read as `out`:
// stride 0 where `in` has size 1 or is missing.
inline Strided broadcast(std::initializer_list<int64_t> out, std::initializer_list<int64_t> in) {
  Strided s = contiguous(out);
  std::vector<int64_t> ins(in);
  const int off = s.ndim - static_cast<int>(ins.size());
  int64_t stride = 1;
  for (int d = s.ndim - 1; d >= 0; --d) {
    const int k = d - off;
    if (k < 0 || ins[static_cast<std::size_t>(k)] == 1) {
      s.strides[d] = 0;
    } else {
      s.strides[d] = stride;
      stride *= ins[static_cast<std::size_t>(k)];
    }
  }
  return s;
}

// Offset of multi-index `idx` (of layout.shape) in the source buffer.
inline int64_t offset_of(const Strided& layout, const int64_t* idx) {
  int64_t off = 0;
  for (int d = 0; d < layout.ndim; ++d) off += idx[d] * layout.strides[d];
  return off;
}

// Visits every multi-index of `shape` in row-major order; f(flat_index, idx).
template <typename F>
void for_each_index(const Strided& shape, F f) {
  int64_t idx[kMaxDims] = {};
  const int64_t n = shape.numel();
  for (int64_t flat = 0; flat < n; ++flat) {
    f(flat, idx);
    for (int d = shape.ndim - 1; d >= 0; --d) {
      if (++idx[d] < shape.shape[d]) break;
      idx[d] = 0;
    }
  }
}

inline bool close(double got, double ref, double atol = 1e-5, double rtol = 1e-5) {
  if (std::isnan(ref)) return std::isnan(got);
  if (std::isinf(ref)) return got == ref;
  return std::fabs(got - ref) <= atol + rtol * std::fabs(ref);
}

// Checks every element and reports the first mismatch with its index.
template <typename A, typename B>
void check_all_close(const A& got, const B& ref, double atol = 1e-5, double rtol = 1e-5) {
  REQUIRE(got.size() == ref.size());
  for (std::size_t i = 0; i < got.size(); ++i) {
    if (!close(got[i], ref[i], atol, rtol)) {
      INFO("first mismatch at index " << i << ": got " << got[i] << ", expected " << ref[i]);
      CHECK(close(got[i], ref[i], atol, rtol));
      return;
    }
  }
}

inline double dot(const std::vector<float>& a, const std::vector<float>& b) {
  double s = 0;
  for (std::size_t i = 0; i < a.size(); ++i) s += static_cast<double>(a[i]) * b[i];
  return s;
}

}  // namespace dplab::test
