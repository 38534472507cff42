// worker.cpp: the main() of one hw5 rank when the grader runs the ranks as processes of their
// own, each as its own user: the student's Zero1SGD (and the given flatten helpers) and
// nothing of the grader's. It answers the judge's calls (remote.h) on its two control pipes:
// each call builds a process group of the library's ring engine over the broker
// (common/broker_transport.h), the rank's only link to the others, and runs rank_run.h's
// steps on it; until the judge closes its end. A crash is reported on a pipe of its own
// (common/crash.cpp), words for the student, never a verdict.
// Read next: remote.h, rank_run.h, remote.cpp (the judge).
#include <cstdio>
#include <exception>
#include <memory>
#include <string>

#include "broker_transport.h"
#include "harness.h"
#include "parallel/algorithms/cost.h"
#include "parallel/engines/collective_engine.h"
#include "rank_run.h"
#include "remote.h"
#include "wire.h"
#include "worker_side.h"

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
  const auto pipes = course::worker::start(course::worker::Role::kRank);
  if (!pipes) return 3;
  course::worker::serve(*pipes, [&](const std::string& request) {
    struct Leave {  // the rank's place, also when its steps threw (a crash report's words)
      ~Leave() { course::harness::place() = {}; }
    } leave;
    return answer(request, pipes->to_broker, pipes->from_broker);
  });
  return 0;
}
