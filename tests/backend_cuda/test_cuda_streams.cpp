// test_cuda_streams.cpp: the CUDA backend's ordering and memory rules, where a wrong answer
// needs a GPU to show: a copy to another logical device waits for a long producer, an
// overlapping copy acts as memmove, the out-of-memory retry empties every logical device of
// the GPU, a bad argmax throws as on the CPU, float16 NaN and +-65520 give the CPU's bytes,
// the comm stream's scope routes kernels, and a tensor past 2^31 elements.
// Skipped (never passed) without a GPU. Read next: cuda_backend.cpp, cuda_allocator.cpp.
#include <doctest/doctest.h>

#include <algorithm>
#include <cstring>

#include "framework/backend/cpu/cpu_half.h"
#include "framework/backend/cuda/cuda_allocator.h"
#include "framework/backend/cuda/cuda_devices.h"
#include "framework/backend/cuda/virtual_gpus.h"
#include "tests/backend_test_util.h"

using namespace dplab;
using namespace dplab::test;

namespace {

// Logical devices for M GPUs as test_cuda_devices.cpp sets them (2M + 1; never fewer than
// already exist: set_virtual_gpus refuses to shrink past a device in use). cuda:M is then a
// second logical device on physical GPU 0.
int share_gpus() {
  const int m = cuda_physical_device_count();
  set_virtual_gpus(std::max(2 * m + 1, cuda_logical_device_count()));
  return m;
}

}  // namespace

TEST_CASE("a copy to another logical device waits for a long producer kernel" *
          doctest::skip(!has_gpu())) {
  share_gpus();
  const Device d0("cuda:0"), d1("cuda:1");  // another GPU, or the same one shared
  const int64_t n = int64_t{64} << 20;      // 64M floats, 256 MiB: each pass takes ~0.1-0.3 ms
  const int passes = 300;
  GpuBuf<float> x(std::vector<float>(static_cast<std::size_t>(n), 0.0f), d0);
  GpuBuf<float> y(static_cast<std::size_t>(n), d1);
  for (int i = 0; i < passes; ++i) gpu().unary(UnaryOp::AddScalar, x.get(), x.get(), n, 1.0f);
  // queued on cuda:1's stream: without the event fence it would copy a half-done x
  gpu().copy_device(d1, y.get(), d0, x.get(), static_cast<std::size_t>(n) * sizeof(float));
  const std::vector<float> got = y.host();
  int64_t bad = 0;
  for (float v : got) bad += v != static_cast<float>(passes);
  CHECK_MESSAGE(bad == 0, bad << " of " << n << " elements copied before the producer ended");
}

TEST_CASE("copy_device within one device acts as memmove on overlapping ranges" *
          doctest::skip(!has_gpu())) {
  const int n = 1 << 20;
  std::vector<float> host(n);
  for (int i = 0; i < n; ++i) host[i] = static_cast<float>(i);
  for (int shift : {1, 8, 4096, -1, -4096}) {
    GpuBuf<float> buf(host);
    const int len = n - std::abs(shift);
    float* src = buf.get() + (shift > 0 ? 0 : -shift);
    float* dst = buf.get() + (shift > 0 ? shift : 0);
    gpu().copy_device(Device("cuda:0"), dst, Device("cuda:0"), src,
                      static_cast<std::size_t>(len) * sizeof(float));
    std::vector<float> ref = host;
    std::memmove(ref.data() + (shift > 0 ? shift : 0), ref.data() + (shift > 0 ? 0 : -shift),
                 static_cast<std::size_t>(len) * sizeof(float));
    check_close(buf.host(), ref, "overlapping copy, shift " + std::to_string(shift), 0.0, 0.0);
  }
}

TEST_CASE("out of memory on cuda:0 first empties the cache of cuda:M on the same GPU" *
          doctest::skip(!has_gpu())) {
  const Device sibling(DeviceKind::CUDA, share_gpus());  // cuda:M, on physical GPU 0
  REQUIRE(cuda::logical_device(sibling.index).physical == 0);
  cuda::bind(0);
  size_t free_b = 0, total_b = 0;
  REQUIRE(cudaMemGetInfo(&free_b, &total_b) == cudaSuccess);
  const std::size_t big = free_b / 10 * 7;  // two of these cannot fit at once
  void* p1 = device_allocate(sibling, big);
  device_free(sibling, p1, big);  // cached by the sibling, still held from CUDA
  void* p0 = nullptr;
  CHECK_NOTHROW(p0 = device_allocate(Device("cuda:0"), big));
  device_free(Device("cuda:0"), p0, big);
  cuda_empty_cache(0);
  cuda_empty_cache(sibling.index);
}

TEST_CASE("max_pool2d_backward with an argmax outside its plane throws, like the CPU" *
          doctest::skip(!has_gpu())) {
  Window2d w{1, 1, 4, 4, 2, 2, 2, 0, 2, 2};
  GpuBuf<float> gy(std::vector<float>{1, 2, 3, 4});
  GpuBuf<int64_t> argmax(std::vector<int64_t>{0, 3, 16, 5});  // 16 is past the 4x4 plane
  GpuBuf<float> gx(16);
  CHECK_THROWS_WITH_AS(gpu().max_pool2d_backward(gy.get(), argmax.get(), w, gx.get()),
                       doctest::Contains("argmax"), Error);
  CHECK_THROWS_WITH_AS(gpu().max_pool2d_backward(gy.get(), argmax.get(), w, gx.get()),
                       doctest::Contains("got 16"), Error);
}

TEST_CASE("float16 NaN and +-65520 through cast, fill and reduce_into give the CPU's bytes" *
          doctest::skip(!has_gpu())) {
  uint32_t qnan_payload = 0x7fc12345u, neg_nan = 0xffc00000u, snan = 0x7f800001u;
  std::vector<float> vals = {65520.0f, -65520.0f, 65519.0f, 65504.0f, -65504.0f, 1.0f, 0.0f};
  for (uint32_t b : {qnan_payload, neg_nan, snan}) {
    float f;
    std::memcpy(&f, &b, sizeof f);
    vals.push_back(f);
  }
  const int64_t n = static_cast<int64_t>(vals.size());
  std::vector<uint16_t> ref(vals.size());
  cpu().cast(DType::Float32, vals.data(), DType::Float16, ref.data(), n);
  GpuBuf<float> x(vals);
  GpuBuf<uint16_t> h(vals.size());
  gpu().cast(DType::Float32, x.get(), DType::Float16, h.get(), n);
  CHECK(h.host() == ref);  // 65520 rounds to inf, NaN is sign | 0x7e00, on both
  // back to float: NaN payloads widen as on the CPU
  std::vector<float> back_ref(vals.size());
  cpu().cast(DType::Float16, ref.data(), DType::Float32, back_ref.data(), n);
  GpuBuf<float> back(vals.size());
  gpu().cast(DType::Float16, h.get(), DType::Float32, back.get(), n);
  std::vector<float> back_got = back.host();
  CHECK(std::memcmp(back_got.data(), back_ref.data(), back_ref.size() * sizeof(float)) == 0);
  // Max / Min with a NaN in dst or src: the CPU's rule (dst's NaN stays)
  for (ReduceKind op : {ReduceKind::Max, ReduceKind::Min, ReduceKind::Sum}) {
    std::vector<uint16_t> dst_ref = ref, src(ref.rbegin(), ref.rend());
    cpu().reduce_into(op, DType::Float16, dst_ref.data(), src.data(), n);
    GpuBuf<uint16_t> dst(ref), s(src);
    gpu().reduce_into(op, DType::Float16, dst.get(), s.get(), n);
    CHECK(dst.host() == dst_ref);
  }
  // fill with NaN
  GpuBuf<uint16_t> filled(3);
  gpu().fill(DType::Float16, filled.get(), 3, std::nan(""));
  CHECK(filled.host() == std::vector<uint16_t>(3, float_to_half(std::nanf(""))));
}

TEST_CASE("inside a CommStreamScope the collectives' kernels go on the comm stream" *
          doctest::skip(!has_gpu())) {
  cuda::LogicalDevice& dev = cuda::bind(0);
  CHECK(dev.comm_stream != nullptr);
  CHECK(dev.comm_stream != dev.stream);
  CHECK(cuda::stream_for(dev) == dev.stream);
  {
    cuda::CommStreamScope scope(0);
    CHECK(cuda::stream_for(dev) == dev.comm_stream);
    GpuBuf<float> a(std::vector<float>{1, 2, 3}), b(std::vector<float>{10, 20, 30});
    gpu().reduce_into(ReduceKind::Sum, DType::Float32, a.get(), b.get(), 3);
    CHECK(cudaStreamSynchronize(dev.comm_stream) == cudaSuccess);
    CHECK(a.host() == std::vector<float>{11, 22, 33});
  }
  CHECK(cuda::stream_for(dev) == dev.stream);
}

TEST_CASE("more than 2^31 elements: fill, sum and the last element" * doctest::skip(!has_gpu())) {
  const int64_t n = (int64_t{1} << 31) + 77;
  cuda::bind(0);
  size_t free_b = 0, total_b = 0;
  REQUIRE(cudaMemGetInfo(&free_b, &total_b) == cudaSuccess);
  if (free_b < static_cast<std::size_t>(n) * sizeof(float) + (std::size_t{1} << 30)) {
    MESSAGE("skipped: the GPU has " << free_b << " bytes free, needs ~9 GiB");
    return;
  }
  const Device d("cuda:0");
  auto* x = static_cast<float*>(device_allocate(d, static_cast<std::size_t>(n) * sizeof(float)));
  gpu().fill(DType::Float32, x, n, 1.0);
  float sum = 0.0f, last = 0.0f;
  GpuBuf<float> out(1);
  gpu().reduce(ReduceKind::Sum, x, out.get(), 1, n, 1);
  sum = out.host()[0];
  gpu().copy_to_host(d, &last, x + n - 1, sizeof(float));
  CHECK(last == 1.0f);
  CHECK(sum == doctest::Approx(static_cast<double>(n)).epsilon(1e-6));
  device_free(d, x, static_cast<std::size_t>(n) * sizeof(float));
}
