// make_result.cpp: recording backward nodes, and the checks ops share.
#include "framework/ops/make_result.h"

#include "framework/ops/lowp.h"

namespace dplab {

bool any_requires_grad(const std::vector<Tensor>& inputs) {
  for (const Tensor& t : inputs)
    if (t.defined() && t.requires_grad()) return true;
  return false;
}

Tensor record(Tensor out, const char* name, const std::vector<Tensor>& inputs, BackwardFn fn) {
  if (!grad_enabled() || !any_requires_grad(inputs)) return out;
  std::vector<std::shared_ptr<Node>> next;
  next.reserve(inputs.size());
  for (const Tensor& t : inputs) next.push_back(gradient_edge(t));
  // A gradient has its input's dtype (a float16 input gets a float16 gradient even when the
  // op computed in float32 or promoted): cast here, once for every op, as PyTorch's engine does.
  std::vector<DType> dtypes;
  bool mixed = false;
  for (const Tensor& t : inputs) {
    dtypes.push_back(t.defined() ? t.dtype() : out.dtype());
    mixed = mixed || dtypes.back() != out.dtype();
  }
  if (mixed) {
    fn = [fn = std::move(fn), dtypes = std::move(dtypes)](const Tensor& g) {
      std::vector<Tensor> grads = fn(g);
      for (size_t i = 0; i < grads.size() && i < dtypes.size(); ++i)
        if (grads[i].defined() && grads[i].dtype() != dtypes[i] && is_floating(dtypes[i]))
          grads[i] = raw_cast(grads[i], dtypes[i]);
      return grads;
    };
  }
  out.impl().grad_fn = std::make_shared<Node>(name, std::move(next), std::move(fn));
  out.impl().requires_grad = true;
  return out;
}

void check_defined(const char* op, const Tensor& t) {
  DPLAB_CHECK(t.defined(), "{}: got an undefined tensor", op);
}

void check_float(const char* op, const Tensor& t) {
  check_defined(op, t);
  DPLAB_CHECK(t.dtype() == DType::Float32, "{}: expected a float32 tensor, got {} of shape {}", op,
              dtype_name(t.dtype()), shape_str(t.shape()));
}

void check_floating(const char* op, const Tensor& t) {
  check_defined(op, t);
  DPLAB_CHECK(is_floating(t.dtype()),
              "{}: expected a floating tensor (float32, float16 or bfloat16), "
              "got {} of shape {}",
              op, dtype_name(t.dtype()), shape_str(t.shape()));
}

void check_int64(const char* op, const Tensor& t) {
  check_defined(op, t);
  DPLAB_CHECK(t.dtype() == DType::Int64, "{}: expected an int64 tensor, got {} of shape {}", op,
              dtype_name(t.dtype()), shape_str(t.shape()));
}

void check_same_device(const char* op, const Tensor& a, const Tensor& b) {
  DPLAB_CHECK(a.device() == b.device(),
              "{}: tensors on different devices: {} is on {}, {} is on {}", op,
              shape_str(a.shape()), a.device(), shape_str(b.shape()), b.device());
}

int64_t normalize_dim(const char* op, int64_t dim, int64_t ndim) {
  int64_t d = dim < 0 ? dim + ndim : dim;
  DPLAB_CHECK(d >= 0 && d < ndim, "{}: dim {} out of range for a tensor with {} dims", op, dim,
              ndim);
  return d;
}

Strided contiguous_layout(const Shape& s) {
  Strided l;
  l.ndim = static_cast<int>(s.size());
  int64_t stride = 1;
  for (int i = l.ndim - 1; i >= 0; --i) {
    l.shape[i] = s[i];
    l.strides[i] = stride;
    stride *= s[i];
  }
  return l;
}

Strided broadcast_layout(const Shape& in, const Shape& out) {
  Strided l = contiguous_layout(out);
  Strided src = contiguous_layout(in);
  int offset = static_cast<int>(out.size() - in.size());
  for (int i = 0; i < l.ndim; ++i) {
    int j = i - offset;
    l.strides[i] = (j < 0 || in[j] == 1) ? 0 : src.strides[j];
  }
  return l;
}

}  // namespace dplab
