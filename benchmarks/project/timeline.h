// timeline.h: one training step as a timeline, not a formula. Forward runs, then backward;
// during backward the gradient buckets become ready, last layers first, at the times a
// readiness profile gives (measured from a trace, or spread evenly over backward); each
// bucket's all-reduce stages (parallel/algorithms/cost_topology.h) start when the bucket is
// ready and their channel is free; the step ends when the last stage is done and the
// optimizer has run. How much communication hides under backward is what this gives, not
// an assumption (all or nothing) made beforehand.
// Read next: timeline.cpp, then projection.h (which runs it for every N).
#pragma once
#include <algorithm>
#include <functional>
#include <string>
#include <vector>

#include "parallel/algorithms/cost_topology.h"

namespace dplab::projection {

struct Compute {
  double forward_s = 0, backward_s = 0, optimizer_s = 0;
  double total() const { return forward_s + backward_s + optimizer_s; }
};

// Which fraction of the gradient's bytes is ready at which fraction of backward's time: points
// (bytes[i], time[i]), both increasing, the last byte fraction 1; linear in between and from
// (0, 0). Uniform: {(1, 1)}: bytes become ready at a constant rate.
struct ReadinessProfile {
  std::vector<double> bytes{1.0};
  std::vector<double> time{1.0};
  // Checks the points (increasing, in [0, 1], the last byte fraction 1); throws Error.
  void check() const;
  // The fraction of backward at which `byte_fraction` of the gradient is ready.
  double time_at(double byte_fraction) const;
};

// Buckets of at most cap bytes in the order backward fills them: full ones first, the
// remainder last (it holds the first layers, as DDP's and Horovod's fusion buffers do).
std::vector<double> bucket_bytes(double gradient_bytes, double cap_bytes);

struct TimedStage {
  int bucket = 0;
  std::string stage;
  double start_s = 0, end_s = 0;
};

struct StepTimeline {
  Compute compute;
  double step_s = 0;
  double comm_s = 0;     // all stages' seconds added up, hidden or not
  double exposed_s = 0;  // step - compute: the communication nothing hid
  std::vector<double> ready_s{};  // when each bucket became ready (from the step's start)
  std::vector<TimedStage> stages{};
  double efficiency() const { return step_s > 0 ? compute.total() / step_s : 1; }
  // Fraction of the communication hidden under compute (1 when there is none to hide).
  double overlap() const { return comm_s > 0 ? std::clamp(1 - exposed_s / comm_s, 0.0, 1.0) : 1; }
};

// The stages of one bucket's all-reduce, from its bytes (all_reduce_stages, bound to a cluster).
using StagesOf = std::function<std::vector<parallel::Stage>(double bytes)>;

// Runs one step. barrier: a stage k > 0 (the pull) of any bucket waits until stage k-1 of
// every bucket is done (a synchronous parameter server applies the update once all
// gradients are in: TensorFlow's SyncReplicasOptimizer); otherwise bucket by bucket.
StepTimeline simulate_step(const Compute& compute, const ReadinessProfile& profile, const std::vector<double>& buckets,
                           const StagesOf& stages_of, bool barrier = false);

}  // namespace dplab::projection
