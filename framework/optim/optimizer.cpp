// optimizer.cpp: what every optimizer shares: the parameter checks, zero_grad, and the
// helpers of optim_state.h (state on the parameter's device, metadata round trips).
// Read next: sgd.cpp (the simplest step), then adam.cpp.
#include "framework/optim/optimizer.h"

#include <fmt/format.h>

#include <cerrno>
#include <cmath>
#include <cstdlib>

#include "framework/ops/ops.h"
#include "framework/optim/optim_state.h"

namespace dplab::optim {

Optimizer::Optimizer(std::vector<Tensor> params) : params_(std::move(params)) {
  // torch.optim's rules: only leaves can be optimized (a non-leaf is recomputed every
  // forward, so updating it would be lost), and only floating-point tensors.
  for (size_t i = 0; i < params_.size(); ++i) {
    const Tensor& p = params_[i];
    DPLAB_CHECK(p.defined(), "optimizer: parameter {} is an undefined tensor", i);
    DPLAB_CHECK(p.dtype() == DType::Float32,
                "optimizer: parameter {} must be float32, got {} of shape {}", i,
                dtype_name(p.dtype()), shape_str(p.shape()));
    DPLAB_CHECK(p.is_leaf(),
                "optimizer: parameter {} (shape {}) is not a leaf tensor; optimize the tensors "
                "you created, not results of ops on them",
                i, shape_str(p.shape()));
    for (size_t j = 0; j < i; ++j)
      DPLAB_CHECK(!params_[j].is_same(p), "optimizer: parameter {} appears twice (also at {})", i,
                  j);
  }
}

void Optimizer::zero_grad(bool set_to_none) {
  for (Tensor& p : params_) {
    if (set_to_none) p.set_grad(Tensor());
    else if (Tensor g = p.grad(); g.defined()) g.zero_();
  }
}

namespace detail {

void check_non_negative(const char* optimizer, const char* what, double value) {
  DPLAB_CHECK(value >= 0.0 && std::isfinite(value),
              "{}: invalid {}: expected a finite value >= 0, "
              "got {}",
              optimizer, what, value);
}

Tensor checked_grad(const char* optimizer, const std::vector<Tensor>& params, size_t i) {
  const Tensor& p = params[i];
  Tensor g = p.grad();
  if (!g.defined()) return g;
  DPLAB_CHECK(g.dtype() == DType::Float32 && g.shape() == p.shape() && g.device() == p.device(),
              "{}: gradient of parameter {} must be float32 {} on {}, got {} {} on {}", optimizer,
              i, shape_str(p.shape()), p.device(), dtype_name(g.dtype()), shape_str(g.shape()),
              g.device());
  return g;
}

Tensor zeros_like_param(const Tensor& param) { return zeros(param.shape(), param.options()); }

std::string state_key(size_t i, const std::string& name) {
  return fmt::format("state.{}.{}", i, name);
}

std::string format_double(double v) { return fmt::format("{:.17g}", v); }

const std::string& meta_string(const Metadata& meta, const std::string& key) {
  auto it = meta.find(key);
  DPLAB_CHECK(it != meta.end(), "optimizer state dict: metadata has no key \"{}\"", key);
  return it->second;
}

double meta_double(const Metadata& meta, const std::string& key) {
  const std::string& s = meta_string(meta, key);
  char* end = nullptr;
  errno = 0;
  double v = std::strtod(s.c_str(), &end);
  DPLAB_CHECK(!s.empty() && end == s.c_str() + s.size() && errno == 0,
              "optimizer state dict: \"{}\" should be a number, got \"{}\"", key, s);
  // a checkpoint edited or corrupted to lr = inf would train on silently into NaN
  DPLAB_CHECK(std::isfinite(v),
              "optimizer state dict: \"{}\" should be a finite number, got "
              "\"{}\"",
              key, s);
  return v;
}

int64_t meta_int(const Metadata& meta, const std::string& key) {
  const std::string& s = meta_string(meta, key);
  char* end = nullptr;
  errno = 0;
  long long v = std::strtoll(s.c_str(), &end, 10);
  DPLAB_CHECK(!s.empty() && end == s.c_str() + s.size() && errno == 0,
              "optimizer state dict: \"{}\" should be an integer, got \"{}\"", key, s);
  return v;
}

void check_header(const Metadata& meta, const std::string& type, size_t num_params) {
  const std::string& saved = meta_string(meta, "optim.type");
  DPLAB_CHECK(saved == type, "load_state_dict: this optimizer is {}, the state dict is from {}",
              type, saved);
  int64_t n = meta_int(meta, "optim.num_params");
  DPLAB_CHECK(n == static_cast<int64_t>(num_params),
              "load_state_dict: {} has {} parameters, the state dict has {}", type, num_params, n);
}

void check_finite_state(const std::string& key, const Tensor& t) {
  const std::vector<float> values = t.to(Device("cpu")).to_vector<float>();
  for (size_t i = 0; i < values.size(); ++i)
    DPLAB_CHECK(std::isfinite(values[i]),
                "load_state_dict: \"{}\" holds {} at element {}: optimizer state must be finite "
                "(a step from it would turn every parameter it touches into NaN)",
                key, values[i], i);
}

Tensor load_state_tensor(const StateDict& tensors, const std::string& key, const Tensor& param) {
  const Tensor& src = tensors.at(key);
  DPLAB_CHECK(src.dtype() == DType::Float32 && src.shape() == param.shape(),
              "load_state_dict: \"{}\" should be float32 {} like its parameter, got {} {}", key,
              shape_str(param.shape()), dtype_name(src.dtype()), shape_str(src.shape()));
  check_finite_state(key, src);
  Tensor t = Tensor::empty(param.shape(), param.options());
  t.copy_(src);  // any device to the parameter's device
  return t;
}

}  // namespace detail
int64_t Optimizer::state_bytes() const {
  StateDict sd;
  Metadata meta;
  state_dict(sd, meta);
  int64_t bytes = 0;
  for (const auto& [name, t] : sd) bytes += t.nbytes();
  return bytes;
}

}  // namespace dplab::optim
