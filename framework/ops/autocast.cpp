// autocast.cpp: the thread-local autocast state and the casts ops ask for (autocast.h).
#include "framework/ops/autocast.h"

#include "framework/error.h"
#include "framework/ops/ops.h"

namespace dplab::amp {
namespace {
thread_local std::optional<DType> t_autocast;
}

std::optional<DType> autocast_dtype() { return t_autocast; }

AutocastGuard::AutocastGuard(DType dtype, bool enabled) : prev_(t_autocast) {
  DPLAB_CHECK(is_low_precision(dtype), "AutocastGuard: expected float16 or bfloat16, got {}",
              dtype_name(dtype));
  t_autocast = enabled ? std::optional<DType>(dtype) : std::nullopt;
}
AutocastGuard::~AutocastGuard() { t_autocast = prev_; }

AutocastSuspend::AutocastSuspend() : prev_(t_autocast) { t_autocast.reset(); }
AutocastSuspend::~AutocastSuspend() { t_autocast = prev_; }

Tensor to_autocast_dtype(const Tensor& t) {
  if (!t.defined() || !t_autocast || !is_floating(t.dtype()) || t.dtype() == *t_autocast) return t;
  return cast(t, *t_autocast);
}

Tensor to_float32(const Tensor& t) {
  if (!t.defined() || !is_low_precision(t.dtype())) return t;
  return cast(t, DType::Float32);
}

}  // namespace dplab::amp
