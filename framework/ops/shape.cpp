// shape.cpp: ops that move elements without arithmetic. Tensors are always contiguous, so
// reshape and narrow along dim 0 are views (same storage, new shape or offset); transpose,
// permute, expand and narrow along other dims read through a Strided layout into a fresh
// contiguous tensor. Each backward is the adjoint move: reshape back, permute back, pad
// with zeros, sum over the broadcast.
// Read next: index.cpp.
#include "framework/ops/make_result.h"
#include "framework/ops/ops.h"

namespace dplab {
namespace {

// A tensor sharing a's storage, with another shape and offset (no autograd).
Tensor view_of(const Tensor& a, const Shape& shape, int64_t extra_offset) {
  auto impl = std::make_shared<TensorImpl>();
  impl->storage = a.impl().storage;
  impl->offset = a.impl().offset + extra_offset;
  impl->shape = shape;
  impl->dtype = a.dtype();
  return Tensor(std::move(impl));
}

// out <- a read through `layout`, starting `offset` elements into a.
Tensor strided_read(const Tensor& a, const Strided& layout, int64_t offset) {
  Shape shape(layout.shape, layout.shape + layout.ndim);
  Tensor out = Tensor::empty(shape, a.options());
  if (out.numel() == 0) return out;
  const char* src = static_cast<const char*>(a.raw_data()) + offset * element_size(a.dtype());
  backend_of(a).strided_copy(a.dtype(), src, layout, out.raw_data());
  return out;
}

std::vector<int64_t> inverse(const std::vector<int64_t>& perm) {
  std::vector<int64_t> inv(perm.size());
  for (size_t i = 0; i < perm.size(); ++i) inv[perm[i]] = static_cast<int64_t>(i);
  return inv;
}

}  // namespace

Tensor reshape(const Tensor& a, const Shape& s) {
  check_defined("reshape", a);
  Shape shape = s;
  int64_t known = 1, infer = -1;
  for (size_t i = 0; i < shape.size(); ++i) {
    if (shape[i] == -1) {
      DPLAB_CHECK(infer < 0, "reshape: only one -1 allowed, got {}", shape_str(s));
      infer = static_cast<int64_t>(i);
    } else {
      DPLAB_CHECK(shape[i] >= 0, "reshape: bad size in {}", shape_str(s));
      known *= shape[i];
    }
  }
  if (infer >= 0) {
    DPLAB_CHECK(known > 0 && a.numel() % known == 0, "reshape: cannot view {} ({} elements) as {}",
                shape_str(a.shape()), a.numel(), shape_str(s));
    shape[infer] = a.numel() / known;
  }
  DPLAB_CHECK(shape_numel(shape) == a.numel(), "reshape: cannot view {} ({} elements) as {}",
              shape_str(a.shape()), a.numel(), shape_str(s));
  Tensor out = view_of(a, shape, 0);
  return record(out, "ReshapeBackward", {a},
                [sa = a.shape()](const Tensor& g) { return std::vector<Tensor>{reshape(g, sa)}; });
}

Tensor permute(const Tensor& a, const std::vector<int64_t>& dims) {
  check_defined("permute", a);
  int64_t n = a.dim();
  DPLAB_CHECK(static_cast<int64_t>(dims.size()) == n,
              "permute: {} dims given for a tensor of shape {}", dims.size(), shape_str(a.shape()));
  std::vector<int64_t> perm(n);
  std::vector<bool> used(n, false);
  for (int64_t i = 0; i < n; ++i) {
    perm[i] = normalize_dim("permute", dims[i], n);
    DPLAB_CHECK(!used[perm[i]], "permute: dim {} repeated in the permutation", perm[i]);
    used[perm[i]] = true;
  }
  Strided in = contiguous_layout(a.shape());
  Strided layout;
  layout.ndim = static_cast<int>(n);
  for (int64_t i = 0; i < n; ++i) {
    layout.shape[i] = in.shape[perm[i]];
    layout.strides[i] = in.strides[perm[i]];
  }
  Tensor out = strided_read(a, layout, 0);
  return record(out, "PermuteBackward", {a}, [inv = inverse(perm)](const Tensor& g) {
    return std::vector<Tensor>{permute(g, inv)};
  });
}

Tensor transpose(const Tensor& a, int64_t d0, int64_t d1) {
  check_defined("transpose", a);
  std::vector<int64_t> perm(a.dim());
  for (int64_t i = 0; i < a.dim(); ++i) perm[i] = i;
  std::swap(perm[normalize_dim("transpose", d0, a.dim())],
            perm[normalize_dim("transpose", d1, a.dim())]);
  return permute(a, perm);
}

Tensor expand(const Tensor& a, const Shape& s) {
  check_defined("expand", a);
  DPLAB_CHECK(broadcast_shapes(a.shape(), s) == s, "expand: cannot expand {} to {}",
              shape_str(a.shape()), shape_str(s));
  Tensor out = strided_read(a, broadcast_layout(a.shape(), s), 0);
  return record(out, "ExpandBackward", {a},
                [sa = a.shape()](const Tensor& g) { return std::vector<Tensor>{sum_to(g, sa)}; });
}

// Backward: the gradient padded with zeros back to the input's extent along dim.
Tensor narrow(const Tensor& a, int64_t dim, int64_t start, int64_t length) {
  check_defined("narrow", a);
  int64_t d = normalize_dim("narrow", dim, a.dim());
  int64_t n = a.shape()[d];
  DPLAB_CHECK(start >= 0 && length >= 0 && start + length <= n,
              "narrow: rows [{}, {}) out of range for dim {} of size {} (shape {})", start,
              start + length, d, n, shape_str(a.shape()));
  Shape shape = a.shape();
  shape[d] = length;
  Strided in = contiguous_layout(a.shape());
  Tensor out;
  if (d == 0) {
    out = view_of(a, shape, start * in.strides[0]);
  } else {
    Strided layout = in;
    layout.shape[d] = length;
    out = strided_read(a, layout, start * in.strides[d]);
  }
  return record(out, "NarrowBackward", {a}, [sa = a.shape(), d, start, length](const Tensor& g) {
    std::vector<Tensor> parts;
    Shape before = sa, after = sa;
    before[d] = start;
    after[d] = sa[d] - start - length;
    if (start > 0) parts.push_back(zeros(before, g.options()));
    parts.push_back(g);
    if (after[d] > 0) parts.push_back(zeros(after, g.options()));
    return std::vector<Tensor>{parts.size() == 1 ? g : cat(parts, d)};
  });
}

Tensor cat(const std::vector<Tensor>& ts, int64_t dim) {
  DPLAB_CHECK(!ts.empty(), "cat: expected a non-empty list of tensors");
  const Tensor& first = ts[0];
  check_defined("cat", first);
  int64_t d = normalize_dim("cat", dim, first.dim());
  if (d != 0) {  // bring dim to the front, cat there, move it back
    std::vector<int64_t> perm(first.dim());
    for (int64_t i = 0; i < first.dim(); ++i) perm[i] = i;
    std::swap(perm[0], perm[d]);
    std::vector<Tensor> moved;
    for (const Tensor& t : ts) moved.push_back(permute(t, perm));
    return permute(cat(moved, 0), perm);
  }
  Shape shape = first.shape();
  int64_t rows = 0;
  std::vector<int64_t> sizes;
  for (const Tensor& t : ts) {
    check_defined("cat", t);
    check_same_device("cat", first, t);
    Shape rest_a(first.shape().begin() + 1, first.shape().end()),
        rest_b(t.shape().begin() + 1, t.shape().end());
    DPLAB_CHECK(t.dim() == first.dim() && rest_a == rest_b && t.dtype() == first.dtype(),
                "cat: shapes must match except along dim 0: {} vs {}", shape_str(first.shape()),
                shape_str(t.shape()));
    rows += t.shape()[0];
    sizes.push_back(t.shape()[0]);
  }
  shape[0] = rows;
  Tensor out = Tensor::empty(shape, first.options());
  int64_t offset = 0;
  for (const Tensor& t : ts) {
    if (t.numel() > 0) {
      char* dst = static_cast<char*>(out.raw_data()) + offset * element_size(t.dtype());
      backend_of(t).copy_device(t.device(), dst, t.device(), t.raw_data(), t.nbytes());
    }
    offset += t.numel();
  }
  return record(out, "CatBackward", ts,
                [sizes](const Tensor& g) { return split_sizes(g, sizes, 0); });
}

Tensor stack(const std::vector<Tensor>& ts, int64_t dim) {
  DPLAB_CHECK(!ts.empty(), "stack: expected a non-empty list of tensors");
  int64_t d = normalize_dim("stack", dim, ts[0].dim() + 1);
  std::vector<Tensor> expanded;
  for (const Tensor& t : ts) {
    DPLAB_CHECK(t.shape() == ts[0].shape(), "stack: all tensors must have one shape: {} vs {}",
                shape_str(ts[0].shape()), shape_str(t.shape()));
    Shape s = t.shape();
    s.insert(s.begin() + d, 1);
    expanded.push_back(reshape(t, s));
  }
  return cat(expanded, d);
}

std::vector<Tensor> split_sizes(const Tensor& a, const std::vector<int64_t>& sizes, int64_t dim) {
  check_defined("split", a);
  int64_t d = normalize_dim("split", dim, a.dim());
  int64_t total = 0;
  for (int64_t s : sizes) total += s;
  DPLAB_CHECK(total == a.shape()[d], "split: sizes add up to {} but dim {} has size {}", total, d,
              a.shape()[d]);
  std::vector<Tensor> out;
  int64_t start = 0;
  for (int64_t s : sizes) {
    out.push_back(narrow(a, d, start, s));
    start += s;
  }
  return out;
}

std::vector<Tensor> split(const Tensor& a, int64_t split_size, int64_t dim) {
  check_defined("split", a);
  DPLAB_CHECK(split_size > 0, "split: split_size must be positive, got {}", split_size);
  int64_t n = a.shape()[normalize_dim("split", dim, a.dim())];
  std::vector<int64_t> sizes;
  for (int64_t start = 0; start < n; start += split_size)
    sizes.push_back(std::min(split_size, n - start));
  return split_sizes(a, sizes, dim);
}

std::vector<Tensor> chunk(const Tensor& a, int64_t chunks, int64_t dim) {
  check_defined("chunk", a);
  DPLAB_CHECK(chunks > 0, "chunk: number of chunks must be positive, got {}", chunks);
  int64_t n = a.shape()[normalize_dim("chunk", dim, a.dim())];
  int64_t per = std::max<int64_t>(1, (n + chunks - 1) / chunks);
  return split(a, per, dim);
}

Tensor clone(const Tensor& a) {
  check_defined("clone", a);
  Tensor out = a.contiguous_copy_on(a.device());
  return record(out, "CloneBackward", {a}, [](const Tensor& g) { return std::vector<Tensor>{g}; });
}

Tensor to_device(const Tensor& a, Device d) {
  check_defined("to", a);
  Tensor out = a.contiguous_copy_on(d);
  return record(out, "ToDeviceBackward", {a}, [src = a.device()](const Tensor& g) {
    return std::vector<Tensor>{to_device(g, src)};
  });
}

}  // namespace dplab
