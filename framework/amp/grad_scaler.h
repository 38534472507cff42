// grad_scaler.h: torch.cuda.amp.GradScaler, dynamic loss scaling for float16 training.
// Why: float16's smallest subnormal is 2^-24 ~ 6e-8, and many gradients are smaller, so
// computed in float16 they round to zero and the weights they belong to stop learning.
// Multiplying the loss by S multiplies every gradient by S (backward is linear), lifting
// them into float16's range; the optimizer must then see gradients / S. Too large an S
// overflows to inf, so S is found at run time:
//   scaler.scale(loss).backward();  // gradients are S times too large
//   scaler.step(optimizer);         // unscale (x 1/S); if any is inf or NaN, skip the step
//   scaler.update();                // overflow: S *= 0.5; 2000 clean steps in a row: S *= 2
// S starts at 2^16. unscale_(optimizer) before step() lets you clip true gradients.
// bfloat16 has float32's exponent range and does not need a scaler (but it does no harm).
// The state (scale, growth tracker) is saved in checkpoints through state_dict.
// Read next: master_weights.h (Apex O2), tutorials/17_mixed_precision.md.
#pragma once
#include <cstdint>
#include <map>

#include "framework/nn/state_dict.h"
#include "framework/optim/optimizer.h"

namespace dplab::amp {

// S stays within float32's normal range (it is applied as a float32 factor).
inline constexpr double kMaxScale = 3.4028234663852886e38;   // FLT_MAX
inline constexpr double kMinScale = 1.1754943508222875e-38;  // FLT_MIN

// What a checkpoint holds of a scaler (state_dict's "scaler.*" keys), checked.
struct GradScalerState {
  double scale, growth_factor, backoff_factor;
  int64_t growth_interval, growth_tracker;
};

struct GradScalerOptions {
  double init_scale = 65536.0;  // 2^16
  double growth_factor = 2.0;
  double backoff_factor = 0.5;
  int64_t growth_interval = 2000;
  bool enabled = true;  // false: every call is a pass-through (one loop for fp32 and fp16)
};

class GradScaler {
 public:
  explicit GradScaler(GradScalerOptions o = {});

  // loss * S (a differentiable multiply, in loss's dtype).
  Tensor scale(const Tensor& loss) const;
  // Divides the gradients of optimizer.params() by S in place and records whether any is
  // inf or NaN. At most once per optimizer between update()s (a second call is an error,
  // as in PyTorch: the gradients would be divided twice).
  void unscale_(optim::Optimizer& optimizer);
  // unscale_ if not done yet, then optimizer.step() unless a gradient was inf / NaN.
  // Returns true when the step ran.
  bool step(optim::Optimizer& optimizer);
  // The new S from this iteration's steps (backoff if any found inf, else growth count).
  void update();

  double get_scale() const { return enabled_ ? scale_ : 1.0; }
  int64_t growth_tracker() const { return growth_tracker_; }
  bool is_enabled() const { return enabled_; }
  int64_t skipped_steps() const {
    return skipped_steps_;
  }  // since construction (a counter for reports)

  // "scaler.scale", "scaler.growth_tracker", ... into a checkpoint's metadata (checkpoint.h).
  void state_dict(Metadata& meta) const;
  // Checks every value as the constructor does (scale in [FLT_MIN, FLT_MAX], growth_factor
  // finite > 1, backoff_factor in (0, 1), growth_interval >= 1, tracker in [0, interval))
  // before changing anything: a refused state leaves the scaler as it was.
  void load_state_dict(const Metadata& meta);
  // The checks of load_state_dict without the loading (load_checkpoint runs them first).
  static GradScalerState parse_state_dict(const Metadata& meta);

 private:
  enum class Stage { Ready, Unscaled, Stepped };
  struct PerOptimizer {
    Stage stage = Stage::Ready;
    bool found_inf = false;
  };
  double scale_, growth_factor_, backoff_factor_;
  int64_t growth_interval_, growth_tracker_ = 0, skipped_steps_ = 0;
  bool enabled_;
  std::map<const optim::Optimizer*, PerOptimizer> per_optimizer_;
};

// True when every element of t is finite: sum(t * 0) is 0 exactly then, NaN otherwise
// (0 * inf = NaN, and NaN spreads through a sum). One reduction, on t's device.
bool all_finite(const Tensor& t);

}  // namespace dplab::amp
