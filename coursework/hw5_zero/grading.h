// grading.h: how hw5 is checked. Each run draws, from a seed chosen as it starts, the
// parameters (the shapes of the reference MLP: P = 83 floats) and each rank's gradient at
// every step; every rank runs your Zero1SGD on them (rank_run.h) and must end with what SGD
// with momentum on the ranks' average gradient gives, computed here in plain loops, never
// with your code. In your own build the ranks are threads with process groups over the
// library's thread transport, whose counters give the calls and bytes of each step; in the
// grader each rank is a process of its own, and the bytes it sent are counted by the broker
// between them (remote.cpp). Bytes and calls are compared with the textbook:
// reduce-scatter + all-gather = one all-reduce.
// Read next: rank_run.h, tests_visible.cpp.
#pragma once
#include <cmath>
#include <cstdint>
#include <random>
#include <string>
#include <vector>

#include "one_process_reference.h"
#include "rank_run.h"

namespace hw5::grading {

using namespace dplab;
using namespace course;

constexpr float kLr = 0.1f, kMomentum = 0.9f;

inline std::vector<Shape> param_shapes() {
  std::vector<Shape> shapes;
  for (const Tensor& p : make_model()->parameters()) shapes.push_back(p.shape());
  return shapes;
}

inline int64_t total_params() {
  int64_t total = 0;
  for (const Shape& s : param_shapes()) total += shape_numel(s);
  return total;  // 83 for the reference MLP: no N in 2..4 divides it
}

// One test's inputs: the initial parameters and every rank's gradient at every step, all
// flat (P floats), drawn afresh from `seed`.
struct Problem {
  uint64_t seed = 0;
  std::vector<float> init;                           // [P]
  std::vector<std::vector<std::vector<float>>> grads;  // [step][rank][P]
};

inline Problem draw(int n, int steps) {
  Problem p;
  p.seed = std::random_device{}();
  Generator g(p.seed);
  const int64_t total = total_params();
  p.init = randn({total}, {}, &g).to_vector<float>();
  p.grads.assign(steps, std::vector<std::vector<float>>(n));
  for (int s = 0; s < steps; ++s)
    for (int r = 0; r < n; ++r) p.grads[s][r] = randn({total}, {}, &g).to_vector<float>();
  return p;
}

// A flat vector cut into the parameters' tensors.
inline std::vector<Tensor> as_params(const std::vector<float>& flat) {
  std::vector<Tensor> out;
  auto at = flat.begin();
  for (const Shape& s : param_shapes()) {
    const int64_t n = shape_numel(s);
    out.push_back(from_vector(std::vector<float>(at, at + n), s));
    at += n;
  }
  return out;
}

inline RankInput rank_input(const Problem& p, int r, int n) {
  RankInput in{.rank = r, .size = n, .lr = kLr, .momentum = kMomentum, .params = as_params(p.init)};
  for (const auto& step : p.grads) in.grads.push_back(as_params(step[r]));
  return in;
}

// Every rank's run of one problem on n ranks. A rank that threw fails the test with its words.
inline std::vector<RankRun> run_all(int n, const Problem& problem) {
  std::vector<RankRun> runs(n);
  if (Outside* judge = outside())
    run_rank_threads(n, [&](int r) { runs[r] = judge->run(rank_input(problem, r, n)); });
  else
    run_ranks(n, [&](std::shared_ptr<ProcessGroup> pg) {
      runs[pg->rank()] = run_rank(pg, rank_input(problem, pg->rank(), n));
    });
  return runs;
}

// What every rank must end with: SGD with momentum, as PyTorch does it (buf = g at the first
// step, then buf = momentum * buf + g; p -= lr * buf), on the ranks' gradients averaged, or
// scaled so (grad_scale: n for gradients summed instead), or with no momentum carried over
// from one step to the next (what a classic mistake does, so that a test can recognise it).
inline std::vector<float> expected(const Problem& p, int n, double grad_scale = 1.0, bool carry = true) {
  std::vector<double> values(p.init.begin(), p.init.end()), buf(values.size(), 0.0);
  for (std::size_t s = 0; s < p.grads.size(); ++s)
    for (std::size_t i = 0; i < values.size(); ++i) {
      double g = 0;
      for (int r = 0; r < n; ++r) g += p.grads[s][r][i];
      g = g / n * grad_scale;
      buf[i] = s == 0 || !carry ? g : kMomentum * buf[i] + g;
      values[i] -= kLr * buf[i];
    }
  return {values.begin(), values.end()};
}

inline bool near(float got, double want) { return std::abs(got - want) <= 1e-5 + 1e-4 * std::abs(want); }

// The first element where a rank's parameters (laid end to end) differ from `want`, or -1.
inline int64_t first_difference(const RankRun& run, const std::vector<float>& want) {
  int64_t i = 0;
  for (const auto& param : run.params)
    for (float v : param) {
      if (i >= static_cast<int64_t>(want.size()) || !near(v, want[i])) return i;
      ++i;
    }
  return i == static_cast<int64_t>(want.size()) ? -1 : i;
}

// Element i of a rank's parameters laid end to end.
inline float flat_at(const RankRun& run, int64_t i) {
  for (const auto& param : run.params) {
    if (i < static_cast<int64_t>(param.size())) return param[i];
    i -= static_cast<int64_t>(param.size());
  }
  return NAN;
}

// Element i of the flat vector as the student knows it: which parameter, and whose shard.
inline std::string where(int64_t i, int n) {
  int64_t offset = 0;
  std::size_t p = 0;
  for (const Shape& s : param_shapes()) {
    if (i < offset + shape_numel(s)) break;
    offset += shape_numel(s);
    ++p;
  }
  const int64_t shard = (total_params() + n - 1) / n;
  return fmt::format("{} element {} (flat element {}, in rank {}'s shard)", param_name(p), i - offset, i,
                     i / shard);
}

// Checks every rank against SGD on the average gradient; false after the first mismatch.
inline bool check_equal_to_one_process(int n, int steps) {
  const Problem problem = draw(n, steps);
  const std::vector<RankRun> runs = run_all(n, problem);
  const std::vector<float> want = expected(problem, n);
  for (int r = 0; r < n; ++r) {
    const int64_t i = first_difference(runs[r], want);
    if (i < 0) continue;
    std::string why =
        i >= static_cast<int64_t>(want.size())
            ? fmt::format("rank {} of {} ended with parameters of another size than the {} it was given", r, n,
                          want.size())
            : fmt::format("rank {} of {}: {} is {:.6f} after {} steps, but SGD with momentum on the ranks' average "
                          "gradient (what one process on the whole batch gets) gives {:.6f}",
                          r, n, where(i, n), flat_at(runs[r], i), steps, want[i]);
    if (i < static_cast<int64_t>(want.size())) {
      if (first_difference(runs[r], problem.init) < 0)
        why += ". The parameters are the ones the rank was given: its step() changed nothing";
      else if (n > 1 && first_difference(runs[r], expected(problem, n, n)) < 0)
        why += fmt::format(". The gradients were summed over the {} ranks, not averaged (reduce-scatter with "
                           "ReduceOp::Avg)", n);
      else if (steps > 1 && first_difference(runs[r], expected(problem, n, 1.0, false)) < 0)
        why += ". That is SGD with no momentum carried from step to step: buf = momentum * buf + g after the first";
      else
        why += ": is the gradient averaged (reduce-scatter with Avg), the momentum applied to my shard, and every "
               "shard gathered back?";
    }
    CHECK_MESSAGE(why.empty(), fmt::format("{} ranks, {} steps (values drawn with seed {}): {}", n, steps,
                                           problem.seed, why));
    return false;
  }
  CHECK(true);  // every rank ended as SGD on the average gradient
  return true;
}

}  // namespace hw5::grading
