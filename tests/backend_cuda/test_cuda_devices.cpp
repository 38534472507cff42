// test_cuda_devices.cpp: logical devices (cuda:k beyond the physical count only with
// virtual GPUs, and mapped to GPU k % M), copies between them, per-device memory stats,
// the caching allocator (a freed block is reused without growing reserved bytes), and
// CudaError messages. The last case runs only where there is NO GPU and checks the
// no-driver path: a count of 0 and a clear Error, never a crash.
// Doctest runs cases in file order, so the "no virtual GPUs yet" case comes first.
#include <doctest/doctest.h>

#include <cstdlib>

#include "framework/backend/cuda/cuda_allocator.h"
#include "framework/backend/cuda/cuda_check.h"
#include "framework/backend/cuda/cuda_devices.h"
#include "framework/backend/cuda/virtual_gpus.h"
#include "tests/backend_test_util.h"

namespace dplab::test {

TEST_CASE("cuda:k past the physical GPUs is an Error that counts them" *
          doctest::skip(!has_gpu())) {
  if (std::getenv("DPLAB_VIRTUAL_GPUS") != nullptr) return;  // the user asked for sharing
  const int m = cuda_physical_device_count();
  CHECK(cuda_logical_device_count() == m);
  const std::string expected = std::to_string(m) + " physical GPU(s)";
  CHECK_THROWS_WITH_AS(device_allocate(Device(DeviceKind::CUDA, m), 64),
                       doctest::Contains(expected.c_str()), Error);
}

TEST_CASE("virtual GPUs map cuda:k to k % M, with their own stream and memory" *
          doctest::skip(!has_gpu())) {
  const int m = cuda_physical_device_count();
  const int n = 2 * m + 1;
  set_virtual_gpus(n);
  CHECK(cuda_logical_device_count() == n);
  CHECK(cuda::logical_device(m).physical == 0);
  CHECK(cuda::logical_device(n - 1).physical == (n - 1) % m);
  CHECK(cuda::logical_device(m).stream != cuda::logical_device(0).stream);
  CHECK_THROWS_AS(cuda::logical_device(n), Error);
  CHECK_THROWS_AS(set_virtual_gpus(0), Error);

  // memory is counted per logical device even when they share one GPU
  const Device d0("cuda:0"), dk(DeviceKind::CUDA, m);
  const int64_t before0 = memory_stats(d0).allocated_bytes;
  const int64_t beforek = memory_stats(dk).allocated_bytes;
  std::vector<float> x = random_vec(100003, 1, -2.0f, 2.0f);
  {
    GpuBuf<float> a(x, d0), b(x.size(), dk);
    CHECK(memory_stats(dk).allocated_bytes == beforek + static_cast<int64_t>(x.size() * 4));
    CHECK(memory_stats(d0).allocated_bytes == before0 + static_cast<int64_t>(x.size() * 4));
    // a kernel queued on cuda:0 then a copy to cuda:m: the event fence orders them
    gpu().unary(UnaryOp::MulScalar, a.get(), a.get(), static_cast<int64_t>(x.size()), 3.0f);
    gpu().copy_device(dk, b.get(), d0, a.get(), x.size() * 4);
    std::vector<float> ref(x.size());
    for (std::size_t i = 0; i < x.size(); ++i) ref[i] = x[i] * 3.0f;
    check_close(b.host(), ref, "copy_device cuda:0 -> cuda:m");
    // and back, within one logical device and to another
    GpuBuf<float> c(x.size(), d0);
    gpu().copy_device(d0, c.get(), dk, b.get(), x.size() * 4);
    check_close(c.host(), ref, "copy_device cuda:m -> cuda:0");
  }
  CHECK(memory_stats(dk).allocated_bytes == beforek);
}

TEST_CASE("the caching allocator reuses freed blocks" * doctest::skip(!has_gpu())) {
  const Device d("cuda:0");
  cuda_empty_cache(0);
  const int64_t base = memory_stats(d).reserved_bytes;
  void* p = device_allocate(d, 1000);  // rounds to 1024
  CHECK(memory_stats(d).reserved_bytes == base + 1024);
  std::size_t offset = 99;
  CHECK(cuda_block_base(static_cast<char*>(p) + 200, &offset) == p);
  CHECK(offset == 200);
  device_free(d, p, 1000);
  CHECK(memory_stats(d).reserved_bytes == base + 1024);  // freed, but still cached
  void* q = device_allocate(d, 1001);                    // same bucket: no new cudaMalloc
  CHECK(q == p);
  CHECK(memory_stats(d).reserved_bytes == base + 1024);
  void* big = device_allocate(d, (3 << 20) + 5);  // large: 2 MiB granularity -> 4 MiB
  CHECK(memory_stats(d).reserved_bytes == base + 1024 + (4 << 20));
  device_free(d, big, (3 << 20) + 5);
  device_free(d, q, 1001);
  cuda_empty_cache(0);
  CHECK(memory_stats(d).reserved_bytes == base);
  int host_value = 0;
  CHECK_THROWS_WITH_AS(gpu().fill(DType::Float32, &host_value, 1, 0.0),
                       doctest::Contains("not memory of a live CUDA tensor"), Error);
}

TEST_CASE("CUDA and cuBLAS failures throw CudaError naming call, error and device" *
          doctest::skip(!has_gpu())) {
  cuda::bind(0);
  CHECK_THROWS_WITH_AS(CUDA_CHECK(cudaErrorMemoryAllocation),
                       doctest::Contains("cudaErrorMemoryAllocation"), CudaError);
  CHECK_THROWS_WITH_AS(CUDA_CHECK(cudaErrorInvalidValue), doctest::Contains("on cuda:0"),
                       CudaError);
  CHECK_THROWS_WITH_AS(CUBLAS_CHECK(CUBLAS_STATUS_INVALID_VALUE),
                       doctest::Contains("CUBLAS_STATUS_INVALID_VALUE"), CudaError);
  // a real failure: more memory than any GPU has
  CHECK_THROWS_WITH_AS(device_allocate(Device("cuda:0"), std::size_t{1} << 50),
                       doctest::Contains("cudaMalloc"), CudaError);
}

TEST_CASE("without a GPU the CUDA backend reports 0 devices and clear Errors" *
          doctest::skip(has_gpu())) {
  CHECK(cuda_physical_device_count() == 0);
  CHECK(cuda_device_count() == 0);
  CHECK(cuda_logical_device_count() == 0);
  CHECK(cuda_compiled());
  CHECK_THROWS_WITH_AS(backend_for(Device("cuda:0")), doctest::Contains("no CUDA GPU"), Error);
  CHECK_THROWS_WITH_AS(device_allocate(Device("cuda:1"), 16), doctest::Contains("no CUDA GPU"),
                       Error);
  set_virtual_gpus(4);  // allowed, and still no device
  CHECK(cuda_logical_device_count() == 0);
}

}  // namespace dplab::test
