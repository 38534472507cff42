// remote.cpp: ps.h's chunk_sizes() and ps_step() for the judge, the test program that holds
// the verdict channel and never loads the student's code: each call is sent to the worker the
// grader started beside it (as another user), and what comes back is only data to check
// (common/wire.h; the call itself is common/judge_side.h's). A training run's first ps_step
// sends the model and the optimizer's settings; the worker keeps them for the run's next
// steps (remote.h). After each step the master's parameters here are set to those the worker
// returned, and its Traffic is added to the caller's: the tests read both as they would read
// the student's own. A worker that crashed, hung, or broke the protocol fails the test that
// called it; the grader adds what the worker's crash report says. Read next: worker.cpp.
#include <bit>
#include <memory>
#include <mutex>
#include <stdexcept>
#include <string>
#include <vector>

#include "framework/autograd/grad_mode.h"
#include "framework/optim/sgd.h"
#include "judge_side.h"
#include "models/mlp.h"
#include "ps.h"
#include "remote.h"
#include "wire.h"

namespace hw2 {
namespace {

using namespace dplab;

// The worker, and the training run it holds.
struct Worker {
  course::judge::Process process = course::judge::worker_from_env();
  std::shared_ptr<nn::Module> master;  // the run the worker holds (kept: its address stays its own)
  const optim::Optimizer* opt = nullptr;
  int steps = 0;
};

Worker& worker() {
  static Worker w;
  return w;
}

std::int64_t count_of(course::wire::Reader& in, std::int64_t most, const char* what) {
  const std::int64_t n = in.i64();
  if (n < 0 || n > most) throw course::wire::Error(std::string("a reply of ") + std::to_string(n) + " " + what);
  return n;
}

}  // namespace

std::vector<int64_t> chunk_sizes(int64_t batch, int n) {
  course::wire::Writer r;
  r.u8(remote::kChunkSizes);
  r.i64(batch);
  r.i64(n);
  std::vector<int64_t> sizes;
  course::judge::call_worker(worker().process, "chunk_sizes", r, [&](course::wire::Reader& in) {
    sizes.resize(count_of(in, 4096, "chunk sizes"));
    for (int64_t& s : sizes) s = in.i64();
  });
  return sizes;
}

float ps_step(const std::vector<std::shared_ptr<nn::Module>>& replicas, const std::vector<Device>& devices,
              const Tensor& x, const Tensor& y, optim::Optimizer& opt, Traffic& traffic) {
  Worker& w = worker();
  const bool fresh = replicas.at(0) != w.master || &opt != w.opt;
  course::wire::Writer r;
  r.u8(remote::kPsStep);
  r.u8(fresh);
  r.i64(fresh ? 1 : w.steps + 1);
  r.i64(static_cast<int64_t>(devices.size()));
  for (const Device& d : devices) {
    if (d.kind != DeviceKind::CPU) throw std::logic_error("hw2's judge sends logical cpu devices only");
    r.i64(d.index);
  }
  std::vector<Tensor> master = replicas[0]->parameters();
  if (fresh) {  // the tests' own: an MLP and SGD (grading.h)
    const auto* mlp = dynamic_cast<const models::MLP*>(replicas[0].get());
    const auto* sgd = dynamic_cast<const optim::SGD*>(&opt);
    if (!mlp || !sgd) throw std::logic_error("hw2's judge sends an MLP and SGD only");
    r.i64(mlp->in_features);
    r.i64(static_cast<int64_t>(mlp->hidden.size()));
    for (int64_t h : mlp->hidden) r.i64(h);
    r.i64(mlp->num_classes);
    r.i64(std::bit_cast<int64_t>(sgd->options().lr));
    r.i64(std::bit_cast<int64_t>(sgd->options().momentum));
    for (const auto& replica : replicas) {
      const std::vector<Tensor> params = replica->parameters();
      r.i64(static_cast<int64_t>(params.size()));
      for (const Tensor& p : params) r.tensor(p);
    }
  }
  r.tensor(x);
  r.tensor(y);
  if (fresh) {  // a run the worker holds from now on, until the next begins
    w.master = replicas[0];
    w.opt = &opt;
    w.steps = 0;
  }
  float loss = 0;
  course::judge::call_worker(w.process, "ps_step", r, [&](course::wire::Reader& in) {
    if (count_of(in, remote::kMaxParameters, "parameters") != static_cast<int64_t>(master.size()))
      throw course::wire::Error("a model of other parameters than the master's");
    std::vector<Tensor> got;
    for (const Tensor& p : master) {
      got.push_back(in.tensor());
      if (!got.back().defined() || got.back().shape() != p.shape() || got.back().dtype() != p.dtype())
        throw course::wire::Error("a parameter shaped unlike the master's");
    }
    loss = in.f32();
    Traffic counted;
    for (int64_t e = count_of(in, 4096, "devices' byte counts"); e > 0; --e) {
      const int64_t d = in.i64(), sent = in.i64(), received = in.i64();
      if (d < -(1 << 30) || d > (1 << 30)) throw course::wire::Error("a device index of " + std::to_string(d));
      counted.sent[static_cast<int>(d)] += sent;
      counted.received[static_cast<int>(d)] += received;
    }
    NoGradGuard no_grad;
    for (size_t k = 0; k < master.size(); ++k) master[k].copy_(got[k].contiguous_copy_on(master[k].device()));
    for (const auto& [d, bytes] : counted.sent) traffic.sent[d] += bytes;
    for (const auto& [d, bytes] : counted.received) traffic.received[d] += bytes;
  });
  ++w.steps;
  return loss;
}

}  // namespace hw2
