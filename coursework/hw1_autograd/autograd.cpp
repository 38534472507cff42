// autograd.cpp: hw1, four backward passes. Your code replaces each // TODO the starter left;
// the signatures stay as they are. Use the tensor ops of framework/ops/ops.h (matmul,
// transpose, reshape, permute, softmax, sum, ...) or loops over t.data<float>(): both are fine.
// The handout (README.md) derives each formula.
#include <algorithm>
#include <limits>

#include "hw1.h"

namespace hw1 {

using namespace dplab;

MatmulGrads matmul_backward(const Tensor& a, const Tensor& b, const Tensor& gy) {
  // BEGIN ASSIGNMENT: dL/da and dL/db of y = a @ b (README section 1)
  // dy/da: each a[m, k] meets every b[k, n] in row m of y, so ga = gy @ b^T and gb = a^T @ gy
  return {matmul(gy, transpose(b, 0, 1)), matmul(transpose(a, 0, 1), gy)};
  // END ASSIGNMENT
}

Tensor cross_entropy_backward(const Tensor& logits, const Tensor& target, float gloss) {
  // BEGIN ASSIGNMENT: dL/dlogits of the mean cross entropy (README section 2)
  // d/dz_j of -log softmax(z)_t = softmax(z)_j - 1[j = t]; the mean divides by B
  const int64_t batch = logits.shape()[0], classes = logits.shape()[1];
  Tensor g = softmax(logits, 1);
  float* p = g.data<float>();
  const int64_t* t = target.data<int64_t>();
  for (int64_t i = 0; i < batch; ++i) p[i * classes + t[i]] -= 1.0f;
  return mul_scalar(g, gloss / static_cast<float>(batch));
  // END ASSIGNMENT
}

Conv2dGrads conv2d_backward(const Tensor& x, const Tensor& w, const Tensor& gy, int64_t stride,
                            int64_t padding) {
  // BEGIN ASSIGNMENT: dL/dx, dL/dw and dL/db of a convolution, through im2col (README section 3)
  const int64_t out_channels = w.shape()[0], kernel = w.shape()[2];
  // the forward was Y = W2 @ cols with W2: [O, C*K*K], cols: [C*K*K, N*L], Y: [O, N*L]
  const Tensor cols = im2col(x, kernel, stride, padding);
  const Tensor gY = reshape(permute(gy, {1, 0, 2, 3}), {out_channels, -1});  // [O, N*L]
  const Tensor w2 = reshape(w, {out_channels, -1});
  Tensor gw = reshape(matmul(gY, transpose(cols, 0, 1)), w.shape());  // gY @ cols^T
  Tensor gcols = matmul(transpose(w2, 0, 1), gY);                     // W2^T @ gY
  Tensor gx = col2im(gcols, x.shape(), kernel, stride, padding);
  Tensor gb = sum(gY, {1});  // the bias is added at every position of every image
  return {gx, gw, gb};
  // END ASSIGNMENT
}

Tensor max_pool2d_backward(const Tensor& x, const Tensor& gy, int64_t kernel, int64_t stride) {
  // BEGIN ASSIGNMENT: route each gy to its window's maximum (README section 4)
  const int64_t planes = x.shape()[0] * x.shape()[1], h = x.shape()[2], w = x.shape()[3];
  const int64_t oh = gy.shape()[2], ow = gy.shape()[3];
  Tensor gx = zeros(x.shape());
  const float* xs = x.data<float>();
  const float* gs = gy.data<float>();
  float* out = gx.data<float>();
  for (int64_t p = 0; p < planes; ++p)
    for (int64_t i = 0; i < oh; ++i)
      for (int64_t j = 0; j < ow; ++j) {
        int64_t best = -1;
        float best_value = -std::numeric_limits<float>::infinity();
        for (int64_t di = 0; di < kernel; ++di)
          for (int64_t dj = 0; dj < kernel; ++dj) {
            const int64_t at = (i * stride + di) * w + (j * stride + dj);
            if (best < 0 || xs[p * h * w + at] > best_value) {  // ">": the first max wins ties
              best = at;
              best_value = xs[p * h * w + at];
            }
          }
        out[p * h * w + best] += gs[(p * oh + i) * ow + j];  // windows may overlap: add
      }
  return gx;
  // END ASSIGNMENT
}

}  // namespace hw1
