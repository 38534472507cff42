// nn_conv.cpp: 2-d convolution as im2col + GEMM, and max / average pooling.
// im2col unrolls every kh x kw window of the padded input into a column, so a convolution
// becomes one matrix product: [O, C*kh*kw] @ [C*kh*kw, N*oh*ow] for the whole batch. That costs
// kh*kw times the input's memory for the columns but runs at GEMM speed, the trade-off
// Caffe made and cuDNN still offers. Pooling has dedicated backend kernels.
// Read next: nn_norm.cpp; the kernels are backend/cpu/cpu_conv_pool.cpp.
#include "framework/ops/make_result.h"
#include "framework/ops/ops.h"

namespace dplab {
namespace {

// The window geometry shared by conv and pooling; checks what both need.
Window2d make_window(const char* op, const Tensor& x, int64_t kh, int64_t kw, int64_t stride,
                     int64_t pad) {
  DPLAB_CHECK(x.dim() == 4, "{}: expected input [N, C, H, W], got {}", op, shape_str(x.shape()));
  DPLAB_CHECK(stride >= 1, "{}: stride must be >= 1, got {}", op, stride);
  DPLAB_CHECK(pad >= 0, "{}: padding must be >= 0, got {}", op, pad);
  DPLAB_CHECK(kh >= 1 && kw >= 1, "{}: kernel must be at least 1x1, got {}x{}", op, kh, kw);
  Window2d w{.N = x.size(0), .C = x.size(1), .H = x.size(2), .W = x.size(3),
             .kh = kh, .kw = kw, .stride = stride, .pad = pad};
  DPLAB_CHECK(kh <= w.H + 2 * pad && kw <= w.W + 2 * pad,
              "{}: kernel {}x{} is larger than the padded input {}x{} (input {}, padding {})", op,
              kh, kw, w.H + 2 * pad, w.W + 2 * pad, shape_str(x.shape()), pad);
  w.out_h = (w.H + 2 * pad - kh) / stride + 1;
  w.out_w = (w.W + 2 * pad - kw) / stride + 1;
  return w;
}

// c[batch, M, N] (+)= op(a) op(b) on the backend, strides in elements.
void run_gemm(const Tensor& on, GemmArgs args, const float* a, const float* b, float* c) {
  if (args.M == 0 || args.N == 0 || args.batch == 0 || args.K == 0) return;
  backend_of(on).gemm(args, a, b, c);
}

// dst [B, A, L] <- src [A, B, L]: swaps the two outer dims (images and channels).
void swap_outer(const Tensor& src, int64_t A, int64_t B, int64_t L, const Tensor& dst) {
  if (A * B * L == 0) return;
  Strided read{.ndim = 3, .shape = {B, A, L}, .strides = {L, B * L, 1}};
  backend_of(src).strided_copy(DType::Float32, fptr(src), read, fptr(dst));
}

}  // namespace

// x: [N, C, H, W]  weight: [O, C, kh, kw]  bias: [O]  ->  y: [N, O, oh, ow]
//   cols = im2col(x)                     [C*kh*kw, N*oh*ow]   (all images side by side)
//   yt   = W [O, C*kh*kw] @ cols + b     [O, N*oh*ow]         (one GEMM for the batch)
//   y    = yt with its two outer dims swapped                 [N, O, oh*ow]
// One big GEMM instead of N small ones: the weight gradient's inner dimension becomes
// N*oh*ow instead of oh*ow, which is what keeps a small LeNet's GEMMs near peak speed.
Tensor conv2d(const Tensor& x, const Tensor& weight, const Tensor& bias, int64_t stride,
              int64_t padding) {
  check_float("conv2d", x);
  check_float("conv2d", weight);
  check_same_device("conv2d", x, weight);
  DPLAB_CHECK(weight.dim() == 4, "conv2d: expected weight [O, C, kh, kw], got {} (input {})",
              shape_str(weight.shape()), shape_str(x.shape()));
  DPLAB_CHECK(x.dim() == 4, "conv2d: expected input [N, C, H, W], got {} (weight {})",
              shape_str(x.shape()), shape_str(weight.shape()));
  DPLAB_CHECK(x.size(1) == weight.size(1),
              "conv2d: input channels differ: input is {} (expected [N, {}, H, W]), weight is {}",
              shape_str(x.shape()), weight.size(1), shape_str(weight.shape()));
  const int64_t O = weight.size(0);
  if (bias.defined()) {
    check_float("conv2d", bias);
    check_same_device("conv2d", x, bias);
    DPLAB_CHECK(bias.dim() == 1 && bias.size(0) == O,
                "conv2d: bias must be [{}] for weight {}, got {}", O, shape_str(weight.shape()),
                shape_str(bias.shape()));
  }
  Window2d w = make_window("conv2d", x, weight.size(2), weight.size(3), stride, padding);
  const int64_t N = w.N, CK = w.C * w.kh * w.kw, L = w.out_h * w.out_w;

  Tensor cols = Tensor::empty({CK, N * L}, x.options());
  if (cols.numel() > 0) backend_of(x).im2col(fptr(x), w, fptr(cols));
  Tensor yt = Tensor::empty({O, N * L}, x.options());
  float beta = 0.0f;
  if (bias.defined() && yt.numel() > 0) {  // pre-fill yt with b, then GEMM with beta = 1
    backend_of(x).strided_copy(DType::Float32, fptr(bias), broadcast_layout({O, 1}, {O, N * L}),
                               fptr(yt));
    beta = 1.0f;
  } else if (CK == 0 && yt.numel() > 0) {
    yt.detach().zero_();
  }
  run_gemm(x, {.M = O, .N = N * L, .K = CK, .beta = beta}, fptr(weight), fptr(cols), fptr(yt));
  Tensor out = Tensor::empty({N, O, w.out_h, w.out_w}, x.options());
  swap_outer(yt, O, N, L, out);

  // Only dW needs the columns: do not keep kh*kw copies of the input alive otherwise.
  Tensor saved_cols = weight.requires_grad() ? cols : Tensor();
  // The closure keeps the weight (for dx) but only the shape of x.
  bool x_grad = x.requires_grad(), b_grad = bias.defined() && bias.requires_grad();
  return record(out, "Conv2dBackward", {x, weight, bias},
                [x_grad, b_grad, sx = x.shape(), weight, saved_cols, w, O, CK, L](const Tensor& g) {
    Tensor gx, gw, gb;
    const int64_t N = w.N;
    // gt [O, N*L]: g [N, O, L] with the images side by side, as the columns are
    Tensor gt = Tensor::empty({O, N * L}, g.options());
    swap_outer(g, N, O, L, gt);
    if (x_grad) {
      // dcols = W^T [CK, O] @ gt [O, N*L];  dx = col2im(dcols), the adjoint of im2col
      Tensor dcols = Tensor::empty({CK, N * L}, g.options());
      if (dcols.numel() > 0 && O == 0) dcols.detach().zero_();
      run_gemm(g, {.M = CK, .N = N * L, .K = O, .trans_a = true}, fptr(weight), fptr(gt),
               fptr(dcols));
      gx = Tensor::empty(sx, g.options());
      if (gx.numel() > 0) backend_of(g).col2im(fptr(dcols), w, fptr(gx));
    }
    if (weight.requires_grad()) {
      // dW [O, CK] = gt [O, N*L] @ cols^T [N*L, CK]: the sum over images is the GEMM's K
      gw = zeros(weight.shape(), weight.options());
      run_gemm(g, {.M = O, .N = CK, .K = N * L, .trans_b = true}, fptr(gt), fptr(saved_cols),
               fptr(gw));
    }
    // db = sum of g over n, h, w
    if (b_grad) gb = sum(g, {0, 2, 3});
    return std::vector<Tensor>{gx, gw, gb};
  });
}

// y[n, c, i, j] = max of the window; argmax remembers which input won, so the backward
// routes g there: dx[argmax] += g (overlapping windows may send several to one input).
Tensor max_pool2d(const Tensor& x, int64_t kernel, int64_t stride, int64_t padding) {
  check_float("max_pool2d", x);
  DPLAB_CHECK(kernel >= 1, "max_pool2d: kernel must be >= 1, got {}", kernel);
  if (stride == 0) stride = kernel;
  // Padding is -inf for a max: a window that is half padding would still pick a real
  // value, but one that is all padding would not, so padding is at most half the kernel.
  DPLAB_CHECK(padding <= kernel / 2, "max_pool2d: padding {} must be at most half the kernel {}",
              padding, kernel);
  Window2d w = make_window("max_pool2d", x, kernel, kernel, stride, padding);
  Tensor out = Tensor::empty({w.N, w.C, w.out_h, w.out_w}, x.options());
  Tensor argmax = Tensor::empty(out.shape(), {.dtype = DType::Int64, .device = x.device()});
  if (out.numel() > 0) backend_of(x).max_pool2d(fptr(x), w, fptr(out), iptr(argmax));
  // dx = g at each window's argmax, 0 elsewhere (summed where windows overlap)
  // (both pooling backward kernels overwrite gx, so it need not be zeroed here)
  return record(out, "MaxPool2dBackward", {x}, [argmax, w, sx = x.shape()](const Tensor& g) {
    Tensor gx = Tensor::empty(sx, g.options());
    if (g.numel() > 0) backend_of(g).max_pool2d_backward(fptr(g), iptr(argmax), w, fptr(gx));
    return std::vector<Tensor>{gx};
  });
}

// y[n, c, i, j] = sum of the window / (k*k), padding counted (count_include_pad=True).
Tensor avg_pool2d(const Tensor& x, int64_t kernel, int64_t stride, int64_t padding) {
  check_float("avg_pool2d", x);
  DPLAB_CHECK(kernel >= 1, "avg_pool2d: kernel must be >= 1, got {}", kernel);
  if (stride == 0) stride = kernel;
  DPLAB_CHECK(padding <= kernel / 2, "avg_pool2d: padding {} must be at most half the kernel {}",
              padding, kernel);
  Window2d w = make_window("avg_pool2d", x, kernel, kernel, stride, padding);
  Tensor out = Tensor::empty({w.N, w.C, w.out_h, w.out_w}, x.options());
  if (out.numel() > 0) backend_of(x).avg_pool2d(fptr(x), w, fptr(out));
  // dx = g / (k*k) spread over every input of the window
  return record(out, "AvgPool2dBackward", {x}, [w, sx = x.shape()](const Tensor& g) {
    Tensor gx = Tensor::empty(sx, g.options());
    if (g.numel() > 0) backend_of(g).avg_pool2d_backward(fptr(g), w, fptr(gx));
    return std::vector<Tensor>{gx};
  });
}

}  // namespace dplab
