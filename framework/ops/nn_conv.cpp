// nn_conv.cpp: 2-d convolution, and max / average pooling. A backend may run the convolution
// directly (the CPU does: backend/cpu/cpu_conv_direct.cpp); what follows is the reference,
// im2col + GEMM, which runs wherever it does not.
// im2col unrolls every kh x kw window of the padded input into a column, so a convolution
// becomes one matrix product: [O, C*kh*kw] @ [C*kh*kw, G*oh*ow] for a group of G images.
// The columns cost kh*kw times the images' memory, so groups are capped (backend.h);
// in return the convolution runs at GEMM speed, the trade-off Caffe made and cuDNN still
// offers. Pooling has dedicated backend kernels.
// Read next: nn_norm.cpp; the kernels are backend/cpu/cpu_conv_pool.cpp.
#include <algorithm>
#include <cstdlib>
#include <string>
#include <vector>

#include "framework/ops/autocast.h"
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
  Window2d w{.N = x.size(0), .C = x.size(1), .H = x.size(2), .W = x.size(3),
             .kh = kh, .kw = kw, .stride = stride, .pad = pad};
  DPLAB_CHECK(kh <= w.H + 2 * pad && kw <= w.W + 2 * pad,
              "{}: kernel {}x{} is larger than the padded input {}x{} (input {}, padding {})", op,
              kh, kw, w.H + 2 * pad, w.W + 2 * pad, shape_str(x.shape()), pad);
  w.out_h = (w.H + 2 * pad - kh) / stride + 1;
  w.out_w = (w.W + 2 * pad - kw) / stride + 1;
  return w;
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
                "conv2d: bias must be [{}] for weight {}, got {}", weight.size(0), shape_str(weight.shape()),
                shape_str(bias.shape()));
  }
  return make_window("conv2d", x, weight.size(2), weight.size(3), stride, padding);
}

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

// How conv2d cuts the batch into groups of images for im2col: enough groups that each one's
// columns fit in the backend's im2col_group_floats(), and at least one per lane so every
// lane has work. Images are dealt out evenly (group sizes differ by at most one). A group's
// GEMMs are still large (N = images * oh*ow), and bounded columns stay in cache and out of
// the kernel's page-fault path (glibc maps blocks over 32 MiB afresh every time).
struct ImageGroups {
  Window2d w;
  int64_t O, CK, L, count, max_size;
  ImageGroups(const Window2d& window, int64_t out_channels, int64_t column_floats, int lanes)
      : w(window), O(out_channels), CK(window.C * window.kh * window.kw),
        L(window.out_h * window.out_w) {
    const int64_t per_image = CK * L, N = std::max<int64_t>(w.N, 1);
    count = per_image > 0 ? (N * per_image + column_floats - 1) / column_floats : 1;
    if (lanes > 1) count = (std::max<int64_t>(count, lanes) + lanes - 1) / lanes * lanes;
    count = std::clamp<int64_t>(count, 1, N);
    max_size = (N + count - 1) / count;
  }
  int64_t first(int64_t i) const { return w.N * i / count; }  // group i: images [first(i), first(i+1))
  Window2d window(int64_t i) const {
    Window2d g = w;
    g.N = first(i + 1) - first(i);
    return g;
  }
  int64_t x_offset(int64_t i) const { return first(i) * w.C * w.H * w.W; }
  int64_t y_offset(int64_t i) const { return first(i) * O * L; }
};

// One scratch buffer per lane, each [rows, max_size * L]: a group's columns or outputs.
std::vector<Tensor> lane_buffers(int lanes, int64_t rows, const ImageGroups& groups,
                                 const TensorOptions& options) {
  std::vector<Tensor> buffers;
  for (int lane = 0; lane < lanes; ++lane)
    buffers.push_back(Tensor::empty({rows, groups.max_size * groups.L}, options));
  return buffers;
}

// The forward as im2col + GEMM, group by group (the comment above conv2d): out [N, O, oh, ow].
void conv2d_im2col(const Tensor& x, const Tensor& weight, const Tensor& bias, const Window2d& w,
                   const ImageGroups& groups, int lanes, Tensor& out) {
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

}  // namespace

// x: [N, C, H, W]  weight: [O, C, kh, kw]  bias: [O]  ->  y: [N, O, oh, ow]
// For each group of G images (the whole batch when its columns fit, see ImageGroups):
//   cols = im2col(x[group])              [C*kh*kw, G*oh*ow]   (the images side by side)
//   yt   = W [O, C*kh*kw] @ cols         [O, G*oh*ow]         (one GEMM for the group)
//   y[group] = yt with its two outer dims swapped, + b[o]      [G, O, oh*ow]  (one pass)
// One big GEMM instead of G small ones: the weight gradient's inner dimension becomes
// G*oh*ow instead of oh*ow, which is what keeps a small LeNet's GEMMs near peak speed.
// Groups are independent pieces: the backend runs them side by side on its lanes (the CPU's
// threads), each lane with its own columns.
Tensor conv2d(const Tensor& x, const Tensor& weight, const Tensor& bias, int64_t stride,
              int64_t padding) {
  if (amp::autocast_dtype()) {  // autocast's low-precision list (autocast.h)
    Tensor xc = amp::to_autocast_dtype(x), wc = amp::to_autocast_dtype(weight),
           bc = amp::to_autocast_dtype(bias);
    amp::AutocastSuspend inside;
    return conv2d(xc, wc, bc, stride, padding);
  }
  if (auto t = lowp_result_dtype({x, weight, bias})) return conv2d_lowp(x, weight, bias, stride, padding, *t);
  const Window2d w = check_conv2d(x, weight, bias, stride, padding);
  const int64_t O = weight.size(0);
  Backend& backend = backend_of(x);
  const ImageGroups groups(w, O, backend.im2col_group_floats(), backend.lanes());
  const int lanes = static_cast<int>(std::min<int64_t>(backend.lanes(), groups.count));

  Tensor out = Tensor::empty({w.N, O, w.out_h, w.out_w}, x.options());
  // A backend's direct convolution (the CPU's: backend/cpu/cpu_conv_direct.cpp) where it has
  // one for this window; else im2col + GEMM (conv2d_im2col), the reference it is tested against.
  const bool direct = backend.conv2d_direct(fptr(x), fptr(weight),
                                            bias.defined() ? fptr(bias) : nullptr, w, O, fptr(out));
  if (!direct) conv2d_im2col(x, weight, bias, w, groups, lanes, out);

  // dW needs the columns again: keep x (kh*kw times smaller) and unroll it group by group.
  // dx needs only the weight and the shape of x.
  Tensor saved_x = weight.requires_grad() ? x.detach() : Tensor();
  bool x_grad = x.requires_grad(), b_grad = bias.defined() && bias.requires_grad();
  return record(out, "Conv2dBackward", {x, weight, bias},
                [x_grad, b_grad, sx = x.shape(), weight, saved_x, w, groups, lanes, direct](const Tensor& g) {
    const int64_t O = groups.O, CK = groups.CK, L = groups.L;
    Backend& backend = backend_of(g);
    Tensor gx = x_grad ? Tensor::empty(sx, g.options()) : Tensor();
    if (direct) {  // the direct path's gradients, where the backend has them for this window
      Tensor gw = weight.requires_grad() ? Tensor::empty(weight.shape(), weight.options()) : Tensor();
      Tensor gb = b_grad ? Tensor::empty({O}, g.options()) : Tensor();
      if (backend.conv2d_direct_backward(fptr(g), gw.defined() ? fptr(saved_x) : nullptr,
                                         fptr(weight), w, O, gx.defined() ? fptr(gx) : nullptr,
                                         gw.defined() ? fptr(gw) : nullptr,
                                         gb.defined() ? fptr(gb) : nullptr))
        return std::vector<Tensor>{gx, gw, gb};
    }
    // dW: lane 0 sums its groups into gw, every other lane into its own partial sum, and the
    // partial sums are added at the end (each lane's groups summed in the same order every run).
    Tensor gw = weight.requires_grad() ? zeros(weight.shape(), weight.options()) : Tensor();
    std::vector<Tensor> gw_lane{gw};
    for (int lane = 1; gw.defined() && lane < lanes; ++lane)
      gw_lane.push_back(zeros(weight.shape(), weight.options()));
    // db = sum of g over n, h, w: each group's row sums of gt, which is in its lane's cache
    // already, one row per group, added up over the groups at the end (in group order)
    Tensor gb_groups = b_grad ? Tensor::empty({groups.count, O}, g.options()) : Tensor();
    std::vector<Tensor> gt = lane_buffers(lanes, O, groups, g.options());
    std::vector<Tensor> cols = lane_buffers(lanes, CK, groups, g.options());  // dcols for dx, cols for dW
    backend.run_pieces(groups.count, lanes, [&](int64_t i, int lane) {
      const Window2d wg = groups.window(i);
      const int64_t GL = wg.N * L;
      // gt [O, G*L]: g[group] [G, O, L] with the images side by side, as the columns are
      swap_outer(g, fptr(g) + groups.y_offset(i), wg.N, O, L, fptr(gt[lane]));
      if (b_grad) backend.reduce(ReduceKind::Sum, fptr(gt[lane]), fptr(gb_groups) + i * O, O, GL, 1);
      if (x_grad && gx.numel() > 0) {
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
    Tensor gb = b_grad ? sum(gb_groups, {0}) : Tensor();
    return std::vector<Tensor>{gx, gw, gb};
  });
}

// y[n, c, i, j] = max of the window; argmax remembers which input won, so the backward
// routes g there: dx[argmax] += g (overlapping windows may send several to one input).
Tensor max_pool2d(const Tensor& x, int64_t kernel, int64_t stride, int64_t padding) {
  // 16-bit: the float32 pool between two casts (it saves only argmax, lowp.h)
  if (is_low_precision(x.dtype())) return cast(max_pool2d(cast(x, DType::Float32), kernel, stride, padding), x.dtype());
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

namespace {
bool& fused_setting() {
  static bool on = [] {
    const char* env = std::getenv("DPLAB_FUSE");
    if (env == nullptr || *env == '\0') return true;
    const std::string v = env;
    DPLAB_CHECK(v == "0" || v == "1", "DPLAB_FUSE: expected 0 (unfused ops) or 1 (fused), got '{}'", v);
    return v == "1";
  }();
  return on;
}
}  // namespace

bool fused_ops() { return fused_setting(); }
void set_fused_ops(bool on) { fused_setting() = on; }

// max_pool2d(relu(conv2d(x, weight, bias, stride, padding)), 2), the same numbers, in one op
// where the backend has the fused kernels (the CPU's direct convolution: cpu_conv_fused.cpp
// says what it saves); everywhere else, and for 16-bit tensors, the three ops. It keeps x
// and a byte per output for backward, where the three ops keep x, the full-size convolution
// output (the ReLU's input) and the pool's int64 argmax.
Tensor conv2d_relu_max_pool2d(const Tensor& x, const Tensor& weight, const Tensor& bias,
                              int64_t stride, int64_t padding) {
  auto unfused = [&] { return max_pool2d(relu(conv2d(x, weight, bias, stride, padding)), 2); };
  const bool float32 = x.dtype() == DType::Float32 && weight.dtype() == DType::Float32 &&
                       (!bias.defined() || bias.dtype() == DType::Float32);
  if (!fused_ops() || amp::autocast_dtype() || !float32) return unfused();
  const Window2d w = check_conv2d(x, weight, bias, stride, padding);
  const int64_t O = weight.size(0);
  Tensor out = Tensor::empty({w.N, O, w.out_h / 2, w.out_w / 2}, x.options());
  // the winner of each window, a byte per output (backend.h), in an int64 tensor of an eighth
  // of the elements: dplab has no 8-bit dtype, and a tensor is what memory_stats counts
  Tensor route = Tensor::empty({(out.numel() + 7) / 8}, {.dtype = DType::Int64, .device = x.device()});
  auto bytes = [](const Tensor& t) { return reinterpret_cast<uint8_t*>(iptr(t)); };
  if (!backend_of(x).conv2d_relu_pool_direct(fptr(x), fptr(weight), bias.defined() ? fptr(bias) : nullptr,
                                             w, O, fptr(out), bytes(route)))
    return unfused();
  Tensor saved_x = weight.requires_grad() ? x.detach() : Tensor();
  const bool x_grad = x.requires_grad(), b_grad = bias.defined() && bias.requires_grad();
  return record(out, "Conv2dReluMaxPool2dBackward", {x, weight, bias},
                [x_grad, b_grad, sx = x.shape(), weight, saved_x, route, bytes, w, O](const Tensor& g) {
    Tensor gx = x_grad ? Tensor::empty(sx, g.options()) : Tensor();
    Tensor gw = weight.requires_grad() ? Tensor::empty(weight.shape(), weight.options()) : Tensor();
    Tensor gb = b_grad ? Tensor::empty({O}, g.options()) : Tensor();
    const bool ran = backend_of(g).conv2d_relu_pool_direct_backward(
        fptr(g), bytes(route), gw.defined() ? fptr(saved_x) : nullptr, fptr(weight), w, O,
        gx.defined() ? fptr(gx) : nullptr, gw.defined() ? fptr(gw) : nullptr,
        gb.defined() ? fptr(gb) : nullptr);
    DPLAB_CHECK(ran, "conv2d_relu_max_pool2d: the backend ran the fused forward, then declined "
                "its backward (a setting changed in between?)");
    return std::vector<Tensor>{gx, gw, gb};
  });
}

// y[n, c, i, j] = sum of the window / (k*k), padding counted (count_include_pad=True).
Tensor avg_pool2d(const Tensor& x, int64_t kernel, int64_t stride, int64_t padding) {
  if (is_low_precision(x.dtype())) return cast(avg_pool2d(cast(x, DType::Float32), kernel, stride, padding), x.dtype());
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
