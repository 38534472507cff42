// training.h: DDP training with the student's reducer as the visible and hidden tests run
// it, and the checks of what comes back. In a student's own build every rank is a thread of
// the tests with a process group over the library's thread transport (rank_trainer.h); in the
// grader every rank is a process of its own, the judge's calls through pipes and its
// all-reduces through the broker (remote.cpp sets outside()), and what a rank sent is counted
// there, outside it. Either way the tests compare what the ranks end with against one
// process on the whole batch, trained here, by the library, never by the student's code.
// Read next: rank_trainer.h, tests_hidden.cpp, remote.cpp (the grader's ranks).
#pragma once
#include <atomic>
#include <memory>
#include <string>
#include <vector>

#include "grading.h"
#include "harness.h"
#include "rank_trainer.h"

namespace hw4::grading {

// Once per test process: the words on counts not reset come from the first rank that sees it.
inline std::atomic<bool>& counts_named() {
  static std::atomic<bool> named{false};
  return named;
}
inline void say_once(const std::string& words) {
  if (!counts_named().exchange(true)) course::harness::note(words);
}

// Rank r's rows of the global batch of backward `step_id` (inputs, labels).
inline Tensor rank_x(int step_id, int64_t rows, int r, int n) {
  return global_x(step_id, rows).narrow(r * (rows / n), rows / n);
}
inline Tensor rank_y(int step_id, int64_t rows, int r, int n) {
  return global_y(step_id, rows).narrow(r * (rows / n), rows / n);
}

// The grader's judge (remote.cpp sets it before the tests run; null in a student's own
// build): runs the same training on ranks that are processes of their own.
struct Outside {
  virtual ~Outside() = default;
  virtual std::vector<RankRun> run_ddp(int n, int steps, int64_t rows, int64_t cap_bytes, int micro,
                                       bool hold_first) = 0;
};
inline Outside*& outside() {
  static Outside* judge = nullptr;
  return judge;
}

// Who counted the all-reduces, in a test's words.
inline const char* counted_by() {
  return outside() ? "the traffic through the broker says" : "the process group ran";
}

// Every rank trains `steps` steps of `micro` micro-batches; each rank's group records what its
// reducer launched.
inline std::vector<RankRun> run_ddp(int n, int steps, int64_t rows, int64_t cap_bytes, int micro = 1,
                                    bool hold_first = false) {
  if (Outside* judge = outside()) return judge->run_ddp(n, steps, rows, cap_bytes, micro, hold_first);
  std::vector<RankRun> runs(n);
  run_ranks(n, [&](std::shared_ptr<ProcessGroup> pg) {
    const int r = pg->rank();
    RankTrainer trainer(std::move(pg), make_model(), cap_bytes, hold_first, say_once);
    std::vector<int64_t> per_step;
    for (int s = 0; s < steps; ++s) {
      std::vector<Tensor> xs, ys;
      for (int m = 0; m < micro; ++m) {
        xs.push_back(rank_x(s * micro + m, rows, r, n));
        ys.push_back(rank_y(s * micro + m, rows, r, n));
      }
      const int64_t before = trainer.all_reduces_run();
      trainer.step(xs, ys);
      per_step.push_back(trainer.all_reduces_run() - before);
    }
    runs[r] = trainer.result();
    runs[r].all_reduces_per_step = per_step;
    runs[r].traffic_words.assign(per_step.size(), "");
  });
  return runs;
}

// Where the first synchronised backward's gradients landed in the buckets it launched: ""
// when each parameter sits at its slot's offset, else the first one that does not.
inline std::string slot_words(const RankRun& run) {
  if (run.local_grads.empty()) return "";
  for (size_t b = 0; b < run.buckets.size() && b < run.launched_flats.size(); ++b) {
    const std::vector<float>& flat = run.launched_flats[b];
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
