// cpu_reduce.cpp: sum / max / min / argmax over the middle axis of x viewed as [outer, r, inner].
// Every reduction over one dim of a row-major tensor has this form (r = the reduced dim,
// outer = the dims before it, inner = the dims after), so one kernel serves them all.
// When inner > 1 the loop runs over k then over the contiguous inner row, so each step adds
// one whole row (vectorised); when inner == 1 each output is a contiguous dot-free sum,
// done by Eigen's vectorised redux. Cost: outer*r*inner reads, outer*inner writes.
// Read next: cpu_nn.cpp.
#include <Eigen/Core>
#include <algorithm>

#include "framework/backend/cpu/cpu_backend.h"
#include "framework/error.h"

namespace dplab {
namespace {

// out[o, i] = x[o, 0, i] op x[o, 1, i] op ... for Sum / Max / Min.
template <typename F>
void reduce_rows(const float* x, float* out, int64_t outer, int64_t r, int64_t inner, F f) {
  for (int64_t o = 0; o < outer; ++o) {
    const float* base = x + o * r * inner;
    float* dst = out + o * inner;
    std::copy_n(base, inner, dst);
    for (int64_t k = 1; k < r; ++k) {
      const float* row = base + k * inner;
      for (int64_t i = 0; i < inner; ++i) dst[i] = f(dst[i], row[i]);
    }
  }
}

// out[o, i] = the first k with x[o, k, i] == max_k x[o, k, i] (strict > keeps the first).
void argmax_rows(const float* x, int64_t* out, int64_t outer, int64_t r, int64_t inner) {
  for (int64_t o = 0; o < outer; ++o) {
    const float* base = x + o * r * inner;
    for (int64_t i = 0; i < inner; ++i) {
      float best = base[i];
      int64_t best_k = 0;
      for (int64_t k = 1; k < r; ++k) {
        float v = base[k * inner + i];
        if (v > best) {
          best = v;
          best_k = k;
        }
      }
      out[o * inner + i] = best_k;
    }
  }
}

}  // namespace

void CpuBackend::reduce_kernel(ReduceKind op, const float* x, void* out, int64_t outer, int64_t r,
                               int64_t inner) {
  if (outer == 0 || inner == 0) return;
  if (op == ReduceKind::ArgMax) {
    argmax_rows(x, static_cast<int64_t*>(out), outer, r, inner);
    return;
  }
  float* y = static_cast<float*>(out);
  if (r == 0) {  // the empty sum is 0 (max / min of nothing: refused by check_reduce)
    std::fill_n(y, outer * inner, 0.0f);
    return;
  }
  if (inner == 1) {
    // Each output reduces one contiguous run of r floats: let Eigen vectorise it.
    for (int64_t o = 0; o < outer; ++o) {
      Eigen::Map<const Eigen::ArrayXf> row(x + o * r, r);
      y[o] = op == ReduceKind::Sum   ? row.sum()
             : op == ReduceKind::Max ? row.maxCoeff()
                                     : row.minCoeff();
    }
    return;
  }
  switch (op) {
    case ReduceKind::Sum:
      reduce_rows(x, y, outer, r, inner, [](float a, float b) { return a + b; });
      return;
    case ReduceKind::Max:
      reduce_rows(x, y, outer, r, inner, [](float a, float b) { return b > a ? b : a; });
      return;
    case ReduceKind::Min:
      reduce_rows(x, y, outer, r, inner, [](float a, float b) { return b < a ? b : a; });
      return;
    case ReduceKind::ArgMax: break;  // handled above
  }
}

}  // namespace dplab
