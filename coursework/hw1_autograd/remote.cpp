// remote.cpp: hw1.h's four backwards for the judge, the test program that holds the verdict
// channel and never loads the student's code: each call is sent to the worker the grader
// started beside it (as another user), and what comes back is only data to check
// (common/wire.h; the call itself is common/judge_side.h's). A worker that crashed, hung, or
// broke the protocol fails the test that called it; the grader adds what the worker's crash
// report says. Read next: worker.cpp.
#include <cstdlib>
#include <mutex>
#include <string>
#include <vector>

#include "hw1.h"
#include "judge_side.h"
#include "remote.h"
#include "wire.h"

namespace hw1 {
namespace {

// Calls `name` in the worker and returns its `expect` tensors; throws with the words the
// student reads when it threw, ended or answered what the protocol does not allow.
std::vector<Tensor> call(const char* name, const course::wire::Writer& request, std::size_t expect) {
  static std::mutex one_at_a_time;
  std::lock_guard<std::mutex> lock(one_at_a_time);
  static course::judge::Process worker = course::judge::worker_from_env();
  std::vector<Tensor> out;
  course::judge::call_worker(worker, name, request, [&](course::wire::Reader& in) {
    const std::size_t count = in.u8();
    if (count != expect) throw course::wire::Error("a reply of " + std::to_string(count) + " tensors");
    for (std::size_t i = 0; i < count; ++i) out.push_back(in.tensor());
  });
  return out;
}

}  // namespace

MatmulGrads matmul_backward(const Tensor& a, const Tensor& b, const Tensor& gy) {
  course::wire::Writer r;
  r.u8(remote::kMatmulBackward);
  r.tensor(a);
  r.tensor(b);
  r.tensor(gy);
  std::vector<Tensor> g = call("matmul_backward", r, 2);
  return {g[0], g[1]};
}

Tensor cross_entropy_backward(const Tensor& logits, const Tensor& target, float gloss) {
  course::wire::Writer r;
  r.u8(remote::kCrossEntropyBackward);
  r.tensor(logits);
  r.tensor(target);
  r.f32(gloss);
  return call("cross_entropy_backward", r, 1)[0];
}

Conv2dGrads conv2d_backward(const Tensor& x, const Tensor& w, const Tensor& gy, int64_t stride, int64_t padding) {
  course::wire::Writer r;
  r.u8(remote::kConv2dBackward);
  r.tensor(x);
  r.tensor(w);
  r.tensor(gy);
  r.i64(stride);
  r.i64(padding);
  std::vector<Tensor> g = call("conv2d_backward", r, 3);
  return {g[0], g[1], g[2]};
}

Tensor max_pool2d_backward(const Tensor& x, const Tensor& gy, int64_t kernel, int64_t stride) {
  course::wire::Writer r;
  r.u8(remote::kMaxPool2dBackward);
  r.tensor(x);
  r.tensor(gy);
  r.i64(kernel);
  r.i64(stride);
  return call("max_pool2d_backward", r, 1)[0];
}

}  // namespace hw1
