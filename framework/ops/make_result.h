// make_result.h: how an op records its backward, and the checks every op shares.
//
//   Tensor y = ...forward on the backend...;
//   return record(y, "MulBackward", {a, b}, [a, b](const Tensor& g) {
//     return std::vector<Tensor>{mul(g, b), mul(g, a)};   // d(ab)/da = b, d(ab)/db = a
//   });
//
// record() attaches a Node only when grad mode is on and some input requires grad, so
// evaluation under NoGradGuard saves nothing. The closure captures what backward needs
// (the "saved tensors"); the engine frees it right after it runs.
#pragma once
#include <vector>

#include "framework/autograd/grad_mode.h"
#include "framework/autograd/node.h"
#include "framework/backend/backend.h"
#include "framework/tensor/tensor.h"

namespace dplab {

bool any_requires_grad(const std::vector<Tensor>& inputs);
Tensor record(Tensor out, const char* name, const std::vector<Tensor>& inputs, BackwardFn fn);

// ---- shared checks: each throws dplab::Error naming the op and both sides ----
void check_defined(const char* op, const Tensor& t);
void check_float(const char* op, const Tensor& t);     // float32
void check_floating(const char* op, const Tensor& t);  // float32, float16 or bfloat16
void check_int64(const char* op, const Tensor& t);
void check_same_device(const char* op, const Tensor& a, const Tensor& b);
int64_t normalize_dim(const char* op, int64_t dim, int64_t ndim);  // -1 -> ndim-1

// ---- layouts for the backend ----
Strided contiguous_layout(const Shape& s);
// How `in` is read when broadcast to `out` (stride 0 along broadcast dims).
Strided broadcast_layout(const Shape& in, const Shape& out);
inline Backend& backend_of(const Tensor& t) { return backend_for(t.device()); }
inline float* fptr(const Tensor& t) { return t.data<float>(); }
inline int64_t* iptr(const Tensor& t) { return t.data<int64_t>(); }

}  // namespace dplab
