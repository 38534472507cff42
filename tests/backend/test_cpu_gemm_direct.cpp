// test_cpu_gemm_direct.cpp: the direct GEMM kernel (backend/cpu/fast/cpu_gemm_direct_kernel.h), through
// CpuBackend::gemm, for the shapes cpu_gemm.cpp sends it: every transpose combination, beta 0
// (C full of NaN) and 1, batches with a shared B, row counts that leave partial blocks and
// widths that leave partial column blocks, on 1, 2 and 3 threads and in both builds.
// The kernel sums each C[m, n] over k in order with one FMA per product, so the reference is
// that same float loop and the results must agree to the bit (with a double-precision loop
// as a second, looser check), as must every thread count and both builds. The Eigen setting
// must still give the right numbers. AVX-512 cases report "skipped" on a CPU without it.
#include <doctest/doctest.h>

#include <cmath>
#include <cstdlib>
#include <limits>
#include <thread>

#include "framework/backend/cpu/cpu_dispatch.h"
#include "framework/error.h"
#include "tests/backend_test_util.h"
#include "tests/thread_count_scope.h"

using namespace dplab;
using namespace dplab::test;

namespace {

struct Choice {
  GemmIsa isa_before = gemm_isa();
  GemmAlgorithm algorithm_before = gemm_algorithm();
  Choice(GemmIsa isa, GemmAlgorithm a) {
    set_gemm_isa(isa);
    set_gemm_algorithm(a);
  }
  ~Choice() {
    set_gemm_isa(isa_before);
    set_gemm_algorithm(algorithm_before);
  }
};

struct Case {
  int64_t batch, M, N, K;
  bool ta, tb, shared_b;
  float beta;
};

// C for `c` given the case's operands: the kernel's own order (k = 0, 1, ..., one FMA each,
// then C's old value added once) in float, and in double.
void references(const Case& t, const std::vector<float>& a, const std::vector<float>& b,
                const std::vector<float>& c, std::vector<float>& in_order,
                std::vector<float>& exact) {
  in_order = c;
  exact = c;
  for (int64_t p = 0; p < t.batch; ++p)
    for (int64_t i = 0; i < t.M; ++i)
      for (int64_t j = 0; j < t.N; ++j) {
        float s = 0.0f;
        double d = 0.0;
        for (int64_t k = 0; k < t.K; ++k) {
          const float av = a[p * t.M * t.K + (t.ta ? k * t.M + i : i * t.K + k)];
          const float bv = b[(t.shared_b ? 0 : p * t.K * t.N) + (t.tb ? j * t.K + k : k * t.N + j)];
          s = std::fma(av, bv, s);
          d += static_cast<double>(av) * bv;
        }
        float& o = in_order[p * t.M * t.N + i * t.N + j];
        float& e = exact[p * t.M * t.N + i * t.N + j];
        o = t.beta == 0.0f ? s : o + s;
        e = static_cast<float>(t.beta == 0.0f ? d : e + d);
      }
}

std::vector<float> run(const Case& t, const std::vector<float>& a, const std::vector<float>& b,
                       const std::vector<float>& c0) {
  std::vector<float> c = c0;
  GemmArgs g{.batch = t.batch,
             .M = t.M,
             .N = t.N,
             .K = t.K,
             .trans_a = t.ta,
             .trans_b = t.tb,
             .stride_a = t.M * t.K,
             .stride_b = t.shared_b ? 0 : t.K * t.N,
             .stride_c = t.M * t.N,
             .beta = t.beta};
  cpu().gemm(g, a.data(), b.data(), c.data());
  return c;
}

// Shapes the direct kernel takes: N a multiple of 16 when B is not transposed, M when it is.
// Partial row blocks (7, 13, 70 rows), partial column blocks (N = 80 = 64 + 16 with AVX-512,
// 48 = 3 x 16), K from 1 to 784, and the MLP's own layer (64 x 784 @ 784 x 256).
std::vector<Case> direct_cases() {
  std::vector<Case> cases;
  for (bool ta : {false, true})
    for (bool tb : {false, true})
      for (float beta : {0.0f, 1.0f}) {
        const int64_t wide = 80,
                      narrow = 7;  // the dimension that must be a multiple of 16, and not
        cases.push_back({2, tb ? wide : narrow, tb ? narrow : wide, 5, ta, tb, true, beta});
        cases.push_back({1, tb ? 48 : 13, tb ? 13 : 48, 1, ta, tb, false, beta});
        cases.push_back({1, tb ? 64 : 70, tb ? 70 : 64, 300, ta, tb, false, beta});
      }
  cases.push_back({1, 64, 256, 784, false, true, false, 0.0f});  // the MLP's forward
  cases.push_back({1, 256, 784, 64, true, false, false, 0.0f});  // its weight gradient
  return cases;
}

void check_against_references(GemmIsa isa) {
  for (const Case& t : direct_cases()) {
    CAPTURE(t.M);
    CAPTURE(t.N);
    CAPTURE(t.K);
    CAPTURE(t.ta);
    CAPTURE(t.tb);
    CAPTURE(t.beta);
    const std::vector<float> a = random_vec(t.batch * t.M * t.K, 40);
    const std::vector<float> b = random_vec(t.batch * t.K * t.N, 41);
    std::vector<float> c0 = random_vec(t.batch * t.M * t.N, 42);
    if (t.beta == 0.0f) c0.assign(c0.size(), std::numeric_limits<float>::quiet_NaN());
    std::vector<float> in_order, exact;
    references(t, a, b, c0, in_order, exact);
    // a float sum of K products drifts from the double one by about sqrt(K) roundings
    const double tol = t.K > 100 ? 1e-4 : 1e-5;
    std::vector<float> first;
    for (int threads : {1, 2, 3}) {
      testing::ThreadCountScope scope(threads);
      if (!scope.available()) continue;
      CAPTURE(threads);
      Choice direct(isa, GemmAlgorithm::Direct);
      const std::vector<float> c = run(t, a, b, c0);
      check_all_close(c, exact, tol, tol);
#if defined(__FMA__)
      CHECK(c == in_order);  // the kernel's summation order, to the bit
#endif
      if (first.empty()) first = c;
      CHECK(c == first);  // the same floats whatever the thread count
    }
    Choice eigen(isa, GemmAlgorithm::Eigen);
    check_all_close(run(t, a, b, c0), exact, tol, tol);
  }
}

}  // namespace

TEST_CASE("direct gemm, baseline build: to the bit in the kernel's order, any thread count") {
  check_against_references(GemmIsa::Baseline);
}

TEST_CASE("direct gemm, AVX-512 build: the same, and the same floats as the baseline build" *
          doctest::skip(!gemm_isa_available(GemmIsa::Avx512))) {
  check_against_references(GemmIsa::Avx512);
  for (const Case& t : direct_cases()) {
    const std::vector<float> a = random_vec(t.batch * t.M * t.K, 50);
    const std::vector<float> b = random_vec(t.batch * t.K * t.N, 51);
    const std::vector<float> c0 = random_vec(t.batch * t.M * t.N, 52);
    std::vector<float> base, wide;
    {
      Choice c(GemmIsa::Baseline, GemmAlgorithm::Direct);
      base = run(t, a, b, c0);
    }
    {
      Choice c(GemmIsa::Avx512, GemmAlgorithm::Direct);
      wide = run(t, a, b, c0);
    }
    CHECK(base == wide);
  }
}

TEST_CASE("direct gemm: callers on four threads at once, with a transposed copy of A each") {
  Choice direct(gemm_isa(), GemmAlgorithm::Direct);
  const Case t{1, 64, 96, 200, false, true, false, 0.0f};  // takes the copy (op(B) = B^T)
  const std::vector<float> a = random_vec(t.M * t.K, 60), b = random_vec(t.K * t.N, 61);
  const std::vector<float> c0(static_cast<std::size_t>(t.M * t.N));
  const std::vector<float> ref = run(t, a, b, c0);
  std::vector<std::vector<float>> out(4);
  std::vector<std::thread> threads;
  for (int i = 0; i < 4; ++i)
    threads.emplace_back([&, i] {
      for (int rep = 0; rep < 5; ++rep) out[i] = run(t, a, b, c0);
    });
  for (std::thread& th : threads) th.join();
  for (int i = 0; i < 4; ++i) CHECK(out[i] == ref);
}

// Auto runs the direct kernel in the AVX-512 build only, Eigen in the baseline build. (This
// case's data gives Eigen and the direct kernel different last bits, so the check can tell.)
TEST_CASE(
    "gemm algorithm choice: auto by default, direct in the AVX-512 build only; names parsed") {
  if (std::getenv("DPLAB_GEMM") == nullptr) CHECK(gemm_algorithm() == GemmAlgorithm::Auto);
  const Case t{1, 64, 256, 784, true, false, false, 0.0f};
  const std::vector<float> a = random_vec(t.M * t.K, 70), b = random_vec(t.K * t.N, 71);
  const std::vector<float> c0(static_cast<std::size_t>(t.M * t.N));
  auto result = [&](GemmIsa isa, GemmAlgorithm alg) {
    Choice c(isa, alg);
    return run(t, a, b, c0);
  };
  const std::vector<float> eigen = result(GemmIsa::Baseline, GemmAlgorithm::Eigen);
  REQUIRE(eigen != result(GemmIsa::Baseline, GemmAlgorithm::Direct));
  CHECK(result(GemmIsa::Baseline, GemmAlgorithm::Auto) == eigen);
  if (gemm_isa_available(GemmIsa::Avx512)) {
    const std::vector<float> direct = result(GemmIsa::Avx512, GemmAlgorithm::Direct);
    REQUIRE(direct != result(GemmIsa::Avx512, GemmAlgorithm::Eigen));
    CHECK(result(GemmIsa::Avx512, GemmAlgorithm::Auto) == direct);
  }
  CHECK(parse_gemm_algorithm("eigen") == GemmAlgorithm::Eigen);
  CHECK(parse_gemm_algorithm("direct") == GemmAlgorithm::Direct);
  CHECK(parse_gemm_algorithm("auto") == GemmAlgorithm::Auto);
  CHECK(std::string(gemm_algorithm_name(GemmAlgorithm::Eigen)) == "eigen");
  CHECK_THROWS_WITH_AS(parse_gemm_algorithm("blas"),
                       doctest::Contains("expected 'eigen', 'direct' or 'auto', got 'blas'"),
                       Error);
}
