// test_device_workers.cpp: DataParallel's persistent workers (parallel/dp/device_workers.h):
// the same thread works a device step after step, device 0 on the caller's thread, the
// caller's grad mode travels, a worker's exception comes back as its own, and a
// DataParallel's forward and backward run each replica on its device's thread.
// Read next: test_data_parallel.cpp.
#include <doctest/doctest.h>

#include <algorithm>
#include <mutex>
#include <set>
#include <stdexcept>
#include <thread>

#include "framework/autograd/grad_mode.h"
#include "framework/nn/layers.h"
#include "framework/ops/ops.h"
#include "parallel/dp/data_parallel.h"
#include "parallel/dp/device_workers.h"

using namespace dplab;
using namespace dplab::parallel;

// Jobs this thread has run: a fresh thread starts at 0 (thread ids alone cannot tell a
// persistent thread from a new one, since the system reuses them).
thread_local int t_jobs = 0;

TEST_CASE("device workers: one thread per device for their whole life, device 0 the caller's") {
  DeviceWorkers workers(3);
  std::vector<std::thread::id> first(3);
  std::vector<int> jobs(3);
  workers.run(3, [&](size_t i) { first[i] = std::this_thread::get_id(); });
  workers.run(3, [&](size_t i) { jobs[i] = t_jobs += 2; });
  workers.run(3, [&](size_t i) { jobs[i] = t_jobs += 1; });
  CHECK(jobs == std::vector<int>{3, 3, 3});  // the same three threads both times
  CHECK(first[0] == std::this_thread::get_id());
  CHECK(std::set<std::thread::id>(first.begin(), first.end()).size() == 3);
  for (int round = 0; round < 20; ++round) {
    std::vector<std::thread::id> now(3);
    std::vector<int> ran(3, 0);
    auto errors = workers.run(round % 3 + 1, [&](size_t i) {  // 1, 2 or 3 devices this round
      now[i] = std::this_thread::get_id();
      ran[i] += 1;
    });
    CAPTURE(round);
    CHECK(errors.size() == static_cast<size_t>(round % 3 + 1));
    for (size_t i = 0; i < 3; ++i) {
      CHECK(ran[i] == (i <= static_cast<size_t>(round % 3) ? 1 : 0));
      if (ran[i]) CHECK(now[i] == first[i]);  // no new threads
    }
  }
}

TEST_CASE("device workers: the caller's grad mode travels, errors come back per device") {
  DeviceWorkers workers(3);
  std::vector<int> enabled(3, -1);
  {
    NoGradGuard no_grad;
    workers.run(3, [&](size_t i) { enabled[i] = grad_enabled(); });
  }
  CHECK(enabled == std::vector<int>{0, 0, 0});
  workers.run(3, [&](size_t i) { enabled[i] = grad_enabled(); });
  CHECK(enabled == std::vector<int>{1, 1, 1});
  auto errors = workers.run(3, [&](size_t i) {
    if (i != 1) throw std::runtime_error("device " + std::to_string(i) + " fails");
  });
  REQUIRE(errors.size() == 3);
  CHECK(errors[1] == nullptr);
  CHECK_THROWS_WITH(std::rethrow_exception(errors[0]), "device 0 fails");
  CHECK_THROWS_WITH(std::rethrow_exception(errors[2]), "device 2 fails");
  int after = 0;
  workers.run(3, [&](size_t) { after += 0; });  // still usable after a failed round
  CHECK(after == 0);
}

namespace {

// Records which thread ran each replica's forward.
struct ThreadRecorder : nn::Module {
  std::shared_ptr<nn::Linear> fc;
  std::shared_ptr<std::set<std::thread::id>> forward_threads =
      std::make_shared<std::set<std::thread::id>>();
  std::shared_ptr<std::vector<int>> jobs = std::make_shared<std::vector<int>>();
  std::shared_ptr<std::mutex> m = std::make_shared<std::mutex>();
  ThreadRecorder() { fc = register_module("fc", std::make_shared<nn::Linear>(4, 2)); }
  Tensor forward(const Tensor& x) override {
    {
      std::lock_guard lock(*m);
      forward_threads->insert(std::this_thread::get_id());
      jobs->push_back(++t_jobs);
    }
    return fc->forward(x);
  }
  std::shared_ptr<nn::Module> make_empty_copy() const override {
    auto c = std::make_shared<ThreadRecorder>();
    c->forward_threads = forward_threads;
    c->jobs = jobs;
    c->m = m;
    return c;
  }
};
}  // namespace

TEST_CASE("DataParallel runs every step's replicas on the same per-device threads") {
  auto model = std::make_shared<ThreadRecorder>();
  DataParallel dp(model, {Device("cpu:0"), Device("cpu:1"), Device("cpu:2")});
  Tensor x = randn({6, 4});
  for (int step = 0; step < 5; ++step) {
    Tensor loss = sum(dp.forward(x));
    loss.backward();
  }
  // 5 steps x 3 replicas, but only 3 threads: the caller (device 0) and two workers
  CHECK(model->forward_threads->size() == 3);
  CHECK(model->forward_threads->count(std::this_thread::get_id()) == 1);
  // and they are the same threads each step: each has run 5 forwards
  CHECK(std::count(model->jobs->begin(), model->jobs->end(), 5) == 3);
}
