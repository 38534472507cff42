// allreduce_gpu.cpp (bench_allreduce_gpu, also `bench_allreduce --device cuda`): dplab's
// all-reduce algorithms over the cuda_ipc transport (ring, one-shot, recursive doubling,
// halving-doubling, star), N ranks as processes on ONE GPU (logical devices cuda:0..N-1),
// float32 sizes 1 MiB .. 256 MiB, next to what a plain device-to-device copy (cudaMemcpyAsync
// D2D through the CUDA backend) reaches on the same GPU in the same run; --nccl adds NCCL's
// all-reduce at N = 1 (NCCL allows one rank per GPU, so on one GPU that is its only shape).
// busbw = 2(N-1)/N * S / t, as in bench_allreduce; copy GB/s = bytes copied / t. On one GPU
// every rank's copies and reduce kernels share the same HBM, so the D2D copy rate is the
// roof to compare with (a copy reads and writes each byte; so does a ring step).
// Ranks are started with spawn() (re-exec: CUDA does not survive fork). Without a GPU it
// says so and exits 0.
// Usage: bench_allreduce_gpu [--ranks 2,4,8] [--algorithms ring,one_shot,...] [--nccl]
//                            [--max-bytes 268435456] [--csv out.csv]
// Read next: ../parallel/transport/cuda_ipc_transport.cpp, allreduce.cpp.
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <map>
#include <optional>
#include <sstream>
#include <string>
#include <tuple>
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

// One rank of one job: times each algorithm on cuda:rank for every size (the algorithms take
// turns within a size, so a slow stretch of the machine costs each one a row, not one all);
// rank 0 appends "name n bytes secs" lines to the file named by DPLAB_BENCH_GPU_OUT. Times
// are the slowest rank's. engine "nccl" runs NCCL's all-reduce (names = {"nccl"}).
void rank_main(int rank, int n, const std::string& engine, const std::vector<std::string>& names,
               const std::vector<int64_t>& sizes) {
  init_process_group({.engine = engine, .timeout = Seconds(120.0)});
  ProcessGroup& pg = default_process_group();
  const Device gpu(DeviceKind::CUDA, rank);
  std::string lines;
  for (int64_t bytes : sizes) {
    Tensor t = Tensor::empty({bytes / 4}, {.device = gpu});
    t.fill_(1.0);
    for (const std::string& name : names) {
      const std::optional<Algorithm> algorithm =
          engine == "nccl" ? std::nullopt : std::optional(algorithm_from_name(name));
      pg.all_reduce(t, ReduceOp::Sum, algorithm);  // warm-up: opens the peers' buffers,
      pg.all_reduce(t, ReduceOp::Sum, algorithm);  // fills the caches and the clocks
      const int iters = iterations_for(bytes);
      pg.barrier();
      auto t0 = Clock::now();
      for (int i = 0; i < iters; ++i) pg.all_reduce(t, ReduceOp::Sum, algorithm);
      backend_for(gpu).synchronize(gpu);  // (the transport already waited for its last kernel)
      double secs = std::chrono::duration<double>(Clock::now() - t0).count() / iters;
      Tensor slowest = Tensor::empty({1}, {.device = gpu});  // NCCL takes GPU tensors only
      slowest.fill_(secs);
      pg.all_reduce(slowest, ReduceOp::Max);
      lines += fmt::format("{} {} {} {:.9f}\n", name, n, bytes, slowest.item());
    }
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
  Tensor a = Tensor::empty({bytes / 4}, {.device = gpu}),
         b = Tensor::empty({bytes / 4}, {.device = gpu});
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

std::vector<std::string> split(const std::string& s) {
  std::vector<std::string> out;
  std::stringstream in(s);
  for (std::string item; std::getline(in, item, ',');)
    if (!item.empty()) out.push_back(item);
  return out;
}

std::vector<int> parse_ranks(const std::string& s) {
  std::vector<int> out;
  for (const std::string& item : split(s)) {
    char* end = nullptr;
    const long n = std::strtol(item.c_str(), &end, 10);
    DPLAB_CHECK(*end == '\0' && n >= 1 && n <= 64,
                "--ranks: expected a list of rank counts 1..64 like 2,4,8, got '{}'", s);
    out.push_back(static_cast<int>(n));
  }
  DPLAB_CHECK(!out.empty(), "--ranks: expected a list like 2,4,8, got '{}'", s);
  return out;
}

}  // namespace

int main(int argc, char** argv) {
  std::string ranks_arg = "2,4", algorithms_arg = "ring", csv;
  bool with_nccl = false;
  int64_t max_bytes = int64_t{256} << 20;
  for (int i = 1; i < argc; ++i) {
    std::string a = argv[i];
    if (a == "--ranks" && i + 1 < argc) ranks_arg = argv[++i];
    else if (a == "--algorithms" && i + 1 < argc) algorithms_arg = argv[++i];
    else if (a == "--max-bytes" && i + 1 < argc) max_bytes = std::atoll(argv[++i]);
    else if (a == "--csv" && i + 1 < argc) csv = argv[++i];
    else if (a == "--nccl") with_nccl = true;
    else if (a == "--device" && i + 1 < argc) ++i;  // forwarded by bench_allreduce: cuda
    else {
      std::fprintf(stderr,
                   "usage: %s [--ranks 2,4,8] [--algorithms ring,one_shot,"
                   "recursive_doubling,halving_doubling,star] [--nccl] [--max-bytes N] "
                   "[--csv FILE]\n",
                   argv[0]);
      return 2;
    }
  }
  try {
    const std::vector<int> ranks = parse_ranks(ranks_arg);
    const std::vector<std::string> names = split(algorithms_arg);
    for (const std::string& name : names) algorithm_from_name(name);  // refuses unknown names
    DPLAB_CHECK(max_bytes >= (int64_t{1} << 20), "--max-bytes: expected at least 1 MiB, got {}",
                max_bytes);
    const std::vector<int64_t> sizes = sizes_up_to(max_bytes);
    if (!is_spawned_child()) {
      if (cuda_device_count() == 0) {
        std::printf("bench_allreduce_gpu: no GPU visible (CUDA compiled: %s): cuda_ipc benchmark "
                    "skipped\n",
                    cuda_compiled() ? "yes" : "no");
        return 0;
      }
      const int most = *std::max_element(ranks.begin(), ranks.end());
      setenv("DPLAB_VIRTUAL_GPUS", std::to_string(std::max(most, 1)).c_str(), 1);  // inherited
      setenv("DPLAB_BENCH_GPU_OUT", fmt::format("/tmp/dplab-bench-gpu-{}", getpid()).c_str(), 1);
      std::remove(std::getenv("DPLAB_BENCH_GPU_OUT"));
    }
    for (int n : ranks) spawn([&](int rank) { rank_main(rank, n, "ring", names, sizes); }, n);
    if (with_nccl) spawn([&](int rank) { rank_main(rank, 1, "nccl", {"nccl"}, sizes); }, 1);

    std::map<std::tuple<std::string, int, int64_t>, double> secs;
    std::ifstream in(std::getenv("DPLAB_BENCH_GPU_OUT"));
    std::string name;
    int n;
    long long bytes;
    double s;
    while (in >> name >> n >> bytes >> s) secs[{name, n, bytes}] = s;
    std::remove(std::getenv("DPLAB_BENCH_GPU_OUT"));

    std::map<int64_t, double> d2d;
    for (int64_t b : sizes) d2d[b] = d2d_seconds(b);
    std::printf("all-reduce of float32, N processes on one GPU: dplab's algorithms over cuda_ipc"
                "%s (GB/s = 1e9 bytes/s)\n",
                with_nccl ? ", and NCCL at N = 1" : "");
    std::printf("%-19s %2s %8s | %10s %8s %8s | %12s\n", "algorithm", "N", "size", "time us",
                "algbw", "busbw", "D2D copy GB/s");
    std::string rows = "algorithm,ranks,bytes,seconds,algbw_gbps,busbw_gbps,d2d_copy_gbps\n";
    for (const auto& [key, t] : secs) {
      const auto& [algo, r, b] = key;
      const double busbw = 2.0 * (r - 1) / r * static_cast<double>(b) / t / 1e9;
      const double algbw = static_cast<double>(b) / t / 1e9,
                   copy = static_cast<double>(b) / d2d[b] / 1e9;
      std::printf("%-19s %2d %5lld MiB | %10.1f %8.2f %8.2f | %12.2f\n", algo.c_str(), r,
                  static_cast<long long>(b >> 20), t * 1e6, algbw, busbw, copy);
      rows +=
          fmt::format("{},{},{},{:.9f},{:.3f},{:.3f},{:.3f}\n", algo, r, b, t, algbw, busbw, copy);
    }
    std::printf("busbw = 2(N-1)/N * bytes / time (0 at N = 1: nothing crosses); D2D = "
                "cudaMemcpyAsync device to device on cuda:0, same run\n");
    if (!csv.empty()) {
      std::ofstream f(csv);
      DPLAB_CHECK(f.good(), "--csv: cannot write {}", csv);
      f << rows;
      std::printf("wrote %s\n", csv.c_str());
    }
  } catch (const std::exception& e) {
    std::fprintf(stderr, "bench_allreduce_gpu: %s\n", e.what());
    return 1;
  }
  return 0;
}
