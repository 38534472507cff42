// support.cpp: the part of hw1 that is given: im2col and col2im on the library's CPU kernels
// (dplab tensors are always contiguous, so their data can go to a kernel as it is).
#include <stdexcept>
#include <string>

#include "hw1.h"
#include "framework/backend/backend.h"

namespace hw1 {
namespace {

dplab::Window2d window(const Shape& x, int64_t kernel, int64_t stride, int64_t padding) {
  if (x.size() != 4) throw std::invalid_argument("im2col/col2im: x must be [N, C, H, W]");
  dplab::Window2d w{.N = x[0], .C = x[1], .H = x[2], .W = x[3], .kh = kernel, .kw = kernel,
                    .stride = stride, .pad = padding};
  w.out_h = out_size(w.H, kernel, stride, padding);
  w.out_w = out_size(w.W, kernel, stride, padding);
  return w;
}

dplab::Backend& cpu() { return dplab::backend_for(dplab::Device(dplab::DeviceKind::CPU)); }

}  // namespace

int64_t out_size(int64_t size, int64_t kernel, int64_t stride, int64_t padding) {
  return (size + 2 * padding - kernel) / stride + 1;
}

Tensor im2col(const Tensor& x, int64_t kernel, int64_t stride, int64_t padding) {
  const dplab::Window2d w = window(x.shape(), kernel, stride, padding);
  Tensor cols = Tensor::empty({w.C * kernel * kernel, w.N * w.out_h * w.out_w});
  cpu().im2col(x.data<float>(), w, cols.data<float>());
  return cols;
}

Tensor col2im(const Tensor& cols, const Shape& x_shape, int64_t kernel, int64_t stride,
              int64_t padding) {
  const dplab::Window2d w = window(x_shape, kernel, stride, padding);
  const Shape want{w.C * kernel * kernel, w.N * w.out_h * w.out_w};
  if (cols.shape() != want)
    throw std::invalid_argument("col2im: cols must be [C*K*K, N*OH*OW] = [" +
                                std::to_string(want[0]) + ", " + std::to_string(want[1]) + "]");
  Tensor gx = Tensor::empty(x_shape);
  cpu().col2im(cols.data<float>(), w, gx.data<float>());
  return gx;
}

}  // namespace hw1
