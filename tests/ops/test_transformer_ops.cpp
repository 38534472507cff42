// test_transformer_ops.cpp: the ops a GPT needs beyond an MLP's (issue #49): gelu, layer_norm,
// embedding, causal_softmax and matmul on 3-D / 4-D batches (broadcast, transposed operands).
// Each forward against a plain float64 loop written here, each gradient against finite
// differences (tests/gradcheck.h), the errors against their messages, and causal attention
// composed from them (ops/nn_transformer.cpp's recipe) against a float64 attention.
// Device parity (cpu:1, cuda:0) is tests/ops_cuda/cases_transformer.cpp.
#include <doctest/doctest.h>

#include <cmath>
#include <string>
#include <utility>
#include <vector>

#include "framework/ops/autocast.h"
#include "framework/ops/ops.h"
#include "framework/tensor/allocator.h"
#include "tests/gradcheck.h"

using namespace dplab;
using dplab::testing::gradcheck;
using dplab::testing::leaf;
using V = std::vector<Tensor>;

namespace {

std::vector<double> values(const Tensor& t) {
  std::vector<float> f = t.to(DType::Float32).to_vector<float>();
  return {f.begin(), f.end()};
}

// |got - want| <= atol + rtol |want| everywhere, naming the first element that is not.
void check_near(const Tensor& got, const std::vector<double>& want, double atol, double rtol,
                const std::string& what) {
  const std::vector<double> g = values(got);
  REQUIRE_MESSAGE(g.size() == want.size(),
                  what << ": " << g.size() << " values, want " << want.size());
  int bad = 0;
  for (size_t i = 0; i < g.size(); ++i) {
    if (std::abs(g[i] - want[i]) <= atol + rtol * std::abs(want[i])) continue;
    if (bad++ == 0)
      CHECK_MESSAGE(false, what << ": element " << i << " is " << g[i] << ", want " << want[i]);
  }
  CHECK_MESSAGE(bad == 0, what << ": " << bad << " elements outside the tolerance");
}

Tensor data(const Shape& s, uint64_t seed, float scale = 1.0f, float shift = 0.0f) {
  return leaf(s, seed, scale, shift).detach();
}

// ---- float64 references ----

double gelu_ref(double x, bool tanh_form) {
  if (tanh_form) return 0.5 * x * (1 + std::tanh(std::sqrt(2 / M_PI) * (x + 0.044715 * x * x * x)));
  return 0.5 * x * (1 + std::erf(x / std::sqrt(2.0)));
}

// x [rows, C], w and b [C] or empty
std::vector<double> layer_norm_ref(const std::vector<double>& x, int64_t C,
                                   const std::vector<double>& w, const std::vector<double>& b,
                                   double eps) {
  std::vector<double> y(x.size());
  for (size_t r = 0; r < x.size() / C; ++r) {
    const double* xr = &x[r * C];
    double mean = 0, var = 0;
    for (int64_t j = 0; j < C; ++j) mean += xr[j] / C;
    for (int64_t j = 0; j < C; ++j) var += (xr[j] - mean) * (xr[j] - mean) / C;
    for (int64_t j = 0; j < C; ++j)
      y[r * C + j] =
          (xr[j] - mean) / std::sqrt(var + eps) * (w.empty() ? 1 : w[j]) + (b.empty() ? 0 : b[j]);
  }
  return y;
}

// scores [batch, q, k]: row i of each matrix over keys j <= i + k - q, 0 after
std::vector<double> causal_softmax_ref(const std::vector<double>& s, int64_t q, int64_t k) {
  std::vector<double> y(s.size(), 0.0);
  for (size_t r = 0; r < s.size() / k; ++r) {
    const int64_t seen = static_cast<int64_t>(r) % q + k - q + 1;
    double m = -INFINITY, sum = 0;
    for (int64_t j = 0; j < seen; ++j) m = std::max(m, s[r * k + j]);
    for (int64_t j = 0; j < seen; ++j) sum += std::exp(s[r * k + j] - m);
    for (int64_t j = 0; j < seen; ++j) y[r * k + j] = std::exp(s[r * k + j] - m) / sum;
  }
  return y;
}

// c[b] = a[b or 0] @ b[b or 0] for batch entries of [M, K] and [K, N] (an operand with one
// matrix is shared)
std::vector<double> bmm_ref(const std::vector<double>& a, const std::vector<double>& b,
                            int64_t batch, int64_t M, int64_t K, int64_t N) {
  const bool a_shared = static_cast<int64_t>(a.size()) == M * K;
  const bool b_shared = static_cast<int64_t>(b.size()) == K * N;
  std::vector<double> c(batch * M * N, 0.0);
  for (int64_t e = 0; e < batch; ++e)
    for (int64_t i = 0; i < M; ++i)
      for (int64_t j = 0; j < N; ++j)
        for (int64_t p = 0; p < K; ++p)
          c[(e * M + i) * N + j] +=
              a[(a_shared ? 0 : e * M * K) + i * K + p] * b[(b_shared ? 0 : e * K * N) + p * N + j];
  return c;
}

}  // namespace

// ---------------------------------------------------------------- gelu

TEST_CASE("gelu, exact and tanh, matches float64 and finite differences") {
  std::vector<float> xs;
  for (int i = -60; i <= 60; ++i) xs.push_back(0.1f * static_cast<float>(i));
  Tensor x = from_vector(xs, {static_cast<int64_t>(xs.size())});
  for (bool tanh_form : {false, true}) {
    CAPTURE(tanh_form);
    const auto approx = tanh_form ? GeluApproximation::Tanh : GeluApproximation::None;
    std::vector<double> want;
    for (float v : xs) want.push_back(gelu_ref(v, tanh_form));
    check_near(gelu(x, approx), want, 1e-6, 1e-6, "gelu");
    gradcheck("gelu", [approx](const V& v) { return gelu(v[0], approx); }, {leaf({3, 7}, 1, 2.0f)});
  }
  // known values: Phi(1) = 0.8413447, and the tanh form a little below it
  CHECK(gelu(full({1}, 1.0)).item() == doctest::Approx(0.8413447460685429).epsilon(1e-6));
  CHECK(gelu(full({1}, 1.0), GeluApproximation::Tanh).item() ==
        doctest::Approx(0.8411919906082768).epsilon(1e-6));
  // far tails: x for large x, 0 (not NaN) for very negative x
  CHECK(gelu(full({1}, 30.0)).item() == 30.0f);
  CHECK(gelu(full({1}, -30.0), GeluApproximation::Tanh).item() == doctest::Approx(0.0));
}

// The CPU kernel of tanh-GELU's backward runs Eigen's vectorised tanh in chunks of 256: over
// 1000 values (chunks and a remainder), tails included, it gives g * gelu_tanh'(x) to float
// precision. In the tails tanh(u) rounds to +-1 within an ulp (6e-8), so 1 - tanh^2 u holds
// only that much, times 0.5 x sqrt(2/pi) (1 + 3 * 0.044715 x^2), about 9 at |x| = 5: an
// absolute 1e-5 is what float32 can promise there (any float32 kernel, PyTorch's too).
TEST_CASE("gelu tanh backward matches the float64 derivative across chunks and in the tails") {
  std::vector<float> xs, gs;
  for (int i = 0; i < 1000; ++i) {
    xs.push_back(-10.0f + 0.02f * static_cast<float>(i));
    gs.push_back(0.5f + 0.001f * static_cast<float>(i % 7));
  }
  Tensor x = from_vector(xs, {10, 100}).requires_grad_(true);
  Tensor g = from_vector(gs, {10, 100});
  gelu(x, GeluApproximation::Tanh).backward(g);
  std::vector<double> want;
  const double k = std::sqrt(2 / M_PI);
  for (size_t i = 0; i < xs.size(); ++i) {
    const double v = xs[i], t = std::tanh(k * (v + 0.044715 * v * v * v));
    want.push_back(gs[i] * (0.5 * (1 + t) +
                            0.5 * v * (1 - t * t) * k * (1 + 3 * 0.044715 * v * v)));
  }
  check_near(x.grad(), want, 1e-5, 1e-5, "gelu tanh backward");
}

// ---------------------------------------------------------------- layer_norm

TEST_CASE("layer_norm matches float64, also far from zero and without weight or bias") {
  Tensor x = data({2, 3, 11}, 2, 2.0f, 0.5f), w = data({11}, 3), b = data({11}, 4);
  const double eps = 1e-5;
  check_near(layer_norm(x, w, b), layer_norm_ref(values(x), 11, values(w), values(b), eps), 1e-5,
             1e-5, "layer_norm");
  check_near(layer_norm(x), layer_norm_ref(values(x), 11, {}, {}, eps), 1e-5, 1e-5,
             "layer_norm without affine");
  check_near(layer_norm(x, w, {}, 0.1f), layer_norm_ref(values(x), 11, values(w), {}, 0.1), 1e-5,
             1e-5, "layer_norm with weight only, eps 0.1");
  // a mean of 1000 with std 0.01: E[x^2] - E[x]^2 (1e6, held to 0.06 in float32) would give a
  // variance of noise; two passes are right to what a float32 mean can hold (3e-5 near 1000,
  // 0.3% of this std)
  Tensor far = data({4, 64}, 5, 0.01f, 1000.0f);
  check_near(layer_norm(far), layer_norm_ref(values(far), 64, {}, {}, eps), 2e-2, 0,
             "layer_norm of values near 1000");
  // rows of one value normalise to 0 (var 0, eps keeps it finite)
  check_near(layer_norm(full({2, 5}, 3.0)), std::vector<double>(10, 0.0), 0, 0, "constant rows");
}

TEST_CASE("layer_norm gradients for x, weight and bias") {
  gradcheck("layer_norm", [](const V& v) { return layer_norm(v[0], v[1], v[2]); },
            {leaf({4, 6}, 6), leaf({6}, 7, 0.5f, 1.0f), leaf({6}, 8)});
  gradcheck("layer_norm 3-d", [](const V& v) { return layer_norm(v[0], v[1], v[2]); },
            {leaf({2, 3, 5}, 9, 3.0f, 2.0f), leaf({5}, 10), leaf({5}, 11)});
  gradcheck("layer_norm without affine", [](const V& v) { return layer_norm(v[0]); },
            {leaf({3, 8}, 12)});
  gradcheck("layer_norm, weight only", [](const V& v) { return layer_norm(v[0], v[1]); },
            {leaf({3, 4}, 13), leaf({4}, 14)});
  // only weight and bias trained (x a constant): the backward skips dx
  gradcheck("layer_norm, constant x", [](const V& v) { return layer_norm(v[0], v[1], v[2]); },
            {data({5, 4}, 15), leaf({4}, 16), leaf({4}, 17)});
}

TEST_CASE("layer_norm errors say what was expected") {
  CHECK_THROWS_WITH_AS(layer_norm(zeros({2, 4}), zeros({3})),
                       doctest::Contains("weight must be [4] for input [2, 4]"), Error);
  CHECK_THROWS_WITH_AS(layer_norm(zeros({2, 4}), {}, zeros({4, 1})),
                       doctest::Contains("bias must be [4]"), Error);
  CHECK_THROWS_WITH_AS(layer_norm(zeros({2, 4}), {}, {}, 0.0f),
                       doctest::Contains("eps must be > 0"), Error);
  CHECK_THROWS_WITH_AS(layer_norm(zeros({2, 0})), doctest::Contains("C > 0"), Error);
}

// ---------------------------------------------------------------- embedding

TEST_CASE("embedding picks rows; repeated ids add their gradients; padding_idx gets none") {
  Tensor w = data({5, 3}, 20);
  Tensor ids = from_vector(std::vector<int64_t>{4, 0, 4, 2, 2, 2}, {2, 3});
  Tensor y = embedding(ids, w);
  REQUIRE(y.shape() == Shape{2, 3, 3});
  const std::vector<double> wv = values(w);
  std::vector<double> want;
  for (int64_t id : ids.to_vector<int64_t>())
    for (int64_t j = 0; j < 3; ++j) want.push_back(wv[id * 3 + j]);
  check_near(y, want, 0, 0, "embedding rows");

  gradcheck("embedding", [](const V& v) { return embedding(v[0], v[1]); }, {ids, leaf({5, 3}, 21)});
  // (a padding row that is looked up gets no gradient although it moves the output: by
  // design, so finite differences can only check a padding row that is not looked up)
  gradcheck("embedding, padding row 1", [](const V& v) { return embedding(v[0], v[1], 1); },
            {ids, leaf({5, 3}, 22)});

  // d sum(embedding)/d w[r] = how often r was looked up; the padding row: 0 however often
  for (std::optional<int64_t> pad :
       {std::optional<int64_t>{}, std::optional<int64_t>{2}, std::optional<int64_t>{-1}}) {
    Tensor wl = leaf({5, 3}, 23);
    sum(embedding(ids, wl, pad)).backward();
    std::vector<double> count = {1, 0, 3, 0, 2};
    if (pad) count[(*pad + 5) % 5] = 0;
    std::vector<double> grad;
    for (double c : count) grad.insert(grad.end(), 3, c);
    check_near(wl.grad(), grad, 0, 0, "embedding gradient counts");
  }
}

TEST_CASE("embedding errors: an id out of range, a bad padding_idx, float ids") {
  Tensor w = zeros({5, 3});
  CHECK_THROWS_WITH_AS(embedding(from_vector(std::vector<int64_t>{1, 5}, {2}), w),
                       doctest::Contains("expected every id in [0, 5)"), Error);
  CHECK_THROWS_WITH_AS(embedding(from_vector(std::vector<int64_t>{1, 5}, {2}), w),
                       doctest::Contains("index 5 out of range [0, 5) at position 1"), Error);
  CHECK_THROWS_WITH_AS(embedding(from_vector(std::vector<int64_t>{-1}, {1}), w),
                       doctest::Contains("expected every id in [0, 5)"), Error);
  CHECK_THROWS_WITH_AS(embedding(from_vector(std::vector<int64_t>{0}, {1}), w, 5),
                       doctest::Contains("padding_idx must lie in [-5, 5)"), Error);
  CHECK_THROWS_WITH_AS(embedding(zeros({2}), w), doctest::Contains("expected an int64 tensor"),
                       Error);
  CHECK_THROWS_WITH_AS(embedding(from_vector(std::vector<int64_t>{0}, {1}), zeros({5})),
                       doctest::Contains("expected weight [num_embeddings, dim]"), Error);
}

// ---------------------------------------------------------------- causal_softmax

TEST_CASE("causal_softmax matches float64: square, fewer queries than keys, 4-d") {
  for (Shape s : {Shape{3, 6, 6}, Shape{2, 2, 3, 7}, Shape{1, 1}, Shape{5, 1, 4}}) {
    CAPTURE(shape_str(s));
    Tensor x = data(s, 30, 3.0f);
    const int64_t q = s[s.size() - 2], k = s.back();
    Tensor y = causal_softmax(x);
    check_near(y, causal_softmax_ref(values(x), q, k), 1e-6, 1e-5, "causal_softmax");
    // masked entries are exactly 0; each row sums to 1
    const std::vector<double> yv = values(y);
    for (size_t r = 0; r < yv.size() / k; ++r) {
      const int64_t seen = static_cast<int64_t>(r) % q + k - q + 1;
      double row = 0;
      for (int64_t j = 0; j < k; ++j) {
        row += yv[r * k + j];
        if (j >= seen) CHECK(yv[r * k + j] == 0.0);
      }
      CHECK(row == doctest::Approx(1.0).epsilon(1e-6));
    }
  }
}

TEST_CASE("causal_softmax: masked scores are never read, large scores do not overflow") {
  Tensor x = data({2, 4, 4}, 31);
  // equal to softmax(x + mask) with the mask written as a large negative number
  std::vector<float> mask(16, 0.0f);
  for (int i = 0; i < 4; ++i)
    for (int j = i + 1; j < 4; ++j) mask[i * 4 + j] = -1e30f;
  Tensor masked = add(x, from_vector(mask, {4, 4}));
  check_near(causal_softmax(x), values(softmax(masked)), 1e-7, 1e-6, "softmax(x + mask)");
  // huge values above the diagonal change nothing; a shift of 1000 changes nothing either
  std::vector<float> above(16, 0.0f);
  for (int i = 0; i < 4; ++i)
    for (int j = i + 1; j < 4; ++j) above[i * 4 + j] = 1e30f;
  check_near(causal_softmax(add(x, from_vector(above, {4, 4}))), values(causal_softmax(x)), 0, 0,
             "huge masked scores");
  check_near(causal_softmax(add_scalar(x, 1000.0f)), values(causal_softmax(x)), 1e-6, 5e-4,
             "shifted by 1000");
}

TEST_CASE("causal_softmax gradient: finite differences, and exactly 0 where masked") {
  gradcheck("causal_softmax", [](const V& v) { return causal_softmax(v[0]); },
            {leaf({2, 5, 5}, 32, 2.0f)});
  gradcheck("causal_softmax q < k", [](const V& v) { return causal_softmax(v[0]); },
            {leaf({2, 3, 3, 5}, 33, 2.0f)});
  Tensor x = leaf({3, 3}, 34);
  sum(mul(causal_softmax(x), data({3, 3}, 35))).backward();
  const std::vector<double> g = values(x.grad());
  CHECK(g[1] == 0.0);
  CHECK(g[2] == 0.0);
  CHECK(g[5] == 0.0);
  CHECK(g[0] == 0.0);  // row 0 sees one key: its probability is 1 whatever the score
}

TEST_CASE("causal_softmax errors") {
  CHECK_THROWS_WITH_AS(causal_softmax(zeros({2, 5, 4})),
                       doctest::Contains("no more queries than keys (q <= k"), Error);
  CHECK_THROWS_WITH_AS(causal_softmax(zeros({4})), doctest::Contains("expected scores [..., q, k]"),
                       Error);
}

// ---------------------------------------------------------------- matmul on batches

TEST_CASE("matmul on 3-d and 4-d batches, shared and broadcast operands, matches float64") {
  Tensor a4 = data({2, 3, 4, 5}, 40), b4 = data({2, 3, 5, 6}, 41);
  check_near(matmul(a4, b4), bmm_ref(values(a4), values(b4), 6, 4, 5, 6), 1e-5, 1e-5, "4-d");
  Tensor b2 = data({5, 6}, 42);
  check_near(matmul(a4, b2), bmm_ref(values(a4), values(b2), 6, 4, 5, 6), 1e-5, 1e-5,
             "4-d @ shared 2-d");
  Tensor a2 = data({4, 5}, 43);
  check_near(matmul(a2, b4), bmm_ref(values(a2), values(b4), 6, 4, 5, 6), 1e-5, 1e-5,
             "shared 2-d @ 4-d");
  Tensor b1 = data({1, 1, 5, 6}, 44);
  check_near(matmul(a4, b1), bmm_ref(values(a4), values(b1), 6, 4, 5, 6), 1e-5, 1e-5,
             "4-d @ [1, 1, 5, 6]");
  // [2, 1, 4, 5] @ [3, 5, 6] -> [2, 3, 4, 6]: a repeats over dim 1, b over dim 0
  Tensor ab = data({2, 1, 4, 5}, 45), bb = data({3, 5, 6}, 46);
  Tensor c = matmul(ab, bb);
  REQUIRE(c.shape() == Shape{2, 3, 4, 6});
  const std::vector<double> av = values(ab), bv = values(bb), cv = values(c);
  for (int64_t i = 0; i < 2; ++i)
    for (int64_t h = 0; h < 3; ++h) {
      std::vector<double> ai(av.begin() + i * 20, av.begin() + (i + 1) * 20);
      std::vector<double> bh(bv.begin() + h * 30, bv.begin() + (h + 1) * 30);
      const std::vector<double> want = bmm_ref(ai, bh, 1, 4, 5, 6);
      for (int64_t e = 0; e < 24; ++e)
        CHECK(cv[(i * 3 + h) * 24 + e] == doctest::Approx(want[e]).epsilon(1e-5));
    }
}

TEST_CASE("matmul with transposed operands equals matmul of the transposes") {
  Tensor a = data({2, 3, 4, 5}, 47), b = data({2, 3, 6, 5}, 48), at = data({2, 3, 5, 4}, 49);
  check_near(matmul(a, b, {.transpose_b = true}), values(matmul(a, transpose(b, -1, -2))), 1e-6,
             1e-5, "a @ b^T");
  check_near(matmul(at, transpose(b, -1, -2), {.transpose_a = true}),
             values(matmul(transpose(at, -1, -2), transpose(b, -1, -2))), 1e-6, 1e-5, "a^T @ b");
  check_near(matmul(at, b, {.transpose_a = true, .transpose_b = true}),
             values(matmul(transpose(at, -1, -2), transpose(b, -1, -2))), 1e-6, 1e-5, "a^T @ b^T");
}

TEST_CASE("matmul gradients: 4-d, shared, broadcast and transposed operands") {
  auto mm = [](MatmulOptions o) { return [o](const V& v) { return matmul(v[0], v[1], o); }; };
  gradcheck("4-d", mm({}), {leaf({2, 2, 3, 4}, 50), leaf({2, 2, 4, 3}, 51)});
  gradcheck("4-d @ 2-d", mm({}), {leaf({2, 2, 3, 4}, 52), leaf({4, 3}, 53)});
  gradcheck("2-d @ 4-d", mm({}), {leaf({3, 4}, 54), leaf({2, 2, 4, 3}, 55)});
  gradcheck("[2,1,3,4] @ [3,4,2]", mm({}), {leaf({2, 1, 3, 4}, 56), leaf({3, 4, 2}, 57)});
  for (bool ta : {false, true})
    for (bool tb : {false, true}) {
      CAPTURE(ta);
      CAPTURE(tb);
      const MatmulOptions o{.transpose_a = ta, .transpose_b = tb};
      const Shape sa = ta ? Shape{2, 4, 3} : Shape{2, 3, 4}, sb = tb ? Shape{5, 4} : Shape{4, 5};
      gradcheck("transposed, shared b", mm(o), {leaf(sa, 58), leaf(sb, 59)});
      const Shape sb3 = tb ? Shape{2, 5, 4} : Shape{2, 4, 5};
      gradcheck("transposed, batched", mm(o), {leaf(sa, 60), leaf(sb3, 61)});
      const Shape sa2 = ta ? Shape{4, 3} : Shape{3, 4};
      gradcheck("transposed, shared a", mm(o), {leaf(sa2, 62), leaf(sb3, 63)});
    }
}

TEST_CASE("a batched matmul allocates the same tensors for 1 batch entry as for 12") {
  const Device cpu("cpu");
  // allocations of q k^T (k read transposed in place) forward, and of its backward
  auto count = [&](int64_t b, int64_t h) {
    Tensor q = leaf({b, h, 8, 16}, 64), k = leaf({b, h, 8, 16}, 65);
    const int64_t before = memory_stats(cpu).alloc_count;
    Tensor s = matmul(q, k, {.transpose_b = true});
    const int64_t forward = memory_stats(cpu).alloc_count - before;
    Tensor g = ones_like(s);
    const int64_t mid = memory_stats(cpu).alloc_count;
    s.backward(g);
    return std::pair{forward, memory_stats(cpu).alloc_count - mid};
  };
  const auto one = count(1, 1), twelve = count(4, 3);
  CHECK(one.first == 1);  // the output, nothing else
  CHECK(twelve.first == 1);
  CHECK(twelve.second == one.second);
  CHECK(one.second <= 4);  // dq and dk (and what accumulating them into .grad costs)
}

TEST_CASE("matmul errors name both operands") {
  CHECK_THROWS_WITH_AS(matmul(zeros({2, 3, 4}), zeros({3, 4, 5})),
                       doctest::Contains("batch dims [2] and [3] do not broadcast"), Error);
  CHECK_THROWS_WITH_AS(matmul(zeros({2, 3, 4}), zeros({2, 3, 4}), {.transpose_b = false}),
                       doctest::Contains("inner dims differ: a is [2, 3, 4], b is [2, 3, 4]"),
                       Error);
  CHECK_THROWS_WITH_AS(matmul(zeros({4}), zeros({4, 2})),
                       doctest::Contains("operands of at least 2 dims"), Error);
}

// ---------------------------------------------------------------- composed: attention

TEST_CASE("causal attention from these ops equals float64 attention, and its gradient checks") {
  const int64_t B = 2, T = 5, H = 2, D = 3, C = H * D;
  // the recipe of ops/nn_transformer.cpp's header
  auto attention = [=](const V& v) {
    Tensor qkv = linear(v[0], v[1]);  // [B, T, 3C]
    qkv = permute(reshape(qkv, {B, T, 3, H, D}), {2, 0, 3, 1, 4});
    std::vector<Tensor> parts = chunk(qkv, 3);
    Tensor q = reshape(parts[0], {B, H, T, D}), k = reshape(parts[1], {B, H, T, D}),
           vv = reshape(parts[2], {B, H, T, D});
    Tensor s = mul_scalar(matmul(q, k, {.transpose_b = true}), 1.0f / std::sqrt(float(D)));
    Tensor y = matmul(causal_softmax(s), vv);
    return reshape(permute(y, {0, 2, 1, 3}), {B, T, C});
  };
  Tensor x = data({B, T, C}, 70), w = data({3 * C, C}, 71, 0.5f);
  // float64: q, k, v per position, then per head the causal weighted sum
  const std::vector<double> xv = values(x), wv = values(w);
  std::vector<double> qkv(B * T * 3 * C, 0.0), want(B * T * C, 0.0);
  for (int64_t bt = 0; bt < B * T; ++bt)
    for (int64_t o = 0; o < 3 * C; ++o)
      for (int64_t i = 0; i < C; ++i) qkv[bt * 3 * C + o] += xv[bt * C + i] * wv[o * C + i];
  auto at = [&](int64_t b, int64_t t, int64_t which, int64_t h, int64_t d) {
    return qkv[(b * T + t) * 3 * C + which * C + h * D + d];
  };
  for (int64_t b = 0; b < B; ++b)
    for (int64_t h = 0; h < H; ++h)
      for (int64_t t = 0; t < T; ++t) {
        std::vector<double> p(t + 1);
        double m = -INFINITY, z = 0;
        for (int64_t u = 0; u <= t; ++u) {
          for (int64_t d = 0; d < D; ++d) p[u] += at(b, t, 0, h, d) * at(b, u, 1, h, d);
          p[u] /= std::sqrt(double(D));
          m = std::max(m, p[u]);
        }
        for (int64_t u = 0; u <= t; ++u) z += std::exp(p[u] - m);
        for (int64_t u = 0; u <= t; ++u)
          for (int64_t d = 0; d < D; ++d)
            want[(b * T + t) * C + h * D + d] += std::exp(p[u] - m) / z * at(b, u, 2, h, d);
      }
  check_near(attention({x, w}), want, 1e-5, 1e-4, "attention");
  gradcheck("attention", attention, {leaf({B, T, C}, 72), leaf({3 * C, C}, 73, 0.5f)});
}

// ---------------------------------------------------------------- 16-bit floats

TEST_CASE("the transformer ops in bfloat16 and float16 follow float32, and autocast keeps norms "
          "float32") {
  Tensor x = data({2, 4, 8}, 80), w = data({8}, 81), b = data({8}, 82);
  Tensor table = data({10, 8}, 83);
  Tensor ids = from_vector(std::vector<int64_t>{1, 9, 9, 0}, {4});
  for (DType t : {DType::BFloat16, DType::Float16}) {
    CAPTURE(dtype_name(t));
    const double tol = t == DType::BFloat16 ? 3e-2 : 4e-3;
    Tensor y = layer_norm(x.to(t), w.to(t), b.to(t));
    CHECK(y.dtype() == t);
    check_near(y, values(layer_norm(x, w, b)), tol, tol, "layer_norm 16-bit");
    check_near(gelu(x.to(t), GeluApproximation::Tanh), values(gelu(x, GeluApproximation::Tanh)),
               tol, tol, "gelu 16-bit");
    check_near(causal_softmax(x.to(t)), values(causal_softmax(x)), tol, tol,
               "causal_softmax 16-bit");
    check_near(embedding(ids, table.to(t)), values(embedding(ids, table.to(t).to(DType::Float32))),
               0, 0, "embedding 16-bit");
    check_near(matmul(x.to(t), x.to(t), {.transpose_b = true}),
               values(matmul(x, x, {.transpose_b = true})), 8 * tol, 8 * tol, "matmul 16-bit");
    // gradients come back in the input's dtype
    Tensor tl = table.to(t).detach();
    tl.requires_grad_(true);
    sum(embedding(ids, tl, 0)).backward();
    CHECK(tl.grad().dtype() == t);
    amp::AutocastGuard autocast(t);
    CHECK(layer_norm(x, w, b).dtype() == DType::Float32);
    CHECK(causal_softmax(x).dtype() == DType::Float32);
  }
}
