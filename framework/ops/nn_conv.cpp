// nn_conv.cpp: 2-d convolution, conv + ReLU + max-pool as one op, and max / average pooling:
// their checks, which path runs, and their backward formulas. A backend may run the
// convolution directly (the CPU does: backend/cpu/fast/cpu_conv_direct.cpp); the reference,
// im2col + GEMM (conv2d_im2col.h), runs wherever it does not. Pooling has dedicated backend
// kernels.
// Read next: conv2d_im2col.h, nn_norm.cpp; the CPU's kernels: backend/cpu/reference/cpu_conv_pool.cpp.
#include <vector>

#include "framework/ops/autocast.h"
#include "framework/ops/conv2d_im2col.h"
#include "framework/ops/lowp.h"
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
  Window2d w{.N = x.size(0),
             .C = x.size(1),
             .H = x.size(2),
             .W = x.size(3),
             .kh = kh,
             .kw = kw,
             .stride = stride,
             .pad = pad};
  DPLAB_CHECK(kh <= w.H + 2 * pad && kw <= w.W + 2 * pad,
              "{}: kernel {}x{} is larger than the padded input {}x{} (input {}, padding {})", op,
              kh, kw, w.H + 2 * pad, w.W + 2 * pad, shape_str(x.shape()), pad);
  w.out_h = (w.H + 2 * pad - kh) / stride + 1;
  w.out_w = (w.W + 2 * pad - kw) / stride + 1;
  return w;
}

// Pooling's checks (max and average alike) and its window: a square kernel, stride 0 meaning
// the kernel. Padding is -inf for a max: a window that is half padding would still pick a
// real value, but one that is all padding would not, so padding is at most half the kernel.
Window2d pool_window(const char* op, const Tensor& x, int64_t kernel, int64_t stride,
                     int64_t padding) {
  check_float(op, x);
  DPLAB_CHECK(kernel >= 1, "{}: kernel must be >= 1, got {}", op, kernel);
  if (stride == 0) stride = kernel;
  DPLAB_CHECK(padding <= kernel / 2, "{}: padding {} must be at most half the kernel {}", op,
              padding, kernel);
  return make_window(op, x, kernel, kernel, stride, padding);
}

// conv2d's checks on its arguments (float32 ones; 16-bit went to conv2d_lowp): its window.
Window2d check_conv2d(const Tensor& x, const Tensor& weight, const Tensor& bias, int64_t stride,
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
  if (bias.defined()) {
    check_float("conv2d", bias);
    check_same_device("conv2d", x, bias);
    DPLAB_CHECK(bias.dim() == 1 && bias.size(0) == weight.size(0),
                "conv2d: bias must be [{}] for weight {}, got {}", weight.size(0),
                shape_str(weight.shape()), shape_str(bias.shape()));
  }
  return make_window("conv2d", x, weight.size(2), weight.size(3), stride, padding);
}

}  // namespace

// x: [N, C, H, W]  weight: [O, C, kh, kw]  bias: [O]  ->  y: [N, O, oh, ow]
// A backend's direct convolution (the CPU's: backend/cpu/fast/cpu_conv_direct.cpp) where it
// has one for this window; else the reference, im2col + GEMM (conv2d_im2col.h), which the
// direct one is tested against. The backward takes the same path as the forward, as far as
// the backend's direct path has the gradients asked for.
Tensor conv2d(const Tensor& x, const Tensor& weight, const Tensor& bias, int64_t stride,
              int64_t padding) {
  if (amp::autocast_dtype()) {  // autocast's low-precision list (autocast.h)
    Tensor xc = amp::to_autocast_dtype(x), wc = amp::to_autocast_dtype(weight),
           bc = amp::to_autocast_dtype(bias);
    amp::AutocastSuspend inside;
    return conv2d(xc, wc, bc, stride, padding);
  }
  if (auto t = lowp_result_dtype({x, weight, bias}))
    return conv2d_lowp(x, weight, bias, stride, padding, *t);
  const Window2d w = check_conv2d(x, weight, bias, stride, padding);
  const int64_t O = weight.size(0);
  Backend& backend = backend_of(x);
  const Im2colPlan plan(w, O, backend);

  Tensor out = Tensor::empty({w.N, O, w.out_h, w.out_w}, x.options());
  const bool direct = backend.conv2d_direct(fptr(x), fptr(weight),
                                            bias.defined() ? fptr(bias) : nullptr, w, O, fptr(out));
  if (!direct) conv2d_im2col(x, weight, bias, plan, out);

  // dW needs the columns again: keep x (kh*kw times smaller) and unroll it group by group.
  // dx needs only the weight and the shape of x.
  Tensor saved_x = weight.requires_grad() ? x.detach() : Tensor();
  bool x_grad = x.requires_grad(), b_grad = bias.defined() && bias.requires_grad();
  return record(
      out, "Conv2dBackward", {x, weight, bias},
      [x_grad, b_grad, sx = x.shape(), weight, saved_x, w, O, plan, direct](const Tensor& g) {
    ConvGrads grads(x_grad, sx, weight, b_grad, O, g.options());
    if (direct && backend_of(g).conv2d_direct_backward(
                      fptr(g), grads.gw.defined() ? fptr(saved_x) : nullptr, fptr(weight), w, O,
                      grads.gx_data(), grads.gw_data(), grads.gb_data()))
      return grads.list();
    conv2d_im2col_backward(g, saved_x, weight, plan, grads);
    return grads.list();
      });
}

// y[n, c, i, j] = max of the window; argmax remembers which input won, so the backward
// routes g there: dx[argmax] += g (overlapping windows may send several to one input).
Tensor max_pool2d(const Tensor& x, int64_t kernel, int64_t stride, int64_t padding) {
  // 16-bit: the float32 pool between two casts (it saves only argmax, lowp.h)
  if (is_low_precision(x.dtype()))
    return cast(max_pool2d(cast(x, DType::Float32), kernel, stride, padding), x.dtype());
  const Window2d w = pool_window("max_pool2d", x, kernel, stride, padding);
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

// max_pool2d(relu(conv2d(x, weight, bias, stride, padding)), 2), the same numbers, in one op
// where the backend has the fused kernels and they are on (the CPU's direct convolution:
// backend/cpu/fast/cpu_conv_fused.cpp says what it saves; DPLAB_FUSE=0 switches it off);
// everywhere else, and for 16-bit tensors, the three ops. It keeps x
// and a byte per output for backward, where the three ops keep x, the full-size convolution
// output (the ReLU's input) and the pool's int64 argmax.
Tensor conv2d_relu_max_pool2d(const Tensor& x, const Tensor& weight, const Tensor& bias,
                              int64_t stride, int64_t padding) {
  auto unfused = [&] { return max_pool2d(relu(conv2d(x, weight, bias, stride, padding)), 2); };
  const bool float32 = x.dtype() == DType::Float32 && weight.dtype() == DType::Float32 &&
                       (!bias.defined() || bias.dtype() == DType::Float32);
  if (!backend_of(x).fuses_conv_relu_pool() || amp::autocast_dtype() || !float32) return unfused();
  const Window2d w = check_conv2d(x, weight, bias, stride, padding);
  const int64_t O = weight.size(0);
  Tensor out = Tensor::empty({w.N, O, w.out_h / 2, w.out_w / 2}, x.options());
  // the winner of each window, a byte per output (backend.h), in an int64 tensor of an eighth
  // of the elements: dplab has no 8-bit dtype, and a tensor is what memory_stats counts
  Tensor route =
      Tensor::empty({(out.numel() + 7) / 8}, {.dtype = DType::Int64, .device = x.device()});
  auto bytes = [](const Tensor& t) { return reinterpret_cast<uint8_t*>(iptr(t)); };
  if (!backend_of(x).conv2d_relu_pool_direct(fptr(x), fptr(weight),
                                             bias.defined() ? fptr(bias) : nullptr, w, O, fptr(out),
                                             bytes(route)))
    return unfused();
  Tensor saved_x = weight.requires_grad() ? x.detach() : Tensor();
  const bool x_grad = x.requires_grad(), b_grad = bias.defined() && bias.requires_grad();
  return record(
      out, "Conv2dReluMaxPool2dBackward", {x, weight, bias},
      [x_grad, b_grad, sx = x.shape(), weight, saved_x, route, bytes, w, O](const Tensor& g) {
    ConvGrads grads(x_grad, sx, weight, b_grad, O, g.options());
    const bool ran = backend_of(g).conv2d_relu_pool_direct_backward(
        fptr(g), bytes(route), grads.gw.defined() ? fptr(saved_x) : nullptr, fptr(weight), w, O,
        grads.gx_data(), grads.gw_data(), grads.gb_data());
    DPLAB_CHECK(ran, "conv2d_relu_max_pool2d: the backend ran the fused forward, then declined "
                     "its backward (a setting changed in between?)");
    return grads.list();
      });
}

// y[n, c, i, j] = sum of the window / (k*k), padding counted (count_include_pad=True).
Tensor avg_pool2d(const Tensor& x, int64_t kernel, int64_t stride, int64_t padding) {
  if (is_low_precision(x.dtype()))
    return cast(avg_pool2d(cast(x, DType::Float32), kernel, stride, padding), x.dtype());
  const Window2d w = pool_window("avg_pool2d", x, kernel, stride, padding);
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
