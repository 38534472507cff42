// remote.cpp: hw5's ranks for the judge, the test program that holds the verdict channel and
// never loads the student's code. The grader starts every rank as a process of its own, each
// as its own user (worker.cpp), and gives the judge each rank's two control pipes and two
// broker pipes (DPLAB_COURSE_RANK_FDS). The tests' rank threads stay as they are; each, where
// a student's build runs rank_run.h's steps itself, sends its rank's inputs to its process
// (remote.h) and waits for what the rank ended with (outside()). The broker runs here, on a
// thread of its own, and counts every byte a rank sends, so the traffic test reads counts no
// rank can change. The ranks of one call meet before it (the counts as it begins) and after
// it (the counts once nothing is on its way).
// Read next: remote.h, worker.cpp (a rank), ../common/broker.h.
#include <fmt/format.h>
#include <unistd.h>

#include <mutex>
#include <regex>
#include <stdexcept>
#include <string>
#include <thread>
#include <vector>

#include "broker.h"
#include "judge_side.h"
#include "rank_run.h"
#include "remote.h"
#include "wire.h"

namespace hw5 {
namespace {

using course::broker::Broker;
using course::judge::Meeting;
using Rank = course::judge::Process;  // a rank's control pipes

std::string process_of(int r) {
  return "the process running your code as rank " + std::to_string(r);
}

class Judge : public Outside {
 public:
  Judge(std::vector<Rank> ranks, const std::vector<course::broker::Link>& links)
      : ranks_(std::move(ranks)),
        // frames of one segment, and a few segments waiting per rank (as the library's links)
        broker_(new Broker(
            links, {.max_frame = static_cast<std::uint32_t>(remote::kSegmentBytes + 1),
                    .max_queued =
                        std::int64_t{8} * static_cast<std::int64_t>(remote::kSegmentBytes + 5)})) {
    std::thread([b = broker_] { b->run(); }).detach();  // never deleted: it may outlive main()
  }
  RankRun run(const RankInput& in) override;

 private:
  std::string call(int r, const RankInput& in, RankRun& out);
  std::string read_reply(int r, const std::string& reply, const RankInput& in, RankRun& out);
  std::string lose(int r, const std::string& why) { return ranks_[r].lose(why); }
  std::string finished_first(int r, const std::string& why);
  std::vector<Rank> ranks_;
  Broker* broker_;
  Meeting before_, after_;
  std::mutex mu_;
  std::vector<bool> finished_;          // ranks of the call that have returned
  course::broker::Report start_, end_;  // the counts as the call began, and after it
};

RankRun Judge::run(const RankInput& in) {
  const int r = in.rank, n = in.size;
  if (n > static_cast<int>(ranks_.size()) || r < 0 || r >= n)
    throw std::logic_error("the test asked for rank " + std::to_string(r) + " of " +
                           std::to_string(n) + ", and the grader started " +
                           std::to_string(ranks_.size()) + " (assignment.json's ranks)");
  before_.meet(n, [&] {
    start_ = broker_->report();
    finished_.assign(n, false);
  });
  RankRun out;
  const std::string failure = call(r, in, out);
  if (!failure.empty()) broker_->tell_failed(r, n);  // the ranks that wait on it stop waiting
  after_.meet(n, [&] { end_ = broker_->settled_report(); });  // what was sent, counted
  for (int k = 0; k < n; ++k) out.bytes_sent += end_.bytes[r][k] - start_.bytes[r][k];
  if (!failure.empty()) throw std::runtime_error(failure);
  return out;
}

// Rank r's inputs to its process, and its reply: "" when its steps returned, else what the
// test is told.
std::string Judge::call(int r, const RankInput& in, RankRun& out) {
  Rank& rank = ranks_[r];
  if (rank.lost) return "your Zero1SGD was not run: " + rank.why;
  course::wire::Writer request;
  request.i64(in.rank);
  request.i64(in.size);
  request.f32(in.lr);
  request.f32(in.momentum);
  request.i64(static_cast<std::int64_t>(in.params.size()));
  request.i64(static_cast<std::int64_t>(in.grads.size()));
  for (const Tensor& p : in.params) request.tensor(p);
  for (const auto& step : in.grads)
    for (const Tensor& g : step) request.tensor(g);
  if (!course::wire::write_frame(rank.to, request.bytes()))
    return lose(r, process_of(r) + " had ended before the call (a crash, or an exit, above?)");
  std::string reply;
  switch (course::wire::read_frame(rank.from, reply)) {
    case course::wire::Read::kFrame: break;
    case course::wire::Read::kTooLong:
      return lose(r, process_of(r) + " answered with more bytes than the grader reads");
    default:
      return lose(r, process_of(r) + " ended before its steps returned (a crash, or an exit?)");
  }
  std::string why = read_reply(r, reply, in, out);
  std::lock_guard<std::mutex> lock(mu_);
  if (why.empty()) finished_[r] = true;
  return why.empty() ? why : finished_first(r, why);
}

// A rank that waited in vain for a rank that had already returned from its steps: the one
// that returned made fewer collective calls (or called them in another order).
std::string Judge::finished_first(int r, const std::string& why) {
  static const std::regex waited(R"(timed out after \S+ s waiting for a segment from rank (\d+))");
  std::smatch m;
  if (!std::regex_search(why, m, waited)) return why;
  const int k = std::stoi(m[1].str());
  if (k < 0 || k >= static_cast<int>(finished_.size()) || !finished_[k]) return why;
  return fmt::format(
      "rank {} had already finished while rank {} still waited on it: do all ranks make the same "
      "collective calls, in the same order? (rank {} made fewer)",
      k, r, k);
}

std::string Judge::read_reply(int r, const std::string& reply, const RankInput& in, RankRun& out) {
  try {
    course::wire::Reader rd(reply);
    if (rd.u8() != 0) {
      std::string why = rd.str();
      rd.end();
      return why.empty() ? "an exception without a message" : why;
    }
    out.shard = rd.i64();
    out.state_floats = rd.i64();
    const std::int64_t steps = rd.i64();
    if (steps != static_cast<std::int64_t>(in.grads.size()))
      throw course::wire::Error(std::to_string(steps) + " steps, where " +
                                std::to_string(in.grads.size()) + " were asked for");
    for (std::int64_t s = 0; s < steps; ++s) {
      StepCalls c;
      c.reduce_scatter = rd.i64();
      c.all_gather = rd.i64();
      c.all_reduce = rd.i64();
      out.calls.push_back(c);
    }
    const std::int64_t params = rd.i64();
    if (params != static_cast<std::int64_t>(in.params.size()))
      throw course::wire::Error(std::to_string(params) + " parameters, where " +
                                std::to_string(in.params.size()) + " were given");
    for (std::int64_t i = 0; i < params; ++i) {
      const Tensor t = rd.tensor();
      if (!t.defined() || t.dtype() != dplab::DType::Float32 || t.shape() != in.params[i].shape())
        throw course::wire::Error("parameter " + std::to_string(i) +
                                  " of another shape than it was given");
      out.params.push_back(t.to_vector<float>());
    }
    rd.end();
  } catch (const course::wire::Error& e) {
    return lose(r, process_of(r) + " answered what the grader does not read: " + e.what());
  }
  return "";
}

// Before main(), while the judge has one thread: the tests ask for their ranks through it.
const bool registered = [] {
  course::judge::Ranks ranks = course::judge::ranks_from_env();
  if (!ranks.control.empty())  // never deleted: its broker's thread may outlive main()
    outside() = new Judge(std::move(ranks.control), ranks.links);
  return true;
}();

}  // namespace

// The tests never build a Zero1SGD here: rank_run.h's steps run in the ranks' processes
// (outside()). These stand in for the student's, which this program does not link.
Zero1SGD::Zero1SGD(std::vector<Tensor>, std::shared_ptr<ProcessGroup>, float, float) {
  throw std::runtime_error("Zero1SGD: no rank processes to run it (this test program is the "
                           "grader's judge; `meson test` in "
                           "your folder runs your Zero1SGD in the tests' own threads)");
}
void Zero1SGD::step() { throw std::logic_error("Zero1SGD::step(): not in the judge"); }

}  // namespace hw5
