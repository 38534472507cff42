// one_process_reference.h: what a data-parallel assignment is compared with. A small MLP
// (the same initial weights on every rank), the global batch of each step, and one process
// trained with SGD and momentum on the whole batch: ranks that split each batch and combine
// their gradients correctly must end with exactly its parameters. Ranks are threads, each
// with a process group over the library's thread transport.
// Used by hw4_ddp and hw5_zero.
#pragma once
#include <doctest/doctest.h>
#include <fmt/format.h>

#include <cmath>
#include <cstdint>
#include <functional>
#include <mutex>
#include <string>
#include <vector>

#include "rank_threads.h"
#include "framework/autograd/grad_mode.h"
#include "framework/ops/ops.h"
#include "framework/optim/sgd.h"
#include "framework/tensor/random.h"
#include "models/mlp.h"
#include "parallel/comm/process_group.h"
#include "parallel/rendezvous/hash_store.h"

namespace course {

using namespace dplab;
using dplab::parallel::ProcessGroup;

// Runs body(pg) on n threads; a rank's exception fails the test, naming the rank.
inline void run_ranks(int n, const std::function<void(std::shared_ptr<ProcessGroup>)>& body) {
  const dplab::parallel::Seconds timeout(20.0);
  auto store = std::make_shared<dplab::parallel::HashStore>(timeout);
  course::run_rank_threads(n, [&](int r) {
    body(dplab::parallel::create_process_group(store, r, n, {.engine = "ring", .timeout = timeout}));
  });
}

constexpr int64_t kIn = 6, kHidden = 8, kClasses = 3;  // parameters: 48 + 8 + 24 + 3 floats

// What the weights and batches are drawn from: 0 (fixed) in a student's own build; a judge
// outside the student's process (hw4's remote.cpp) draws it when the grade runs, before the
// tests, and sends the ranks what they need, so that no answer is known ahead.
inline std::uint64_t& draw_seed() {
  static std::uint64_t seed = 0;
  return seed;
}

// The same initial weights everywhere, and the global batch of a step.
// (Ranks are threads sharing the default generator: seed and draw under one lock.)
inline std::shared_ptr<models::MLP> make_model() {
  static std::mutex mu;
  std::lock_guard<std::mutex> lock(mu);
  manual_seed(42 + draw_seed());
  return std::make_shared<models::MLP>(kIn, std::vector<int64_t>{kHidden}, kClasses);
}
inline Tensor global_x(int step, int64_t rows) {
  Generator g(100 + step + 1000 * draw_seed());
  return randn({rows, kIn}, {}, &g);
}
inline Tensor global_y(int step, int64_t rows) {
  Generator g(200 + step + 1000 * draw_seed());
  return randint(0, kClasses, {rows}, {.dtype = DType::Int64}, &g);
}

inline std::vector<std::vector<float>> params_of(nn::Module& m) {
  std::vector<std::vector<float>> out;
  for (const Tensor& p : m.parameters()) out.push_back(p.to_vector<float>());
  return out;
}

// One process, `steps` SGD steps on the whole batch of each step (`micro` micro-batches per
// step, the loss of each a mean over its rows, gradients summed over the micro-batches).
// grad_scale != 1 trains with every step's gradient scaled: what a classic mistake does
// (summed over N ranks instead of averaged: N; divided by the micro-batches: 1/micro), so a
// test can recognise it.
inline std::vector<std::vector<float>> single_process(int steps, int64_t rows, int micro = 1,
                                                      float grad_scale = 1.0f) {
  auto model = make_model();
  optim::SGD opt(model->parameters(), {.lr = 0.1, .momentum = 0.9});
  for (int s = 0; s < steps; ++s) {
    opt.zero_grad();
    for (int m = 0; m < micro; ++m) {
      const int step_id = s * micro + m;
      cross_entropy(model->forward(global_x(step_id, rows)), global_y(step_id, rows)).backward();
    }
    if (grad_scale != 1.0f) {
      NoGradGuard no_grad;
      for (Tensor p : model->parameters()) p.grad().mul_(grad_scale);
    }
    opt.step();
  }
  return params_of(*model);
}

inline std::string param_name(size_t p) {
  const char* names[] = {"the first layer's weight", "the first layer's bias", "the last layer's weight",
                         "the last layer's bias"};
  return p < 4 ? fmt::format("parameter {} ({})", p, names[p]) : fmt::format("parameter {}", p);
}

// "" if a rank's parameters equal one process's; else which parameter differs and by how much.
inline std::string compare_params(int rank, int n, const std::vector<std::vector<float>>& got,
                                  const std::vector<std::vector<float>>& want, const std::string& hint) {
  for (size_t p = 0; p < want.size(); ++p)
    for (size_t i = 0; i < want[p].size(); ++i)
      if (std::abs(got[p][i] - want[p][i]) > 1e-5f + 1e-4f * std::abs(want[p][i]))
        return fmt::format("rank {} of {}: {} element {} is {:.6f} after training, but one process on the whole "
                           "batch gets {:.6f}{}", rank, n, param_name(p), i, got[p][i], want[p][i],
                           hint.empty() ? "" : ": " + hint);
  return "";
}

}  // namespace course
