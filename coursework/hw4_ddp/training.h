// training.h: one rank's DDP training with the student's reducer, shared by the visible and
// hidden tests. Each rank takes its rows of the global batch; every `micro`-th backward is
// synchronised, the others run inside no_sync (set_require_sync(false)).
#pragma once
#include "grading.h"

namespace hw4::grading {

struct RankRun {
  std::vector<std::vector<float>> params;
  std::vector<int64_t> all_reduces_per_step;  // counted by the process group
  int64_t launched = 0;                       // as the reducer says
  int64_t launched_before_last_gradient = -1;  // in the last step, when param 0's gradient arrived
};

inline RankRun ddp_train(std::shared_ptr<ProcessGroup> pg, int steps, int64_t rows, int64_t cap_bytes,
                         int micro = 1) {
  const int n = pg->size(), r = pg->rank();
  const int64_t per = rows / n;
  auto model = make_model();
  std::vector<Tensor> params = model->parameters();
  RankRun run;
  Reducer* reducer = nullptr;
  // registered before the reducer's hooks, so it runs first: param 0's gradient is the last
  // of a backward (buckets go in reverse order), so whatever was launched by now overlapped
  int64_t launched_at_step_start = 0;
  params[0].register_post_accumulate_grad_hook([&](Tensor&) {
    if (reducer) run.launched_before_last_gradient = reducer->all_reduces_launched() - launched_at_step_start;
  });
  std::unique_ptr<Reducer> owned = make_reducer(params, pg, cap_bytes);
  reducer = owned.get();
  optim::SGD opt(params, {.lr = 0.1, .momentum = 0.9});
  for (int s = 0; s < steps; ++s) {
    const int64_t before = pg->comm_stats().per_collective["all_reduce"].calls;
    launched_at_step_start = reducer->all_reduces_launched();
    opt.zero_grad();
    for (int m = 0; m < micro; ++m) {
      const int step_id = s * micro + m;
      reducer->set_require_sync(m == micro - 1);
      const Tensor x = global_x(step_id, rows).narrow(r * per, per);
      const Tensor y = global_y(step_id, rows).narrow(r * per, per);
      cross_entropy(model->forward(x), y).backward();
    }
    opt.step();
    run.all_reduces_per_step.push_back(pg->comm_stats().per_collective["all_reduce"].calls - before);
  }
  run.launched = reducer->all_reduces_launched();
  run.params = params_of(*model);
  return run;
}

// Checks every rank's parameters against one process; returns false after the first mismatch.
inline bool check_equal_to_one_process(int n, int steps, int64_t rows, int64_t cap_bytes, int micro = 1) {
  std::vector<RankRun> runs(n);
  run_ranks(n, [&](std::shared_ptr<ProcessGroup> pg) { runs[pg->rank()] = ddp_train(pg, steps, rows, cap_bytes, micro); });
  const auto want = single_process(steps, rows, micro);
  for (int r = 0; r < n; ++r) {
    const std::string why = compare_params(r, n, runs[r].params, want);
    CHECK_MESSAGE(why.empty(), fmt::format("{} ranks, {} steps, {}-byte buckets{}: {}", n, steps, cap_bytes,
                                           micro > 1 ? fmt::format(", {} micro-batches per step", micro) : "",
                                           why));
    if (!why.empty()) return false;
  }
  return true;
}

}  // namespace hw4::grading
