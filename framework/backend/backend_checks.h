// backend_checks.h: the argument checks made above every backend: Backend's public kernel
// functions (backend.h) run them, then call the backend's *_kernel, so the CPU and CUDA
// backends only compute. Each throws dplab::Error saying what was expected and what came.
// Ops check shapes and devices before they reach a backend; these guard the backend's own
// contract (a window's geometry, two layouts of one shape, an optimizer's flags), so a wrong
// call from any caller fails alike on every device.
// Read next: backend.h.
#pragma once
#include <cstdint>

#include "framework/backend/backend.h"

namespace dplab {

// Non-negative sizes, a positive kernel and stride, and out_h x out_w what the geometry gives.
void check_window(const char* what, const Window2d& w);
// Two operand layouts of one output shape (binary ops read both along it).
void check_same_shape(const char* what, const Strided& a, const Strided& b);
// [outer, r, inner] non-negative; r = 0 only for a sum (max, min and argmax of nothing).
void check_reduce(ReduceKind op, int64_t outer, int64_t r, int64_t inner);
// A momentum buffer when momentum != 0; nesterov only with momentum and no dampening.
void check_sgd_args(const SgdArgs& a, const float* momentum_buf);
// step is 1-based (bias correction divides by 1 - beta^step).
void check_adam_args(const AdamArgs& a);
// [batch, q, k] non-negative with q <= k: every query row sees at least one key.
void check_causal(int64_t batch, int64_t q, int64_t k);

}  // namespace dplab
