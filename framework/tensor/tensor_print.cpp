// tensor_print.cpp: fmt::format("{}", t). Values are copied to the host first;
// a dim longer than 6 shows its first 3 and last 3 entries around "...".
#include <string>

#include "framework/autograd/node.h"
#include "framework/tensor/tensor.h"

namespace dplab {
namespace {

constexpr int64_t kEdge = 3;

std::string grad_fn_name(const Tensor& t) { return t.grad_fn()->name(); }

void print_dim(std::string& out, const Tensor& t, const std::vector<double>& v, int64_t d,
               int64_t base) {
  const Shape& s = t.shape();
  int64_t n = s[d];
  int64_t stride = 1;
  for (size_t k = d + 1; k < s.size(); ++k) stride *= s[k];
  out += '[';
  for (int64_t i = 0; i < n; ++i) {
    if (n > 2 * kEdge && i == kEdge) {
      out += "..., ";
      i = n - kEdge;
    }
    if (d + 1 == static_cast<int64_t>(s.size())) {
      double x = v[base + i];
      out += is_floating(t.dtype()) ? fmt::format("{:.4f}", x) : fmt::format("{}", (int64_t)x);
    } else {
      print_dim(out, t, v, d + 1, base + i * stride);
    }
    if (i + 1 < n) out += ", ";
  }
  out += ']';
}

}  // namespace

std::string to_string(const Tensor& t) {
  if (!t.defined()) return "tensor(undefined)";
  std::vector<double> v;
  if (is_floating(t.dtype())) {  // 16-bit values print through float32, exactly
    for (float x : t.detach().to(DType::Float32).to_vector<float>()) v.push_back(x);
  } else {
    for (int64_t x : t.to_vector<int64_t>()) v.push_back(static_cast<double>(x));
  }
  std::string out = "tensor(";
  if (t.dim() == 0) {
    out += is_floating(t.dtype()) ? fmt::format("{:.4f}", v[0]) : fmt::format("{}", (int64_t)v[0]);
  } else {
    print_dim(out, t, v, 0, 0);
  }
  out += fmt::format(", shape={}, device={}", shape_str(t.shape()), t.device());
  if (t.dtype() != DType::Float32) out += fmt::format(", dtype={}", dtype_name(t.dtype()));
  if (t.grad_fn()) out += ", grad_fn=" + grad_fn_name(t);
  else if (t.requires_grad()) out += ", requires_grad=true";
  out += ')';
  return out;
}

}  // namespace dplab
