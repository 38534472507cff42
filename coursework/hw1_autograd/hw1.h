// hw1.h: the four backward passes you write (autograd.cpp) and the two helpers you are given
// (support.cpp). Each backward gets the forward's inputs and gy = dL/dy, the gradient of the
// loss with respect to the forward's output, and returns dL/d(each input): the chain rule,
// one op at a time, exactly what dplab's autograd does for every op (framework/ops/*.cpp).
// Shapes are in the comments: [rows, cols], [N, C, H, W]. Everything is float32 on the CPU.
// Read the handout (README.md) for the math of each.
#pragma once
#include <cstdint>

#include "framework/ops/ops.h"
#include "framework/tensor/tensor.h"

namespace hw1 {

using dplab::Shape;
using dplab::Tensor;

// y = a @ b.  a: [M, K], b: [K, N], gy: [M, N]  ->  ga: [M, K], gb: [K, N]
struct MatmulGrads {
  Tensor ga, gb;
};
MatmulGrads matmul_backward(const Tensor& a, const Tensor& b, const Tensor& gy);

// loss = mean over i of -log softmax(logits[i])[target[i]]  (cross entropy: log_softmax then
// nll). logits: [B, C], target: int64 [B], gloss = dL/dloss  ->  dL/dlogits: [B, C]
Tensor cross_entropy_backward(const Tensor& logits, const Tensor& target, float gloss);

// y = conv2d(x, w, b, stride, padding).  x: [N, C, H, W], w: [O, C, K, K], b: [O],
// gy: [N, O, OH, OW]  ->  gx like x, gw like w, gb like b. Write it with im2col/col2im below.
struct Conv2dGrads {
  Tensor gx, gw, gb;
};
Conv2dGrads conv2d_backward(const Tensor& x, const Tensor& w, const Tensor& gy, int64_t stride,
                            int64_t padding);

// y = max_pool2d(x, kernel, stride), no padding.  x: [N, C, H, W], gy: [N, C, OH, OW]  ->  gx
// like x: each gy goes to the position of its window's maximum (the first one on a tie).
Tensor max_pool2d_backward(const Tensor& x, const Tensor& gy, int64_t kernel, int64_t stride);

// ---- given ----
// The columns of a convolution: cols[(c*K + i)*K + j, n*OH*OW + oh*OW + ow] =
// x[n, c, oh*stride + i - padding, ow*stride + j - padding] (0 outside the image), so that
// conv2d(x, w) is reshape(w, [O, C*K*K]) @ cols, one column per output position.
// cols: [C*K*K, N*OH*OW].
Tensor im2col(const Tensor& x, int64_t kernel, int64_t stride, int64_t padding);
// Its adjoint: every entry of cols added back to the image position it was read from.
// Returns [N, C, H, W] = x_shape.
Tensor col2im(const Tensor& cols, const Shape& x_shape, int64_t kernel, int64_t stride,
              int64_t padding);
// OH (or OW) for a side of `size`: (size + 2*padding - kernel) / stride + 1.
int64_t out_size(int64_t size, int64_t kernel, int64_t stride, int64_t padding);

}  // namespace hw1
