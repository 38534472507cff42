// test_cpu_nn_kernels.cpp: the CPU backend's neural-network kernels against naive loops:
// softmax family (stable on inputs near 1000, causal too), layer norm, nll_loss and indexing
// (with the errors a bad label or index must raise), im2col/col2im (and their adjointness),
// pooling, and the fused SGD / Adam(W) steps against values computed by hand from
// torch.optim's formulas.
// Shares helpers with test_cpu_kernels.cpp through tests/backend_test_util.h.
#include <doctest/doctest.h>
#include <fmt/format.h>

#include <cmath>
#include <limits>

#include "framework/error.h"
#include "tests/backend_test_util.h"

using namespace dplab;
using namespace dplab::test;

namespace {

// Row-wise softmax in double, the textbook way but shifted by the max.
std::vector<double> softmax_ref(const std::vector<float>& x, int64_t rows, int64_t cols) {
  std::vector<double> y(x.size());
  for (int64_t i = 0; i < rows; ++i) {
    double m = -1e300, s = 0;
    for (int64_t j = 0; j < cols; ++j) m = std::max(m, static_cast<double>(x[i * cols + j]));
    for (int64_t j = 0; j < cols; ++j) s += std::exp(x[i * cols + j] - m);
    for (int64_t j = 0; j < cols; ++j) y[i * cols + j] = std::exp(x[i * cols + j] - m) / s;
  }
  return y;
}

}  // namespace

TEST_CASE("softmax and log_softmax are right and finite on large inputs") {
  const int64_t rows = 3, cols = 13;
  std::vector<float> x = random_vec(rows * cols, 40, -5.0f, 5.0f);
  for (int64_t j = 0; j < cols; ++j) x[cols + j] += 1000.0f;  // exp(1000) overflows float
  x[2 * cols] = -1000.0f;
  std::vector<double> p = softmax_ref(x, rows, cols);
  std::vector<float> y(x.size()), logy(x.size());
  cpu().softmax(x.data(), y.data(), rows, cols, false);
  cpu().softmax(x.data(), logy.data(), rows, cols, true);
  // log p = x - m - log(sum exp(x - m)); log(p) itself would be -inf where p underflows
  std::vector<double> logp(p.size());
  for (int64_t i = 0; i < rows; ++i) {
    double m = -1e300, s = 0;
    for (int64_t j = 0; j < cols; ++j) m = std::max(m, static_cast<double>(x[i * cols + j]));
    for (int64_t j = 0; j < cols; ++j) s += std::exp(x[i * cols + j] - m);
    for (int64_t j = 0; j < cols; ++j) logp[i * cols + j] = x[i * cols + j] - m - std::log(s);
  }
  for (std::size_t i = 0; i < p.size(); ++i) {
    CHECK(std::isfinite(y[i]));
    CHECK(std::isfinite(logy[i]));
  }
  check_all_close(y, p, 1e-6, 1e-4);
  check_all_close(logy, logp, 1e-4, 1e-5);
}

TEST_CASE("softmax_backward is the Jacobian-transpose product") {
  const int64_t rows = 2, cols = 7;
  std::vector<float> x = random_vec(rows * cols, 41, -2.0f, 2.0f), gy = random_vec(rows * cols, 42);
  std::vector<double> p = softmax_ref(x, rows, cols);
  std::vector<float> y(x.size()), logy(x.size()), gx(x.size()), glx(x.size());
  cpu().softmax(x.data(), y.data(), rows, cols, false);
  cpu().softmax(x.data(), logy.data(), rows, cols, true);
  cpu().softmax_backward(gy.data(), y.data(), gx.data(), rows, cols, false);
  cpu().softmax_backward(gy.data(), logy.data(), glx.data(), rows, cols, true);
  // d p_i / d x_j = p_i (d_ij - p_j);   d log p_i / d x_j = d_ij - p_j
  std::vector<double> ref(x.size()), ref_log(x.size());
  for (int64_t r = 0; r < rows; ++r)
    for (int64_t j = 0; j < cols; ++j) {
      double s = 0, sl = 0;
      for (int64_t i = 0; i < cols; ++i) {
        const double pi = p[r * cols + i], pj = p[r * cols + j], d = i == j ? 1.0 : 0.0;
        s += gy[r * cols + i] * pi * (d - pj);
        sl += gy[r * cols + i] * (d - pj);
      }
      ref[r * cols + j] = s;
      ref_log[r * cols + j] = sl;
    }
  check_all_close(gx, ref, 1e-6, 1e-4);
  check_all_close(glx, ref_log, 1e-6, 1e-4);
}

TEST_CASE("causal_softmax: each query row over the keys it sees, zeros after; q > k refused") {
  const int64_t batch = 2, q = 3, k = 5;  // row i sees keys 0 .. i + 2
  std::vector<float> x = random_vec(batch * q * k, 43, -3.0f, 3.0f), y(x.size());
  cpu().causal_softmax(x.data(), y.data(), batch, q, k);
  for (int64_t r = 0; r < batch * q; ++r) {
    const int64_t seen = r % q + k - q + 1;
    std::vector<float> visible(x.begin() + r * k, x.begin() + r * k + seen);
    std::vector<double> ref = softmax_ref(visible, 1, seen);
    ref.resize(static_cast<std::size_t>(k), 0.0);
    std::vector<float> got(y.begin() + r * k, y.begin() + (r + 1) * k);
    check_all_close(got, ref, 0.0, 1e-5);  // the zeros exactly
  }
  CHECK_THROWS_WITH_AS(cpu().causal_softmax(x.data(), y.data(), 1, 5, 3),
                       doctest::Contains("0 <= q <= k"), Error);
}

TEST_CASE("layer_norm and its backward against float64, with and without weight and bias") {
  const int64_t rows = 3, cols = 10;
  std::vector<float> x = random_vec(rows * cols, 44, -2.0f, 3.0f), w = random_vec(cols, 45),
                     b = random_vec(cols, 46), gy = random_vec(rows * cols, 47);
  for (bool affine : {false, true}) {
    CAPTURE(affine);
    const float* wp = affine ? w.data() : nullptr;
    std::vector<float> y(x.size()), mean(rows), rstd(rows), gx(x.size()), gw(cols), gb(cols);
    cpu().layer_norm(x.data(), wp, affine ? b.data() : nullptr, y.data(), mean.data(), rstd.data(),
                     rows, cols, 1e-5f);
    cpu().layer_norm_backward(gy.data(), x.data(), wp, mean.data(), rstd.data(), gx.data(),
                              gw.data(), gb.data(), rows, cols);
    std::vector<double> ry(x.size()), rgx(x.size()), rgw(cols, 0.0), rgb(cols, 0.0);
    for (int64_t r = 0; r < rows; ++r) {
      double mu = 0, var = 0;
      for (int64_t j = 0; j < cols; ++j) mu += x[r * cols + j] / double(cols);
      for (int64_t j = 0; j < cols; ++j) var += std::pow(x[r * cols + j] - mu, 2) / double(cols);
      const double rs = 1 / std::sqrt(var + 1e-5);
      double mean_gh = 0, mean_ghx = 0;
      for (int64_t j = 0; j < cols; ++j) {
        const double xhat = (x[r * cols + j] - mu) * rs, wj = affine ? w[j] : 1.0;
        ry[r * cols + j] = xhat * wj + (affine ? b[j] : 0.0);
        mean_gh += gy[r * cols + j] * wj / double(cols);
        mean_ghx += gy[r * cols + j] * wj * xhat / double(cols);
        rgw[j] += gy[r * cols + j] * xhat;
        rgb[j] += gy[r * cols + j];
      }
      for (int64_t j = 0; j < cols; ++j) {
        const double xhat = (x[r * cols + j] - mu) * rs, wj = affine ? w[j] : 1.0;
        rgx[r * cols + j] = rs * (gy[r * cols + j] * wj - mean_gh - xhat * mean_ghx);
      }
    }
    check_all_close(y, ry, 1e-5, 1e-5);
    check_all_close(gx, rgx, 1e-5, 1e-4);
    check_all_close(gw, rgw, 1e-5, 1e-4);
    check_all_close(gb, rgb, 1e-5, 1e-5);
    // only the parameters' gradients (gx not wanted): the same numbers
    std::vector<float> gw2(cols), gb2(cols);
    cpu().layer_norm_backward(gy.data(), x.data(), wp, mean.data(), rstd.data(), nullptr,
                              gw2.data(), gb2.data(), rows, cols);
    CHECK(gw2 == gw);
    CHECK(gb2 == gb);
  }
}

TEST_CASE("nll_loss picks -logp[target] and names a bad target") {
  const int64_t rows = 5, cols = 10;
  std::vector<float> logp = random_vec(rows * cols, 43, -3.0f, 0.0f), out(rows),
                     gout = {1, 2, 3, 4, 5};
  std::vector<int64_t> target = {0, 9, 3, 3, 7};
  cpu().nll_loss(logp.data(), target.data(), out.data(), rows, cols);
  for (int64_t i = 0; i < rows; ++i) CHECK(out[i] == -logp[i * cols + target[i]]);
  std::vector<float> g(rows * cols, 99.0f);
  cpu().nll_loss_backward(gout.data(), target.data(), g.data(), rows, cols);
  for (int64_t i = 0; i < rows; ++i)
    for (int64_t j = 0; j < cols; ++j) CHECK(g[i * cols + j] == (j == target[i] ? -gout[i] : 0.0f));

  target[3] = 12;
  CHECK_THROWS_WITH_AS(cpu().nll_loss(logp.data(), target.data(), out.data(), rows, cols),
                       doctest::Contains("nll_loss: target 12 out of range [0, 10) at row 3"),
                       Error);
  target[3] = -1;
  CHECK_THROWS_WITH_AS(cpu().nll_loss_backward(gout.data(), target.data(), g.data(), rows, cols),
                       doctest::Contains("target -1 out of range [0, 10) at row 3"), Error);
}

TEST_CASE("index_rows, index_add_rows, gather_rows, scatter_add_rows") {
  const int64_t src_rows = 6, row = 5;
  std::vector<float> src = random_vec(src_rows * row, 44);
  std::vector<int64_t> idx = {5, 0, 5, 2};  // a repeat, so the add kernels must accumulate
  std::vector<float> out(idx.size() * row);
  cpu().index_rows(DType::Float32, src.data(), src_rows, idx.data(), 4, row, out.data());
  for (int64_t i = 0; i < 4; ++i)
    for (int64_t j = 0; j < row; ++j) CHECK(out[i * row + j] == src[idx[i] * row + j]);

  std::vector<int64_t> isrc = {10, 11, 20, 21, 30, 31}, iout(4);
  std::vector<int64_t> iidx = {2, 0};
  cpu().index_rows(DType::Int64, isrc.data(), 3, iidx.data(), 2, 2, iout.data());
  CHECK(iout == std::vector<int64_t>{30, 31, 10, 11});

  std::vector<float> acc(src_rows * row, 1.0f), ref(acc);
  for (int64_t i = 0; i < 4; ++i)
    for (int64_t j = 0; j < row; ++j) ref[idx[i] * row + j] += out[i * row + j];
  cpu().index_add_rows(out.data(), idx.data(), 4, row, acc.data());
  check_all_close(acc, ref);

  // gather / scatter_add: out[i, j] = src[idx[i, j], j], idx is [3, 5]
  std::vector<int64_t> gidx = {0, 1, 2, 3, 4, 5, 5, 5, 5, 5, 1, 1, 0, 0, 2};
  std::vector<float> gout(15), sacc(src_rows * row, 0.0f), sref(sacc);
  cpu().gather_rows(src.data(), src_rows, gidx.data(), 3, row, gout.data());
  for (int64_t i = 0; i < 3; ++i)
    for (int64_t j = 0; j < row; ++j) {
      CHECK(gout[i * row + j] == src[gidx[i * row + j] * row + j]);
      sref[gidx[i * row + j] * row + j] += gout[i * row + j];
    }
  cpu().scatter_add_rows(gout.data(), gidx.data(), 3, row, sacc.data());
  check_all_close(sacc, sref);

  idx[2] = 6;
  CHECK_THROWS_WITH_AS(
      cpu().index_rows(DType::Float32, src.data(), src_rows, idx.data(), 4, row, out.data()),
      doctest::Contains("index 6 out of range [0, 6) at position 2"), Error);
  gidx[7] = -3;
  CHECK_THROWS_WITH_AS(cpu().gather_rows(src.data(), src_rows, gidx.data(), 3, row, gout.data()),
                       doctest::Contains("index -3 out of range [0, 6) at [1, 2]"), Error);
  CHECK_THROWS_WITH_AS(cpu().scatter_add_rows(gout.data(), gidx.data(), 3, row, sacc.data()),
                       doctest::Contains("index -3 is negative"), Error);
}

namespace {

Window2d window(int64_t N, int64_t C, int64_t H, int64_t W, int64_t k, int64_t stride,
                int64_t pad) {
  Window2d w{.N = N, .C = C, .H = H, .W = W, .kh = k, .kw = k, .stride = stride, .pad = pad};
  w.out_h = (H + 2 * pad - k) / stride + 1;
  w.out_w = (W + 2 * pad - k) / stride + 1;
  return w;
}

// x[n, c, ih, iw] or 0 outside the image; `inside` tells which.
float at(const std::vector<float>& x, const Window2d& w, int64_t nc, int64_t ih, int64_t iw,
         bool* inside = nullptr) {
  const bool in = ih >= 0 && ih < w.H && iw >= 0 && iw < w.W;
  if (inside) *inside = in;
  return in ? x[(nc * w.H + ih) * w.W + iw] : 0.0f;
}

}  // namespace

TEST_CASE("im2col matches the definition; col2im is its adjoint") {
  // Output rows of 4 to 6 (single floats), 8 (one vector), 13 and 14 (8 + 4 + single floats,
  // LeNet's second conv), 19 and 28 (several vectors; LeNet's first conv): the row kernels'
  // vector and tail paths. Stride 2 takes the strided loop.
  for (Window2d w :
       {window(2, 3, 7, 6, 3, 1, 1), window(1, 2, 9, 8, 3, 2, 1), window(2, 1, 5, 5, 5, 1, 2),
        window(1, 1, 4, 7, 2, 2, 0), window(1, 2, 3, 10, 3, 1, 0), window(2, 2, 4, 13, 3, 1, 1),
        window(2, 3, 5, 14, 5, 1, 2), window(1, 1, 3, 19, 3, 1, 1), window(1, 2, 6, 28, 5, 1, 2)}) {
    CAPTURE(w.W);
    CAPTURE(w.H);
    CAPTURE(w.stride);
    CAPTURE(w.pad);
    const int64_t L = w.out_h * w.out_w, rows = w.C * w.kh * w.kw;
    // cols starts as garbage: im2col must write every entry, zeros for padding included
    std::vector<float> x = random_vec(w.N * w.C * w.H * w.W, 50), cols(w.N * rows * L, 7.0f),
                       ref(cols.size());
    cpu().im2col(x.data(), w, cols.data());
    for (int64_t n = 0; n < w.N; ++n)
      for (int64_t c = 0; c < w.C; ++c)
        for (int64_t i = 0; i < w.kh; ++i)
          for (int64_t j = 0; j < w.kw; ++j)
            for (int64_t oh = 0; oh < w.out_h; ++oh)
              for (int64_t ow = 0; ow < w.out_w; ++ow) {
                const int64_t r = (c * w.kh + i) * w.kw + j;
                ref[(r * w.N + n) * L + oh * w.out_w + ow] =
                    at(x, w, n * w.C + c, oh * w.stride - w.pad + i, ow * w.stride - w.pad + j);
              }
    CHECK(cols == ref);
    // <col2im(c), x> == <c, im2col(x)> for random c
    std::vector<float> c = random_vec(static_cast<int64_t>(cols.size()), 51), gx(x.size(), 7.0f);
    cpu().col2im(c.data(), w, gx.data());
    CHECK(dot(gx, x) == doctest::Approx(dot(c, cols)).epsilon(1e-5));
  }
  CHECK_THROWS_AS(
      cpu().im2col(
          nullptr,
          Window2d{.N = 1, .C = 1, .H = 4, .W = 4, .kh = 3, .kw = 3, .out_h = 4, .out_w = 4},
          nullptr),
      Error);
}

TEST_CASE("max_pool2d: values, first-max argmax as ih*W+iw, padding never wins, backward") {
  // The first two are 2x2 windows with stride 2, which have their own kernel; the second is
  // wide enough (18 outputs a row) for its vector loop and a remainder.
  for (Window2d w :
       {window(2, 3, 7, 5, 2, 2, 0), window(2, 3, 8, 37, 2, 2, 0), window(1, 2, 6, 7, 3, 1, 0),
        window(1, 2, 6, 6, 3, 2, 1), window(1, 1, 5, 7, 3, 1, 1)}) {
    CAPTURE(w.kh);
    CAPTURE(w.W);
    const int64_t L = w.out_h * w.out_w, plane = w.H * w.W;
    // all negative, so a zero from padding would win if padding were read; four values only,
    // so most windows hold ties, which the first maximum in row-major order must win
    std::vector<float> x = random_vec(w.N * w.C * plane, 52, -2.0f, -0.5f);
    for (float& v : x) v = std::round(v * 2.0f) / 2.0f;
    std::vector<float> y(w.N * w.C * L), gy = random_vec(static_cast<int64_t>(y.size()), 53);
    std::vector<int64_t> am(y.size());
    cpu().max_pool2d(x.data(), w, y.data(), am.data());
    std::vector<float> gref(x.size(), 0.0f), gx(x.size(), 5.0f);
    for (int64_t nc = 0; nc < w.N * w.C; ++nc)
      for (int64_t oh = 0; oh < w.out_h; ++oh)
        for (int64_t ow = 0; ow < w.out_w; ++ow) {
          float best = -std::numeric_limits<float>::infinity();
          int64_t arg = -1;
          for (int64_t i = 0; i < w.kh; ++i)
            for (int64_t j = 0; j < w.kw; ++j) {
              bool inside;
              const int64_t ih = oh * w.stride - w.pad + i, iw = ow * w.stride - w.pad + j;
              const float v = at(x, w, nc, ih, iw, &inside);
              if (inside && v > best) best = v, arg = ih * w.W + iw;
            }
          const int64_t o = nc * L + oh * w.out_w + ow;
          CHECK(y[o] == best);
          CHECK(am[o] == arg);
          gref[nc * plane + arg] += gy[o];
        }
    cpu().max_pool2d_backward(gy.data(), am.data(), w, gx.data());
    check_all_close(gx, gref);
    const int64_t last = static_cast<int64_t>(am.size()) - 1;
    am[last] = plane;  // a corrupted argmax: one past the end of its plane
    CHECK_THROWS_WITH_AS(
        cpu().max_pool2d_backward(gy.data(), am.data(), w, gx.data()),
        doctest::Contains(
            fmt::format("argmax {} out of range [0, {}) at output {}", plane, plane, last).c_str()),
        Error);
  }
}

TEST_CASE("avg_pool2d counts padding in the divisor; backward is its adjoint") {
  Window2d w = window(2, 2, 5, 6, 3, 2, 1);
  const int64_t L = w.out_h * w.out_w;
  std::vector<float> x = random_vec(w.N * w.C * w.H * w.W, 54), y(w.N * w.C * L), ref(y.size());
  cpu().avg_pool2d(x.data(), w, y.data());
  for (int64_t nc = 0; nc < w.N * w.C; ++nc)
    for (int64_t oh = 0; oh < w.out_h; ++oh)
      for (int64_t ow = 0; ow < w.out_w; ++ow) {
        double s = 0;
        for (int64_t i = 0; i < w.kh; ++i)
          for (int64_t j = 0; j < w.kw; ++j)
            s += at(x, w, nc, oh * w.stride - w.pad + i, ow * w.stride - w.pad + j);
        ref[nc * L + oh * w.out_w + ow] = static_cast<float>(s / 9.0);
      }
  check_all_close(y, ref);
  std::vector<float> gy = random_vec(static_cast<int64_t>(y.size()), 55), gx(x.size(), 3.0f);
  cpu().avg_pool2d_backward(gy.data(), w, gx.data());
  CHECK(dot(gx, x) == doctest::Approx(dot(gy, y)).epsilon(1e-5));
}

// Two steps on one parameter p0 = 1 with gradients 0.5 then -0.25, lr = 0.1.
TEST_CASE("sgd_step follows torch.optim.SGD for two steps") {
  auto run = [](SgdArgs a) {
    float p = 1.0f, buf = 0.0f;
    const float grads[2] = {0.5f, -0.25f};
    for (int t = 0; t < 2; ++t) {
      a.first_step = t == 0;
      cpu().sgd_step(a, &p, &grads[t], &buf, 1);
    }
    return p;
  };
  // plain: 1 - 0.1*0.5 + 0.1*0.25
  CHECK(run({.lr = 0.1f}) == doctest::Approx(0.975).epsilon(1e-6));
  // momentum 0.9, wd 0.01: g1 = 0.51, buf = 0.51, p = 0.949;
  // g2 = -0.25 + 0.00949 = -0.24051, buf = 0.459 - 0.24051 = 0.21849, p = 0.949 - 0.021849
  CHECK(run({.lr = 0.1f, .momentum = 0.9f, .weight_decay = 0.01f}) ==
        doctest::Approx(0.927151).epsilon(1e-6));
  // nesterov: p1 = 1 - 0.1*(0.51 + 0.9*0.51) = 0.9031; g2 = -0.240969, buf = 0.218031,
  // g = -0.240969 + 0.9*0.218031 = -0.0447411, p2 = 0.9031 + 0.00447411
  CHECK(run({.lr = 0.1f, .momentum = 0.9f, .weight_decay = 0.01f, .nesterov = true}) ==
        doctest::Approx(0.90757411).epsilon(1e-6));
  // dampening 0.5: buf1 = 0.5 (first step copies g), p1 = 0.95; buf2 = 0.45 - 0.125 = 0.325
  CHECK(run({.lr = 0.1f, .momentum = 0.9f, .dampening = 0.5f}) ==
        doctest::Approx(0.9175).epsilon(1e-6));
  float p = 1.0f, g = 1.0f;
  CHECK_THROWS_AS(cpu().sgd_step({.lr = 0.1f, .momentum = 0.9f}, &p, &g, nullptr, 1), Error);
}

TEST_CASE("adam_step follows torch.optim.Adam / AdamW for two steps") {
  auto run = [](AdamArgs a) {
    float p = 1.0f, m = 0.0f, v = 0.0f;
    const float grads[2] = {0.5f, -0.25f};
    for (int t = 0; t < 2; ++t) {
      a.step = t + 1;
      cpu().adam_step(a, &p, &grads[t], &m, &v, 1);
    }
    return p;
  };
  // step 1: m = 0.05, v = 0.00025, m^ = 0.5, v^ = 0.25: p = 1 - 0.1 * 0.5/0.5 = 0.9
  // step 2: m = 0.02, v = 0.00031225, m^ = 0.02/0.19, v^ = 0.00031225/0.001999:
  //         p = 0.9 - 0.1 * 0.1052632 / 0.3952254 = 0.8733663
  CHECK(run({.lr = 0.1f}) == doctest::Approx(0.8733663).epsilon(1e-6));
  // Adam, L2 wd 0.1: g1 = 0.6 (p1 = 0.9), g2 = -0.25 + 0.09 = -0.16: m = 0.038, v = 0.00038524
  CHECK(run({.lr = 0.1f, .weight_decay = 0.1f}) == doctest::Approx(0.8544414).epsilon(1e-6));
  // AdamW wd 0.1: p *= 0.99 first: p1 = 0.99 - 0.1 = 0.89, p2 = 0.8811 - 0.0266337
  CHECK(run({.lr = 0.1f, .weight_decay = 0.1f, .decoupled = true}) ==
        doctest::Approx(0.8544663).epsilon(1e-6));
  float p = 1, g = 1, m = 0, v = 0;
  CHECK_THROWS_WITH_AS(cpu().adam_step({.lr = 0.1f, .step = 0}, &p, &g, &m, &v, 1),
                       doctest::Contains("expected step >= 1"), Error);
}
