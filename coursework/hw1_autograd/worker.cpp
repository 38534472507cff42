// worker.cpp: the main() of hw1's worker, the process that runs the student's code (with
// the given code) and nothing of the grader's: no tests, no verdict channel, no token. It
// answers the judge's calls (remote.cpp) on the two pipes the grader gave it, one at a
// time, until the judge closes its end. A crash is reported on a pipe of its own
// (common/crash.cpp), which the grader reads as words for the student, never as a verdict.
// Read next: remote.cpp, ../common/wire.h, ../common/worker_side.h.
#include <cstdio>
#include <cstdlib>
#include <exception>
#include <string>

#include "framework/autograd/grad_mode.h"
#include "hw1.h"
#include "remote.h"
#include "wire.h"
#include "worker_side.h"

namespace {

// One call: the request's function with its arguments, and the reply.
std::string answer(const std::string& request) {
  course::wire::Reader in(request);
  course::wire::Writer out;
  std::vector<dplab::Tensor> got;
  const std::uint8_t fn = in.u8();
  if (fn == hw1::remote::kMatmulBackward) {
    const dplab::Tensor a = in.tensor(), b = in.tensor(), gy = in.tensor();
    in.end();
    hw1::MatmulGrads g = hw1::matmul_backward(a, b, gy);
    got = {g.ga, g.gb};
  } else if (fn == hw1::remote::kCrossEntropyBackward) {
    const dplab::Tensor logits = in.tensor(), target = in.tensor();
    const float gloss = in.f32();
    in.end();
    got = {hw1::cross_entropy_backward(logits, target, gloss)};
  } else if (fn == hw1::remote::kConv2dBackward) {
    const dplab::Tensor x = in.tensor(), w = in.tensor(), gy = in.tensor();
    const std::int64_t stride = in.i64(), padding = in.i64();
    in.end();
    hw1::Conv2dGrads g = hw1::conv2d_backward(x, w, gy, stride, padding);
    got = {g.gx, g.gw, g.gb};
  } else if (fn == hw1::remote::kMaxPool2dBackward) {
    const dplab::Tensor x = in.tensor(), gy = in.tensor();
    const std::int64_t kernel = in.i64(), stride = in.i64();
    in.end();
    got = {hw1::max_pool2d_backward(x, gy, kernel, stride)};
  } else {
    throw course::wire::Error("unknown function " + std::to_string(fn));
  }
  out.u8(0);
  out.u8(static_cast<std::uint8_t>(got.size()));
  for (const dplab::Tensor& t : got) out.tensor(t);
  return out.bytes();
}

}  // namespace

int main() {
  const auto pipes = course::worker::start(course::worker::Role::kWorker);
  if (!pipes) return 3;
  dplab::NoGradGuard no_grad;  // the student's backward runs without autograd recording anything
  course::worker::serve(*pipes, &answer);
  return 0;
}
