// test_cpu_kernels.cpp: the CPU backend's memory, elementwise and reduction kernels,
// each against a naive loop written here, on odd sizes (7x13, 3x7x5) so no vector-width or
// block-size luck hides an edge bug. Broadcast layouts cover scalar, trailing-row, column and
// two-sided broadcasts. test_cpu_gemm.cpp covers GEMM; test_cpu_nn_kernels.cpp softmax,
// indexing, conv and optimizers.
#include <doctest/doctest.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <thread>
#include <tuple>

#include "framework/backend/cpu/cpu_backend.h"
#include "framework/backend/cpu/cpu_threads.h"
#include "framework/error.h"
#include "tests/backend_test_util.h"
#include "tests/thread_count_scope.h"

using namespace dplab;
using namespace dplab::test;

TEST_CASE("allocate is 64-byte aligned, zero bytes give nullptr, copies are memcpy") {
  Backend& be = cpu();
  CHECK(&be == &cpu_backend());
  CHECK(be.allocate(Device("cpu"), 0) == nullptr);
  for (std::size_t n : {1u, 3u, 64u, 1000u}) {
    void* p = be.allocate(Device("cpu:1"), n);
    REQUIRE(p != nullptr);
    CHECK(reinterpret_cast<uintptr_t>(p) % 64 == 0);
    be.deallocate(Device("cpu:1"), p, n);
  }
  std::vector<float> a = random_vec(19, 1), b(19), c(19);
  be.copy_from_host(Device("cpu"), b.data(), a.data(), 19 * sizeof(float));
  be.copy_device(Device("cpu:1"), c.data(), Device("cpu:0"), b.data(), 19 * sizeof(float));
  CHECK(std::memcmp(a.data(), c.data(), 19 * sizeof(float)) == 0);
  be.synchronize(Device("cpu"));
}

TEST_CASE("fill and cast, float32 and int64") {
  Backend& be = cpu();
  std::vector<float> f(11);
  std::vector<int64_t> i(11);
  be.fill(DType::Float32, f.data(), 11, 2.5);
  be.fill(DType::Int64, i.data(), 11, -7);
  for (int k = 0; k < 11; ++k) {
    CHECK(f[k] == 2.5f);
    CHECK(i[k] == -7);
  }
  std::vector<float> src = {-2.7f, -0.5f, 0.0f, 0.9f, 3.99f};
  std::vector<int64_t> as_int(5);
  be.cast(DType::Float32, src.data(), DType::Int64, as_int.data(), 5);
  CHECK(as_int == std::vector<int64_t>{-2, 0, 0, 0, 3});  // truncation toward zero
  std::vector<float> back(5);
  be.cast(DType::Int64, as_int.data(), DType::Float32, back.data(), 5);
  CHECK(back == std::vector<float>{-2, 0, 0, 0, 3});
}

TEST_CASE("strided_copy: transpose, broadcast and int64 match index arithmetic") {
  Backend& be = cpu();
  // src is a contiguous [3, 5, 4]; read it permuted as [4, 3, 5] (strides 1, 20, 4).
  std::vector<float> src = random_vec(60, 2);
  Strided perm;
  perm.ndim = 3;
  int64_t shp[3] = {4, 3, 5}, str[3] = {1, 20, 4};
  for (int d = 0; d < 3; ++d) perm.shape[d] = shp[d], perm.strides[d] = str[d];
  std::vector<float> out(60), ref(60);
  be.strided_copy(DType::Float32, src.data(), perm, out.data());
  for_each_index(perm,
                 [&](int64_t flat, const int64_t* idx) { ref[flat] = src[offset_of(perm, idx)]; });
  CHECK(out == ref);

  // [13] broadcast to [7, 13] and [7, 1] to [7, 13], int64
  std::vector<int64_t> row(13), col(7), got(91);
  for (int k = 0; k < 13; ++k) row[k] = 100 + k;
  for (int k = 0; k < 7; ++k) col[k] = -k;
  be.strided_copy(DType::Int64, row.data(), broadcast({7, 13}, {13}), got.data());
  for (int r = 0; r < 7; ++r)
    for (int c = 0; c < 13; ++c) CHECK(got[r * 13 + c] == 100 + c);
  be.strided_copy(DType::Int64, col.data(), broadcast({7, 13}, {7, 1}), got.data());
  for (int r = 0; r < 7; ++r)
    for (int c = 0; c < 13; ++c) CHECK(got[r * 13 + c] == -r);
}

namespace {

// GELU in float64, and its derivative by a central difference of step 1e-5 (the float32
// kernels' closed forms are backend/gelu_math.h's: this checks them independently).
double gelu_ref(double x, bool tanh_form) {
  if (tanh_form) return 0.5 * x * (1 + std::tanh(std::sqrt(2 / M_PI) * (x + 0.044715 * x * x * x)));
  return 0.5 * x * (1 + std::erf(x / std::sqrt(2.0)));
}
double gelu_grad_ref(double x, bool tanh_form) {
  return (gelu_ref(x + 1e-5, tanh_form) - gelu_ref(x - 1e-5, tanh_form)) / 2e-5;
}

}  // namespace

TEST_CASE("unary ops match std:: on 37 elements") {
  Backend& be = cpu();
  std::vector<float> x = random_vec(37, 3, -3.0f, 3.0f), pos = random_vec(37, 4, 0.1f, 4.0f);
  x[0] = 0.0f;
  const float s = 1.5f;
  struct Case {
    UnaryOp op;
    bool positive;
    double (*f)(double, double);
  };
  const Case cases[] = {
      {UnaryOp::Neg, false, [](double v, double) { return -v; }},
      {UnaryOp::Exp, false, [](double v, double) { return std::exp(v); }},
      {UnaryOp::Log, true, [](double v, double) { return std::log(v); }},
      {UnaryOp::Sqrt, true, [](double v, double) { return std::sqrt(v); }},
      {UnaryOp::Relu, false, [](double v, double) { return v > 0 ? v : 0.0; }},
      {UnaryOp::Sigmoid, false, [](double v, double) { return 1.0 / (1.0 + std::exp(-v)); }},
      {UnaryOp::Tanh, false, [](double v, double) { return std::tanh(v); }},
      {UnaryOp::Abs, false, [](double v, double) { return std::fabs(v); }},
      {UnaryOp::PowScalar, true, [](double v, double p) { return std::pow(v, p); }},
      {UnaryOp::AddScalar, false, [](double v, double p) { return v + p; }},
      {UnaryOp::MulScalar, false, [](double v, double p) { return v * p; }},
      {UnaryOp::RsubScalar, false, [](double v, double p) { return p - v; }},
      {UnaryOp::RdivScalar, true, [](double v, double p) { return p / v; }},
      {UnaryOp::GtScalar, false, [](double v, double p) { return v > p ? 1.0 : 0.0; }},
      {UnaryOp::Gelu, false, [](double v, double) { return gelu_ref(v, false); }},
      {UnaryOp::GeluTanh, false, [](double v, double) { return gelu_ref(v, true); }},
  };
  for (const Case& c : cases) {
    CAPTURE(static_cast<int>(c.op));
    const std::vector<float>& in = c.positive ? pos : x;
    std::vector<float> y(37), ref(37);
    be.unary(c.op, in.data(), y.data(), 37, s);
    for (int i = 0; i < 37; ++i) ref[i] = static_cast<float>(c.f(in[i], s));
    check_all_close(y, ref, 1e-6, 1e-5);
  }
  // integer powers of negative bases stay real; x^2 takes its own fast path
  std::vector<float> neg = {-2.0f, -0.5f, 3.0f}, y(3);
  be.unary(UnaryOp::PowScalar, neg.data(), y.data(), 3, 3.0f);
  CHECK(y == std::vector<float>{-8.0f, -0.125f, 27.0f});
  be.unary(UnaryOp::PowScalar, neg.data(), y.data(), 3, 2.0f);
  CHECK(y == std::vector<float>{4.0f, 0.25f, 9.0f});
}

namespace {

double binary_ref(BinaryOp op, double a, double b) {
  switch (op) {
    case BinaryOp::Add: return a + b;
    case BinaryOp::Sub: return a - b;
    case BinaryOp::Mul: return a * b;
    case BinaryOp::Div: return a / b;
    case BinaryOp::Pow: return std::pow(a, b);
    case BinaryOp::Max: return a > b ? a : b;
    case BinaryOp::Min: return a < b ? a : b;
    case BinaryOp::Eq: return a == b ? 1.0 : 0.0;
    case BinaryOp::ReluGrad: return b > 0 ? a : 0.0;
    case BinaryOp::SigmoidGrad: return a * b * (1 - b);
    case BinaryOp::TanhGrad: return a * (1 - b * b);
    case BinaryOp::GeluGrad: return a * gelu_grad_ref(b, false);
    case BinaryOp::GeluTanhGrad: return a * gelu_grad_ref(b, true);
  }
  return 0;
}

// Runs every BinaryOp on (a, al) op (b, bl) and compares with the index-by-index reference.
void check_binary(const Strided& al, const Strided& bl, int64_t a_size, int64_t b_size) {
  std::vector<float> a = random_vec(a_size, 10, 0.2f, 2.0f), b = random_vec(b_size, 11, 0.2f, 2.0f);
  a[0] = b[0];  // an Eq hit
  const BinaryOp ops[] = {BinaryOp::Add,         BinaryOp::Sub,      BinaryOp::Mul,
                          BinaryOp::Div,         BinaryOp::Pow,      BinaryOp::Max,
                          BinaryOp::Min,         BinaryOp::Eq,       BinaryOp::ReluGrad,
                          BinaryOp::SigmoidGrad, BinaryOp::TanhGrad, BinaryOp::GeluGrad,
                          BinaryOp::GeluTanhGrad};
  for (BinaryOp op : ops) {
    CAPTURE(static_cast<int>(op));
    std::vector<float> out(static_cast<std::size_t>(al.numel())), ref(out.size());
    cpu().binary(op, a.data(), al, b.data(), bl, out.data());
    for_each_index(al, [&](int64_t flat, const int64_t* idx) {
      ref[flat] = static_cast<float>(binary_ref(op, a[offset_of(al, idx)], b[offset_of(bl, idx)]));
    });
    check_all_close(out, ref, 1e-6, 1e-5);
  }
}

}  // namespace

TEST_CASE("binary: contiguous, scalar, trailing, column and two-sided broadcasts") {
  SUBCASE("same shape [7, 13]") { check_binary(contiguous({7, 13}), contiguous({7, 13}), 91, 91); }
  SUBCASE("[7, 13] op scalar") { check_binary(contiguous({7, 13}), broadcast({7, 13}, {}), 91, 1); }
  SUBCASE("scalar op [7, 13]") {
    check_binary(broadcast({7, 13}, {1}), contiguous({7, 13}), 1, 91);
  }
  SUBCASE("[7, 13] op [13]") {
    check_binary(contiguous({7, 13}), broadcast({7, 13}, {13}), 91, 13);
  }
  SUBCASE("[7, 13] op [7, 1]") {
    check_binary(contiguous({7, 13}), broadcast({7, 13}, {7, 1}), 91, 7);
  }
  SUBCASE("[3, 1, 5] op [4, 5] -> [3, 4, 5]") {
    check_binary(broadcast({3, 4, 5}, {3, 1, 5}), broadcast({3, 4, 5}, {4, 5}), 15, 20);
  }
  SUBCASE("transposed a: [5, 3] read as [3, 5]") {
    Strided t = contiguous({3, 5});
    t.strides[0] = 1;
    t.strides[1] = 3;
    check_binary(t, contiguous({3, 5}), 15, 15);
  }
  SUBCASE("0-d") { check_binary(contiguous({}), contiguous({}), 1, 1); }
}

TEST_CASE("binary: out may alias a contiguous input") {
  std::vector<float> a = random_vec(91, 5), b = random_vec(13, 6), ref(91);
  for (int i = 0; i < 91; ++i) ref[i] = a[i] * b[i % 13];
  cpu().binary(BinaryOp::Mul, a.data(), contiguous({7, 13}), b.data(), broadcast({7, 13}, {13}),
               a.data());
  check_all_close(a, ref);
}

TEST_CASE("binary: layouts with different shapes are rejected") {
  std::vector<float> a(6), b(6), out(6);
  CHECK_THROWS_AS(cpu().binary(BinaryOp::Add, a.data(), contiguous({2, 3}), b.data(),
                               contiguous({3, 2}), out.data()),
                  Error);
}

TEST_CASE("reduce_into: float sum/max/min and int64 sum") {
  std::vector<float> dst = {1, 5, -2}, src = {4, 2, -3};
  std::vector<float> d = dst;
  cpu().reduce_into(ReduceKind::Sum, DType::Float32, d.data(), src.data(), 3);
  CHECK(d == std::vector<float>{5, 7, -5});
  d = dst;
  cpu().reduce_into(ReduceKind::Max, DType::Float32, d.data(), src.data(), 3);
  CHECK(d == std::vector<float>{4, 5, -2});
  d = dst;
  cpu().reduce_into(ReduceKind::Min, DType::Float32, d.data(), src.data(), 3);
  CHECK(d == std::vector<float>{1, 2, -3});
  std::vector<int64_t> di = {1, 2}, si = {10, -20};
  cpu().reduce_into(ReduceKind::Sum, DType::Int64, di.data(), si.data(), 2);
  CHECK(di == std::vector<int64_t>{11, -18});
  CHECK_THROWS_AS(cpu().reduce_into(ReduceKind::ArgMax, DType::Float32, d.data(), src.data(), 3),
                  Error);
}

TEST_CASE("reduce over [outer, r, inner] matches loops; argmax keeps the first maximum") {
  for (auto [outer, r, inner] :
       {std::tuple<int64_t, int64_t, int64_t>{3, 7, 5}, {4, 13, 1}, {1, 9, 11}, {2, 1, 3}}) {
    CAPTURE(outer);
    CAPTURE(r);
    CAPTURE(inner);
    std::vector<float> x = random_vec(outer * r * inner, 7);
    for (ReduceKind op : {ReduceKind::Sum, ReduceKind::Max, ReduceKind::Min}) {
      std::vector<float> out(static_cast<std::size_t>(outer * inner)), ref(out.size());
      cpu().reduce(op, x.data(), out.data(), outer, r, inner);
      for (int64_t o = 0; o < outer; ++o)
        for (int64_t i = 0; i < inner; ++i) {
          double acc = x[o * r * inner + i];
          for (int64_t k = 1; k < r; ++k) {
            double v = x[(o * r + k) * inner + i];
            acc = op == ReduceKind::Sum   ? acc + v
                  : op == ReduceKind::Max ? std::max(acc, v)
                                          : std::min(acc, v);
          }
          ref[o * inner + i] = static_cast<float>(acc);
        }
      check_all_close(out, ref, 1e-5, 1e-5);
    }
  }
  // ties: rows [1, 3, 3, 0] and [2, 2, 2, 2] along r, inner = 1 and inner = 2
  std::vector<float> x = {1, 3, 3, 0, 2, 2, 2, 2};
  std::vector<int64_t> idx(2);
  cpu().reduce(ReduceKind::ArgMax, x.data(), idx.data(), 2, 4, 1);
  CHECK(idx == std::vector<int64_t>{1, 0});
  // as [1, 4, 2]: columns (1, 3, 2, 2) and (3, 0, 2, 2) -> 1 and 0
  cpu().reduce(ReduceKind::ArgMax, x.data(), idx.data(), 1, 4, 2);
  CHECK(idx == std::vector<int64_t>{1, 0});
  std::vector<float> empty_sum(3, 9.0f);
  cpu().reduce(ReduceKind::Sum, x.data(), empty_sum.data(), 3, 0, 1);
  CHECK(empty_sum == std::vector<float>{0, 0, 0});
}

TEST_CASE("elementwise kernels split between threads: rows cut mid-way, strided and broadcast") {
  // [4, 301, 157] = 189,028 elements, past threads_for's threshold (cpu_threads.h),
  // split 63009 / 63009 / 63010 between three threads: the second starts 52 elements into an
  // innermost row of 157.
  const int64_t A = 4, B = 301, C = 157, n = A * B * C;
  testing::ThreadCountScope three(3);
  if (!three.available()) {
    MESSAGE("skipping: built without OpenMP");
    return;
  }
  std::vector<float> src = random_vec(n, 40), bias = random_vec(C, 41), out(n), ref(n);
  // strided_copy reading src stored as [C, B, A]: out[i, j, k] = src[k*B*A + j*A + i]
  Strided transposed{.ndim = 3, .shape = {A, B, C}, .strides = {1, A, B * A}};
  cpu().strided_copy(DType::Float32, src.data(), transposed, out.data());
  for (int64_t i = 0; i < A; ++i)
    for (int64_t j = 0; j < B; ++j)
      for (int64_t k = 0; k < C; ++k) ref[(i * B + j) * C + k] = src[k * B * A + j * A + i];
  CHECK(out == ref);
  // binary: src [A, B, C] + bias [C] broadcast
  Strided flat{.ndim = 3, .shape = {A, B, C}, .strides = {B * C, C, 1}};
  Strided row{.ndim = 3, .shape = {A, B, C}, .strides = {0, 0, 1}};
  cpu().binary(BinaryOp::Add, src.data(), flat, bias.data(), row, out.data());
  for (int64_t e = 0; e < n; ++e) ref[e] = src[e] + bias[e % C];
  CHECK(out == ref);
  cpu().unary(UnaryOp::Relu, src.data(), out.data(), n, 0.0f);
  for (int64_t e = 0; e < n; ++e) ref[e] = std::max(src[e], 0.0f);
  CHECK(out == ref);
}

TEST_CASE("run_pieces: every piece once, lane t gets the t-th block of pieces; errors rethrown") {
  testing::ThreadCountScope three(3);
  if (!three.available()) {
    MESSAGE("skipping: built without OpenMP");
    return;
  }
  CHECK(cpu().lanes() == 3);
  const int64_t n = 8;
  std::vector<int> lane_of(n, -1), kernel_threads_in(n, -1);
  std::vector<std::thread::id> thread_of(n);
  cpu().run_pieces(n, 3, [&](int64_t i, int lane) {
    lane_of[i] = lane;
    thread_of[i] = std::this_thread::get_id();
    kernel_threads_in[i] = kernel_threads();  // a lane's kernels run single-threaded
  });
  for (int64_t i = 0; i < n; ++i) {
    CAPTURE(i);
    const int block = i < 2 ? 0 : i < 5 ? 1 : 2;  // 8 pieces on 3 lanes: [0, 2), [2, 5), [5, 8)
    CHECK(lane_of[i] == block);
    CHECK(thread_of[i] ==
          thread_of[block == 0   ? 0
                    : block == 1 ? 2
                                 : 5]);  // one lane, one thread: its scratch needs no lock
    CHECK(kernel_threads_in[i] == 1);
  }
  CHECK(thread_of[0] != thread_of[2]);
  CHECK(thread_of[2] != thread_of[5]);
  CHECK(kernel_threads() == 3);  // outside the lanes, the kernels have all threads again
  // A piece that throws: the error comes out of run_pieces, after the other lanes stopped.
  std::vector<int> ran(n, 0);
  CHECK_THROWS_WITH_AS(cpu().run_pieces(
                           n, 3,
                           [&](int64_t i, int) {
    ran[i] = 1;
    DPLAB_CHECK(i != 3, "piece {} failed", i);
                           }),
                       doctest::Contains("piece 3 failed"), Error);
  CHECK(ran[1] == 1);  // lane 0's and lane 2's pieces went on
  CHECK(ran[7] == 1);
  CHECK(ran[2] == 1);  // lane 1 ran [2, 5) in order and stopped at its failed piece 3
  CHECK(ran[4] == 0);
  // One lane: the pieces run in order on the calling thread.
  std::vector<int64_t> order;
  cpu().run_pieces(4, 1, [&](int64_t i, int lane) {
    CHECK(lane == 0);
    order.push_back(i);
  });
  CHECK(order == std::vector<int64_t>{0, 1, 2, 3});
}

TEST_CASE("threads: set and get, bad counts throw") {
  const int before = get_num_threads();
  CHECK(before >= 1);
  set_num_threads(1);
  CHECK(get_num_threads() == 1);
  CHECK_THROWS_WITH_AS(set_num_threads(0), doctest::Contains("expected n >= 1, got 0"), Error);
  set_num_threads(before);
}
