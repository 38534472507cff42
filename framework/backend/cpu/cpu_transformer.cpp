// cpu_transformer.cpp: the transformer's row kernels on the CPU, causal softmax and layer
// norm, forward and backward (backend.h states their maths). Rows are independent, so each
// kernel splits them between threads (cpu_threads.h); a row is an Eigen array, so the
// per-row sums and exps vectorise. The CUDA versions (cuda_transformer.cu) are tested
// against these.
// Read next: ops/nn_transformer.cpp (the ops and their autograd).
#include <Eigen/Core>
#include <algorithm>
#include <cmath>
#include <cstring>

#include "framework/backend/cpu/cpu_backend.h"
#include "framework/backend/cpu/cpu_threads.h"

namespace dplab {
namespace {

using Row = Eigen::Map<const Eigen::ArrayXf>;
using RowOut = Eigen::Map<Eigen::ArrayXf>;

// Calls row_fn(r) for r in [0, rows), rows split evenly between the threads (when the work,
// rows * cols, is worth starting them).
template <typename F>
void for_rows(int64_t rows, int64_t cols, F row_fn) {
  const int threads = threads_for(rows * cols);
#pragma omp parallel for num_threads(threads) schedule(static)
  for (int p = 0; p < threads; ++p) {
    for (int64_t r = rows * p / threads; r < rows * (p + 1) / threads; ++r) row_fn(r);
  }
}

}  // namespace

// Row r is query i = r % q of its [q, k] matrix; it sees the keys [0, i + k - q] and the rest
// are 0. Only the seen keys enter the max and the sum, so a masked score, however large,
// changes nothing (softmax(x + mask) with mask = -inf, without adding infinities).
void CpuBackend::causal_softmax_kernel(const float* x, float* y, int64_t batch, int64_t q,
                                       int64_t k) {
  if (k == 0) return;
  for_rows(batch * q, k, [&](int64_t r) {
    const int64_t seen = r % q + (k - q) + 1;
    Row xr(x + r * k, seen);
    RowOut yr(y + r * k, seen);
    const float m = xr.maxCoeff();
    yr = (xr - m).exp();
    yr /= yr.sum();
    std::fill(y + r * k + seen, y + (r + 1) * k, 0.0f);
  });
}

// mean, then the variance from the centred values (two passes: E[x^2] - E[x]^2 cancels in
// float32 when |mean| >> std).
void CpuBackend::layer_norm(const float* x, const float* w, const float* b, float* y, float* mean,
                            float* rstd, int64_t rows, int64_t cols, float eps) {
  if (cols == 0) return;
  const float inv_cols = 1.0f / static_cast<float>(cols);
  for_rows(rows, cols, [&](int64_t r) {
    Row xr(x + r * cols, cols);
    RowOut yr(y + r * cols, cols);
    const float mu = xr.sum() * inv_cols;
    yr = xr - mu;  // y holds the centred row until the end
    const float rs = 1.0f / std::sqrt(yr.square().sum() * inv_cols + eps);
    mean[r] = mu;
    rstd[r] = rs;
    yr *= rs;
    if (w) yr *= Row(w, cols);
    if (b) yr += Row(b, cols);
  });
}

// xhat = (x - mean) * rstd, gh = gy * w:
//   gx = rstd * (gh - mean(gh) - xhat * mean(gh * xhat)),  gw = sum_rows gy*xhat,  gb = sum_rows gy
// gx row by row on the threads; gw and gb, sums over rows, on one thread down the rows.
void CpuBackend::layer_norm_backward(const float* gy, const float* x, const float* w,
                                     const float* mean, const float* rstd, float* gx, float* gw,
                                     float* gb, int64_t rows, int64_t cols) {
  if (cols == 0) return;
  const float inv_cols = 1.0f / static_cast<float>(cols);
  if (gx) {
    for_rows(rows, cols, [&](int64_t r) {
      Row g(gy + r * cols, cols), xr(x + r * cols, cols);
      RowOut out(gx + r * cols, cols);
      const float mu = mean[r], rs = rstd[r];
      // gh: an Eigen expression, g * w or g itself, evaluated where it is used (no scratch row)
      auto grad = [&](const auto& gh) {
        const float mean_gh = gh.sum() * inv_cols;
        const float mean_ghx = (gh * (xr - mu)).sum() * rs * inv_cols;
        out = rs * (gh - mean_gh - (xr - mu) * (rs * mean_ghx));
      };
      if (w) {
        grad(g * Row(w, cols));
      } else {
        grad(g);
      }
    });
  }
  if (gw) std::memset(gw, 0, static_cast<std::size_t>(cols) * sizeof(float));
  if (gb) std::memset(gb, 0, static_cast<std::size_t>(cols) * sizeof(float));
  if (!gw && !gb) return;
  for (int64_t r = 0; r < rows; ++r) {
    Row g(gy + r * cols, cols);
    if (gw) RowOut(gw, cols) += g * (Row(x + r * cols, cols) - mean[r]) * rstd[r];
    if (gb) RowOut(gb, cols) += g;
  }
}

}  // namespace dplab
