// grad_scaler.cpp: dynamic loss scaling (grad_scaler.h), PyTorch's GradScaler step by step.
#include "framework/amp/grad_scaler.h"

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

GradScaler::GradScaler(GradScalerOptions o)
    : scale_(o.init_scale), growth_factor_(o.growth_factor), backoff_factor_(o.backoff_factor),
      growth_interval_(o.growth_interval), enabled_(o.enabled) {
  DPLAB_CHECK(o.init_scale > 0 && std::isfinite(o.init_scale), "GradScaler: init_scale must be a finite "
              "value > 0, got {}", o.init_scale);
  DPLAB_CHECK(o.growth_factor > 1.0, "GradScaler: growth_factor must be > 1, got {}", o.growth_factor);
  DPLAB_CHECK(o.backoff_factor > 0.0 && o.backoff_factor < 1.0,
              "GradScaler: backoff_factor must lie in (0, 1), got {}", o.backoff_factor);
  DPLAB_CHECK(o.growth_interval >= 1, "GradScaler: growth_interval must be >= 1, got {}", o.growth_interval);
}

Tensor GradScaler::scale(const Tensor& loss) const {
  if (!enabled_) return loss;
  return mul_scalar(loss, static_cast<float>(scale_));
}

void GradScaler::unscale_(optim::Optimizer& optimizer) {
  if (!enabled_) return;
  PerOptimizer& st = per_optimizer_[&optimizer];
  DPLAB_CHECK(st.stage == Stage::Ready, "GradScaler::unscale_: already {} for this optimizer since "
              "the last update()", st.stage == Stage::Unscaled ? "unscaled" : "stepped");
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
  if (found_inf) {
    scale_ *= backoff_factor_;
    growth_tracker_ = 0;
  } else if (++growth_tracker_ == growth_interval_) {
    scale_ *= growth_factor_;
    growth_tracker_ = 0;
  }
  per_optimizer_.clear();
}

void GradScaler::state_dict(Metadata& meta) const {
  meta["scaler.scale"] = fmt::format("{}", scale_);
  meta["scaler.growth_factor"] = fmt::format("{}", growth_factor_);
  meta["scaler.backoff_factor"] = fmt::format("{}", backoff_factor_);
  meta["scaler.growth_interval"] = std::to_string(growth_interval_);
  meta["scaler.growth_tracker"] = std::to_string(growth_tracker_);
}

void GradScaler::load_state_dict(const Metadata& meta) {
  auto get = [&](const char* key) -> const std::string& {
    auto it = meta.find(key);
    DPLAB_CHECK(it != meta.end(), "GradScaler::load_state_dict: missing \"{}\" (a checkpoint saved "
                "without the scaler's state_dict?)", key);
    return it->second;
  };
  try {
    scale_ = std::stod(get("scaler.scale"));
    growth_factor_ = std::stod(get("scaler.growth_factor"));
    backoff_factor_ = std::stod(get("scaler.backoff_factor"));
    growth_interval_ = std::stoll(get("scaler.growth_interval"));
    growth_tracker_ = std::stoll(get("scaler.growth_tracker"));
  } catch (const std::logic_error& e) {  // stod / stoll: not a number
    DPLAB_FAIL("GradScaler::load_state_dict: a scaler.* value is not a number ({})", e.what());
  }
  DPLAB_CHECK(scale_ > 0 && std::isfinite(scale_), "GradScaler::load_state_dict: scale must be > 0, got {}", scale_);
  per_optimizer_.clear();
}

}  // namespace dplab::amp
