// test_cuda_kernels.cpp: every CUDA kernel against the CPU backend on odd sizes (not
// multiples of 32 or 256, so partial warps and blocks and grid-stride tails are hit).
// Tolerances: 1e-5 where both sides compute the same float ops; looser where the order of
// additions differs (reductions, softmax sums, GEMM: cuBLAS blocks K differently).
// Skipped without a GPU. Read next: test_cuda_devices.cpp.
#include <doctest/doctest.h>

#include "tests/backend_test_util.h"

namespace dplab::test {

TEST_CASE("cuda fill, cast, strided_copy, reduce_into match the CPU" * doctest::skip(!has_gpu())) {
  GpuBuf<float> f(1001);
  gpu().fill(DType::Float32, f.get(), 1001, 2.5);
  check_close(f.host(), std::vector<float>(1001, 2.5f), "fill f32");
  GpuBuf<int64_t> l(999);
  gpu().fill(DType::Int64, l.get(), 999, -3.0);
  check_close(l.host(), std::vector<int64_t>(999, -3), "fill i64");

  // cast truncates toward zero both ways round
  std::vector<float> x = random_vec(777, 1, -50.0f, 50.0f);
  GpuBuf<float> gx(x);
  GpuBuf<int64_t> gi(x.size());
  gpu().cast(DType::Float32, gx.get(), DType::Int64, gi.get(), 777);
  std::vector<int64_t> ri(x.size());
  cpu().cast(DType::Float32, x.data(), DType::Int64, ri.data(), 777);
  check_close(gi.host(), ri, "cast f32->i64");
  GpuBuf<float> back(x.size());
  gpu().cast(DType::Int64, gi.get(), DType::Float32, back.get(), 777);
  std::vector<float> rb(x.size());
  cpu().cast(DType::Int64, ri.data(), DType::Float32, rb.data(), 777);
  check_close(back.host(), rb, "cast i64->f32");

  // a permuted [5, 7, 3] read (transpose of dims 0 and 2), and a broadcast [4, 9] of [9]
  std::vector<float> src = random_vec(3 * 7 * 5, 2, -2.0f, 2.0f);
  Strided perm = contiguous({5, 7, 3});
  perm.strides[0] = 1;
  perm.strides[1] = 5;
  perm.strides[2] = 35;
  Strided bcast = contiguous({4, 9});
  bcast.strides[0] = 0;
  for (const Strided& layout : {perm, bcast, contiguous({105})}) {
    GpuBuf<float> gs(src), go(static_cast<std::size_t>(layout.numel()));
    gpu().strided_copy(DType::Float32, gs.get(), layout, go.get());
    std::vector<float> ro(static_cast<std::size_t>(layout.numel()));
    cpu().strided_copy(DType::Float32, src.data(), layout, ro.data());
    check_close(go.host(), ro, "strided_copy ndim " + std::to_string(layout.ndim));
  }

  for (ReduceKind op : {ReduceKind::Sum, ReduceKind::Max, ReduceKind::Min}) {
    std::vector<float> a = random_vec(1003, 3, -2.0f, 2.0f), b = random_vec(1003, 4, -2.0f, 2.0f);
    GpuBuf<float> ga(a), gb(b);
    gpu().reduce_into(op, DType::Float32, ga.get(), gb.get(), 1003);
    cpu().reduce_into(op, DType::Float32, a.data(), b.data(), 1003);
    check_close(ga.host(), a, "reduce_into f32 op " + std::to_string(static_cast<int>(op)));
    std::vector<int64_t> ia = random_idx(517, 1000, 5), ib = random_idx(517, 1000, 6);
    GpuBuf<int64_t> gia(ia), gib(ib);
    gpu().reduce_into(op, DType::Int64, gia.get(), gib.get(), 517);
    cpu().reduce_into(op, DType::Int64, ia.data(), ib.data(), 517);
    check_close(gia.host(), ia, "reduce_into i64");
  }
  CHECK_THROWS_AS(gpu().reduce_into(ReduceKind::ArgMax, DType::Float32, f.get(), f.get(), 3),
                  Error);
}

// float16 is stored as 2-byte words: strided_copy and index_rows must move exactly that
// (they once took every non-4-byte element for an 8-byte one and read past the buffer).
TEST_CASE("cuda strided_copy and index_rows move float16 words like the CPU" *
          doctest::skip(!has_gpu())) {
  std::vector<int64_t> wide = random_idx(6 * 7, 65536, 7);
  std::vector<uint16_t> src(wide.begin(), wide.end());  // arbitrary bit patterns
  Strided perm = contiguous({7, 6});                    // the transpose of a [6, 7]
  perm.strides[0] = 1;
  perm.strides[1] = 7;
  GpuBuf<uint16_t> gs(src), go(src.size());
  gpu().strided_copy(DType::Float16, gs.get(), perm, go.get());
  std::vector<uint16_t> ro(src.size());
  cpu().strided_copy(DType::Float16, src.data(), perm, ro.data());
  check_close(go.host(), ro, "strided_copy f16");

  std::vector<int64_t> idx = random_idx(9, 6, 8);  // 9 rows of 7 halves from 6
  GpuBuf<int64_t> gi(idx);
  GpuBuf<uint16_t> gr(9 * 7);
  gpu().index_rows(DType::Float16, gs.get(), 6, gi.get(), 9, 7, gr.get());
  std::vector<uint16_t> rr(9 * 7);
  cpu().index_rows(DType::Float16, src.data(), 6, idx.data(), 9, 7, rr.data());
  check_close(gr.host(), rr, "index_rows f16");
}

TEST_CASE("cuda unary ops match the CPU" * doctest::skip(!has_gpu())) {
  const int64_t n = 4099;
  for (int k = 0; k <= static_cast<int>(UnaryOp::GeluTanh); ++k) {
    const auto op = static_cast<UnaryOp>(k);
    const bool positive = op == UnaryOp::Log || op == UnaryOp::Sqrt || op == UnaryOp::PowScalar ||
                          op == UnaryOp::RdivScalar;
    std::vector<float> x = random_vec(n, 10 + k, positive ? 0.1f : -4.0f, 4.0f);
    const float s = op == UnaryOp::PowScalar ? 1.7f : 0.75f;
    GpuBuf<float> gx(x), gy(static_cast<std::size_t>(n));
    gpu().unary(op, gx.get(), gy.get(), n, s);
    std::vector<float> ry(x.size());
    cpu().unary(op, x.data(), ry.data(), n, s);
    check_close(gy.host(), ry, "unary op " + std::to_string(k), 1e-5, 1e-5);
  }
}

TEST_CASE("cuda binary ops with broadcasting match the CPU" * doctest::skip(!has_gpu())) {
  // out [5, 3, 7]: a is [5, 1, 7] (broadcast over dim 1), b is [3, 7] (broadcast over dim 0)
  Strided al = contiguous({5, 3, 7}), bl = contiguous({5, 3, 7});
  al.strides[0] = 7;
  al.strides[1] = 0;
  bl.strides[0] = 0;
  const int64_t n = 5 * 3 * 7;
  for (int k = 0; k <= static_cast<int>(BinaryOp::GeluTanhGrad); ++k) {
    const auto op = static_cast<BinaryOp>(k);
    const bool positive = op == BinaryOp::Pow;
    std::vector<float> a = random_vec(5 * 7, 20 + k, positive ? 0.2f : -2.0f, 2.0f);
    std::vector<float> b = random_vec(3 * 7, 40 + k, -2.0f, 2.0f);
    if (op == BinaryOp::Eq) b[3] = a[3];  // some equal pairs
    GpuBuf<float> ga(a), gb(b), go(static_cast<std::size_t>(n));
    gpu().binary(op, ga.get(), al, gb.get(), bl, go.get());
    std::vector<float> ro(static_cast<std::size_t>(n));
    cpu().binary(op, a.data(), al, b.data(), bl, ro.data());
    check_close(go.host(), ro, "binary broadcast op " + std::to_string(k), 1e-5, 1e-5);

    // contiguous, 70001 elements, out aliasing a
    std::vector<float> c = random_vec(70001, 60 + k, positive ? 0.2f : -2.0f, 2.0f);
    std::vector<float> d = random_vec(70001, 80 + k, -2.0f, 2.0f);
    Strided flat = contiguous({70001});
    GpuBuf<float> gc(c), gd(d);
    gpu().binary(op, gc.get(), flat, gd.get(), flat, gc.get());
    cpu().binary(op, c.data(), flat, d.data(), flat, c.data());
    check_close(gc.host(), c, "binary flat op " + std::to_string(k), 1e-5, 1e-5);
  }
  GpuBuf<float> g(8);
  CHECK_THROWS_AS(
      gpu().binary(BinaryOp::Add, g.get(), contiguous({8}), g.get(), contiguous({2, 4}), g.get()),
      Error);
}

TEST_CASE("cuda reduce over [outer, r, inner] matches the CPU" * doctest::skip(!has_gpu())) {
  struct Shape {
    int64_t outer, r, inner;
  };
  for (Shape s : {Shape{3, 37, 1}, Shape{2, 5, 33}, Shape{1, 1001, 1}, Shape{4, 1, 3},
                  Shape{7, 300, 5}, Shape{1000, 3, 1}}) {
    const int64_t n = s.outer * s.r * s.inner, m = s.outer * s.inner;
    std::vector<float> x = random_vec(n, static_cast<uint32_t>(n), -2.0f, 2.0f);
    GpuBuf<float> gx(x);
    for (ReduceKind op : {ReduceKind::Sum, ReduceKind::Max, ReduceKind::Min}) {
      GpuBuf<float> go(static_cast<std::size_t>(m));
      gpu().reduce(op, gx.get(), go.get(), s.outer, s.r, s.inner);
      std::vector<float> ro(static_cast<std::size_t>(m));
      cpu().reduce(op, x.data(), ro.data(), s.outer, s.r, s.inner);
      check_close(go.host(), ro, "reduce r=" + std::to_string(s.r), 1e-3, 1e-4);
    }
    GpuBuf<int64_t> ga(static_cast<std::size_t>(m));
    gpu().reduce(ReduceKind::ArgMax, gx.get(), ga.get(), s.outer, s.r, s.inner);
    std::vector<int64_t> ra(static_cast<std::size_t>(m));
    cpu().reduce(ReduceKind::ArgMax, x.data(), ra.data(), s.outer, s.r, s.inner);
    check_close(ga.host(), ra, "argmax r=" + std::to_string(s.r));
  }
  // ties: the first maximum wins, on both paths (inner == 1 and inner > 1)
  std::vector<float> ties(2 * 40, 1.0f);
  GpuBuf<float> gt(ties);
  GpuBuf<int64_t> gi(2);
  gpu().reduce(ReduceKind::ArgMax, gt.get(), gi.get(), 2, 40, 1);
  CHECK(gi.host() == std::vector<int64_t>{0, 0});
  gpu().reduce(ReduceKind::ArgMax, gt.get(), gi.get(), 1, 40, 2);
  CHECK(gi.host() == std::vector<int64_t>{0, 0});
}

TEST_CASE("cuda gemm matches the CPU for every transpose and batch" * doctest::skip(!has_gpu())) {
  const int64_t M = 37, N = 53, K = 29, B = 3;
  for (int t = 0; t < 4; ++t) {
    for (bool shared_b : {false, true}) {
      GemmArgs g;
      g.batch = B;
      g.M = M;
      g.N = N;
      g.K = K;
      g.trans_a = t & 1;
      g.trans_b = t & 2;
      g.stride_a = M * K;
      g.stride_b = shared_b ? 0 : K * N;  // 0: one B for every batch entry (a Linear weight)
      g.stride_c = M * N;
      g.alpha = 0.5f;
      g.beta = t == 3 ? 2.0f : 0.0f;
      std::vector<float> a = random_vec(B * M * K, 100 + t, -2.0f, 2.0f),
                         b = random_vec(B * K * N, 200 + t, -2.0f, 2.0f);
      std::vector<float> c = random_vec(B * M * N, 300 + t, -2.0f, 2.0f);
      GpuBuf<float> ga(a), gb(b), gc(c);
      gpu().gemm(g, ga.get(), gb.get(), gc.get());
      cpu().gemm(g, a.data(), b.data(), c.data());
      check_close(gc.host(), c, "gemm trans " + std::to_string(t), 1e-4, 1e-4);
    }
  }
}

TEST_CASE("cuda softmax, log_softmax and backwards match the CPU" * doctest::skip(!has_gpu())) {
  struct Shape {
    int64_t rows, cols;
  };
  for (Shape s : {Shape{7, 1000}, Shape{33, 3}, Shape{2, 4097}}) {
    const int64_t n = s.rows * s.cols;
    std::vector<float> x = random_vec(n, 7, -30.0f, 30.0f);  // large logits: max-subtraction
    std::vector<float> gy = random_vec(n, 8, -2.0f, 2.0f);
    for (bool log : {false, true}) {
      const auto un = static_cast<std::size_t>(n);
      GpuBuf<float> gx(x), gyb(gy), y(un), gxb(un);
      gpu().softmax(gx.get(), y.get(), s.rows, s.cols, log);
      std::vector<float> ry(x.size()), rg(x.size());
      cpu().softmax(x.data(), ry.data(), s.rows, s.cols, log);
      check_close(y.host(), ry, log ? "log_softmax" : "softmax", 1e-5, 1e-4);
      GpuBuf<float> yref(ry);  // same y on both sides, so only the backward is compared
      gpu().softmax_backward(gyb.get(), yref.get(), gxb.get(), s.rows, s.cols, log);
      cpu().softmax_backward(gy.data(), ry.data(), rg.data(), s.rows, s.cols, log);
      check_close(gxb.host(), rg, log ? "log_softmax backward" : "softmax backward", 1e-5, 1e-4);
    }
  }
}

TEST_CASE("cuda nll_loss matches the CPU and rejects bad targets" * doctest::skip(!has_gpu())) {
  const int64_t rows = 37, cols = 11;
  std::vector<float> logp = random_vec(rows * cols, 9, -5.0f, 0.0f),
                     gout = random_vec(rows, 10, -2.0f, 2.0f);
  std::vector<int64_t> target = random_idx(rows, cols, 11);
  GpuBuf<float> gl(logp), gg(gout), out(rows), glogp(static_cast<std::size_t>(rows * cols));
  GpuBuf<int64_t> gt(target);
  gpu().nll_loss(gl.get(), gt.get(), out.get(), rows, cols);
  std::vector<float> ro(rows), rg(static_cast<std::size_t>(rows * cols));
  cpu().nll_loss(logp.data(), target.data(), ro.data(), rows, cols);
  check_close(out.host(), ro, "nll_loss");
  gpu().nll_loss_backward(gg.get(), gt.get(), glogp.get(), rows, cols);
  cpu().nll_loss_backward(gout.data(), target.data(), rg.data(), rows, cols);
  check_close(glogp.host(), rg, "nll_loss_backward");

  target[5] = cols;  // one past the end
  GpuBuf<int64_t> bad(target);
  CHECK_THROWS_WITH_AS(gpu().nll_loss(gl.get(), bad.get(), out.get(), rows, cols),
                       doctest::Contains("target in [0, 11), got 11"), Error);
  // the flag was cleared: a good call afterwards succeeds
  CHECK_NOTHROW(gpu().nll_loss(gl.get(), gt.get(), out.get(), rows, cols));
}

}  // namespace dplab::test
