// cuda_test_util.h: helpers for the CUDA tests. Every CUDA kernel is checked against the
// CPU backend (the slow, obviously right reference, llm.c style) on odd sizes, with
// |gpu - cpu| <= atol + rtol * |cpu|. GPU buffers go through device_allocate, so memory
// stats and the caching allocator are exercised too. Without a GPU every case is skipped
// (doctest::skip), never passed. Read next: test_cuda_kernels.cpp.
#pragma once
#include <doctest/doctest.h>

#include <cmath>
#include <cstdint>
#include <random>
#include <string>
#include <vector>

#include "framework/backend/backend.h"
#include "framework/backend/cuda/cuda_backend.h"
#include "framework/error.h"
#include "framework/tensor/allocator.h"

namespace dplab::cuda_test {

inline bool has_gpu() { return cuda_physical_device_count() > 0; }
inline Backend& cpu() { return backend_for(Device("cpu")); }
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

inline std::vector<float> random_vec(int64_t n, uint32_t seed, float lo = -2.0f, float hi = 2.0f) {
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

// Counts elements outside |got - ref| <= atol + rtol*|ref| (NaN must match NaN) and
// reports the first one, so a failure names where and by how much.
template <typename T>
void check_close(const std::vector<T>& got, const std::vector<T>& ref, const std::string& what,
                 double atol = 1e-5, double rtol = 1e-5) {
  REQUIRE_MESSAGE(got.size() == ref.size(), what << ": sizes " << got.size() << " vs "
                                                 << ref.size());
  std::size_t bad = 0, first = 0;
  for (std::size_t i = 0; i < ref.size(); ++i) {
    const double g = static_cast<double>(got[i]), r = static_cast<double>(ref[i]);
    const bool ok = std::isnan(r) ? std::isnan(g) : std::fabs(g - r) <= atol + rtol * std::fabs(r);
    if (!ok && bad++ == 0) first = i;
  }
  CHECK_MESSAGE(bad == 0, what << ": " << bad << " of " << ref.size() << " differ; first at "
                               << first << ": gpu " << (bad ? got[first] : T()) << " cpu "
                               << (bad ? ref[first] : T()));
}

}  // namespace dplab::cuda_test
