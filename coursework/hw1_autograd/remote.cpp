// remote.cpp: hw1.h's four backwards for the judge, the test program that holds the verdict
// channel and never loads the student's code: each call is sent to the worker the grader
// started beside it (as another user), and what comes back is only data to check
// (common/wire.h). A worker that crashed, hung, or broke the protocol fails the test that
// called it; the grader adds what the worker's crash report says. Read next: worker.cpp.
#include <signal.h>

#include <cstdlib>
#include <mutex>
#include <string>
#include <vector>

#include "hw1.h"
#include "remote.h"
#include "wire.h"

namespace hw1 {
namespace {

struct Worker {
  int to = -1, from = -1;
  bool lost = false;  // once a worker broke its protocol or ended, no call reaches it
  std::string why;
};

Worker& worker() {
  static Worker w = [] {
    ::signal(SIGPIPE, SIG_IGN);  // a worker that died: write() says EPIPE, the test fails
    return Worker{course::wire::fd_from_env("DPLAB_COURSE_JUDGE_TO_WORKER_FD"),
                  course::wire::fd_from_env("DPLAB_COURSE_JUDGE_FROM_WORKER_FD")};
  }();
  return w;
}

// Calls `name` in the worker and returns its `expect` tensors; throws with the words the
// student reads when it threw, ended or answered what the protocol does not allow.
std::vector<Tensor> call(const char* name, const course::wire::Writer& request, std::size_t expect) {
  static std::mutex one_at_a_time;
  std::lock_guard<std::mutex> lock(one_at_a_time);
  Worker& w = worker();
  const std::string fn = std::string(name) + "()";
  if (w.to < 0 || w.from < 0)
    throw std::runtime_error(fn + ": no worker to run it (this test program is the grader's judge; "
                             "`meson test` in your folder runs your code in the tests themselves)");
  if (w.lost) throw std::runtime_error(fn + " was not run: " + w.why);
  auto lose = [&](const std::string& why) {
    w.lost = true;
    w.why = why;
    return std::runtime_error(fn + ": " + why);
  };
  if (!course::wire::write_frame(w.to, request.bytes()))
    throw lose("the process running your code had ended before the call (a crash, or an exit, above?)");
  std::string reply;
  switch (course::wire::read_frame(w.from, reply)) {
    case course::wire::Read::kFrame: break;
    case course::wire::Read::kClosed:
    case course::wire::Read::kTruncated:
      throw lose("the process running your code ended before it returned (a crash, or an exit?)");
    case course::wire::Read::kTooLong:
      throw lose("the process running your code answered with more bytes than the grader reads (did your "
                 "code write to a file descriptor it does not own?)");
  }
  try {
    course::wire::Reader in(reply);
    const std::uint8_t status = in.u8();
    if (status == 1) {
      const std::string what = in.str();
      in.end();
      throw std::runtime_error(what);  // the student's exception, in its own words
    }
    if (status != 0) throw course::wire::Error("an unknown reply status");
    const std::size_t count = in.u8();
    if (count != expect) throw course::wire::Error("a reply of " + std::to_string(count) + " tensors");
    std::vector<Tensor> out;
    for (std::size_t i = 0; i < count; ++i) out.push_back(in.tensor());
    in.end();
    return out;
  } catch (const course::wire::Error& e) {
    throw lose(std::string("the process running your code answered what the grader does not read (") + e.what() +
               "; did your code write to a file descriptor it does not own?)");
  }
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
