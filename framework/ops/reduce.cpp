// reduce.cpp: sum, mean, var, max, argmax. A reduction over one dim sees the tensor as
// [outer, r, inner] (dims before, the dim, dims after): the backend reduces the middle.
// Several dims are reduced one at a time, last first. Backward of a sum broadcasts the
// gradient back (expand); of a max, sends it to the position that won.
// Read next: matmul.cpp.
#include <algorithm>

#include "framework/ops/autocast.h"
#include "framework/ops/lowp.h"
#include "framework/ops/make_result.h"
#include "framework/ops/ops.h"

namespace dplab {
namespace {

struct Split3 {
  int64_t outer = 1, r = 1, inner = 1;
};
Split3 split_at(const Shape& s, int64_t d) {
  Split3 v;
  for (int64_t i = 0; i < static_cast<int64_t>(s.size()); ++i) {
    if (i < d) v.outer *= s[i];
    else if (i == d) v.r = s[i];
    else v.inner *= s[i];
  }
  return v;
}

// Reduces dim d of a (kept as size 1), no autograd.
Tensor reduce_dim_raw(ReduceKind op, const Tensor& a, int64_t d) {
  Shape out_shape = a.shape();
  out_shape[d] = 1;
  Split3 v = split_at(a.shape(), d);
  DType t = op == ReduceKind::ArgMax ? DType::Int64 : DType::Float32;
  Tensor out = Tensor::empty(out_shape, {.dtype = t, .device = a.device()});
  DPLAB_CHECK(v.r > 0 || op == ReduceKind::Sum, "reduction over an empty dim {} of shape {}", d,
              shape_str(a.shape()));
  backend_of(a).reduce(op, fptr(a), out.raw_data(), v.outer, v.r, v.inner);
  return out;
}

std::vector<int64_t> normalized_dims(const char* op, const std::vector<int64_t>& dims,
                                     int64_t ndim) {
  std::vector<int64_t> out;
  for (int64_t d : dims) out.push_back(normalize_dim(op, d, ndim));
  std::sort(out.begin(), out.end());
  DPLAB_CHECK(std::adjacent_find(out.begin(), out.end()) == out.end(), "{}: a dim is repeated", op);
  return out;
}

Shape reduced_shape(const Shape& s, const std::vector<int64_t>& dims, bool keepdim) {
  Shape out;
  for (int64_t i = 0; i < static_cast<int64_t>(s.size()); ++i) {
    bool reduced = std::find(dims.begin(), dims.end(), i) != dims.end();
    if (!reduced) out.push_back(s[i]);
    else if (keepdim) out.push_back(1);
  }
  return out;
}

// 16-bit input: the float32 reduction between two casts, so the sum accumulates in float32
// and is rounded once (lowp.h). Inside autocast, sum, mean and var stay in float32.
bool lowp(const Tensor& a) { return a.defined() && is_low_precision(a.dtype()); }
DType result_dtype(const Tensor& a) { return amp::autocast_dtype() ? DType::Float32 : a.dtype(); }

}  // namespace

Tensor sum(const Tensor& a) {
  if (lowp(a) || amp::autocast_dtype()) {
    const DType t = result_dtype(a);
    amp::AutocastSuspend inside;
    return cast(sum(amp::to_float32(a)), t);
  }
  check_float("sum", a);
  Tensor out = Tensor::empty({}, a.options());
  backend_of(a).reduce(ReduceKind::Sum, fptr(a), fptr(out), 1, a.numel(), 1);
  // d sum/dx_i = 1
  return record(out, "SumBackward", {a},
                [sa = a.shape()](const Tensor& g) { return std::vector<Tensor>{expand(g, sa)}; });
}

Tensor sum(const Tensor& a, const std::vector<int64_t>& dims, bool keepdim) {
  if (lowp(a) || amp::autocast_dtype()) {
    const DType t = result_dtype(a);
    amp::AutocastSuspend inside;
    return cast(sum(amp::to_float32(a), dims, keepdim), t);
  }
  check_float("sum", a);
  auto ds = normalized_dims("sum", dims, a.dim());
  Tensor r = a.detach();
  for (auto it = ds.rbegin(); it != ds.rend(); ++it) r = reduce_dim_raw(ReduceKind::Sum, r, *it);
  Tensor out = r.reshape(reduced_shape(a.shape(), ds, keepdim)).detach();
  Shape kept = reduced_shape(a.shape(), ds, true);
  return record(out, "SumDimBackward", {a}, [sa = a.shape(), kept](const Tensor& g) {
    return std::vector<Tensor>{expand(reshape(g, kept), sa)};
  });
}

Tensor mean(const Tensor& a) {
  if (lowp(a) || amp::autocast_dtype()) {
    const DType t = result_dtype(a);
    amp::AutocastSuspend inside;
    return cast(mean(amp::to_float32(a)), t);
  }
  check_float("mean", a);
  DPLAB_CHECK(a.numel() > 0, "mean: of an empty tensor of shape {}", shape_str(a.shape()));
  return mul_scalar(sum(a), 1.0f / static_cast<float>(a.numel()));
}

Tensor mean(const Tensor& a, const std::vector<int64_t>& dims, bool keepdim) {
  if (lowp(a) || amp::autocast_dtype()) {
    const DType t = result_dtype(a);
    amp::AutocastSuspend inside;
    return cast(mean(amp::to_float32(a), dims, keepdim), t);
  }
  check_float("mean", a);
  int64_t count = 1;
  for (int64_t d : normalized_dims("mean", dims, a.dim())) count *= a.shape()[d];
  DPLAB_CHECK(count > 0, "mean: over empty dims of shape {}", shape_str(a.shape()));
  return mul_scalar(sum(a, dims, keepdim), 1.0f / static_cast<float>(count));
}

Tensor var(const Tensor& a, const std::vector<int64_t>& dims, bool unbiased, bool keepdim) {
  if (lowp(a) || amp::autocast_dtype()) {
    const DType t = result_dtype(a);
    amp::AutocastSuspend inside;
    return cast(var(amp::to_float32(a), dims, unbiased, keepdim), t);
  }
  check_float("var", a);
  int64_t count = 1;
  for (int64_t d : normalized_dims("var", dims, a.dim())) count *= a.shape()[d];
  DPLAB_CHECK(count > (unbiased ? 1 : 0), "var: needs more than {} elements per group, got {}",
              unbiased ? 1 : 0, count);
  Tensor centered = sub(a, mean(a, dims, /*keepdim=*/true));
  return mul_scalar(sum(mul(centered, centered), dims, keepdim),
                    1.0f / static_cast<float>(unbiased ? count - 1 : count));
}

// Backward: the gradient is shared evenly among the elements equal to the maximum.
Tensor max(const Tensor& a) {
  if (lowp(a)) return cast(max(amp::to_float32(a)), a.dtype());
  check_float("max", a);
  DPLAB_CHECK(a.numel() > 0, "max: of an empty tensor");
  Tensor out = Tensor::empty({}, a.options());
  backend_of(a).reduce(ReduceKind::Max, fptr(a), fptr(out), 1, a.numel(), 1);
  return record(out, "MaxBackward", {a}, [a, out](const Tensor& g) {
    Tensor mask = eq(a, out);
    return std::vector<Tensor>{mul(mask, div(g, sum(mask)))};
  });
}

Tensor argmax(const Tensor& a, int64_t dim, bool keepdim) {
  if (lowp(a)) return argmax(raw_cast(a, DType::Float32), dim, keepdim);
  check_float("argmax", a);
  int64_t d = normalize_dim("argmax", dim, a.dim());
  Tensor idx = reduce_dim_raw(ReduceKind::ArgMax, a, d);
  return keepdim ? idx : idx.reshape(reduced_shape(a.shape(), {d}, false));
}

// Backward: g goes to the winning index of each slice: move dim to the front, scatter_add
// rows there, move it back.
MaxResult max(const Tensor& a, int64_t dim, bool keepdim) {
  if (lowp(a)) {
    MaxResult r = max(amp::to_float32(a), dim, keepdim);
    return {cast(r.values, a.dtype()), r.indices};
  }
  check_float("max", a);
  int64_t d = normalize_dim("max", dim, a.dim());
  Tensor idx = reduce_dim_raw(ReduceKind::ArgMax, a, d);
  Tensor values = reduce_dim_raw(ReduceKind::Max, a, d);
  Shape out_shape = reduced_shape(a.shape(), {d}, keepdim);
  values = values.reshape(out_shape).detach();
  values = record(values, "MaxDimBackward", {a}, [sa = a.shape(), idx, d](const Tensor& g) {
    std::vector<int64_t> perm(sa.size());
    for (size_t i = 0; i < perm.size(); ++i) perm[i] = static_cast<int64_t>(i);
    std::swap(perm[0], perm[d]);
    Shape kept = idx.shape();
    Tensor g_front = permute(reshape(g, kept), perm);  // [1, rest...]
    Tensor idx_front = permute(idx, perm);
    Shape front = g_front.shape();
    front[0] = sa[d];
    Tensor grad = zeros(front, g.options());
    int64_t cols = g_front.numel();
    backend_of(g).scatter_add_rows(fptr(g_front), iptr(idx_front), 1, cols, fptr(grad));
    return std::vector<Tensor>{permute(grad, perm)};
  });
  return {values, keepdim ? idx : idx.reshape(out_shape)};
}

}  // namespace dplab
