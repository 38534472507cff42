// grad_mode.h: whether ops record the graph. Thread-local, because DataParallel runs one
// replica per thread and a NoGradGuard in one must not switch off recording in another.
#pragma once

namespace dplab {

bool grad_enabled();
void set_grad_enabled(bool on);

// { NoGradGuard g; ... }  evaluation, optimizer steps: nothing is recorded inside.
class NoGradGuard {
 public:
  NoGradGuard() : prev_(grad_enabled()) { set_grad_enabled(false); }
  ~NoGradGuard() { set_grad_enabled(prev_); }
  NoGradGuard(const NoGradGuard&) = delete;
  NoGradGuard& operator=(const NoGradGuard&) = delete;

 private:
  bool prev_;
};

}  // namespace dplab
