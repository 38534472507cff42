// grad_scaler.cpp: dynamic loss scaling (grad_scaler.h), PyTorch's GradScaler step by step.
#include "framework/amp/grad_scaler.h"

#include <algorithm>
#include <charconv>
#include <cmath>
#include <string>

#include "framework/autograd/grad_mode.h"
#include "framework/error.h"
#include "framework/ops/ops.h"

namespace dplab::amp {

bool all_finite(const Tensor& t) {
  if (t.numel() == 0) return true;
  NoGradGuard no_grad;
  const float probe = sum(mul_scalar(t.detach().to(DType::Float32), 0.0f)).item();
  return probe == 0.0f;
}

namespace {

// The rules the constructor and load_state_dict share; `who` starts the message.
void check_options(const char* who, double scale, double growth, double backoff, int64_t interval) {
  // A subnormal S (1e-45) has lost its precision and one backoff takes it to 0, after which
  // every gradient is 0 and training stalls without a word: S stays a normal float32.
  DPLAB_CHECK(std::isfinite(scale) && scale >= kMinScale && scale <= kMaxScale,
              "{}: scale must be a finite value in (0, {:g}] (float32's largest) and a normal "
              "float32, at least {:g}, got {}",
              who, kMaxScale, kMinScale, scale);
  DPLAB_CHECK(growth > 1.0 && std::isfinite(growth),
              "{}: growth_factor must be a finite value "
              "> 1, got {}",
              who, growth);
  DPLAB_CHECK(backoff > 0.0 && backoff < 1.0, "{}: backoff_factor must lie in (0, 1), got {}", who,
              backoff);
  DPLAB_CHECK(interval >= 1, "{}: growth_interval must be >= 1, got {}", who, interval);
}

}  // namespace

GradScaler::GradScaler(GradScalerOptions o)
    : scale_(o.init_scale), growth_factor_(o.growth_factor), backoff_factor_(o.backoff_factor),
      growth_interval_(o.growth_interval), enabled_(o.enabled) {
  check_options("GradScaler", o.init_scale, o.growth_factor, o.backoff_factor, o.growth_interval);
}

Tensor GradScaler::scale(const Tensor& loss) const {
  if (!enabled_) return loss;
  return mul_scalar(loss, static_cast<float>(scale_));
}

void GradScaler::unscale_(optim::Optimizer& optimizer) {
  if (!enabled_) return;
  PerOptimizer& st = per_optimizer_[&optimizer];
  DPLAB_CHECK(st.stage == Stage::Ready,
              "GradScaler::unscale_: already {} for this optimizer since "
              "the last update()",
              st.stage == Stage::Unscaled ? "unscaled" : "stepped");
  optimizer.sync_grads();
  // 1/S is a power of two while S is (the defaults keep it so): unscaling is exact.
  const float inv_scale = static_cast<float>(1.0 / scale_);
  bool found_inf = false;
  NoGradGuard no_grad;
  for (const Tensor& p : optimizer.params()) {
    Tensor g = p.grad();
    if (!g.defined()) continue;
    g.mul_(inv_scale);
    found_inf = found_inf || !all_finite(g);
  }
  st.found_inf = found_inf;
  st.stage = Stage::Unscaled;
}

bool GradScaler::step(optim::Optimizer& optimizer) {
  if (!enabled_) {
    optimizer.step();
    return true;
  }
  PerOptimizer& st = per_optimizer_[&optimizer];
  DPLAB_CHECK(st.stage != Stage::Stepped, "GradScaler::step: step() was already called for this "
                                          "optimizer since the last update()");
  if (st.stage == Stage::Ready) unscale_(optimizer);
  st.stage = Stage::Stepped;
  if (st.found_inf) {
    ++skipped_steps_;
    return false;  // the gradients overflowed: these weights would be garbage
  }
  optimizer.step();
  return true;
}

void GradScaler::update() {
  if (!enabled_) return;
  DPLAB_CHECK(!per_optimizer_.empty(), "GradScaler::update: no inf checks were recorded before "
                                       "update() (call step() or unscale_() first)");
  bool found_inf = false;
  for (const auto& [opt, st] : per_optimizer_) found_inf = found_inf || st.found_inf;
  // S stays a normal float32 (it is applied as one): past float32's largest value S would
  // be inf, every step would overflow and be skipped, and S could never come back.
  if (found_inf) {
    scale_ = std::max(scale_ * backoff_factor_, kMinScale);
    growth_tracker_ = 0;
  } else if (++growth_tracker_ == growth_interval_) {
    scale_ = std::min(scale_ * growth_factor_, kMaxScale);
    growth_tracker_ = 0;
  }
  per_optimizer_.clear();
}

void GradScaler::state_dict(Metadata& meta) const {
  meta["scaler.scale"] = fmt::format("{:.17g}", scale_);
  meta["scaler.growth_factor"] = fmt::format("{:.17g}", growth_factor_);
  meta["scaler.backoff_factor"] = fmt::format("{:.17g}", backoff_factor_);
  meta["scaler.growth_interval"] = std::to_string(growth_interval_);
  meta["scaler.growth_tracker"] = std::to_string(growth_tracker_);
}

GradScalerState GradScaler::parse_state_dict(const Metadata& meta) {
  const char* who = "GradScaler::load_state_dict";
  auto get = [&](const char* key) -> const std::string& {
    auto it = meta.find(key);
    DPLAB_CHECK(it != meta.end(),
                "{}: missing \"{}\" (a checkpoint saved without the scaler's "
                "state_dict?)",
                who, key);
    return it->second;
  };
  auto number = [&](const char* key) {
    const std::string& s = get(key);
    double v = 0;
    auto [end, ec] = std::from_chars(s.data(), s.data() + s.size(), v);
    DPLAB_CHECK(!s.empty() && ec == std::errc() && end == s.data() + s.size(),
                "{}: \"{}\" should be a number, got \"{}\"", who, key, s);
    return v;
  };
  auto integer = [&](const char* key) {
    const std::string& s = get(key);
    int64_t v = 0;
    auto [end, ec] = std::from_chars(s.data(), s.data() + s.size(), v);
    DPLAB_CHECK(!s.empty() && ec == std::errc() && end == s.data() + s.size(),
                "{}: \"{}\" should be an integer, got \"{}\"", who, key, s);
    return v;
  };
  GradScalerState st{.scale = number("scaler.scale"),
                     .growth_factor = number("scaler.growth_factor"),
                     .backoff_factor = number("scaler.backoff_factor"),
                     .growth_interval = integer("scaler.growth_interval"),
                     .growth_tracker = integer("scaler.growth_tracker")};
  check_options(who, st.scale, st.growth_factor, st.backoff_factor, st.growth_interval);
  DPLAB_CHECK(st.growth_tracker >= 0 && st.growth_tracker < st.growth_interval,
              "{}: growth_tracker must lie in [0, growth_interval = {}), got {}", who,
              st.growth_interval, st.growth_tracker);
  return st;
}

void GradScaler::load_state_dict(const Metadata& meta) {
  const GradScalerState st = parse_state_dict(meta);  // throws before anything changes
  scale_ = st.scale;
  growth_factor_ = st.growth_factor;
  backoff_factor_ = st.backoff_factor;
  growth_interval_ = st.growth_interval;
  growth_tracker_ = st.growth_tracker;
  per_optimizer_.clear();
}

}  // namespace dplab::amp
