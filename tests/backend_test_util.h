// backend_test_util.h: helpers shared by the backends' kernel tests (tests/backend for the
// CPU, tests/backend_cuda for CUDA): the backends under test, random data, layouts
// (contiguous, broadcast, permuted), GPU buffers, and one llm.c-style closeness check
// |got - ref| <= atol + rtol * |ref|. The CPU kernels are checked against naive loops,
// written to be obviously right rather than fast; every CUDA kernel against the CPU backend
// on odd sizes. GPU buffers go through device_allocate, so memory stats and the caching
// allocator are exercised too. Without a GPU the CUDA cases are skipped (doctest::skip),
// never passed. Read next: backend/test_cpu_kernels.cpp, backend_cuda/test_cuda_kernels.cpp.
#pragma once
#include <doctest/doctest.h>

#include <cmath>
#include <cstdint>
#include <random>
#include <sstream>
#include <string>
#include <vector>

#include "framework/backend/backend.h"
#include "framework/backend/cuda/cuda_backend.h"
#include "framework/error.h"
#include "framework/tensor/allocator.h"

namespace dplab::test {

inline Backend& cpu() { return backend_for(Device("cpu")); }
inline bool has_gpu() { return cuda_physical_device_count() > 0; }
inline Backend& gpu() { return backend_for(Device("cuda:0")); }

// A typed buffer on a CUDA device, freed with its owner.
template <typename T>
class GpuBuf {
 public:
  explicit GpuBuf(const std::vector<T>& host, Device d = Device("cuda:0"))
      : d_(d), n_(host.size()) {
    p_ = static_cast<T*>(device_allocate(d_, bytes()));
    if (n_ > 0) backend_for(d_).copy_from_host(d_, p_, host.data(), bytes());
  }
  explicit GpuBuf(std::size_t n, Device d = Device("cuda:0"))
      : GpuBuf(std::vector<T>(n, T(-7)), d) {}  // -7: a value no kernel result should keep
  GpuBuf(const GpuBuf&) = delete;
  GpuBuf& operator=(const GpuBuf&) = delete;
  ~GpuBuf() { device_free(d_, p_, bytes()); }

  T* get() const { return p_; }
  std::vector<T> host() const {
    std::vector<T> v(n_);
    if (n_ > 0) backend_for(d_).copy_to_host(d_, v.data(), p_, bytes());
    return v;
  }

 private:
  std::size_t bytes() const { return n_ * sizeof(T); }
  Device d_;
  std::size_t n_;
  T* p_ = nullptr;
};

inline std::vector<float> random_vec(int64_t n, uint32_t seed, float lo = -1.0f, float hi = 1.0f) {
  std::mt19937 gen(seed);
  std::uniform_real_distribution<float> dist(lo, hi);
  std::vector<float> v(static_cast<std::size_t>(n));
  for (float& x : v) x = dist(gen);
  return v;
}

inline std::vector<int64_t> random_idx(int64_t n, int64_t hi, uint32_t seed) {
  std::mt19937 gen(seed);
  std::uniform_int_distribution<int64_t> dist(0, hi - 1);
  std::vector<int64_t> v(static_cast<std::size_t>(n));
  for (int64_t& x : v) x = dist(gen);
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

// Checks every element by close(), counts the mismatches and reports the first, so a failure
// names what, where and by how much. `what` names the case ("softmax, 1000 x 3"); ref is the
// reference (a naive loop, or the CPU backend for a CUDA kernel).
template <typename A, typename B>
void check_close(const A& got, const B& ref, const std::string& what, double atol = 1e-5,
                 double rtol = 1e-5) {
  REQUIRE_MESSAGE(got.size() == ref.size(),
                  what << ": sizes " << got.size() << " vs " << ref.size());
  std::size_t bad = 0, first = 0;
  for (std::size_t i = 0; i < ref.size(); ++i)
    if (!close(static_cast<double>(got[i]), static_cast<double>(ref[i]), atol, rtol) && bad++ == 0)
      first = i;
  std::ostringstream first_diff;
  if (bad)
    first_diff << "; first at index " << first << ": got " << got[first] << ", expected "
               << ref[first];
  CHECK_MESSAGE(bad == 0, what << (what.empty() ? "" : ": ") << bad << " of " << ref.size()
                               << " differ" << first_diff.str());
}
template <typename A, typename B>
void check_all_close(const A& got, const B& ref, double atol = 1e-5, double rtol = 1e-5) {
  check_close(got, ref, "", atol, rtol);
}

inline double dot(const std::vector<float>& a, const std::vector<float>& b) {
  double s = 0;
  for (std::size_t i = 0; i < a.size(); ++i) s += static_cast<double>(a[i]) * b[i];
  return s;
}

}  // namespace dplab::test
