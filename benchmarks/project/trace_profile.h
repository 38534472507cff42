// trace_profile.h: what a measured step looks like, read from the trace.json that
// `dplab-compare --trace` writes (benchmarks/compare/trace.h): forward, backward and the
// optimizer's share of the step, and when each gradient bucket became ready during backward
// (its "ready bucket i" event; traces written before those events existed give the start of
// the bucket's all-reduce instead, which is the same or later). The projection scales this
// shape to the compute time it is given, so a laptop's trace of a small model says how
// gradients arrive in backward, not how long a big model computes.
// Read next: trace_profile.cpp.
#pragma once
#include <string>

#include "benchmarks/project/timeline.h"

namespace dplab::projection {

struct TraceProfile {
  std::string run;         // the trace's run, "ring N=2"
  int steps = 0;           // the steps it was read from (the first, a warm-up, is left out)
  int buckets = 0;         // buckets per step
  bool ready_events = false;  // true: ready times; false: all-reduce starts (an upper bound)
  Compute compute{};       // median forward, backward (to its last gradient) and optimizer
  ReadinessProfile profile{};
};

// Reads `path`; `run` picks a run by its label ("ring N=4"); empty: the DDP run with the most
// ranks, ring first. Uses rank 0's track. Throws Error when the file is not such a trace or
// the run has no step with bucket events.
TraceProfile read_trace_profile(const std::string& path, const std::string& run = "");

}  // namespace dplab::projection
