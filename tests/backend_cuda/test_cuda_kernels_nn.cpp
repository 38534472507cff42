// test_cuda_kernels_nn.cpp: indexing, causal softmax, layer norm, im2col / col2im, pooling and
// the fused optimizer steps on CUDA against the CPU backend, plus the index checks that
// kernels report through the device-side error flag. Skipped without a GPU.
// Read next: test_cuda_devices.cpp.
#include <doctest/doctest.h>

#include <tuple>
#include <utility>

#include "tests/backend_test_util.h"

namespace dplab::test {

TEST_CASE("cuda indexing along dim 0 matches the CPU" * doctest::skip(!has_gpu())) {
  const int64_t src_rows = 13, row = 19, n_idx = 41;
  std::vector<float> src = random_vec(src_rows * row, 1, -2.0f, 2.0f);
  std::vector<int64_t> idx = random_idx(n_idx, src_rows, 2);  // repeats: atomics must add
  GpuBuf<float> gs(src), out(static_cast<std::size_t>(n_idx * row));
  GpuBuf<int64_t> gi(idx);
  gpu().index_rows(DType::Float32, gs.get(), src_rows, gi.get(), n_idx, row, out.get());
  std::vector<float> ro(static_cast<std::size_t>(n_idx * row));
  cpu().index_rows(DType::Float32, src.data(), src_rows, idx.data(), n_idx, row, ro.data());
  check_close(out.host(), ro, "index_rows f32");

  std::vector<int64_t> isrc = random_idx(src_rows * row, 1000, 3);
  GpuBuf<int64_t> gis(isrc), iout(static_cast<std::size_t>(n_idx * row));
  gpu().index_rows(DType::Int64, gis.get(), src_rows, gi.get(), n_idx, row, iout.get());
  std::vector<int64_t> rio(static_cast<std::size_t>(n_idx * row));
  cpu().index_rows(DType::Int64, isrc.data(), src_rows, idx.data(), n_idx, row, rio.data());
  check_close(iout.host(), rio, "index_rows i64");

  std::vector<float> g = random_vec(n_idx * row, 4, -2.0f, 2.0f),
                     acc = random_vec(src_rows * row, 5, -2.0f, 2.0f);
  GpuBuf<float> gg(g), gacc(acc);
  gpu().index_add_rows(gg.get(), gi.get(), n_idx, row, gacc.get());
  cpu().index_add_rows(g.data(), idx.data(), n_idx, row, acc.data());
  check_close(gacc.host(), acc, "index_add_rows", 1e-5, 1e-5);

  // gather / scatter: idx [rows, cols] picks a source row per element
  const int64_t rows = 9, cols = 23;
  std::vector<int64_t> gidx = random_idx(rows * cols, src_rows, 6);
  GpuBuf<int64_t> ggi(gidx);
  std::vector<float> src2 = random_vec(src_rows * cols, 14, -2.0f, 2.0f);  // [src_rows, cols]
  GpuBuf<float> gsrc(src2);
  GpuBuf<float> gout(static_cast<std::size_t>(rows * cols));
  gpu().gather_rows(gsrc.get(), src_rows, ggi.get(), rows, cols, gout.get());
  std::vector<float> rgo(static_cast<std::size_t>(rows * cols));
  cpu().gather_rows(src2.data(), src_rows, gidx.data(), rows, cols, rgo.data());
  check_close(gout.host(), rgo, "gather_rows");
  std::vector<float> sg = random_vec(rows * cols, 7, -2.0f, 2.0f);
  std::vector<float> sacc(static_cast<std::size_t>(src_rows * cols), 0.0f);
  GpuBuf<float> gsg(sg), gsacc(sacc);
  gpu().scatter_add_rows(gsg.get(), ggi.get(), rows, cols, gsacc.get());
  cpu().scatter_add_rows(sg.data(), gidx.data(), rows, cols, sacc.data());
  check_close(gsacc.host(), sacc, "scatter_add_rows", 1e-5, 1e-5);

  // a bad index throws, naming it, and is not sticky
  idx[7] = -2;
  GpuBuf<int64_t> bad(idx);
  CHECK_THROWS_WITH_AS(
      gpu().index_rows(DType::Float32, gs.get(), src_rows, bad.get(), n_idx, row, out.get()),
      doctest::Contains("index in [0, 13), got -2"), Error);
  CHECK_THROWS_WITH_AS(gpu().index_add_rows(gg.get(), bad.get(), n_idx, row, gacc.get()),
                       doctest::Contains("got -2"), Error);
  gidx[4] = src_rows;
  GpuBuf<int64_t> bad_g(gidx);
  CHECK_THROWS_WITH_AS(gpu().gather_rows(gsrc.get(), src_rows, bad_g.get(), rows, cols, gout.get()),
                       doctest::Contains("got 13"), Error);
  CHECK_NOTHROW(gpu().gather_rows(gsrc.get(), src_rows, ggi.get(), rows, cols, gout.get()));
}

TEST_CASE("cuda causal_softmax and layer_norm match the CPU" * doctest::skip(!has_gpu())) {
  // rows shorter and longer than a block of 256 threads
  for (auto [batch, q, k] : {std::tuple{3, 7, 7}, std::tuple{2, 5, 300}, std::tuple{1, 600, 600}}) {
    CAPTURE(k);
    std::vector<float> x = random_vec(batch * q * k, 60, -4.0f, 4.0f);
    GpuBuf<float> gx(x), gy(x.size());
    gpu().causal_softmax(gx.get(), gy.get(), batch, q, k);
    std::vector<float> ry(x.size());
    cpu().causal_softmax(x.data(), ry.data(), batch, q, k);
    check_close(gy.host(), ry, "causal_softmax", 1e-6, 1e-5);
  }
  for (auto [rows, cols] : {std::pair{5, 37}, std::pair{3, 1000}}) {
    for (bool affine : {false, true}) {
      CAPTURE(cols);
      CAPTURE(affine);
      std::vector<float> x = random_vec(rows * cols, 61, -2.0f, 3.0f), w = random_vec(cols, 62),
                         b = random_vec(cols, 63), gy = random_vec(rows * cols, 64);
      GpuBuf<float> gxin(x), gw_in(w), gb_in(b), ggy(gy), gyout(x.size()), gmean(rows), grstd(rows),
          ggx(x.size()), ggw(cols), ggb(cols);
      const float* wg = affine ? gw_in.get() : nullptr;
      gpu().layer_norm(gxin.get(), wg, affine ? gb_in.get() : nullptr, gyout.get(), gmean.get(),
                       grstd.get(), rows, cols, 1e-5f);
      gpu().layer_norm_backward(ggy.get(), gxin.get(), wg, gmean.get(), grstd.get(), ggx.get(),
                                ggw.get(), ggb.get(), rows, cols);
      std::vector<float> y(x.size()), mean(rows), rstd(rows), gx(x.size()), gw(cols), gb(cols);
      const float* wc = affine ? w.data() : nullptr;
      cpu().layer_norm(x.data(), wc, affine ? b.data() : nullptr, y.data(), mean.data(),
                       rstd.data(), rows, cols, 1e-5f);
      cpu().layer_norm_backward(gy.data(), x.data(), wc, mean.data(), rstd.data(), gx.data(),
                                gw.data(), gb.data(), rows, cols);
      check_close(gyout.host(), y, "layer_norm y", 1e-5, 1e-5);
      check_close(gmean.host(), mean, "layer_norm mean", 1e-5, 1e-5);
      check_close(grstd.host(), rstd, "layer_norm rstd", 1e-5, 1e-5);
      check_close(ggx.host(), gx, "layer_norm gx", 1e-4, 1e-4);
      check_close(ggw.host(), gw, "layer_norm gw", 1e-4, 1e-4);
      check_close(ggb.host(), gb, "layer_norm gb", 1e-4, 1e-4);
    }
  }
}

TEST_CASE("cuda im2col, col2im and pooling match the CPU" * doctest::skip(!has_gpu())) {
  struct Case {
    int64_t k, stride, pad;
  };
  for (Case c : {Case{3, 1, 1}, Case{3, 2, 1}, Case{2, 2, 0}, Case{5, 3, 2}}) {
    Window2d w;
    w.N = 2;
    w.C = 3;
    w.H = 9;
    w.W = 11;
    w.kh = w.kw = c.k;
    w.stride = c.stride;
    w.pad = c.pad;
    w.out_h = (w.H + 2 * w.pad - w.kh) / w.stride + 1;
    w.out_w = (w.W + 2 * w.pad - w.kw) / w.stride + 1;
    // appended piecewise: g++ 12 warns falsely (-Wrestrict) on "k" + std::to_string(...)
    std::string what = "k";
    what += std::to_string(c.k) + " s" + std::to_string(c.stride) + " p" + std::to_string(c.pad);
    const int64_t n_x = w.N * w.C * w.H * w.W, n_y = w.N * w.C * w.out_h * w.out_w;
    const int64_t n_cols = w.N * w.C * w.kh * w.kw * w.out_h * w.out_w;
    std::vector<float> x = random_vec(n_x, 11, -2.0f, 2.0f),
                       cols = random_vec(n_cols, 12, -2.0f, 2.0f);
    std::vector<float> gy = random_vec(n_y, 13, -2.0f, 2.0f);
    GpuBuf<float> gx(x), gcols(cols), ggy(gy);

    GpuBuf<float> out_cols(static_cast<std::size_t>(n_cols)), out_x(static_cast<std::size_t>(n_x));
    std::vector<float> r_cols(static_cast<std::size_t>(n_cols)), r_x(static_cast<std::size_t>(n_x));
    gpu().im2col(gx.get(), w, out_cols.get());
    cpu().im2col(x.data(), w, r_cols.data());
    check_close(out_cols.host(), r_cols, "im2col " + what);
    gpu().col2im(gcols.get(), w, out_x.get());
    cpu().col2im(cols.data(), w, r_x.data());
    check_close(out_x.host(), r_x, "col2im " + what, 1e-5, 1e-5);

    GpuBuf<float> y(static_cast<std::size_t>(n_y));
    GpuBuf<int64_t> am(static_cast<std::size_t>(n_y));
    std::vector<float> ry(static_cast<std::size_t>(n_y));
    std::vector<int64_t> ram(static_cast<std::size_t>(n_y));
    gpu().max_pool2d(gx.get(), w, y.get(), am.get());
    cpu().max_pool2d(x.data(), w, ry.data(), ram.data());
    check_close(y.host(), ry, "max_pool2d " + what);
    check_close(am.host(), ram, "max_pool2d argmax " + what);
    gpu().max_pool2d_backward(ggy.get(), am.get(), w, out_x.get());
    cpu().max_pool2d_backward(gy.data(), ram.data(), w, r_x.data());
    check_close(out_x.host(), r_x, "max_pool2d_backward " + what, 1e-5, 1e-5);

    gpu().avg_pool2d(gx.get(), w, y.get());
    cpu().avg_pool2d(x.data(), w, ry.data());
    check_close(y.host(), ry, "avg_pool2d " + what, 1e-5, 1e-5);
    gpu().avg_pool2d_backward(ggy.get(), w, out_x.get());
    cpu().avg_pool2d_backward(gy.data(), w, r_x.data());
    check_close(out_x.host(), r_x, "avg_pool2d_backward " + what, 1e-5, 1e-5);
  }
}

TEST_CASE("cuda fused SGD and Adam steps match the CPU" * doctest::skip(!has_gpu())) {
  const int64_t n = 10007;
  for (int variant = 0; variant < 4; ++variant) {
    SgdArgs a;
    a.lr = 0.05f;
    a.momentum = variant == 0 ? 0.0f : 0.9f;
    a.dampening = variant == 2 ? 0.1f : 0.0f;
    a.weight_decay = variant >= 1 ? 1e-2f : 0.0f;
    a.nesterov = variant == 3;
    std::vector<float> p = random_vec(n, 20, -2.0f, 2.0f), buf(static_cast<std::size_t>(n), 0.0f);
    GpuBuf<float> gp(p), gbuf(buf);
    for (int step = 0; step < 3; ++step) {
      a.first_step = step == 0;
      std::vector<float> g = random_vec(n, 30 + step, -2.0f, 2.0f);
      GpuBuf<float> gg(g);
      gpu().sgd_step(a, gp.get(), gg.get(), gbuf.get(), n);
      cpu().sgd_step(a, p.data(), g.data(), buf.data(), n);
    }
    check_close(gp.host(), p, "sgd param variant " + std::to_string(variant), 1e-6, 1e-5);
    check_close(gbuf.host(), buf, "sgd buffer variant " + std::to_string(variant), 1e-6, 1e-5);
  }
  for (bool decoupled : {false, true}) {
    AdamArgs a;
    a.lr = 1e-2f;
    a.weight_decay = 0.05f;
    a.decoupled = decoupled;
    std::vector<float> p = random_vec(n, 40, -2.0f, 2.0f), m(static_cast<std::size_t>(n), 0.0f),
                       v = m;
    GpuBuf<float> gp(p), gm(m), gv(v);
    for (int64_t step = 1; step <= 4; ++step) {
      a.step = step;
      std::vector<float> g = random_vec(n, 50 + static_cast<uint32_t>(step), -2.0f, 2.0f);
      GpuBuf<float> gg(g);
      gpu().adam_step(a, gp.get(), gg.get(), gm.get(), gv.get(), n);
      cpu().adam_step(a, p.data(), g.data(), m.data(), v.data(), n);
    }
    const std::string what = decoupled ? "adamw" : "adam";
    check_close(gp.host(), p, what + " param", 1e-6, 1e-5);
    check_close(gm.host(), m, what + " m", 1e-6, 1e-5);
    check_close(gv.host(), v, what + " v", 1e-6, 1e-5);
  }
}

}  // namespace dplab::test
