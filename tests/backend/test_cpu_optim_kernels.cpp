// test_cpu_optim_kernels.cpp: the CPU's fused SGD step (cpu_optim.cpp) against the formula
// written out per element, for every case it specialises (plain, momentum first step and later
// steps, Nesterov, dampening, weight decay) on a tensor long enough to be shared between
// threads (an odd length, so the threads' blocks differ in size).
#include <doctest/doctest.h>

#include "tests/backend_test_util.h"
#include "tests/thread_count_scope.h"

using namespace dplab;
using namespace dplab::test;

namespace {

// torch.optim.SGD for one element, obviously right.
void sgd_reference(const SgdArgs& a, float& p, float g, float& buf) {
  float d = g + a.weight_decay * p;
  if (a.momentum != 0.0f) {
    buf = a.first_step ? d : a.momentum * buf + (1.0f - a.dampening) * d;
    d = a.nesterov ? d + a.momentum * buf : buf;
  }
  p -= a.lr * d;
}

}  // namespace

TEST_CASE("sgd_step kernel equals torch.optim.SGD's formula element by element, 1 and 2 threads") {
  const int64_t n = 100003;  // past threads_for's 32K: split between threads
  const std::vector<float> grad = random_vec(n, 1), param0 = random_vec(n, 2),
                           buf0 = random_vec(n, 3);
  const std::vector<SgdArgs> cases = {
      {.lr = 0.1f},
      {.lr = 0.1f, .weight_decay = 0.01f},
      {.lr = 0.05f, .momentum = 0.9f, .first_step = true},
      {.lr = 0.05f, .momentum = 0.9f, .first_step = false},
      {.lr = 0.05f,
       .momentum = 0.9f,
       .dampening = 0.3f,
       .weight_decay = 0.001f,
       .first_step = false},
      {.lr = 0.05f, .momentum = 0.9f, .nesterov = true, .first_step = true},
      {.lr = 0.05f, .momentum = 0.9f, .weight_decay = 0.01f, .nesterov = true, .first_step = false},
  };
  for (int threads : {1, 2}) {
    testing::ThreadCountScope scope(threads);
    if (!scope.available()) continue;
    for (const SgdArgs& a : cases) {
      CAPTURE(threads);
      CAPTURE(a.momentum);
      CAPTURE(a.nesterov);
      CAPTURE(a.first_step);
      std::vector<float> p = param0, buf = buf0, p_ref = param0, buf_ref = buf0;
      cpu().sgd_step(a, p.data(), grad.data(), a.momentum != 0.0f ? buf.data() : nullptr, n);
      for (int64_t i = 0; i < n; ++i) sgd_reference(a, p_ref[i], grad[i], buf_ref[i]);
      int64_t bad = -1;
      for (int64_t i = 0; i < n && bad < 0; ++i)
        if (!close(p[i], p_ref[i], 1e-6f, 1e-6f) ||
            (a.momentum != 0.0f && !close(buf[i], buf_ref[i], 1e-6f, 1e-6f)))
          bad = i;
      CHECK_MESSAGE(bad == -1, "first mismatch at ", bad);
    }
  }
}
