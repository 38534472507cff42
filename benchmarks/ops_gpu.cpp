// ops_gpu.cpp (bench_ops_gpu): how close the CUDA backend gets to what the GPU can do.
//  - matmul n x n x n (n = 1024, 2048, 4096) through Backend::gemm vs cublasSgemm called
//    directly on the same buffers: the backend adds only a pointer lookup and a launch, so
//    anything far below 100% is a bug (a hidden transpose, a sync per call).
//  - add and relu on 64M floats vs cudaMemcpy device-to-device in the same run: all three
//    are memory-bound, so memcpy's bandwidth is the ceiling (add moves 12 B per element,
//    relu and memcpy 8 B).
// Prints a table and writes CSV (argv[1], default ops_gpu.csv). Without a GPU: prints
// "no GPU: skipped" and exits 0. Read next: framework/backend/cuda/cuda_backend.cpp.
#include <cublas_v2.h>
#include <cuda_runtime.h>

#include <chrono>
#include <cstdio>
#include <functional>
#include <string>
#include <vector>

#include "framework/backend/backend.h"
#include "framework/backend/cuda/cuda_backend.h"
#include "framework/backend/cuda/cuda_check.h"
#include "framework/tensor/allocator.h"

namespace {

using dplab::Backend;
using dplab::Device;

struct Row {
  std::string op, size, unit;
  double ms = 0, rate = 0, ref_rate = 0;
};

// Mean milliseconds per call of f, after warm-up, with `sync` ending each timed batch.
double time_ms(const std::function<void()>& f, const std::function<void()>& sync, int iters) {
  for (int i = 0; i < 3; ++i) f();
  sync();
  const auto t0 = std::chrono::steady_clock::now();
  for (int i = 0; i < iters; ++i) f();
  sync();
  const auto t1 = std::chrono::steady_clock::now();
  return std::chrono::duration<double, std::milli>(t1 - t0).count() / iters;
}

void run_matmul(Backend& be, Device d, int64_t n, std::vector<Row>& rows) {
  const std::size_t bytes = static_cast<std::size_t>(n * n) * sizeof(float);
  auto* a = static_cast<float*>(dplab::device_allocate(d, bytes));
  auto* b = static_cast<float*>(dplab::device_allocate(d, bytes));
  auto* c = static_cast<float*>(dplab::device_allocate(d, bytes));
  be.fill(dplab::DType::Float32, a, n * n, 0.01);
  be.fill(dplab::DType::Float32, b, n * n, 0.02);
  be.synchronize(d);

  dplab::GemmArgs g;
  g.M = g.N = g.K = n;
  const int iters = n >= 4096 ? 10 : 30;
  const double ms = time_ms([&] { be.gemm(g, a, b, c); }, [&] { be.synchronize(d); }, iters);

  // The same product straight through cuBLAS, on its own handle and the default stream.
  cublasHandle_t h = nullptr;
  CUBLAS_CHECK(cublasCreate(&h));
  const float alpha = 1.0f, beta = 0.0f;
  const int ni = static_cast<int>(n);
  const double ref_ms = time_ms(
      [&] {
        CUBLAS_CHECK(cublasSgemm(h, CUBLAS_OP_N, CUBLAS_OP_N, ni, ni, ni, &alpha, b, ni, a, ni,
                                 &beta, c, ni));
      },
      [] { CUDA_CHECK(cudaDeviceSynchronize()); }, iters);
  CUBLAS_CHECK(cublasDestroy(h));

  const double flops = 2.0 * static_cast<double>(n) * n * n;
  rows.push_back({"matmul", std::to_string(n) + "^3", "GFLOP/s", ms, flops / ms / 1e6,
                  flops / ref_ms / 1e6});
  for (float* p : {a, b, c}) dplab::device_free(d, p, bytes);
}

void run_elementwise(Backend& be, Device d, std::vector<Row>& rows) {
  const int64_t n = int64_t{64} << 20;  // 64M floats = 256 MiB per buffer
  const std::size_t bytes = static_cast<std::size_t>(n) * sizeof(float);
  auto* x = static_cast<float*>(dplab::device_allocate(d, bytes));
  auto* y = static_cast<float*>(dplab::device_allocate(d, bytes));
  auto* z = static_cast<float*>(dplab::device_allocate(d, bytes));
  be.fill(dplab::DType::Float32, x, n, -0.5);
  be.fill(dplab::DType::Float32, y, n, 1.5);
  be.synchronize(d);
  const int iters = 20;
  auto sync = [&] { be.synchronize(d); };

  const double copy_ms = time_ms(
      [&] { CUDA_CHECK(cudaMemcpy(z, x, bytes, cudaMemcpyDeviceToDevice)); },
      [] { CUDA_CHECK(cudaDeviceSynchronize()); }, iters);
  const double copy_gbs = 2.0 * bytes / copy_ms / 1e6;  // read + write

  dplab::Strided flat;
  flat.ndim = 1;
  flat.shape[0] = n;
  flat.strides[0] = 1;
  const double add_ms =
      time_ms([&] { be.binary(dplab::BinaryOp::Add, x, flat, y, flat, z); }, sync, iters);
  const double relu_ms =
      time_ms([&] { be.unary(dplab::UnaryOp::Relu, x, z, n, 0.0f); }, sync, iters);

  rows.push_back({"memcpy d2d", "64M", "GB/s", copy_ms, copy_gbs, copy_gbs});
  rows.push_back({"add", "64M", "GB/s", add_ms, 3.0 * bytes / add_ms / 1e6, copy_gbs});
  rows.push_back({"relu", "64M", "GB/s", relu_ms, 2.0 * bytes / relu_ms / 1e6, copy_gbs});
  for (float* p : {x, y, z}) dplab::device_free(d, p, bytes);
}

}  // namespace

int main(int argc, char** argv) {
  if (dplab::cuda_physical_device_count() == 0) {
    std::printf("no GPU: skipped\n");
    return 0;
  }
  const std::string csv_path = argc > 1 ? argv[1] : "ops_gpu.csv";
  try {
    const Device d("cuda:0");
    Backend& be = dplab::backend_for(d);
    cudaDeviceProp prop{};
    CUDA_CHECK(cudaGetDeviceProperties(&prop, 0));
    std::printf("GPU: %s\n", prop.name);
    std::vector<Row> rows;
    for (int64_t n : {1024, 2048, 4096}) run_matmul(be, d, n, rows);
    run_elementwise(be, d, rows);

    std::printf("%-12s %-8s %10s %12s %12s %8s\n", "op", "size", "ms", "rate", "reference",
                "% ref");
    std::FILE* csv = std::fopen(csv_path.c_str(), "w");
    if (csv != nullptr) std::fprintf(csv, "op,size,ms,rate,reference_rate,unit,percent\n");
    for (const Row& r : rows) {
      const double pct = 100.0 * r.rate / r.ref_rate;
      std::printf("%-12s %-8s %10.3f %8.1f %-3s %8.1f %-3s %7.1f%%\n", r.op.c_str(),
                  r.size.c_str(), r.ms, r.rate, r.unit.c_str(), r.ref_rate, r.unit.c_str(), pct);
      if (csv != nullptr) {
        std::fprintf(csv, "%s,%s,%.4f,%.2f,%.2f,%s,%.2f\n", r.op.c_str(), r.size.c_str(), r.ms,
                     r.rate, r.ref_rate, r.unit.c_str(), pct);
      }
    }
    if (csv != nullptr) {
      std::fclose(csv);
      std::printf("wrote %s (reference: cublasSgemm for matmul, cudaMemcpy D2D for the rest)\n",
                  csv_path.c_str());
    }
  } catch (const std::exception& e) {
    std::fprintf(stderr, "bench_ops_gpu: %s\n", e.what());
    return 1;
  }
  return 0;
}
