// ops.h: every differentiable operation dplab has. Each op, in framework/ops/*.cpp, checks
// its inputs (shapes, dtypes, devices: errors name both sides), calls the backend of the
// inputs' device, and records its backward formula next to the forward one.
// All inputs of an op must be on the same device.
// Read next: make_result.h (how an op records its backward), then elementwise.cpp.
#pragma once
#include <cstdint>
#include <optional>
#include <vector>

#include "framework/tensor/tensor.h"

namespace dplab {

// ---- factories (ops/factories.cpp) ----
Tensor zeros(const Shape& s, TensorOptions o = {});
Tensor ones(const Shape& s, TensorOptions o = {});
Tensor full(const Shape& s, double value, TensorOptions o = {});
Tensor arange(int64_t end, TensorOptions o = {});
Tensor arange(int64_t start, int64_t end, int64_t step = 1, TensorOptions o = {});
Tensor from_vector(const std::vector<float>& v, const Shape& s, TensorOptions o = {});
Tensor from_vector(const std::vector<int64_t>& v, const Shape& s, TensorOptions o = {});
Tensor zeros_like(const Tensor& t);
Tensor ones_like(const Tensor& t);
// Random factories draw from the global generator (random.h) unless given one.
class Generator;
Tensor randn(const Shape& s, TensorOptions o = {}, Generator* gen = nullptr);
Tensor rand(const Shape& s, TensorOptions o = {}, Generator* gen = nullptr);  // U[0, 1)
Tensor uniform(const Shape& s, float low, float high, TensorOptions o = {},
               Generator* gen = nullptr);
Tensor randint(int64_t low, int64_t high, const Shape& s, TensorOptions o = {},
               Generator* gen = nullptr);
Tensor randperm(int64_t n, Generator* gen = nullptr);  // int64 on cpu

// ---- elementwise, with NumPy broadcasting (ops/elementwise.cpp) ----
Tensor add(const Tensor& a, const Tensor& b);
Tensor sub(const Tensor& a, const Tensor& b);
Tensor mul(const Tensor& a, const Tensor& b);
Tensor div(const Tensor& a, const Tensor& b);
Tensor pow(const Tensor& a, const Tensor& b);
Tensor maximum(const Tensor& a, const Tensor& b);  // ties send the gradient to a
Tensor eq(const Tensor& a, const Tensor& b);       // not differentiable; float 0/1
Tensor add_scalar(const Tensor& a, float s);
Tensor mul_scalar(const Tensor& a, float s);
Tensor pow(const Tensor& a, float p);
Tensor neg(const Tensor& a);
Tensor exp(const Tensor& a);
Tensor log(const Tensor& a);
Tensor sqrt(const Tensor& a);
Tensor abs(const Tensor& a);
Tensor relu(const Tensor& a);
Tensor sigmoid(const Tensor& a);
Tensor tanh(const Tensor& a);
Shape broadcast_shapes(const Shape& a, const Shape& b);  // throws naming both
// Sums g down to `shape` (the reverse of broadcasting): used by every broadcasting backward.
Tensor sum_to(const Tensor& g, const Shape& shape);

// ---- reductions (ops/reduce.cpp) ----
Tensor sum(const Tensor& a);
Tensor sum(const Tensor& a, const std::vector<int64_t>& dims, bool keepdim = false);
Tensor mean(const Tensor& a);
Tensor mean(const Tensor& a, const std::vector<int64_t>& dims, bool keepdim = false);
Tensor var(const Tensor& a, const std::vector<int64_t>& dims, bool unbiased, bool keepdim = false);
Tensor max(const Tensor& a);  // over all elements
struct MaxResult {
  Tensor values, indices;
};
MaxResult max(const Tensor& a, int64_t dim, bool keepdim = false);  // indices int64
Tensor argmax(const Tensor& a, int64_t dim, bool keepdim = false);

// ---- linear algebra and shapes (ops/matmul.cpp, ops/shape.cpp) ----
// [..., M, K] @ [..., K, N] -> [..., M, N]: the last two dims multiply, the dims before them
// are a batch and broadcast (NumPy's rule): [B,H,T,D]@[B,H,D,T], [B,M,K]@[K,N], ... One
// batched GEMM for the whole batch; an operand whose batch dims are all 1 (or absent) is
// read once for every entry, with no copy. transpose_a / transpose_b multiply by the
// operand's last two dims swapped, read in place by the GEMM (attention's q k^T without
// a transposed copy of k): matmul(q, k, {.transpose_b = true}).
struct MatmulOptions {
  bool transpose_a = false, transpose_b = false;
};
Tensor matmul(const Tensor& a, const Tensor& b, MatmulOptions o = {});
// x: [B, in]  W: [out, in]  b: [out] -> [B, out]   (y = x W^T + b, one fused GEMM)
Tensor linear(const Tensor& x, const Tensor& weight, const Tensor& bias = {});
Tensor reshape(const Tensor& a, const Shape& s);
Tensor transpose(const Tensor& a, int64_t d0, int64_t d1);
Tensor permute(const Tensor& a, const std::vector<int64_t>& dims);
Tensor expand(const Tensor& a, const Shape& s);  // broadcast a to s (a copy)
Tensor cat(const std::vector<Tensor>& ts, int64_t dim = 0);
Tensor stack(const std::vector<Tensor>& ts, int64_t dim = 0);
Tensor narrow(const Tensor& a, int64_t dim, int64_t start, int64_t length);
// Tensor.chunk's rule: each chunk has ceil(n / chunks) rows, the last the remainder,
// so 30 rows in 8 chunks -> 4,4,4,4,4,4,4,2 and fewer rows than chunks gives fewer chunks.
std::vector<Tensor> chunk(const Tensor& a, int64_t chunks, int64_t dim = 0);
std::vector<Tensor> split(const Tensor& a, int64_t split_size, int64_t dim = 0);
std::vector<Tensor> split_sizes(const Tensor& a, const std::vector<int64_t>& sizes,
                                int64_t dim = 0);
Tensor index_select(const Tensor& a, const Tensor& index);  // rows of a along dim 0
Tensor gather(const Tensor& a, const Tensor& index);        // out[i,j] = a[index[i,j], j]
Tensor to_device(const Tensor& a, Device d);                // differentiable copy
// a in dtype t (Tensor::to(DType)); differentiable between floating dtypes (ops/lowp.cpp)
Tensor cast(const Tensor& a, DType t);
Tensor clone(const Tensor& a);

// ---- neural-network functions (ops/nn_*.cpp) ----
Tensor softmax(const Tensor& x, int64_t dim = -1);
Tensor log_softmax(const Tensor& x, int64_t dim = -1);
enum class Reduction { None, Mean, Sum };
Tensor nll_loss(const Tensor& logp, const Tensor& target, Reduction r = Reduction::Mean);
Tensor cross_entropy(const Tensor& logits, const Tensor& target, Reduction r = Reduction::Mean);
Tensor mse_loss(const Tensor& input, const Tensor& target, Reduction r = Reduction::Mean);
// x: [N, C, H, W]  weight: [O, C, kh, kw]  bias: [O] -> [N, O, oh, ow]
Tensor conv2d(const Tensor& x, const Tensor& weight, const Tensor& bias = {}, int64_t stride = 1,
              int64_t padding = 0);
Tensor max_pool2d(const Tensor& x, int64_t kernel, int64_t stride = 0, int64_t padding = 0);
// max_pool2d(relu(conv2d(x, weight, bias, stride, padding)), 2) as one op, with the same
// numbers: LeNet's stages. Fused where the backend can (the CPU's direct convolution), without
// the full-size convolution output; elsewhere the three ops. The CPU's DPLAB_FUSE=0 or
// set_fused_conv(false) (backend/cpu/cpu_dispatch.h) runs the three ops.
Tensor conv2d_relu_max_pool2d(const Tensor& x, const Tensor& weight, const Tensor& bias = {},
                              int64_t stride = 1, int64_t padding = 0);
Tensor avg_pool2d(const Tensor& x, int64_t kernel, int64_t stride = 0, int64_t padding = 0);
// x: [N, C] or [N, C, H, W]. In training, normalises with the batch statistics and, when
// running_mean/var are given, updates them in place: r = (1-momentum)*r + momentum*batch
// (the unbiased variance goes into running_var, as PyTorch does).
Tensor batch_norm(const Tensor& x, const Tensor& running_mean, const Tensor& running_var,
                  const Tensor& weight, const Tensor& bias, bool training, float momentum,
                  float eps);
// Zeroes each element with probability p and scales the rest by 1/(1-p); identity in eval.
Tensor dropout(const Tensor& x, float p, bool training, Generator* gen = nullptr);

// ---- the transformer's ops (ops/nn_transformer.cpp; gelu is in ops/elementwise.cpp) ----
// GELU: x Phi(x) with the normal CDF (None), or GPT-2's tanh approximation (Tanh), as torch's
// approximate= ("none", "tanh").
enum class GeluApproximation { None, Tanh };
Tensor gelu(const Tensor& x, GeluApproximation approximate = GeluApproximation::None);
// Layer norm over the last dim: x [..., C], weight and bias [C] (either may be undefined),
// y = (x - mean) / sqrt(var + eps) * weight + bias with each row's mean and biased var.
// Forward and backward are one kernel each.
Tensor layer_norm(const Tensor& x, const Tensor& weight = {}, const Tensor& bias = {},
                  float eps = 1e-5f);
// weight [V, D] rows picked by int64 ids of any shape -> [ids..., D]; an id outside [0, V) is
// an Error. Backward adds each output row's gradient into its row of weight; the row
// padding_idx (negative counts from V) gets no gradient, as torch's padding_idx.
Tensor embedding(const Tensor& ids, const Tensor& weight,
                 std::optional<int64_t> padding_idx = std::nullopt);
// Softmax over the last dim of scores [..., q, k] with a causal mask, fused: row i sees the
// keys j <= i + (k - q) (for q = k, j <= i), the later ones get probability exactly 0;
// needs q <= k. causal_softmax(s) = softmax(s + mask), mask = -inf above the diagonal.
Tensor causal_softmax(const Tensor& scores);

}  // namespace dplab
