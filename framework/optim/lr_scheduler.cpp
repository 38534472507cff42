// lr_scheduler.cpp: the schedules as closed forms of the epoch number. PyTorch computes
// them recursively from the previous lr ("chainable" form); both give the same values when
// nothing else changes the lr, and the closed form cannot accumulate rounding error.
// Read next: framework/data/dataloader.cpp.
#include "framework/optim/lr_scheduler.h"

#include <cmath>
#include <numbers>

namespace dplab::optim {

LRScheduler::LRScheduler(Optimizer& optimizer)
    : optimizer_(optimizer), base_lr_(optimizer.lr()), last_lr_(optimizer.lr()) {
  DPLAB_CHECK(base_lr_ >= 0.0, "LR scheduler: the optimizer's lr must be >= 0, got {}", base_lr_);
}

void LRScheduler::init() { set_last_epoch(0); }

void LRScheduler::step() { set_last_epoch(last_epoch_ + 1); }

void LRScheduler::set_last_epoch(int64_t epoch) {
  DPLAB_CHECK(epoch >= 0, "LR scheduler: epoch must be >= 0, got {}", epoch);
  last_epoch_ = epoch;
  last_lr_ = lr_at(epoch);
  optimizer_.set_lr(last_lr_);
}

StepLR::StepLR(Optimizer& optimizer, StepLROptions options)
    : LRScheduler(optimizer), options_(options) {
  DPLAB_CHECK(options_.step_size > 0, "StepLR: step_size must be > 0, got {}", options_.step_size);
  DPLAB_CHECK(options_.gamma >= 0.0, "StepLR: gamma must be >= 0, got {}", options_.gamma);
  init();
}

double StepLR::lr_at(int64_t epoch) const {
  return base_lr() * std::pow(options_.gamma, static_cast<double>(epoch / options_.step_size));
}

CosineAnnealingLR::CosineAnnealingLR(Optimizer& optimizer, CosineAnnealingLROptions options)
    : LRScheduler(optimizer), options_(options) {
  DPLAB_CHECK(options_.t_max > 0, "CosineAnnealingLR: t_max must be > 0, got {}", options_.t_max);
  DPLAB_CHECK(options_.eta_min >= 0.0, "CosineAnnealingLR: eta_min must be >= 0, got {}",
              options_.eta_min);
  init();
}

double CosineAnnealingLR::lr_at(int64_t epoch) const {
  double phase =
      std::numbers::pi * static_cast<double>(epoch) / static_cast<double>(options_.t_max);
  return options_.eta_min + (base_lr() - options_.eta_min) * (1.0 + std::cos(phase)) / 2.0;
}

WarmupCosineLR::WarmupCosineLR(Optimizer& optimizer, WarmupCosineLROptions options)
    : LRScheduler(optimizer), options_(options) {
  DPLAB_CHECK(options_.warmup_steps >= 0, "WarmupCosineLR: warmup_steps must be >= 0, got {}",
              options_.warmup_steps);
  DPLAB_CHECK(options_.total_steps > options_.warmup_steps,
              "WarmupCosineLR: total_steps must be > warmup_steps, got total_steps {} and "
              "warmup_steps {}",
              options_.total_steps, options_.warmup_steps);
  DPLAB_CHECK(options_.min_lr >= 0.0, "WarmupCosineLR: min_lr must be >= 0, got {}",
              options_.min_lr);
  init();
}

double WarmupCosineLR::lr_at(int64_t step) const {
  const int64_t warmup = options_.warmup_steps, total = options_.total_steps;
  if (step < warmup) return base_lr() * static_cast<double>(step + 1) / static_cast<double>(warmup);
  if (step > total) return options_.min_lr;
  const double r = static_cast<double>(step - warmup) / static_cast<double>(total - warmup);
  return options_.min_lr +
         (base_lr() - options_.min_lr) * (1.0 + std::cos(std::numbers::pi * r)) / 2.0;
}

}  // namespace dplab::optim
