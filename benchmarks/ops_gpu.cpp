// ops_gpu.cpp (bench_ops_gpu): how close the CUDA backend gets to the GPU (issue #4 targets).
//  - matmul n^3 (n = 1024, 2048, 4096) through dplab::matmul (the op layer) and Backend::gemm,
//    each vs cublasSgemm called directly on the same buffers: target >= 90% (anything far
//    below is a bug: a hidden transpose, a sync per call).
//  - add and relu on 64M floats (op layer, backend) vs cudaMemcpy D2D in the same run: target
//    >= 75% (all memory-bound; add moves 12 B per element, relu and memcpy 8 B).
//  - reductions of the same 64M floats: the whole tensor (sum, max, argmax: outer = 1, the
//    two-pass kernels), the columns of [64, 1M] (few long columns) and the rows of [1M, 64]
//    (many short rows), each reading 4 B per element, vs the copy's read rate (half its
//    bytes): target >= 75% (a one-warp reduction was ~1%).
// Prints a table, writes CSV (argv[1], default ops_gpu.csv); without a GPU prints "no GPU:
// skipped" and exits 0. Read next: framework/backend/cuda/cuda_backend.cpp.
#include <cublas_v2.h>
#include <cuda_runtime.h>

#include <chrono>
#include <cstdio>
#include <functional>
#include <string>
#include <utility>
#include <vector>

#include "framework/backend/backend.h"
#include "framework/backend/cuda/cublas_library.h"
#include "framework/backend/cuda/cuda_backend.h"
#include "framework/backend/cuda/cuda_check.h"
#include "framework/ops/ops.h"

namespace {

using dplab::Backend;
using dplab::Device;
using dplab::Tensor;

struct Row {
  std::string op, layer, size, unit;
  double ms = 0, rate = 0, ref_rate = 0, target_pct = 0;
  double pct() const { return 100.0 * rate / ref_rate; }
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

void run_matmul(Device d, int64_t n, std::vector<Row>& rows) {
  Backend& be = dplab::backend_for(d);
  auto sync = [&] { be.synchronize(d); };
  Tensor a = dplab::full({n, n}, 0.01, {.device = d}), b = dplab::full({n, n}, 0.02, {.device = d});
  Tensor c = Tensor::empty({n, n}, {.device = d});
  sync();
  const int iters = n >= 4096 ? 10 : 30;

  // The op layer: the output comes from the caching allocator (reused after the first call).
  const double op_ms = time_ms([&] { Tensor r = dplab::matmul(a, b); }, sync, iters);
  // The backend's gemm into c, on the same buffers.
  dplab::GemmArgs g;
  g.M = g.N = g.K = n;
  const double be_ms =
      time_ms([&] { be.gemm(g, a.data<float>(), b.data<float>(), c.data<float>()); }, sync, iters);

  // The same product straight through cuBLAS (the backend's table of its entry points,
  // cublas_library.h), on its own handle and the default stream.
  // Row-major C = A B is column-major C^T = B^T A^T: B first (as the backend does).
  const dplab::cuda::CublasLibrary& blas = dplab::cuda::cublas();
  cublasHandle_t h = nullptr;
  CUBLAS_CHECK(blas.create(&h));
  const float alpha = 1.0f, beta = 0.0f;
  const int ni = static_cast<int>(n);
  const double ref_ms = time_ms(
      [&] {
    CUBLAS_CHECK(blas.sgemm(h, CUBLAS_OP_N, CUBLAS_OP_N, ni, ni, ni, &alpha, b.data<float>(), ni,
                            a.data<float>(), ni, &beta, c.data<float>(), ni));
      },
      [] { CUDA_CHECK(cudaDeviceSynchronize()); }, iters);
  CUBLAS_CHECK(blas.destroy(h));

  const double gflop = 2.0 * static_cast<double>(n) * n * n / 1e9;
  const std::string size = std::to_string(n) + "^3";
  rows.push_back(
      {"matmul", "op", size, "GFLOP/s", op_ms, gflop / op_ms * 1e3, gflop / ref_ms * 1e3, 90});
  rows.push_back(
      {"matmul", "backend", size, "GFLOP/s", be_ms, gflop / be_ms * 1e3, gflop / ref_ms * 1e3, 90});
  rows.push_back({"cublasSgemm", "direct", size, "GFLOP/s", ref_ms, gflop / ref_ms * 1e3,
                  gflop / ref_ms * 1e3, 0});
}

void run_elementwise(Device d, std::vector<Row>& rows) {
  Backend& be = dplab::backend_for(d);
  auto sync = [&] { be.synchronize(d); };
  const int64_t n = int64_t{64} << 20;  // 64M floats = 256 MiB per buffer
  const double bytes = static_cast<double>(n) * sizeof(float);
  Tensor x = dplab::full({n}, -0.5, {.device = d}), y = dplab::full({n}, 1.5, {.device = d});
  Tensor z = Tensor::empty({n}, {.device = d});
  sync();
  const int iters = 20;

  const double copy_ms = time_ms(
      [&] {
    CUDA_CHECK(cudaMemcpy(z.data<float>(), x.data<float>(), static_cast<size_t>(bytes),
                          cudaMemcpyDeviceToDevice));
      },
      [] { CUDA_CHECK(cudaDeviceSynchronize()); }, iters);
  const double copy_gbs = 2.0 * bytes / copy_ms / 1e6;  // read + write

  dplab::Strided flat;
  flat.ndim = 1;
  flat.shape[0] = n;
  flat.strides[0] = 1;
  const double add_op_ms = time_ms([&] { Tensor r = dplab::add(x, y); }, sync, iters);
  const double add_be_ms = time_ms(
      [&] {
    be.binary(dplab::BinaryOp::Add, x.data<float>(), flat, y.data<float>(), flat, z.data<float>());
      },
      sync, iters);
  const double relu_op_ms = time_ms([&] { Tensor r = dplab::relu(x); }, sync, iters);
  const double relu_be_ms =
      time_ms([&] { be.unary(dplab::UnaryOp::Relu, x.data<float>(), z.data<float>(), n, 0.0f); },
              sync, iters);

  rows.push_back({"memcpy d2d", "direct", "64M", "GB/s", copy_ms, copy_gbs, copy_gbs, 0});
  rows.push_back(
      {"add", "op", "64M", "GB/s", add_op_ms, 3.0 * bytes / add_op_ms / 1e6, copy_gbs, 75});
  rows.push_back(
      {"add", "backend", "64M", "GB/s", add_be_ms, 3.0 * bytes / add_be_ms / 1e6, copy_gbs, 75});
  rows.push_back(
      {"relu", "op", "64M", "GB/s", relu_op_ms, 2.0 * bytes / relu_op_ms / 1e6, copy_gbs, 75});
  rows.push_back(
      {"relu", "backend", "64M", "GB/s", relu_be_ms, 2.0 * bytes / relu_be_ms / 1e6, copy_gbs, 75});

  // Reductions read 4 B per element and write almost nothing: compare with the copy's read
  // rate, bytes / copy_ms (the copy reads and writes them).
  const double read_gbs = bytes / copy_ms / 1e6;
  Tensor out = Tensor::empty({int64_t{1} << 20}, {.dtype = dplab::DType::Int64, .device = d});
  struct Shape {
    const char* name;
    const char* size;
    int64_t outer, r, inner;
  };
  const Shape shapes[] = {{"all", "64M", 1, n, 1},
                          {"columns", "64x1M", 1, 64, int64_t{1} << 20},
                          {"rows", "1Mx64", int64_t{1} << 20, 64, 1},
                          {"columns", "1Mx64", 1, int64_t{1} << 20, 64}};
  for (const Shape& sh : shapes) {
    for (auto [op, op_name] :
         {std::pair{dplab::ReduceKind::Sum, "sum"}, std::pair{dplab::ReduceKind::Max, "max"},
          std::pair{dplab::ReduceKind::ArgMax, "argmax"}}) {
      const double ms =
          time_ms([&] { be.reduce(op, x.data<float>(), out.raw_data(), sh.outer, sh.r, sh.inner); },
                  sync, iters);
      rows.push_back({std::string(op_name) + " " + sh.name, "backend", sh.size, "GB/s", ms,
                      bytes / ms / 1e6, read_gbs, 75});
    }
  }
  const double sum_op_ms = time_ms([&] { Tensor r = dplab::sum(x); }, sync, iters);
  rows.push_back(
      {"sum all", "op", "64M", "GB/s", sum_op_ms, bytes / sum_op_ms / 1e6, read_gbs, 75});
}

}  // namespace

int main(int argc, char** argv) {
  if (dplab::cuda_physical_device_count() == 0) {
    std::printf("no GPU: skipped (bench_ops_gpu needs a CUDA GPU; none is visible)\n");
    return 0;
  }
  const std::string csv_path = argc > 1 ? argv[1] : "ops_gpu.csv";
  try {
    const Device d("cuda:0");
    cudaDeviceProp prop{};
    CUDA_CHECK(cudaGetDeviceProperties(&prop, 0));
    std::printf("GPU: %s\n", prop.name);
    std::vector<Row> rows;
    for (int64_t n : {1024, 2048, 4096}) run_matmul(d, n, rows);
    run_elementwise(d, rows);

    std::printf("%-16s %-8s %-8s %10s %12s %16s %8s %8s\n", "op", "layer", "size", "ms", "rate",
                "reference", "% ref", "target");
    std::FILE* csv = std::fopen(csv_path.c_str(), "w");
    if (csv != nullptr) {
      std::fprintf(csv, "op,layer,size,ms,rate,reference_rate,unit,percent,target_percent,met\n");
    }
    for (const Row& r : rows) {
      const bool has_target = r.target_pct > 0;
      const char* met = !has_target ? "" : r.pct() >= r.target_pct ? "met" : "MISSED";
      const std::string target =
          has_target ? ">=" + std::to_string(static_cast<int>(r.target_pct)) + "% " + met : "";
      std::printf("%-16s %-8s %-8s %10.3f %8.1f %-7s %8.1f %-7s %7.1f%% %s\n", r.op.c_str(),
                  r.layer.c_str(), r.size.c_str(), r.ms, r.rate, r.unit.c_str(), r.ref_rate,
                  r.unit.c_str(), r.pct(), target.c_str());
      if (csv != nullptr) {
        std::fprintf(csv, "%s,%s,%s,%.4f,%.2f,%.2f,%s,%.2f,%.0f,%s\n", r.op.c_str(),
                     r.layer.c_str(), r.size.c_str(), r.ms, r.rate, r.ref_rate, r.unit.c_str(),
                     r.pct(), r.target_pct, met);
      }
    }
    if (csv != nullptr) {
      std::fclose(csv);
      std::printf("wrote %s (reference: cublasSgemm on the same buffers for matmul, cudaMemcpy "
                  "D2D in this run for add and relu, its read rate for reductions)\n",
                  csv_path.c_str());
    }
  } catch (const std::exception& e) {
    std::fprintf(stderr, "bench_ops_gpu: %s\n", e.what());
    return 1;
  }
  return 0;
}
