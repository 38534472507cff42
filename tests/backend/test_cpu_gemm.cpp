// test_cpu_gemm.cpp: the CPU GEMM against a naive loop, once per build of its kernel
// (baseline and AVX-512, cpu_dispatch.h): every transpose combination, alpha/beta, batch strides,
// columns split over threads, NaN in C with beta = 0, and concurrent callers. The AVX-512
// cases report "skipped" on a CPU without AVX-512. Then the choice of kernel itself.
#include <doctest/doctest.h>

#include <cstdlib>
#include <limits>
#include <thread>

#include "framework/backend/cpu/cpu_backend.h"
#include "framework/backend/cpu/cpu_dispatch.h"
#include "framework/backend/cpu/cpu_threads.h"
#include "framework/error.h"
#include "tests/backend_test_util.h"
#include "tests/thread_count_scope.h"

using namespace dplab;
using namespace dplab::test;

namespace {

// Runs the test body with `isa` chosen, and puts the previous choice back afterwards.
struct IsaScope {
  GemmIsa before = gemm_isa();
  explicit IsaScope(GemmIsa isa) { set_gemm_isa(isa); }
  ~IsaScope() { set_gemm_isa(before); }
};

void check_transposes_alpha_beta_batches_threads() {
  const int64_t B = 3;
  // N = 13 on one thread; N = 301 on three, where C's columns are split 100/100/101 between
  // threads (cpu_gemm.cpp), so every slice's pointer and stride arithmetic is exercised; and a
  // narrow C with many rows (M = 700, N = 13) on three, where its rows are split instead.
  struct Shape3 {
    int64_t M, N, K;
    int threads;
  };
  for (auto [M, N, K, threads] :
       {Shape3{7, 13, 5, 1}, Shape3{7, 301, 5, 3}, Shape3{700, 13, 300, 3}}) {
    testing::ThreadCountScope scope(threads);
    if (!scope.available()) {
      MESSAGE("skipping ", threads, " threads: built without OpenMP");
      continue;
    }
    for (bool ta : {false, true})
      for (bool tb : {false, true})
        for (int64_t stride_b_mult : {0, 1}) {  // 0: one B shared by every batch entry
          CAPTURE(M);
          CAPTURE(N);
          CAPTURE(ta);
          CAPTURE(tb);
          CAPTURE(stride_b_mult);
          GemmArgs g{.batch = B,
                     .M = M,
                     .N = N,
                     .K = K,
                     .trans_a = ta,
                     .trans_b = tb,
                     .stride_a = M * K,
                     .stride_b = stride_b_mult * K * N,
                     .stride_c = M * N,
                     .alpha = 0.5f,
                     .beta = 0.25f};
          std::vector<float> a = random_vec(B * M * K, 20), b = random_vec(B * K * N, 21);
          std::vector<float> c = random_vec(B * M * N, 22), ref(c.size());
          for (int64_t p = 0; p < B; ++p)
            for (int64_t i = 0; i < M; ++i)
              for (int64_t j = 0; j < N; ++j) {
                double s = 0;
                for (int64_t k = 0; k < K; ++k) {
                  double av = a[p * g.stride_a + (ta ? k * M + i : i * K + k)];
                  double bv = b[p * g.stride_b + (tb ? j * K + k : k * N + j)];
                  s += av * bv;
                }
                const int64_t ci = p * g.stride_c + i * N + j;
                ref[ci] = static_cast<float>(0.5 * s + 0.25 * c[ci]);
              }
          cpu().gemm(g, a.data(), b.data(), c.data());
          check_all_close(c, ref, 1e-5, 1e-5);
        }
  }
}

void check_beta_zero_and_large_square() {
  const int64_t n = 67;  // past Eigen's small-matrix path, so the blocked GEMM runs
  std::vector<float> a = random_vec(n * n, 30), b = random_vec(n * n, 31);
  std::vector<float> c(n * n, std::numeric_limits<float>::quiet_NaN()), ref(n * n);
  for (int64_t i = 0; i < n; ++i)
    for (int64_t j = 0; j < n; ++j) {
      double s = 0;
      for (int64_t k = 0; k < n; ++k) s += static_cast<double>(a[i * n + k]) * b[k * n + j];
      ref[i * n + j] = static_cast<float>(s);
    }
  cpu().gemm(GemmArgs{.M = n, .N = n, .K = n}, a.data(), b.data(), c.data());
  check_all_close(c, ref, 1e-4, 1e-4);
  // K = 0: C = beta * C
  std::vector<float> c2 = {1, 2};
  cpu().gemm(GemmArgs{.M = 1, .N = 2, .K = 0, .beta = 3.0f}, a.data(), b.data(), c2.data());
  CHECK(c2 == std::vector<float>{3, 6});
}

// DataParallel runs one replica per thread, each calling GEMM at the same time.
void check_concurrent_callers() {
  const int64_t n = 96;
  std::vector<float> a = random_vec(n * n, 32), b = random_vec(n * n, 33), ref(n * n);
  cpu().gemm(GemmArgs{.M = n, .N = n, .K = n}, a.data(), b.data(), ref.data());
  std::vector<std::vector<float>> out(4, std::vector<float>(n * n));
  std::vector<std::thread> threads;
  for (int t = 0; t < 4; ++t) {
    threads.emplace_back([&, t] {
      for (int rep = 0; rep < 5; ++rep)
        cpu().gemm(GemmArgs{.M = n, .N = n, .K = n}, a.data(), b.data(), out[t].data());
    });
  }
  for (std::thread& th : threads) th.join();
  for (int t = 0; t < 4; ++t) CHECK(out[t] == ref);
}

void check_every_case(GemmIsa isa) {
  IsaScope scope(isa);
  SUBCASE("every transpose combination, alpha/beta, batch strides, split over threads") {
    check_transposes_alpha_beta_batches_threads();
  }
  SUBCASE("beta = 0 ignores NaN in C; a large square product is right") {
    check_beta_zero_and_large_square();
  }
  SUBCASE("called from four threads at once, it matches the single-thread result") {
    check_concurrent_callers();
  }
}

}  // namespace

TEST_CASE("gemm, baseline kernel (AVX2 + FMA on x86-64)") { check_every_case(GemmIsa::Baseline); }

TEST_CASE("gemm, AVX-512 kernel" * doctest::skip(!gemm_isa_available(GemmIsa::Avx512))) {
  check_every_case(GemmIsa::Avx512);
}

TEST_CASE("gemm kernel choice: the best available by default, names parsed, bad ones refused") {
  const bool avx512 = gemm_isa_available(GemmIsa::Avx512);
  CHECK(gemm_isa_available(GemmIsa::Baseline));
  // The default is AVX-512 where available, unless DPLAB_GEMM_ISA chose.
  if (std::getenv("DPLAB_GEMM_ISA") == nullptr)
    CHECK(gemm_isa() == (avx512 ? GemmIsa::Avx512 : GemmIsa::Baseline));
  CHECK(parse_gemm_isa("baseline") == GemmIsa::Baseline);
  CHECK(parse_gemm_isa("avx512") == GemmIsa::Avx512);
  CHECK(std::string(gemm_isa_name(GemmIsa::Avx512)) == "avx512");
  CHECK_THROWS_WITH_AS(parse_gemm_isa("avx2"),
                       doctest::Contains("expected 'baseline' or 'avx512', got 'avx2'"), Error);
  if (!avx512) {
    CHECK_THROWS_WITH_AS(set_gemm_isa(GemmIsa::Avx512), doctest::Contains("use baseline"), Error);
    CHECK(gemm_isa() == GemmIsa::Baseline);
  }
}

// cpu_dispatch.h decides every kernel in one place: the float16 conversions follow the GEMM's
// instruction set (they once took AVX-512 whatever DPLAB_GEMM_ISA said), and
// kernels_summary() names what the settings choose.
TEST_CASE(
    "cpu_dispatch: float16 conversions follow the instruction set; the summary names the kernels") {
  const GemmIsa isa0 = gemm_isa();
  const GemmAlgorithm gemm0 = gemm_algorithm();
  const ConvAlgorithm conv0 = conv_algorithm();
  const bool fuse0 = fused_conv();
  set_gemm_isa(GemmIsa::Baseline);
  CHECK(half_path() != HalfPath::Avx512);  // nobody in this program set a path of its own
  CHECK(half_path() == (half_path_available(HalfPath::F16c) ? HalfPath::F16c : HalfPath::Scalar));
  set_gemm_algorithm(GemmAlgorithm::Eigen);
  set_conv_algorithm(ConvAlgorithm::Im2col);
  std::string s = kernels_summary();
  CAPTURE(s);
  CHECK(s.find("GEMM reference eigen on baseline, convolution reference im2col, float16 ") == 0);
  CHECK(s.find("fused") == std::string::npos);  // fusion needs the direct convolution
  if (gemm_isa_available(GemmIsa::Avx512)) {
    set_gemm_isa(GemmIsa::Avx512);
    CHECK(half_path() == HalfPath::Avx512);
    set_gemm_algorithm(GemmAlgorithm::Auto);  // auto: direct on avx512
    set_conv_algorithm(ConvAlgorithm::Direct);
    set_fused_conv(true);
    s = kernels_summary();
    CHECK(s.find("GEMM fast direct on avx512, convolution fast direct + fused ReLU/max-pool, "
                 "float16 avx512, ") == 0);
  }
  // DPLAB_FUSE is the backend's: conv2d_relu_max_pool2d asks it whether it fuses
  set_fused_conv(false);
  CHECK_FALSE(cpu_backend().fuses_conv_relu_pool());
  set_fused_conv(true);
  CHECK(cpu_backend().fuses_conv_relu_pool());
  set_gemm_isa(isa0);
  set_gemm_algorithm(gemm0);
  set_conv_algorithm(conv0);
  set_fused_conv(fuse0);
}
