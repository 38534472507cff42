// worker.cpp: the main() of hw2's worker, the process that runs the student's code (with the
// given code) and nothing of the grader's: no tests, no verdict channel, no token. It answers
// the judge's calls (remote.cpp) on the two pipes the grader gave it, one at a time, until the
// judge closes its end. A training run's replicas and optimizer live here, on logical devices
// cpu:0 .. cpu:N-1 of this process, from its first step to its last (remote.h). A crash is
// reported on a pipe of its own (common/crash.cpp), which the grader reads as words for the
// student, never as a verdict.
// Read next: remote.h, remote.cpp, ../common/wire.h.
#include <algorithm>
#include <bit>
#include <cstdio>
#include <exception>
#include <memory>
#include <string>
#include <vector>

#include "framework/autograd/grad_mode.h"
#include "framework/ops/ops.h"
#include "framework/optim/sgd.h"
#include "harness.h"
#include "models/mlp.h"
#include "ps.h"
#include "remote.h"
#include "wire.h"
#include "worker_side.h"

namespace {

using namespace dplab;
namespace remote = hw2::remote;

// The training run the judge is stepping: replicas[i] on devices[i], the optimizer over the
// master's (replicas[0]) parameters.
struct Run {
  std::vector<std::shared_ptr<nn::Module>> replicas;
  std::vector<Device> devices;
  std::unique_ptr<optim::SGD> opt;
};

std::int64_t bounded(course::wire::Reader& in, std::int64_t low, std::int64_t high, const char* what) {
  const std::int64_t v = in.i64();
  if (v < low || v > high) throw course::wire::Error(std::string("a request with ") + what + " " + std::to_string(v));
  return v;
}

// A fresh run: the MLP's shape, every replica's weights on its device, the optimizer.
void start_run(course::wire::Reader& in, Run& run) {
  const std::int64_t in_features = bounded(in, 1, 1 << 20, "in_features");
  std::vector<std::int64_t> hidden(bounded(in, 0, remote::kMaxLayers, "hidden layers"));
  for (std::int64_t& h : hidden) h = bounded(in, 1, 1 << 20, "a hidden width");
  const std::int64_t classes = bounded(in, 1, 1 << 20, "classes");
  const double lr = std::bit_cast<double>(in.i64()), momentum = std::bit_cast<double>(in.i64());
  run.replicas.clear();
  for (const Device& d : run.devices) {
    auto model = std::make_shared<models::MLP>(in_features, hidden, classes);
    model->to(d);
    std::vector<Tensor> params = model->parameters();
    if (bounded(in, 0, remote::kMaxParameters, "parameters") != static_cast<std::int64_t>(params.size()))
      throw course::wire::Error("a replica whose parameters are not the MLP's");
    NoGradGuard no_grad;
    for (Tensor& p : params) {
      const Tensor w = in.tensor();
      if (!w.defined() || w.shape() != p.shape() || w.dtype() != p.dtype())
        throw course::wire::Error("a parameter that is not shaped as the MLP's");
      p.copy_(w.contiguous_copy_on(d));
    }
    run.replicas.push_back(model);
  }
  run.opt = std::make_unique<optim::SGD>(run.replicas[0]->parameters(),
                                         optim::SGDOptions{.lr = lr, .momentum = momentum});
}

// One call: the request's function with its arguments, and the reply.
std::string answer(const std::string& request, Run& run) {
  course::wire::Reader in(request);
  course::wire::Writer out;
  const std::uint8_t fn = in.u8();
  if (fn == remote::kChunkSizes) {
    const std::int64_t batch = in.i64(), n = in.i64();
    in.end();
    const std::vector<std::int64_t> sizes = hw2::chunk_sizes(batch, static_cast<int>(n));
    out.u8(0);
    out.i64(static_cast<std::int64_t>(sizes.size()));
    for (std::int64_t s : sizes) out.i64(s);
    return out.bytes();
  }
  if (fn != remote::kPsStep) throw course::wire::Error("unknown function " + std::to_string(fn));
  const bool fresh = in.u8() != 0;
  const std::int64_t step = in.i64();
  std::vector<Device> devices(bounded(in, 1, remote::kMaxDevices, "devices"));
  for (Device& d : devices) d = Device(DeviceKind::CPU, static_cast<int>(bounded(in, 0, 63, "a device index")));
  if (fresh) {
    run.devices = devices;
    start_run(in, run);
  } else if (!run.opt || devices != run.devices) {
    throw course::wire::Error("a step of a training run that was never started");
  }
  const Tensor x = in.tensor(), y = in.tensor();
  in.end();
  course::harness::place().step = static_cast<int>(step);  // a crash report names the step
  course::harness::place().step_word = "training step";
  hw2::Traffic traffic;
  const float loss = hw2::ps_step(run.replicas, run.devices, x.contiguous_copy_on(devices[0]),
                                  y.contiguous_copy_on(devices[0]), *run.opt, traffic);
  const std::vector<Tensor> params = run.replicas[0]->parameters();
  out.u8(0);
  out.i64(static_cast<std::int64_t>(params.size()));
  for (const Tensor& p : params) out.tensor(p);
  out.f32(loss);
  std::vector<int> seen;  // every device either map names, once
  for (const auto* counts : {&traffic.sent, &traffic.received})
    for (const auto& [d, bytes] : *counts)
      if (std::find(seen.begin(), seen.end(), d) == seen.end()) seen.push_back(d);
  out.i64(static_cast<std::int64_t>(seen.size()));
  for (int d : seen) {
    out.i64(d);
    out.i64(traffic.sent.count(d) ? traffic.sent.at(d) : 0);
    out.i64(traffic.received.count(d) ? traffic.received.at(d) : 0);
  }
  return out.bytes();
}

}  // namespace

int main() {
  const auto pipes = course::worker::start(course::worker::Role::kWorker);
  if (!pipes) return 3;
  Run run;
  course::worker::serve(*pipes, [&](const std::string& request) { return answer(request, run); });
  return 0;
}
