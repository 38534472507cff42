// index.cpp: picking rows along dim 0 by an int64 index (a batch from a dataset, the
// logits at the targets). Backward adds each gradient row back where it came from
// (index_add / scatter_add), so repeated indices accumulate.
// Read next: nn_loss.cpp.
#include "framework/ops/make_result.h"
#include "framework/ops/ops.h"

namespace dplab {

// out[i, ...] = a[index[i], ...]
Tensor index_select(const Tensor& a, const Tensor& index) {
  check_defined("index_select", a);
  check_int64("index_select", index);
  check_same_device("index_select", a, index);
  DPLAB_CHECK(a.dim() >= 1 && index.dim() == 1,
              "index_select: expected a with >= 1 dims and a 1-D "
              "index, got a {} and index {}",
              shape_str(a.shape()), shape_str(index.shape()));
  Shape shape = a.shape();
  shape[0] = index.numel();
  Tensor out = Tensor::empty(shape, a.options());
  int64_t row = a.size(0) == 0 ? 0 : a.numel() / a.size(0);
  if (out.numel() > 0)
    backend_of(a).index_rows(a.dtype(), a.raw_data(), a.size(0), iptr(index), index.numel(), row,
                             out.raw_data());
  return record(out, "IndexSelectBackward", {a}, [sa = a.shape(), index, row](const Tensor& g) {
    Tensor grad = zeros(sa, g.options());
    if (g.numel() > 0)
      backend_of(g).index_add_rows(fptr(g), iptr(index), index.numel(), row, fptr(grad));
    return std::vector<Tensor>{grad};
  });
}

// out[i, j] = a[index[i, j], j]; trailing dims of a and index must agree.
Tensor gather(const Tensor& a, const Tensor& index) {
  check_float("gather", a);
  check_int64("gather", index);
  check_same_device("gather", a, index);
  Shape rest_a(a.shape().begin() + std::min<int64_t>(1, a.dim()), a.shape().end());
  Shape rest_i(index.shape().begin() + std::min<int64_t>(1, index.dim()), index.shape().end());
  DPLAB_CHECK(a.dim() >= 1 && index.dim() == a.dim() && rest_a == rest_i,
              "gather: index must have a's shape except along dim 0: a is {}, index is {}",
              shape_str(a.shape()), shape_str(index.shape()));
  int64_t cols = shape_numel(rest_a), rows = index.size(0);
  Tensor out = Tensor::empty(index.shape(), a.options());
  if (out.numel() > 0)
    backend_of(a).gather_rows(fptr(a), a.size(0), iptr(index), rows, cols, fptr(out));
  return record(out, "GatherBackward", {a}, [sa = a.shape(), index, rows, cols](const Tensor& g) {
    Tensor grad = zeros(sa, g.options());
    if (g.numel() > 0) backend_of(g).scatter_add_rows(fptr(g), iptr(index), rows, cols, fptr(grad));
    return std::vector<Tensor>{grad};
  });
}

}  // namespace dplab
