// bench_ops: how fast dplab's core ops run on the CPU, and how far they are from Eigen.
// Matmul [n,n]@[n,n] for n = 256, 512, 1024 three ways on the same buffers: through the op
// layer (dplab::matmul: checks, output allocation, dispatch), through the backend's gemm
// kernel alone, and Eigen's product called directly (ops_eigen_direct.cpp). The target is
// op layer within 1.5x of Eigen. Then conv2d forward + backward on a Fashion-MNIST batch
// (LeNet's two layers; DPLAB_CONV=im2col times the reference instead of the direct kernel),
// and the GEMMs of the MLP's training step on dplab's direct kernel and on Eigen.
// Prints a table, writes a CSV (--csv). Each figure is the best of several timed runs (the
// machine is shared: interference only ever adds time), on the thread CPU clock when single-threaded. Read next: framework/backend/cpu/cpu_gemm.cpp.
#include <CLI/CLI.hpp>
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <ctime>
#include <fstream>
#include <functional>
#include <string>
#include <vector>

#if defined(__FMA__) && defined(__AVX2__)
#include <immintrin.h>
#endif

#include "benchmarks/ops_eigen_direct.h"
#include "framework/autograd/grad_mode.h"
#include "framework/backend/backend.h"
#include "framework/backend/cpu/cpu_dispatch.h"
#include "framework/backend/cpu/cpu_threads.h"
#include "framework/ops/ops.h"

namespace {

using Clock = std::chrono::steady_clock;

double seconds_since(Clock::time_point t0) {
  return std::chrono::duration<double>(Clock::now() - t0).count();
}

// With one thread, time on this thread's CPU clock: on a shared 2-core machine the wall clock
// also counts the time other processes held the core, which says nothing about the kernel.
// With several threads the work runs on OpenMP threads too, so only wall time means anything.
bool g_use_thread_clock = true;

double now_s() {
  if (g_use_thread_clock) {
    timespec ts{};
    clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts);
    return static_cast<double>(ts.tv_sec) + static_cast<double>(ts.tv_nsec) * 1e-9;
  }
  return std::chrono::duration<double>(Clock::now().time_since_epoch()).count();
}

// Runs each function once to warm up, then in rounds (interleaved, so slow phases of the
// machine hit all of them alike) until `budget_s` has passed and at least 3 rounds ran.
// Returns the best time of each, in seconds.
std::vector<double> best_times(const std::vector<std::function<void()>>& fns, double budget_s) {
  std::vector<double> best(fns.size(), 1e30);
  for (const auto& f : fns) f();
  Clock::time_point start = Clock::now();
  for (int round = 0; round < 3 || (seconds_since(start) < budget_s && round < 1000); ++round) {
    for (std::size_t i = 0; i < fns.size(); ++i) {
      const double t0 = now_s();
      fns[i]();
      best[i] = std::min(best[i], now_s() - t0);
    }
  }
  return best;
}

// Single-thread FMA peak: 10 independent accumulators hide the 4-5 cycle FMA latency on two
// FMA ports, so the loop runs at the issue rate: 2 ports x 8 floats x 2 flops per cycle.
double measured_fma_peak_gflops() {
#if defined(__FMA__) && defined(__AVX2__)
  constexpr int kAcc = 10;
  constexpr int64_t kIters = 20'000'000;
  // Named variables, not an array: an array would live in memory and every FMA would wait
  // on a store and a load.
  __m256 a0 = _mm256_set1_ps(0.0f), a1 = _mm256_set1_ps(0.1f), a2 = _mm256_set1_ps(0.2f),
         a3 = _mm256_set1_ps(0.3f), a4 = _mm256_set1_ps(0.4f), a5 = _mm256_set1_ps(0.5f),
         a6 = _mm256_set1_ps(0.6f), a7 = _mm256_set1_ps(0.7f), a8 = _mm256_set1_ps(0.8f),
         a9 = _mm256_set1_ps(0.9f);
  const __m256 mul = _mm256_set1_ps(0.999999f), add = _mm256_set1_ps(1e-7f);
  double best = 1e30;
  for (int rep = 0; rep < 3; ++rep) {
    const double t0 = now_s();
    for (int64_t it = 0; it < kIters; ++it) {
      a0 = _mm256_fmadd_ps(a0, mul, add);
      a1 = _mm256_fmadd_ps(a1, mul, add);
      a2 = _mm256_fmadd_ps(a2, mul, add);
      a3 = _mm256_fmadd_ps(a3, mul, add);
      a4 = _mm256_fmadd_ps(a4, mul, add);
      a5 = _mm256_fmadd_ps(a5, mul, add);
      a6 = _mm256_fmadd_ps(a6, mul, add);
      a7 = _mm256_fmadd_ps(a7, mul, add);
      a8 = _mm256_fmadd_ps(a8, mul, add);
      a9 = _mm256_fmadd_ps(a9, mul, add);
      // Keeps the loop from being folded away, at no cost (an empty asm in registers).
      asm volatile(""
                   : "+x"(a0), "+x"(a1), "+x"(a2), "+x"(a3), "+x"(a4), "+x"(a5), "+x"(a6), "+x"(a7),
                     "+x"(a8), "+x"(a9));
    }
    best = std::min(best, now_s() - t0);
  }
  return static_cast<double>(kIters) * kAcc * 8 * 2 / best * 1e-9;
#else
  return 0.0;  // not built for AVX2 + FMA: only the theoretical figure is printed
#endif
}

double cpu_mhz() {
  std::ifstream in("/proc/cpuinfo");
  std::string line;
  while (std::getline(in, line)) {
    if (line.rfind("cpu MHz", 0) == 0) {
      std::size_t colon = line.find(':');
      if (colon != std::string::npos) return std::stod(line.substr(colon + 1));
    }
  }
  return 0.0;
}

struct Row {
  std::string bench, shape;
  double op_ms = 0, op_gflops = 0, backend_gflops = 0, eigen_gflops = 0;
};

// The GEMMs of the MLP's training step (784-256-128-10 at batch `n`), as nn::Linear calls
// them (ops/matmul.cpp): the forward x @ W^T (bias pre-filled, beta 1), the weight gradient
// g^T @ x and the input gradient g @ W. The small last layer is left out.
struct StepGemm {
  const char* name;
  dplab::GemmArgs args;
};
std::vector<StepGemm> mlp_step_gemms(int64_t n) {
  return {{"forward x @ W1^T", {.M = n, .N = 256, .K = 784, .trans_b = true, .beta = 1.0f}},
          {"forward h1 @ W2^T", {.M = n, .N = 128, .K = 256, .trans_b = true, .beta = 1.0f}},
          {"weight grad g1^T @ x", {.M = 256, .N = 784, .K = n, .trans_a = true}},
          {"weight grad g2^T @ h1", {.M = 128, .N = 256, .K = n, .trans_a = true}},
          {"input grad g2 @ W2", {.M = n, .N = 256, .K = 128}}};
}

// Each step GEMM through Backend::gemm, once on dplab's direct kernel and once on Eigen
// (DPLAB_GEMM=direct / eigen), interleaved; prints a table and adds rows "mlp_gemm_direct"
// and "mlp_gemm_eigen" (op_ms / op_gflops) to `rows`.
void time_mlp_step_gemms(dplab::Backend& be, int64_t n, double budget, std::vector<Row>& rows) {
  std::printf("\nthe MLP's training-step GEMMs at batch %lld, through Backend::gemm:\n"
              "%-24s %-14s %10s %9s %10s %9s\n",
              static_cast<long long>(n), "gemm", "M x N x K", "direct us", "GFLOP/s", "Eigen us",
              "GFLOP/s");
  const dplab::GemmAlgorithm before = dplab::gemm_algorithm();
  for (const StepGemm& sg : mlp_step_gemms(n)) {
    const dplab::GemmArgs& g = sg.args;
    dplab::Tensor a = dplab::randn({g.M * g.K}), b = dplab::randn({g.K * g.N}),
                  c = dplab::randn({g.M * g.N});
    auto run_on = [&](dplab::GemmAlgorithm algorithm) {
      dplab::set_gemm_algorithm(algorithm);
      be.gemm(g, a.data<float>(), b.data<float>(), c.data<float>());
    };
    auto t = best_times({[&] { run_on(dplab::GemmAlgorithm::Direct); },
                         [&] { run_on(dplab::GemmAlgorithm::Eigen); }},
                        budget);
    const double flops = 2.0 * g.M * g.N * g.K;
    const std::string shape = fmt::format("{}x{}x{}", g.M, g.N, g.K);
    std::printf("%-24s %-14s %10.1f %9.1f %10.1f %9.1f\n", sg.name, shape.c_str(), t[0] * 1e6,
                flops / t[0] * 1e-9, t[1] * 1e6, flops / t[1] * 1e-9);
    for (int i = 0; i < 2; ++i)
      rows.push_back({i == 0 ? "mlp_gemm_direct" : "mlp_gemm_eigen",
                      fmt::format("{} {}", sg.name, shape), t[i] * 1e3, flops / t[i] * 1e-9, 0, 0});
  }
  dplab::set_gemm_algorithm(before);
}

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{"bench_ops: dplab op speed on the CPU against Eigen's own GEMM"};
  std::string csv_path = "ops.csv";
  int threads = 0;
  double budget = 0.5;
  std::vector<int64_t> sizes = {256, 512, 1024};
  app.add_option("--csv", csv_path, "where to write the CSV")->capture_default_str();
  app.add_option("--threads", threads, "CPU threads (default: DPLAB_NUM_THREADS, else 1)");
  app.add_option("--budget", budget, "seconds of timed runs per measurement")
      ->capture_default_str();
  app.add_option("--sizes", sizes, "matmul sizes n for [n,n]@[n,n]")->capture_default_str();
  int64_t mlp_batch = 64;
  app.add_option("--mlp-batch", mlp_batch,
                 "batch of the MLP step GEMMs timed direct vs Eigen (0: skip them)")
      ->capture_default_str()
      ->check(CLI::NonNegativeNumber);
  std::string gemm_isa = "baseline";
  app.add_option("--gemm-isa", gemm_isa,
                 "dplab's GEMM kernel: baseline (the build Eigen direct is) or avx512")
      ->capture_default_str();
  CLI11_PARSE(app, argc, argv);

  try {
    if (threads > 0) dplab::set_num_threads(threads);
    // Eigen direct is compiled with the build's flags, so the like-for-like comparison is
    // against dplab's baseline kernel; --gemm-isa avx512 shows what dispatch adds.
    dplab::set_gemm_isa(dplab::parse_gemm_isa(gemm_isa));
    const int nthreads = dplab::get_num_threads();
    const double mhz = cpu_mhz();
    const double theory = 2.0 * 8 * 2 * mhz * 1e-3;      // 2 FMA units x 8 floats x 2 flops x GHz
    const double measured = measured_fma_peak_gflops();  // one thread: on its CPU clock
    g_use_thread_clock = nthreads == 1;
    std::printf("bench_ops: %d thread(s) (Eigen reports %d); timed on the %s\nkernels: %s\n",
                nthreads, dplab::bench::eigen_threads(),
                g_use_thread_clock ? "thread's CPU clock" : "wall clock",
                dplab::kernels_summary().c_str());
    std::printf("single-thread peak context: AVX2 FMA loop measures %.1f GFLOP/s; theory "
                "2 FMA x 8 floats x 2 flops x %.2f GHz (/proc/cpuinfo) = %.1f GFLOP/s\n"
                "  (cpuinfo shows the nominal clock; turbo runs above it, so the loop can beat "
                "the theory figure)\n",
                measured, mhz * 1e-3, theory);

    std::vector<Row> rows;
    dplab::Backend& be = dplab::backend_for(dplab::Device("cpu"));
    for (int64_t n : sizes) {
      dplab::NoGradGuard no_grad;  // matmul rows time the forward only, with no graph kept
      dplab::Tensor a = dplab::randn({n, n}), b = dplab::randn({n, n});
      dplab::Tensor c_backend = dplab::Tensor::empty({n, n}),
                    c_eigen = dplab::Tensor::empty({n, n});
      dplab::Tensor sink;
      const float *pa = a.data<float>(), *pb = b.data<float>();
      auto t = best_times(
          {[&] { sink = dplab::matmul(a, b); },
           [&] { be.gemm({.M = n, .N = n, .K = n}, pa, pb, c_backend.data<float>()); },
           [&] { dplab::bench::eigen_gemm_direct(pa, pb, c_eigen.data<float>(), n, n, n); }},
          budget);
      const double flops = 2.0 * n * n * n;
      rows.push_back({"matmul", fmt::format("{0}x{0}x{0}", n), t[0] * 1e3, flops / t[0] * 1e-9,
                      flops / t[1] * 1e-9, flops / t[2] * 1e-9});
    }

    // conv2d forward + backward (weight, bias and input gradients), autograd on.
    struct Conv {
      int64_t N, C, H, O, k, pad;
    };
    for (Conv cv : {Conv{64, 1, 28, 16, 5, 2}, Conv{64, 16, 14, 32, 5, 2}}) {
      // The first layer's input (C = 1, the images) needs no gradient, as in training.
      const bool x_grad = cv.C > 1;
      dplab::Tensor x = dplab::randn({cv.N, cv.C, cv.H, cv.H}).requires_grad_(x_grad);
      dplab::Tensor w = dplab::randn({cv.O, cv.C, cv.k, cv.k}).requires_grad_();
      dplab::Tensor bias = dplab::zeros({cv.O}).requires_grad_();
      const int64_t oh = cv.H + 2 * cv.pad - cv.k + 1;
      dplab::Tensor gy = dplab::ones({cv.N, cv.O, oh, oh});
      auto t = best_times({[&] {
                            dplab::Tensor y = dplab::conv2d(x, w, bias, 1, cv.pad);
                            y.backward(gy);
                          }},
                          budget);
      // forward, dW and dx are each one GEMM of 2*N*O*C*k*k*oh*ow flops
      const double flops = (x_grad ? 3.0 : 2.0) * 2 * cv.N * cv.O * cv.C * cv.k * cv.k * oh * oh;
      rows.push_back({"conv2d_fwd_bwd",
                      fmt::format("x{}x{}x{}x{} w{}x{}x{}x{} pad{}{}", cv.N, cv.C, cv.H, cv.H, cv.O,
                                  cv.C, cv.k, cv.k, cv.pad, x_grad ? "" : " no dx"),
                      t[0] * 1e3, flops / t[0] * 1e-9, 0, 0});
    }

    if (mlp_batch > 0) time_mlp_step_gemms(be, mlp_batch, budget, rows);

    std::printf("\n%-15s %-34s %10s %12s %15s %13s %11s\n", "benchmark", "shape", "op ms",
                "op GFLOP/s", "kernel GFLOP/s", "Eigen GFLOP/s", "Eigen / op");
    for (const Row& r : rows) {
      if (r.bench.starts_with("mlp_gemm")) continue;  // in their own table above
      if (r.eigen_gflops > 0) {
        std::printf("%-15s %-34s %10.3f %12.1f %15.1f %13.1f %10.2fx\n", r.bench.c_str(),
                    r.shape.c_str(), r.op_ms, r.op_gflops, r.backend_gflops, r.eigen_gflops,
                    r.eigen_gflops / r.op_gflops);
      } else {
        std::printf("%-15s %-34s %10.3f %12.1f %15s %13s %11s\n", r.bench.c_str(), r.shape.c_str(),
                    r.op_ms, r.op_gflops, "-", "-", "-");
      }
    }
    std::printf(
        "(Eigen / op: how many times faster Eigen alone is than dplab::matmul; target <= 1.5x)\n");

    std::ofstream csv(csv_path);
    DPLAB_CHECK(csv.good(), "bench_ops: cannot open '{}' for writing", csv_path);
    csv << "benchmark,shape,threads,clock,op_ms,op_gflops,kernel_gflops,eigen_gflops,eigen_over_op,"
           "fma_peak_measured_gflops,fma_peak_theory_gflops\n";
    for (const Row& r : rows) {
      csv << fmt::format(
          "{},{},{},{},{:.4f},{:.2f},{},{},{},{:.1f},{:.1f}\n", r.bench, r.shape, nthreads,
          g_use_thread_clock ? "thread_cpu" : "wall", r.op_ms, r.op_gflops,
          r.backend_gflops > 0 ? fmt::format("{:.2f}", r.backend_gflops) : "",
          r.eigen_gflops > 0 ? fmt::format("{:.2f}", r.eigen_gflops) : "",
          r.eigen_gflops > 0 ? fmt::format("{:.3f}", r.eigen_gflops / r.op_gflops) : "", measured,
          theory);
    }
    std::printf("wrote %s\n", csv_path.c_str());
  } catch (const std::exception& e) {
    std::fprintf(stderr, "bench_ops: %s\n", e.what());
    return 1;
  }
  return 0;
}
