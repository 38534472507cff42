// worker.cpp: the main() of one hw5 rank when the grader runs the ranks as processes of their
// own, each as its own user: the student's Zero1SGD (and the given flatten helpers) and
// nothing of the grader's. It answers the judge's calls (remote.h) on its two control pipes:
// each call builds a process group of the library's ring engine over the broker
// (common/broker_transport.h), the rank's only link to the others, and runs rank_run.h's
// steps on it; until the judge closes its end. A crash is reported on a pipe of its own
// (common/crash.cpp), words for the student, never a verdict.
// Read next: remote.h, rank_run.h, remote.cpp (the judge).
#include <signal.h>

#include <cstdio>
#include <exception>
#include <memory>
#include <string>

#include "broker_transport.h"
#include "channel.h"
#include "harness.h"
#include "parallel/algorithms/cost.h"
#include "parallel/engines/collective_engine.h"
#include "rank_run.h"
#include "remote.h"
#include "wire.h"

namespace course::harness {
void install_crash_handlers();  // crash.cpp
}

namespace {

using namespace hw5;

RankInput read_input(const std::string& request) {
  course::wire::Reader in(request);
  RankInput input;
  input.rank = static_cast<int>(in.i64());
  input.size = static_cast<int>(in.i64());
  input.lr = in.f32();
  input.momentum = in.f32();
  const std::int64_t params = in.i64(), steps = in.i64();
  if (params < 0 || params > remote::kMaxParams || steps < 0 || steps > remote::kMaxSteps)
    throw course::wire::Error("a call of " + std::to_string(params) + " parameters and " +
                              std::to_string(steps) + " steps");
  for (std::int64_t i = 0; i < params; ++i) input.params.push_back(in.tensor());
  input.grads.assign(static_cast<std::size_t>(steps), {});
  for (auto& step : input.grads)
    for (std::int64_t i = 0; i < params; ++i) step.push_back(in.tensor());
  in.end();
  return input;
}

// One call: the rank's steps over a group of its own on the broker, and the reply.
std::string answer(const std::string& request, int to_broker, int from_broker) {
  const RankInput input = read_input(request);
  auto transport = std::make_unique<course::broker::BrokerTransport>(
      to_broker, from_broker, remote::kSegmentBytes, remote::kWait);
  transport->begin(input.rank, input.size);
  auto pg = std::make_shared<dplab::parallel::ProcessGroup>(dplab::parallel::make_dplab_engine(
      std::move(transport), dplab::parallel::Algorithm::Ring, {}, dplab::parallel::LinkCost{}));
  course::harness::place() = {.rank = input.rank, .size = input.size};  // a crash report's words
  const RankRun run = run_rank(pg, input);
  course::harness::place() = {};
  course::wire::Writer out;
  out.u8(0);
  out.i64(run.shard);
  out.i64(run.state_floats);
  out.i64(static_cast<std::int64_t>(run.calls.size()));
  for (const StepCalls& c : run.calls) {
    out.i64(c.reduce_scatter);
    out.i64(c.all_gather);
    out.i64(c.all_reduce);
  }
  out.i64(static_cast<std::int64_t>(run.params.size()));
  for (std::size_t i = 0; i < run.params.size(); ++i)
    out.tensor(dplab::from_vector(run.params[i], input.params[i].shape()));
  return out.bytes();
}

}  // namespace

int main() {
  std::string why;
  if (!course::harness::open_channel(why)) {  // the crash reports' pipe (no verdicts read there)
    std::fprintf(stderr, "rank: %s\n", why.c_str());
    return 3;
  }
  course::harness::install_crash_handlers();
  ::signal(SIGPIPE, SIG_IGN);
  const int in = course::wire::fd_from_env("DPLAB_COURSE_WORKER_IN_FD");
  const int out = course::wire::fd_from_env("DPLAB_COURSE_WORKER_OUT_FD");
  const int to_broker = course::wire::fd_from_env("DPLAB_COURSE_TO_BROKER_FD");
  const int from_broker = course::wire::fd_from_env("DPLAB_COURSE_FROM_BROKER_FD");
  if (in < 0 || out < 0 || to_broker < 0 || from_broker < 0) {
    std::fprintf(stderr, "rank: started without the grader's pipes\n");
    return 3;
  }
  std::string request;
  while (course::wire::read_frame(in, request) == course::wire::Read::kFrame) {
    std::string reply;
    try {
      reply = answer(request, to_broker, from_broker);
    } catch (const std::exception& e) {
      reply = course::wire::error_reply(e.what());
    } catch (...) {
      reply = course::wire::error_reply("an exception that is not a std::exception");
    }
    course::harness::place() = {};
    std::fflush(stdout);  // what the student printed comes before the reply is judged
    if (!course::wire::write_frame(out, reply)) break;
  }
  return 0;
}
