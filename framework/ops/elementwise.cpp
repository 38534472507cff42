// elementwise.cpp: arithmetic with NumPy broadcasting, and the unary functions.
// Broadcasting is resolved here, once: the backend reads each input through a Strided
// layout with stride 0 along broadcast dims. Backward sums the gradient back down to each
// input's shape (sum_to), the adjoint of broadcasting.
// Read next: reduce.cpp.
#include "framework/ops/autocast.h"
#include "framework/ops/lowp.h"
#include "framework/ops/make_result.h"
#include "framework/ops/ops.h"

namespace dplab {

Shape broadcast_shapes(const Shape& a, const Shape& b) {
  size_t n = std::max(a.size(), b.size());
  Shape out(n);
  for (size_t i = 0; i < n; ++i) {
    int64_t da = i < n - a.size() ? 1 : a[i - (n - a.size())];
    int64_t db = i < n - b.size() ? 1 : b[i - (n - b.size())];
    DPLAB_CHECK(da == db || da == 1 || db == 1, "cannot broadcast shapes {} and {}", shape_str(a),
                shape_str(b));
    out[i] = da == 1 ? db : da;
  }
  return out;
}

Tensor sum_to(const Tensor& g, const Shape& shape) {
  if (g.shape() == shape) return g;
  size_t lead = g.shape().size() - shape.size();
  std::vector<int64_t> dims;
  for (size_t i = 0; i < g.shape().size(); ++i) {
    if (i < lead || (shape[i - lead] == 1 && g.shape()[i] != 1))
      dims.push_back(static_cast<int64_t>(i));
  }
  Tensor s = dims.empty() ? g : sum(g, dims, /*keepdim=*/true);
  return reshape(s, shape);
}

namespace {

// out = a op b, broadcast; no autograd. 16-bit operands are computed in float32 scratch
// copies and the result rounded once (lowp.h); the result has the promoted dtype.
Tensor binary_raw(BinaryOp op, const char* name, const Tensor& a, const Tensor& b) {
  check_floating(name, a);
  check_floating(name, b);
  check_same_device(name, a, b);
  Shape out_shape = broadcast_shapes(a.shape(), b.shape());
  const DType out_dtype = promote_types(a.dtype(), b.dtype());
  const Tensor a32 = raw_cast(a, DType::Float32), b32 = raw_cast(b, DType::Float32);
  Tensor out = Tensor::empty(out_shape, {.device = a.device()});
  backend_of(a).binary(op, fptr(a32), broadcast_layout(a.shape(), out_shape), fptr(b32),
                       broadcast_layout(b.shape(), out_shape), fptr(out));
  return raw_cast(out, out_dtype);
}

Tensor unary_raw(UnaryOp op, const char* name, const Tensor& a, float scalar = 0) {
  check_floating(name, a);
  const Tensor a32 = raw_cast(a, DType::Float32);
  Tensor out = Tensor::empty(a.shape(), {.device = a.device()});
  backend_of(a).unary(op, fptr(a32), fptr(out), a.numel(), scalar);
  return raw_cast(out, a.dtype());
}

}  // namespace

// d(a+b) = g, g (each summed back to its input's shape)
Tensor add(const Tensor& a, const Tensor& b) {
  Tensor out = binary_raw(BinaryOp::Add, "add", a, b);
  return record(out, "AddBackward", {a, b}, [sa = a.shape(), sb = b.shape()](const Tensor& g) {
    return std::vector<Tensor>{sum_to(g, sa), sum_to(g, sb)};
  });
}

// d(a-b) = g, -g
Tensor sub(const Tensor& a, const Tensor& b) {
  Tensor out = binary_raw(BinaryOp::Sub, "sub", a, b);
  return record(out, "SubBackward", {a, b}, [sa = a.shape(), sb = b.shape()](const Tensor& g) {
    return std::vector<Tensor>{sum_to(g, sa), sum_to(neg(g), sb)};
  });
}

// d(ab)/da = b, d(ab)/db = a
Tensor mul(const Tensor& a, const Tensor& b) {
  Tensor out = binary_raw(BinaryOp::Mul, "mul", a, b);
  bool ga = a.requires_grad(), gb = b.requires_grad();
  return record(out, "MulBackward", {a, b}, [a, b, ga, gb](const Tensor& g) {
    return std::vector<Tensor>{ga ? sum_to(mul(g, b), a.shape()) : Tensor(),
                               gb ? sum_to(mul(g, a), b.shape()) : Tensor()};
  });
}

// d(a/b)/da = 1/b, d(a/b)/db = -a/b^2
Tensor div(const Tensor& a, const Tensor& b) {
  Tensor out = binary_raw(BinaryOp::Div, "div", a, b);
  bool ga = a.requires_grad(), gb = b.requires_grad();
  return record(out, "DivBackward", {a, b}, [a, b, ga, gb](const Tensor& g) {
    return std::vector<Tensor>{ga ? sum_to(div(g, b), a.shape()) : Tensor(),
                               gb ? sum_to(neg(div(mul(g, a), mul(b, b))), b.shape()) : Tensor()};
  });
}

// d(a^b)/da = b a^(b-1), d(a^b)/db = a^b ln a
Tensor pow(const Tensor& a, const Tensor& b) {
  if (amp::autocast_dtype()) {  // autocast's float32 list (autocast.h)
    amp::AutocastSuspend inside;
    return pow(amp::to_float32(a), amp::to_float32(b));
  }
  Tensor out = binary_raw(BinaryOp::Pow, "pow", a, b);
  bool ga = a.requires_grad(), gb = b.requires_grad();
  return record(out, "PowBackward", {a, b}, [a, b, out, ga, gb](const Tensor& g) {
    return std::vector<Tensor>{
        ga ? sum_to(mul(g, mul(b, pow(a, sub(b, ones_like(b))))), a.shape()) : Tensor(),
        gb ? sum_to(mul(g, mul(out, log(a))), b.shape()) : Tensor()};
  });
}

// d max(a,b) goes to a where a >= b, else to b
Tensor maximum(const Tensor& a, const Tensor& b) {
  Tensor out = binary_raw(BinaryOp::Max, "maximum", a, b);
  return record(out, "MaximumBackward", {a, b}, [a, b](const Tensor& g) {
    Tensor mask_b = unary_raw(UnaryOp::GtScalar, "maximum", sub(b, a), 0.0f);  // b strictly wins
    Tensor mask_a = add_scalar(neg(mask_b), 1.0f);
    return std::vector<Tensor>{sum_to(mul(g, mask_a), a.shape()),
                               sum_to(mul(g, mask_b), b.shape())};
  });
}

Tensor eq(const Tensor& a, const Tensor& b) { return binary_raw(BinaryOp::Eq, "eq", a, b); }

Tensor add_scalar(const Tensor& a, float s) {
  Tensor out = unary_raw(UnaryOp::AddScalar, "add_scalar", a, s);
  return record(out, "AddScalarBackward", {a},
                [](const Tensor& g) { return std::vector<Tensor>{g}; });
}

Tensor mul_scalar(const Tensor& a, float s) {
  Tensor out = unary_raw(UnaryOp::MulScalar, "mul_scalar", a, s);
  return record(out, "MulScalarBackward", {a},
                [s](const Tensor& g) { return std::vector<Tensor>{mul_scalar(g, s)}; });
}

// d x^p = p x^(p-1)
Tensor pow(const Tensor& a, float p) {
  if (amp::autocast_dtype()) {  // autocast's float32 list (autocast.h)
    amp::AutocastSuspend inside;
    return pow(amp::to_float32(a), p);
  }
  Tensor out = unary_raw(UnaryOp::PowScalar, "pow", a, p);
  return record(out, "PowScalarBackward", {a}, [a, p](const Tensor& g) {
    return std::vector<Tensor>{mul(g, mul_scalar(pow(a, p - 1.0f), p))};
  });
}

Tensor neg(const Tensor& a) {
  Tensor out = unary_raw(UnaryOp::Neg, "neg", a);
  return record(out, "NegBackward", {a},
                [](const Tensor& g) { return std::vector<Tensor>{neg(g)}; });
}

// d exp(x) = exp(x)
Tensor exp(const Tensor& a) {
  if (amp::autocast_dtype()) {  // autocast's float32 list (autocast.h)
    amp::AutocastSuspend inside;
    return exp(amp::to_float32(a));
  }
  Tensor out = unary_raw(UnaryOp::Exp, "exp", a);
  return record(out, "ExpBackward", {a},
                [out](const Tensor& g) { return std::vector<Tensor>{mul(g, out)}; });
}

// d log(x) = 1/x
Tensor log(const Tensor& a) {
  if (amp::autocast_dtype()) {  // autocast's float32 list (autocast.h)
    amp::AutocastSuspend inside;
    return log(amp::to_float32(a));
  }
  Tensor out = unary_raw(UnaryOp::Log, "log", a);
  return record(out, "LogBackward", {a},
                [a](const Tensor& g) { return std::vector<Tensor>{div(g, a)}; });
}

// d sqrt(x) = 1 / (2 sqrt(x))
Tensor sqrt(const Tensor& a) {
  Tensor out = unary_raw(UnaryOp::Sqrt, "sqrt", a);
  return record(out, "SqrtBackward", {a}, [out](const Tensor& g) {
    return std::vector<Tensor>{div(g, mul_scalar(out, 2.0f))};
  });
}

// d |x| = sign(x)   (0 at 0)
Tensor abs(const Tensor& a) {
  Tensor out = unary_raw(UnaryOp::Abs, "abs", a);
  return record(out, "AbsBackward", {a}, [a](const Tensor& g) {
    Tensor pos = unary_raw(UnaryOp::GtScalar, "abs", a, 0.0f);
    Tensor negative = unary_raw(UnaryOp::GtScalar, "abs", neg(a), 0.0f);
    return std::vector<Tensor>{mul(g, sub(pos, negative))};
  });
}

// d relu/dx = 1[x > 0]
Tensor relu(const Tensor& a) {
  Tensor out = unary_raw(UnaryOp::Relu, "relu", a);
  return record(out, "ReluBackward", {a}, [a](const Tensor& g) {
    return std::vector<Tensor>{binary_raw(BinaryOp::ReluGrad, "relu", g, a)};
  });
}

// d sigmoid = s (1 - s)
Tensor sigmoid(const Tensor& a) {
  Tensor out = unary_raw(UnaryOp::Sigmoid, "sigmoid", a);
  return record(out, "SigmoidBackward", {a}, [out](const Tensor& g) {
    return std::vector<Tensor>{binary_raw(BinaryOp::SigmoidGrad, "sigmoid", g, out)};
  });
}

// d tanh = 1 - tanh^2
Tensor tanh(const Tensor& a) {
  Tensor out = unary_raw(UnaryOp::Tanh, "tanh", a);
  return record(out, "TanhBackward", {a}, [out](const Tensor& g) {
    return std::vector<Tensor>{binary_raw(BinaryOp::TanhGrad, "tanh", g, out)};
  });
}

// GELU, exact or tanh-approximated (the formulas and derivatives: backend/gelu_math.h).
// Backward reads the input: d gelu/dx = Phi(x) + x phi(x) is not a function of the output.
Tensor gelu(const Tensor& a, GeluApproximation approximate) {
  const bool tanh_form = approximate == GeluApproximation::Tanh;
  Tensor out = unary_raw(tanh_form ? UnaryOp::GeluTanh : UnaryOp::Gelu, "gelu", a);
  return record(out, "GeluBackward", {a}, [a, tanh_form](const Tensor& g) {
    return std::vector<Tensor>{
        binary_raw(tanh_form ? BinaryOp::GeluTanhGrad : BinaryOp::GeluGrad, "gelu", g, a)};
  });
}

}  // namespace dplab
