// worker.cpp: the main() of one hw4 rank when the grader runs the ranks as processes of their
// own, each as its own user: the student's reducer and the rank's training (rank_trainer.h)
// and nothing of the grader's: no tests, no verdict channel, no token, no expected value. It
// answers the judge's calls (remote.h) on its two control pipes; its process group's
// all-reduces (the library's ring) go through the broker (common/broker_transport.h), the
// rank's only link to the others, which counts every byte. A crash is reported on a pipe of
// its own (common/crash.cpp), words for the student, never a verdict.
// Read next: remote.h, remote.cpp (the judge).
#include <cstdio>
#include <exception>
#include <memory>
#include <stdexcept>
#include <string>
#include <vector>

#include "broker_transport.h"
#include "harness.h"
#include "rank_trainer.h"
#include "remote.h"
#include "wire.h"
#include "worker_side.h"
#include "framework/autograd/grad_mode.h"
#include "parallel/algorithms/cost.h"
#include "parallel/engines/collective_engine.h"

namespace {

using namespace hw4;
using namespace hw4::remote;
using course::wire::Reader;
using course::wire::Writer;

struct Rank {
  int in, out, to_broker, from_broker;
  std::unique_ptr<grading::RankTrainer> trainer;
};

// The model the judge sent: an MLP of the weights' shapes, with their values.
std::shared_ptr<dplab::models::MLP> model_of(const std::vector<Tensor>& w) {
  auto shape_words = [&] {
    std::string s;
    for (const Tensor& t : w) s += (s.empty() ? "" : ", ") + dplab::shape_str(t.shape());
    return s;
  };
  if (w.size() != 4 || w[0].dim() != 2 || w[2].dim() != 2)
    throw std::invalid_argument("the judge sent weights that are no MLP: " + shape_words());
  auto model = std::make_shared<dplab::models::MLP>(w[0].size(1), std::vector<int64_t>{w[0].size(0)}, w[2].size(0));
  std::vector<Tensor> params = model->parameters();
  dplab::NoGradGuard no_grad;
  for (size_t i = 0; i < params.size(); ++i) {
    if (params[i].shape() != w[i].shape())
      throw std::invalid_argument("the judge sent weights that are no MLP: " + shape_words());
    params[i].copy_(w[i]);
  }
  return model;
}

// One call and its reply (remote.h).
std::string answer(Rank& rank, const std::string& request) {
  Reader in(request);
  Writer out;
  const std::uint8_t call = in.u8();
  if (call == kBuckets) {
    const std::int64_t cap = in.i64(), count = count_in(in, kMaxLists, "parameters");
    std::vector<Tensor> params;
    for (std::int64_t i = 0; i < count; ++i) params.push_back(dplab::zeros({count_in(in, kMaxFloats, "floats")}));
    in.end();
    const std::vector<std::vector<size_t>> buckets = assign_buckets(params, cap);
    out.u8(0);
    put_buckets(out, buckets);
  } else if (call == kBegin) {
    const int r = static_cast<int>(in.i64()), n = static_cast<int>(in.i64());
    const std::int64_t cap = in.i64();
    const bool overlap = in.u8() != 0;
    std::vector<Tensor> weights;
    for (int i = 0; i < 4; ++i) weights.push_back(in.tensor());
    in.end();
    rank.trainer.reset();
    course::harness::place() = {.rank = r, .size = n};  // for a crash report's words
    auto tr = std::make_unique<course::broker::BrokerTransport>(rank.to_broker, rank.from_broker, kSegmentBytes,
                                                                kWait);
    tr->begin(r, n);
    tr->set_context("the all-reduce of a bucket");
    auto pg = std::make_shared<ProcessGroup>(dplab::parallel::make_dplab_engine(
        std::move(tr), dplab::parallel::Algorithm::Ring, nullptr, dplab::parallel::LinkCost{}));
    const int to_judge = rank.out;
    rank.trainer = std::make_unique<grading::RankTrainer>(
        pg, model_of(weights), cap, overlap, [to_judge](const std::string& words) {
          Writer say;
          say.u8(kSay);
          say.str(words);
          course::wire::write_frame(to_judge, say.bytes());
        });
    if (overlap)  // the judge looks at the broker's counts before the reducer sees the last gradient
      rank.trainer->at_last_gradient = [to_judge, from_judge = rank.in](grading::Recorder& rec) {
        auto answered = [&](char word) {
          std::string frame;
          return course::wire::read_frame(from_judge, frame, 1) == course::wire::Read::kFrame &&
                 frame == std::string(1, word);
        };
        if (!course::wire::write_frame(to_judge, std::string(1, static_cast<char>(kLastGradient))) ||
            !answered(kAck))
          throw std::runtime_error("the judge did not answer at the last gradient");
        rec.gradient_done();
        if (!answered(kGo)) throw std::runtime_error("the judge did not say go on after the last gradient");
      };
    out.u8(0);
    put_buckets(out, rank.trainer->result().buckets);
  } else if (call == kStep) {
    if (!rank.trainer) throw std::logic_error("a training step before the judge's begin");
    const int micro = in.u8();
    std::vector<Tensor> xs, ys;
    for (int m = 0; m < micro; ++m) {
      xs.push_back(in.tensor());
      ys.push_back(in.tensor());
    }
    in.end();
    rank.trainer->step(xs, ys);
    out.u8(0);
    put_run(out, rank.trainer->result());
  } else if (call == kEnd) {
    in.end();
    rank.trainer.reset();
    course::harness::place() = {};
    out.u8(0);
  } else {
    throw course::wire::Error("unknown call " + std::to_string(call));
  }
  return out.bytes();
}

}  // namespace

int main() {
  const auto pipes = course::worker::start(course::worker::Role::kRank);
  if (!pipes) return 3;
  Rank rank{pipes->in, pipes->out, pipes->to_broker, pipes->from_broker, nullptr};
  course::worker::serve(*pipes, [&](const std::string& request) { return answer(rank, request); });
  return 0;
}
