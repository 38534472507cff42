// cpu_nn.cpp: softmax / log_softmax and their backward, nll_loss, and row indexing
// (index_rows, index_add_rows, gather_rows, scatter_add_rows) on the CPU.
// Softmax subtracts each row's max before exp: exp(x - m) <= 1 never overflows, and the
// result is unchanged because softmax(x) = softmax(x - m). Indices coming from data (labels,
// embedding ids) are checked, and a bad one is named with its position and the valid range.
// Read next: reference/cpu_conv_pool.cpp.
#include <Eigen/Core>
#include <cmath>
#include <cstring>

#include "framework/backend/cpu/cpu_backend.h"
#include "framework/error.h"

namespace dplab {
namespace {

using Row = Eigen::Map<const Eigen::ArrayXf>;
using RowOut = Eigen::Map<Eigen::ArrayXf>;

}  // namespace

// y = exp(x - m) / sum(exp(x - m));  log: y = x - m - log(sum(exp(x - m))),  m = max(x)
void CpuBackend::softmax(const float* x, float* y, int64_t rows, int64_t cols, bool log) {
  if (cols == 0) return;
  for (int64_t i = 0; i < rows; ++i) {
    Row xi(x + i * cols, cols);
    RowOut yi(y + i * cols, cols);
    const float m = xi.maxCoeff();
    if (log) {
      const float lse = m + std::log((xi - m).exp().sum());
      yi = xi - lse;
    } else {
      yi = (xi - m).exp();
      yi /= yi.sum();
    }
  }
}

// softmax:     gx = y * (gy - sum(gy * y))
// log_softmax: gx = gy - exp(y) * sum(gy)       (y is log-probabilities)
void CpuBackend::softmax_backward(const float* gy, const float* y, float* gx, int64_t rows,
                                  int64_t cols, bool log) {
  if (cols == 0) return;
  for (int64_t i = 0; i < rows; ++i) {
    Row g(gy + i * cols, cols);
    Row yi(y + i * cols, cols);
    RowOut out(gx + i * cols, cols);
    if (log) {
      const float s = g.sum();
      out = g - yi.exp() * s;
    } else {
      const float s = (g * yi).sum();
      out = yi * (g - s);
    }
  }
}

void CpuBackend::nll_loss(const float* logp, const int64_t* target, float* out, int64_t rows,
                          int64_t cols) {
  for (int64_t i = 0; i < rows; ++i) {
    const int64_t t = target[i];
    DPLAB_CHECK(t >= 0 && t < cols, "nll_loss: target {} out of range [0, {}) at row {}", t, cols,
                i);
    out[i] = -logp[i * cols + t];
  }
}

void CpuBackend::nll_loss_backward(const float* gout, const int64_t* target, float* glogp,
                                   int64_t rows, int64_t cols) {
  std::memset(glogp, 0, static_cast<std::size_t>(rows * cols) * sizeof(float));
  for (int64_t i = 0; i < rows; ++i) {
    const int64_t t = target[i];
    DPLAB_CHECK(t >= 0 && t < cols, "nll_loss_backward: target {} out of range [0, {}) at row {}",
                t, cols, i);
    glogp[i * cols + t] = -gout[i];
  }
}

void CpuBackend::index_rows(DType t, const void* src, int64_t src_rows, const int64_t* idx,
                            int64_t n_idx, int64_t row_elems, void* out) {
  const std::size_t row_bytes = static_cast<std::size_t>(row_elems) * element_size(t);
  const char* s = static_cast<const char*>(src);
  char* o = static_cast<char*>(out);
  for (int64_t i = 0; i < n_idx; ++i) {
    const int64_t k = idx[i];
    DPLAB_CHECK(k >= 0 && k < src_rows, "index_rows: index {} out of range [0, {}) at position {}",
                k, src_rows, i);
    if (row_bytes != 0) std::memcpy(o + i * row_bytes, s + k * row_bytes, row_bytes);
  }
}

// out[idx[i], :] += g[i, :]; repeated indices accumulate (the gradient of a repeated lookup).
void CpuBackend::index_add_rows(const float* g, const int64_t* idx, int64_t n_idx,
                                int64_t row_elems, float* out) {
  for (int64_t i = 0; i < n_idx; ++i) {
    const int64_t k = idx[i];
    DPLAB_CHECK(k >= 0, "index_add_rows: index {} is negative at position {}", k, i);
    RowOut(out + k * row_elems, row_elems) += Row(g + i * row_elems, row_elems);
  }
}

void CpuBackend::gather_rows(const float* src, int64_t src_rows, const int64_t* idx, int64_t rows,
                             int64_t cols, float* out) {
  for (int64_t i = 0; i < rows; ++i) {
    for (int64_t j = 0; j < cols; ++j) {
      const int64_t k = idx[i * cols + j];
      DPLAB_CHECK(k >= 0 && k < src_rows, "gather_rows: index {} out of range [0, {}) at [{}, {}]",
                  k, src_rows, i, j);
      out[i * cols + j] = src[k * cols + j];
    }
  }
}

void CpuBackend::scatter_add_rows(const float* g, const int64_t* idx, int64_t rows, int64_t cols,
                                  float* out) {
  for (int64_t i = 0; i < rows; ++i) {
    for (int64_t j = 0; j < cols; ++j) {
      const int64_t k = idx[i * cols + j];
      DPLAB_CHECK(k >= 0, "scatter_add_rows: index {} is negative at [{}, {}]", k, i, j);
      out[k * cols + j] += g[i * cols + j];
    }
  }
}

}  // namespace dplab
