// training.h: one rank's DDP training with the student's reducer, shared by the visible and
// hidden tests. Each rank takes its rows of the global batch; every `micro`-th backward is
// synchronised, the others run inside no_sync (set_require_sync(false)). The rank's group
// records what the reducer launched (recording_engine.h), so a wrong result is explained:
// which parameter's gradient landed at which offset of which bucket, a gradient scaled by
// the number of ranks or of micro-batches, an all-reduce waited for inside a hook, or a
// backward that launched fewer buckets than the first (counts finish() did not reset).
// Read next: recording_engine.h, tests_hidden.cpp.
#pragma once
#include <atomic>
#include <memory>
#include <string>
#include <vector>

#include "grading.h"
#include "harness.h"
#include "recording_engine.h"
#include "framework/autograd/engine.h"

namespace hw4::grading {

// Once per test process: the words on counts not reset come from the first rank that sees it.
inline std::atomic<bool>& counts_named() {
  static std::atomic<bool> named{false};
  return named;
}

struct RankRun {
  std::vector<std::vector<float>> params;
  std::vector<int64_t> all_reduces_per_step;  // counted by the process group
  int64_t launched = 0;                       // as the reducer says
  int64_t launched_before_last_gradient = -1;  // in the last step, when param 0's gradient arrived
  std::vector<std::vector<size_t>> buckets;   // the student's assign_buckets
  std::vector<std::vector<float>> local_grads;  // the first synchronised backward's, before the reduction
  std::shared_ptr<Recorder> rec;
};

inline RankRun ddp_train(std::shared_ptr<ProcessGroup> pg, std::shared_ptr<Recorder> rec, int steps, int64_t rows,
                         int64_t cap_bytes, int micro) {
  const int n = pg->size(), r = pg->rank();
  const int64_t per = rows / n;
  auto model = make_model();
  std::vector<Tensor> params = model->parameters();
  RankRun run;
  run.rec = rec;
  Reducer* reducer = nullptr;
  bool synced = false;  // inside the step's synchronised backward
  int64_t launched_at_step_start = 0;
  int step = 0;
  // At the end of each synchronised backward, before the reducer's finish() (queued first, by
  // a hook that runs before the reducer's): every bucket is full by then, so all should be
  // launched. A reducer that launched them all in the first backward and not in a later one
  // kept counting from where the last backward left off; finish() then waits on buckets
  // never launched, which may crash there: this says why first.
  const int64_t buckets = static_cast<int64_t>(assign_buckets(params, cap_bytes).size());
  int64_t launched_in_first = -1;
  bool end_queued = false;
  auto at_backward_end = [&] {
    end_queued = false;
    const int64_t launched = reducer->all_reduces_launched() - launched_at_step_start;
    if (launched_in_first < 0) launched_in_first = launched;
    else if (launched < buckets && launched_in_first == buckets && !counts_named().exchange(true))
      course::harness::note(fmt::format(
          "rank {}: training step {}'s backward ended with {} of its {} bucket{} launched, where training step 1's "
          "had launched {}: the counts your gradient hooks keep (each bucket's gradients still to come, the next "
          "bucket to launch) were not reset for the next backward. finish() should leave them as the constructor did",
          r, step + 1, launched, buckets, buckets == 1 ? "" : "s", buckets == 1 ? "it" : "all of them"));
  };
  // around the reducer's hook on every parameter, one before and one after: the hold of the
  // overlap test sees a reducer's hook that never returns (recording_engine.h)
  for (Tensor& p : params)
    p.register_post_accumulate_grad_hook([&, rec](Tensor&) {
      rec->hook_entered();
      if (synced && !end_queued) {
        end_queued = true;
        queue_backward_callback(at_backward_end);
      }
    });
  // registered before the reducer's hooks, so it runs first: param 0's gradient is the last
  // of a backward (buckets go in reverse order), so whatever was launched by now overlapped
  params[0].register_post_accumulate_grad_hook([&](Tensor&) {
    if (!synced) return;
    if (reducer) run.launched_before_last_gradient = reducer->all_reduces_launched() - launched_at_step_start;
    if (run.local_grads.empty())
      for (const Tensor& p : params) run.local_grads.push_back(p.grad().to_vector<float>());
    rec->gradient_done();
  });
  std::unique_ptr<Reducer> owned = make_reducer(params, pg, cap_bytes);
  reducer = owned.get();
  for (Tensor& p : params) p.register_post_accumulate_grad_hook([rec](Tensor&) { rec->hook_returned(); });
  run.buckets = assign_buckets(params, cap_bytes);
  optim::SGD opt(params, {.lr = 0.1, .momentum = 0.9});
  for (int s = 0; s < steps; ++s) {
    step = s;
    const int64_t before = pg->comm_stats().per_collective["all_reduce"].calls;
    launched_at_step_start = reducer->all_reduces_launched();
    course::harness::place().step = s + 1;
    course::harness::place().step_word = "training step";
    opt.zero_grad();
    for (int m = 0; m < micro; ++m) {
      const int step_id = s * micro + m;
      synced = m == micro - 1;
      reducer->set_require_sync(synced);
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

// Every rank trains; each rank's group records what its reducer launched.
inline std::vector<RankRun> run_ddp(int n, int steps, int64_t rows, int64_t cap_bytes, int micro = 1,
                                    bool hold_first = false) {
  std::vector<RankRun> runs(n);
  run_ranks(n, [&](std::shared_ptr<ProcessGroup> pg) {
    auto rec = std::make_shared<Recorder>();
    rec->hold_first = hold_first;
    const int r = pg->rank();
    runs[r] = ddp_train(recording_group(std::move(pg), rec), rec, steps, rows, cap_bytes, micro);
  });
  return runs;
}

// Where the first synchronised backward's gradients landed in the buckets it launched: ""
// when each parameter sits at its slot's offset, else the first one that does not.
inline std::string slot_words(const RankRun& run) {
  if (run.local_grads.empty()) return "";
  for (size_t b = 0; b < run.buckets.size() && b < run.rec->launched.size(); ++b) {
    const std::vector<float>& flat = run.rec->launched[b];
    int64_t offset = 0;
    for (size_t p : run.buckets[b]) {
      const std::vector<float>& g = run.local_grads[p];
      auto holds_at = [&](int64_t at) {
        if (at < 0 || at + static_cast<int64_t>(g.size()) > static_cast<int64_t>(flat.size())) return false;
        for (size_t i = 0; i < g.size(); ++i)
          if (std::abs(flat[at + i] - g[i]) > 1e-6f + 1e-5f * std::abs(g[i])) return false;
        return true;
      };
      if (!holds_at(offset)) {
        int64_t found = -1;
        for (int64_t at = 0; at < static_cast<int64_t>(flat.size()) && found < 0; ++at)
          if (holds_at(at)) found = at;
        return fmt::format("bucket {} (parameters {}; {} floats) was launched with {}, {} floats, not at its "
                           "slot's offset {}: {}", b, fmt::join(run.buckets[b], ", "), flat.size(), param_name(p),
                           g.size(), offset,
                           found >= 0 ? fmt::format("its gradient is at offset {}", found)
                                      : std::string("its gradient is nowhere in the bucket (overwritten?)"));
      }
      offset += static_cast<int64_t>(g.size());
    }
  }
  return "";
}

// Checks every rank's parameters against one process; returns false after the first mismatch,
// with what went wrong when it can be named.
inline bool check_equal_to_one_process(int n, int steps, int64_t rows, int64_t cap_bytes, int micro = 1) {
  const std::vector<RankRun> runs = run_ddp(n, steps, rows, cap_bytes, micro);
  const auto want = single_process(steps, rows, micro);
  for (int r = 0; r < n; ++r) {
    std::string why = course::compare_params(r, n, runs[r].params, want, "");
    if (why.empty()) continue;
    if (course::compare_params(r, n, runs[r].params, single_process(steps, rows, micro, static_cast<float>(n)), "")
            .empty())
      why += fmt::format(". The gradients were summed over the {} ranks, not averaged", n);
    else if (micro > 1 && course::compare_params(r, n, runs[r].params,
                                                 single_process(steps, rows, micro, 1.0f / static_cast<float>(micro)),
                                                 "").empty())
      why += fmt::format(". The accumulated gradient was divided by the {} micro-batches: inside no_sync the "
                         "gradients add up, as one process's do over the same rows; only the average over the "
                         "ranks divides", micro);
    else if (std::string slots = slot_words(runs[r]); !slots.empty())
      why += ". " + slots;
    else
      why += ": are the gradients averaged (not summed), and every bucket written back?";
    CHECK_MESSAGE(why.empty(), fmt::format("{} ranks, {} steps, {}-byte buckets{}: {}", n, steps, cap_bytes,
                                           micro > 1 ? fmt::format(", {} micro-batches per step", micro) : "", why));
    return false;
  }
  CHECK(true);
  return true;
}

}  // namespace hw4::grading
