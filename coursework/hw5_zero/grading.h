// grading.h: how hw5 is checked. Ranks are threads with process groups over the library's
// thread transport; each trains the reference MLP on its rows of every global batch with the
// student's Zero1SGD, and must end with the parameters of one process running plain SGD with
// momentum on the whole batch. The group's counters give the bytes and calls of each
// collective, compared with the textbook: reduce-scatter + all-gather = one all-reduce.
#pragma once
#include <string>
#include <vector>

#include "zero.h"
#include "one_process_reference.h"

namespace hw5::grading {

using namespace dplab;
using namespace course;

constexpr float kLr = 0.1f, kMomentum = 0.9f;  // one_process_reference.h's SGD

struct RankRun {
  std::vector<std::vector<float>> params;
  int64_t shard = 0, state_floats = 0;
  std::vector<dplab::parallel::CommStats> stats_per_step;
};

inline RankRun zero_train(std::shared_ptr<ProcessGroup> pg, int steps, int64_t rows) {
  const int n = pg->size(), r = pg->rank();
  const int64_t per = rows / n;
  auto model = make_model();
  Zero1SGD opt(model->parameters(), pg, kLr, kMomentum);
  RankRun run;
  for (int s = 0; s < steps; ++s) {
    course::harness::place().step = s + 1;  // a crash report names the step
    course::harness::place().step_word = "training step";
    model->zero_grad();
    cross_entropy(model->forward(global_x(s, rows).narrow(r * per, per)),
                  global_y(s, rows).narrow(r * per, per)).backward();
    pg->reset_comm_stats();
    opt.step();
    run.stats_per_step.push_back(pg->comm_stats());
  }
  run.params = params_of(*model);
  run.shard = opt.shard_size();
  run.state_floats = opt.state_floats();
  return run;
}

inline std::vector<RankRun> run_all(int n, int steps, int64_t rows) {
  std::vector<RankRun> runs(n);
  run_ranks(n, [&](std::shared_ptr<ProcessGroup> pg) { runs[pg->rank()] = zero_train(pg, steps, rows); });
  return runs;
}

// Checks every rank against one process; false after the first mismatch.
inline bool check_equal_to_one_process(int n, int steps, int64_t rows) {
  const std::vector<RankRun> runs = run_all(n, steps, rows);
  const auto want = single_process(steps, rows);
  for (int r = 0; r < n; ++r) {
    std::string why = compare_params(r, n, runs[r].params, want, "");
    if (why.empty()) continue;
    if (n > 1 && compare_params(r, n, runs[r].params, single_process(steps, rows, 1, static_cast<float>(n)), "").empty())
      why += fmt::format(". The gradients were summed over the {} ranks, not averaged (reduce-scatter with "
                         "ReduceOp::Avg)", n);
    else
      why += ": is the gradient averaged (reduce-scatter with Avg), the momentum applied to my shard, and every "
             "shard gathered back?";
    CHECK_MESSAGE(why.empty(), fmt::format("{} ranks, {} steps: {}", n, steps, why));
    return false;
  }
  CHECK(true);  // every rank trained like one process
  return true;
}

inline int64_t total_params() {
  int64_t total = 0;
  for (const Tensor& p : make_model()->parameters()) total += p.numel();
  return total;  // 83 for the reference MLP: no N in 2..4 divides it
}

}  // namespace hw5::grading
