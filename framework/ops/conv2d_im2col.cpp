// conv2d_im2col.cpp: the reference convolution (conv2d_im2col.h), group by group:
//   forward     cols = im2col(x[group]); yt = W @ cols; y[group] = yt swapped, + b
//   input grad  dcols = W^T @ gt; dx[group] = col2im(dcols), the adjoint of im2col
//   weight grad dW += gt @ cols^T (the sum over the group's images is the GEMM's K)
//   bias grad   db = row sums of gt, per group, added up over the groups
// Read next: nn_conv.cpp (which calls it), backend/cpu/reference/cpu_conv_pool.cpp.
#include "framework/ops/conv2d_im2col.h"

#include <vector>

#include "framework/ops/make_result.h"
#include "framework/ops/ops.h"

namespace dplab {
namespace {

// c[M, N] = op(a) op(b) + beta * c on the backend, beta 0 or 1. With K = 0 (no input or no
// output channels) the product is all zeros: c is zeroed (beta 0) or left as it is (beta 1).
void run_gemm(const Tensor& on, GemmArgs args, const float* a, const float* b, float* c) {
  if (args.M == 0 || args.N == 0) return;
  if (args.K > 0) return backend_of(on).gemm(args, a, b, c);
  if (args.beta == 0.0f) backend_of(on).fill(DType::Float32, c, args.M * args.N, 0.0);
}

// dst [B, A, L] <- src [A, B, L]: swaps the two outer dims (images and channels). `on`
// names the device; src and dst may point into the middle of a tensor (one image group).
void swap_outer(const Tensor& on, const float* src, int64_t A, int64_t B, int64_t L, float* dst) {
  if (A * B * L == 0) return;
  Strided read{.ndim = 3, .shape = {B, A, L}, .strides = {L, B * L, 1}};
  backend_of(on).strided_copy(DType::Float32, src, read, dst);
}

// One scratch buffer per lane, each [rows, max_size * L]: a group's columns or outputs.
std::vector<Tensor> lane_buffers(int lanes, int64_t rows, const ImageGroups& groups,
                                 const TensorOptions& options) {
  std::vector<Tensor> buffers;
  for (int lane = 0; lane < lanes; ++lane)
    buffers.push_back(Tensor::empty({rows, groups.max_size * groups.L}, options));
  return buffers;
}

}  // namespace

ConvGrads::ConvGrads(bool x_grad, const Shape& x_shape, const Tensor& weight, bool b_grad,
                     int64_t O, const TensorOptions& options)
    : gx(x_grad ? Tensor::empty(x_shape, options) : Tensor()),
      gw(weight.requires_grad() ? Tensor::empty(weight.shape(), weight.options()) : Tensor()),
      gb(b_grad ? Tensor::empty({O}, options) : Tensor()) {}
float* ConvGrads::gx_data() const { return gx.defined() ? fptr(gx) : nullptr; }
float* ConvGrads::gw_data() const { return gw.defined() ? fptr(gw) : nullptr; }
float* ConvGrads::gb_data() const { return gb.defined() ? fptr(gb) : nullptr; }

// For each group of G images (the whole batch when its columns fit, see ImageGroups):
//   cols = im2col(x[group])              [C*kh*kw, G*oh*ow]   (the images side by side)
//   yt   = W [O, C*kh*kw] @ cols         [O, G*oh*ow]         (one GEMM for the group)
//   y[group] = yt with its two outer dims swapped, + b[o]      [G, O, oh*ow]  (one pass)
// One big GEMM instead of G small ones: the weight gradient's inner dimension becomes
// G*oh*ow instead of oh*ow, which is what keeps a small LeNet's GEMMs near peak speed.
// Groups are independent pieces: the backend runs them side by side on its lanes (the CPU's
// threads), each lane with its own columns.
void conv2d_im2col(const Tensor& x, const Tensor& weight, const Tensor& bias,
                   const Im2colPlan& plan, Tensor& out) {
  const ImageGroups& groups = plan.groups;
  const int lanes = plan.lanes;
  Backend& backend = backend_of(x);
  const int64_t O = groups.O, CK = groups.CK, L = groups.L;
  std::vector<Tensor> cols = lane_buffers(lanes, CK, groups, x.options());
  std::vector<Tensor> yt = lane_buffers(lanes, O, groups, x.options());
  backend.run_pieces(groups.count, lanes, [&](int64_t i, int lane) {
    const Window2d wg = groups.window(i);
    const int64_t GL = wg.N * L;
    if (CK * GL > 0) backend.im2col(fptr(x) + groups.x_offset(i), wg, fptr(cols[lane]));
    run_gemm(x, {.M = O, .N = GL, .K = CK}, fptr(weight), fptr(cols[lane]), fptr(yt[lane]));
    float* y = fptr(out) + groups.y_offset(i);
    if (!bias.defined()) {
      swap_outer(x, fptr(yt[lane]), O, wg.N, L, y);
    } else if (O * GL > 0) {  // y[group] [G, O, L] = yt [O, G, L] swapped, + b[o], in one pass
      Strided swapped{.ndim = 3, .shape = {wg.N, O, L}, .strides = {L, wg.N * L, 1}};
      backend.binary(BinaryOp::Add, fptr(yt[lane]), swapped, fptr(bias),
                     broadcast_layout({1, O, 1}, {wg.N, O, L}), y);
    }
  });
}

void conv2d_im2col_backward(const Tensor& g, const Tensor& saved_x, const Tensor& weight,
                            const Im2colPlan& plan, ConvGrads& grads) {
  const ImageGroups& groups = plan.groups;
  const int lanes = plan.lanes;
  const int64_t O = groups.O, CK = groups.CK, L = groups.L;
  Backend& backend = backend_of(g);
  Tensor& gx = grads.gx;
  Tensor& gw = grads.gw;
  const bool b_grad = grads.gb.defined();
  // dW: lane 0 sums its groups into gw, every other lane into its own partial sum, and the
  // partial sums are added at the end (each lane's groups summed in the same order every run).
  if (gw.defined()) gw.zero_();
  std::vector<Tensor> gw_lane{gw};
  for (int lane = 1; gw.defined() && lane < lanes; ++lane)
    gw_lane.push_back(zeros(weight.shape(), weight.options()));
  // db = sum of g over n, h, w: each group's row sums of gt, which is in its lane's cache
  // already, one row per group, added up over the groups at the end (in group order)
  Tensor gb_groups = b_grad ? Tensor::empty({groups.count, O}, g.options()) : Tensor();
  std::vector<Tensor> gt = lane_buffers(lanes, O, groups, g.options());
  std::vector<Tensor> cols =
      lane_buffers(lanes, CK, groups, g.options());  // dcols for dx, cols for dW
  backend.run_pieces(groups.count, lanes, [&](int64_t i, int lane) {
    const Window2d wg = groups.window(i);
    const int64_t GL = wg.N * L;
    // gt [O, G*L]: g[group] [G, O, L] with the images side by side, as the columns are
    swap_outer(g, fptr(g) + groups.y_offset(i), wg.N, O, L, fptr(gt[lane]));
    if (b_grad) backend.reduce(ReduceKind::Sum, fptr(gt[lane]), fptr(gb_groups) + i * O, O, GL, 1);
    if (gx.defined() && gx.numel() > 0) {
      // dcols = W^T [CK, O] @ gt [O, G*L];  dx[group] = col2im(dcols), the adjoint of im2col
      run_gemm(g, {.M = CK, .N = GL, .K = O, .trans_a = true}, fptr(weight), fptr(gt[lane]),
               fptr(cols[lane]));
      backend.col2im(fptr(cols[lane]), wg, fptr(gx) + groups.x_offset(i));
    }
    if (gw.defined() && CK * GL > 0) {
      // dW [O, CK] += gt [O, G*L] @ cols^T [G*L, CK]: the sum over images is the GEMM's K
      backend.im2col(fptr(saved_x) + groups.x_offset(i), wg, fptr(cols[lane]));
      run_gemm(g, {.M = O, .N = CK, .K = GL, .trans_b = true, .beta = 1.0f}, fptr(gt[lane]),
               fptr(cols[lane]), fptr(gw_lane[lane]));
    }
  });
  for (std::size_t lane = 1; lane < gw_lane.size(); ++lane) gw.add_(gw_lane[lane]);
  if (b_grad) grads.gb = sum(gb_groups, {0});
}

}  // namespace dplab
