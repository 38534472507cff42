// rank_run.h: what one rank does in a hw5 test: your Zero1SGD over the parameters it is
// given, one step() per step after that step's gradient of this rank is put in each .grad;
// what it ends with, and what each step called. In your own build (`meson test`) the tests'
// rank threads run it over process groups of the library's thread transport (grading.h); in
// the grader each rank is a process of its own (worker.cpp) that runs it over the broker, and
// the tests only send the inputs and read the results (outside(), remote.cpp).
// Read next: grading.h, worker.cpp.
#pragma once
#include <cstdint>
#include <memory>
#include <vector>

#include "framework/ops/ops.h"
#include "harness.h"
#include "zero.h"

namespace hw5 {

struct RankInput {
  int rank = 0, size = 1;
  float lr = 0, momentum = 0;
  std::vector<Tensor> params;              // the initial values, the same on every rank
  std::vector<std::vector<Tensor>> grads;  // [step][param]: this rank's gradient at each step
};

struct StepCalls {
  int64_t reduce_scatter = 0, all_gather = 0, all_reduce = 0;
};

struct RankRun {
  std::vector<std::vector<float>> params;  // after the last step
  int64_t shard = 0, state_floats = 0;
  std::vector<StepCalls> calls;  // per step
  int64_t bytes_sent = 0;        // over every step (in the grader: the broker's count)
};

inline RankRun run_rank(const std::shared_ptr<ProcessGroup>& pg, const RankInput& in) {
  std::vector<Tensor> params;
  for (const Tensor& p : in.params) params.push_back(dplab::clone(p));
  Zero1SGD opt(params, pg, in.lr, in.momentum);
  RankRun run;
  for (std::size_t s = 0; s < in.grads.size(); ++s) {
    course::harness::place().step = static_cast<int>(s) + 1;  // a crash report names the step
    course::harness::place().step_word = "training step";
    for (std::size_t i = 0; i < params.size(); ++i) params[i].set_grad(in.grads[s][i]);
    pg->reset_comm_stats();
    opt.step();
    dplab::parallel::CommStats stats = pg->comm_stats();
    run.calls.push_back({stats.per_collective["reduce_scatter"].calls,
                         stats.per_collective["all_gather"].calls,
                         stats.per_collective["all_reduce"].calls});
    run.bytes_sent += stats.total.bytes_sent;
  }
  for (const Tensor& p : params) run.params.push_back(p.to_vector<float>());
  run.shard = opt.shard_size();
  run.state_floats = opt.state_floats();
  return run;
}

// The judge's side in the grader, where every rank is a process of its own: runs rank
// in.rank's part there and returns what it ended with (remote.cpp sets it before the tests
// run; null in your own build, where the ranks are the tests' threads).
struct Outside {
  virtual ~Outside() = default;
  virtual RankRun run(const RankInput& in) = 0;
};
inline Outside*& outside() {
  static Outside* judge = nullptr;
  return judge;
}

}  // namespace hw5
