// support.cpp: the part of hw2 that is given: copies between devices, counted.
#include "ps.h"
#include "framework/ops/ops.h"

namespace hw2 {

Tensor copy_to(const Tensor& t, Device to, Traffic& traffic) {
  if (t.device() == to) return t;
  traffic.sent[t.device().index] += t.nbytes();
  traffic.received[to.index] += t.nbytes();
  return t.contiguous_copy_on(to);
}

}  // namespace hw2
