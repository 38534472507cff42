// lr_scheduler.h: learning-rate schedules that set an optimizer's lr once per epoch,
// torch.optim.lr_scheduler's StepLR and CosineAnnealingLR.
//   optim::StepLR sched(opt, {.step_size = 30, .gamma = 0.1});
//   for (epoch ...) { train(); sched.step(); }
// Construction sets lr to the schedule's value at epoch 0 (the optimizer's lr at that
// moment is the base lr), as PyTorch's constructor does. Values come from the closed
// form of each schedule, so they do not drift however many epochs run.
// Read next: framework/data/dataloader.h.
#pragma once
#include <cstdint>

#include "framework/optim/optimizer.h"

namespace dplab::optim {

class LRScheduler {
 public:
  explicit LRScheduler(Optimizer& optimizer);
  virtual ~LRScheduler() = default;
  LRScheduler(const LRScheduler&) = delete;
  LRScheduler& operator=(const LRScheduler&) = delete;

  void step();                                     // next epoch: last_epoch += 1, set lr
  double get_last_lr() const { return last_lr_; }  // the lr set by the last step()
  int64_t last_epoch() const { return last_epoch_; }
  double base_lr() const { return base_lr_; }
  // Resuming from a checkpoint: jump to `epoch` and set the lr for it.
  void set_last_epoch(int64_t epoch);

 protected:
  // The schedule: lr at epoch e >= 0 from the base lr. Called by step(), so subclasses
  // must call init() at the end of their constructor (a virtual call in the base
  // constructor would not reach them).
  virtual double lr_at(int64_t epoch) const = 0;
  void init();

 private:
  Optimizer& optimizer_;
  double base_lr_;
  int64_t last_epoch_ = 0;
  double last_lr_;
};

struct StepLROptions {
  int64_t step_size = 1;  // epochs between decays, > 0
  double gamma = 0.1;     // factor per decay
};

// lr = base * gamma^floor(epoch / step_size)
class StepLR : public LRScheduler {
 public:
  StepLR(Optimizer& optimizer, StepLROptions options);

 protected:
  double lr_at(int64_t epoch) const override;

 private:
  StepLROptions options_;
};

struct CosineAnnealingLROptions {
  int64_t t_max = 1;     // half period in epochs, > 0
  double eta_min = 0.0;  // the lowest lr, reached at epoch t_max
};

// lr = eta_min + (base - eta_min) * (1 + cos(pi * epoch / t_max)) / 2
// Past t_max the cosine climbs back up (PyTorch's schedule does the same).
class CosineAnnealingLR : public LRScheduler {
 public:
  CosineAnnealingLR(Optimizer& optimizer, CosineAnnealingLROptions options);

 protected:
  double lr_at(int64_t epoch) const override;

 private:
  CosineAnnealingLROptions options_;
};

struct WarmupCosineLROptions {
  int64_t warmup_steps = 0;  // >= 0
  int64_t total_steps = 1;   // > warmup_steps: where the cosine reaches min_lr
  double min_lr = 0.0;       // the lr from total_steps on (nanoGPT: base / 10)
};

// GPT-2 / nanoGPT's schedule; `epoch` here counts optimizer steps, s:
//   s < warmup:          lr = base * (s + 1) / warmup
//   warmup <= s <= total: lr = min_lr + (base - min_lr) * (1 + cos(pi * r)) / 2,
//                          r = (s - warmup) / (total - warmup)
//   s > total:           lr = min_lr
// The warm-up starts at base / warmup, not 0, so the first step is not wasted, and it
// exists because Adam's first moments are estimated from few gradients: full-size steps
// on them early can throw a transformer into a bad region it never leaves.
class WarmupCosineLR : public LRScheduler {
 public:
  WarmupCosineLR(Optimizer& optimizer, WarmupCosineLROptions options);

 protected:
  double lr_at(int64_t step) const override;

 private:
  WarmupCosineLROptions options_;
};

}  // namespace dplab::optim
