// allreduce_gpu.cpp (bench_allreduce_gpu, also `bench_allreduce --device cuda`): the ring
// all-reduce over the cuda_ipc transport, N ranks as processes on ONE GPU (logical devices
// cuda:0..N-1), float32 sizes 1 MiB .. 256 MiB, next to what a plain device-to-device copy
// (cudaMemcpyAsync D2D through the CUDA backend) reaches on the same GPU in the same run.
// busbw = 2(N-1)/N * S / t, as in bench_allreduce; copy GB/s = bytes copied / t. On one GPU
// every rank's copies and reduce kernels share the same HBM, so the D2D copy rate is the
// roof to compare with (a copy reads and writes each byte; so does a ring step).
// Ranks are started with spawn() (re-exec: CUDA does not survive fork). Without a GPU it
// says so and exits 0.
// Usage: bench_allreduce_gpu [--ranks 2,4] [--max-bytes 268435456]
// Read next: ../parallel/transport/cuda_ipc_transport.cpp, allreduce.cpp.
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <map>
#include <string>
#include <vector>

#include "framework/backend/backend.h"
#include "framework/tensor/tensor.h"
#include "parallel/comm/init.h"
#include "parallel/comm/process_group.h"
#include "parallel/launch/spawn.h"

using namespace dplab;
using namespace dplab::parallel;

namespace {

using Clock = std::chrono::steady_clock;

int iterations_for(int64_t bytes) {
  return static_cast<int>(std::clamp<int64_t>((int64_t{2} << 30) / bytes, 5, 100));
}

std::vector<int64_t> sizes_up_to(int64_t max_bytes) {
  std::vector<int64_t> sizes;
  for (int64_t b = int64_t{1} << 20; b <= max_bytes; b *= 4) sizes.push_back(b);
  return sizes;
}

// One rank: times the ring on cuda:rank for every size; rank 0 appends "n bytes secs" lines
// to the file named by DPLAB_BENCH_GPU_OUT. Times are the slowest rank's.
void rank_main(int rank, int n, const std::vector<int64_t>& sizes) {
  init_process_group({.timeout = Seconds(120.0)});
  ProcessGroup& pg = default_process_group();
  const Device gpu(DeviceKind::CUDA, rank);
  std::string lines;
  for (int64_t bytes : sizes) {
    Tensor t = Tensor::empty({bytes / 4}, {.device = gpu});
    t.fill_(1.0);
    pg.all_reduce(t, parallel::ReduceOp::Sum, Algorithm::Ring);  // warm-up: opens nothing new, but
    pg.all_reduce(t, parallel::ReduceOp::Sum, Algorithm::Ring);  // fills the caches and the clocks
    const int iters = iterations_for(bytes);
    pg.barrier();
    auto t0 = Clock::now();
    for (int i = 0; i < iters; ++i) pg.all_reduce(t, parallel::ReduceOp::Sum, Algorithm::Ring);
    backend_for(gpu).synchronize(gpu);  // (the transport already waited for its last kernel)
    double secs = std::chrono::duration<double>(Clock::now() - t0).count() / iters;
    Tensor slowest = Tensor::empty({1});
    slowest.fill_(secs);
    pg.all_reduce(slowest, parallel::ReduceOp::Max, Algorithm::Star);
    lines += fmt::format("{} {} {:.9f}\n", n, bytes, slowest.item());
  }
  if (rank == 0) {
    std::ofstream out(std::getenv("DPLAB_BENCH_GPU_OUT"), std::ios::app);
    out << lines;
  }
  destroy_process_group();
}

// Device-to-device copy rate on cuda:0, bytes copied per second.
double d2d_seconds(int64_t bytes) {
  const Device gpu(DeviceKind::CUDA, 0);
  Tensor a = Tensor::empty({bytes / 4}, {.device = gpu}), b = Tensor::empty({bytes / 4}, {.device = gpu});
  a.fill_(1.0);
  Backend& be = backend_for(gpu);
  be.copy_device(gpu, b.raw_data(), gpu, a.raw_data(), static_cast<std::size_t>(bytes));  // warm-up
  be.synchronize(gpu);
  const int iters = iterations_for(bytes) * 4;
  auto t0 = Clock::now();
  for (int i = 0; i < iters; ++i)
    be.copy_device(gpu, b.raw_data(), gpu, a.raw_data(), static_cast<std::size_t>(bytes));
  be.synchronize(gpu);
  return std::chrono::duration<double>(Clock::now() - t0).count() / iters;
}

std::vector<int> parse_list(std::string s) {
  std::vector<int> out;
  while (!s.empty()) {
    out.push_back(std::atoi(s.c_str()));
    auto c = s.find(',');
    s = c == std::string::npos ? "" : s.substr(c + 1);
  }
  return out;
}

}  // namespace

int main(int argc, char** argv) {
  std::vector<int> ranks = {2, 4};
  int64_t max_bytes = int64_t{256} << 20;
  for (int i = 1; i < argc; ++i) {
    std::string a = argv[i];
    if (a == "--ranks" && i + 1 < argc) ranks = parse_list(argv[++i]);
    else if (a == "--max-bytes" && i + 1 < argc) max_bytes = std::atoll(argv[++i]);
    else if (a == "--device" && i + 1 < argc) ++i;  // forwarded by bench_allreduce: cuda
    else {
      std::fprintf(stderr, "usage: %s [--ranks 2,4] [--max-bytes N]\n", argv[0]);
      return 2;
    }
  }
  const std::vector<int64_t> sizes = sizes_up_to(max_bytes);
  if (!is_spawned_child()) {
    if (cuda_device_count() == 0) {
      std::printf("bench_allreduce_gpu: no GPU visible (CUDA compiled: %s): cuda_ipc benchmark "
                  "skipped\n", cuda_compiled() ? "yes" : "no");
      return 0;
    }
    const int most = *std::max_element(ranks.begin(), ranks.end());
    setenv("DPLAB_VIRTUAL_GPUS", std::to_string(std::max(most, 1)).c_str(), 1);  // inherited
    setenv("DPLAB_BENCH_GPU_OUT", fmt::format("/tmp/dplab-bench-gpu-{}", getpid()).c_str(), 1);
    std::remove(std::getenv("DPLAB_BENCH_GPU_OUT"));
  }
  try {
    for (int n : ranks) spawn([&](int rank) { rank_main(rank, n, sizes); }, n);
  } catch (const std::exception& e) {
    std::fprintf(stderr, "bench_allreduce_gpu: %s\n", e.what());
    return 1;
  }

  std::map<std::pair<int, int64_t>, double> secs;
  std::ifstream in(std::getenv("DPLAB_BENCH_GPU_OUT"));
  int n;
  long long bytes;
  double s;
  while (in >> n >> bytes >> s) secs[{n, bytes}] = s;
  std::remove(std::getenv("DPLAB_BENCH_GPU_OUT"));

  std::printf("all-reduce (ring) of float32 over cuda_ipc, N processes on one GPU "
              "(GB/s = 1e9 bytes/s)\n");
  std::printf("%2s %8s | %10s %8s %8s | %12s\n", "N", "size", "ring us", "algbw", "busbw",
              "D2D copy GB/s");
  std::map<int64_t, double> d2d;
  for (int64_t b : sizes) d2d[b] = d2d_seconds(b);
  for (int r : ranks)
    for (int64_t b : sizes) {
      auto it = secs.find({r, b});
      if (it == secs.end()) continue;
      double t = it->second;
      std::printf("%2d %5lld MiB | %10.1f %8.2f %8.2f | %12.2f\n", r,
                  static_cast<long long>(b >> 20), t * 1e6, b / t / 1e9,
                  2.0 * (r - 1) / r * b / t / 1e9, b / d2d[b] / 1e9);
    }
  std::printf("busbw = 2(N-1)/N * bytes / time; D2D = cudaMemcpyAsync device to device on "
              "cuda:0, same run\n");
  return 0;
}
