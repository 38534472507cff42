// trace.h: a Chrome trace (the JSON "Trace Event Format" that Perfetto and chrome://tracing
// open) of dplab-compare's runs. Each run is a process row ("ring N=4"); each rank or device
// is a track in it, with complete events ("ph":"X") for forward, backward, the optimizer
// step, every bucket's all-reduce and the time spent waiting for it. Timestamps are
// microseconds of the monotonic clock, which every process on the machine shares, so the
// ranks of a DDP run line up: overlap (ring) and serialisation at rank 0 (star) show.
// Each process records into its own TraceRecorder (thread-safe: the DDP comm thread records
// too) and writes a fragment; merge_traces() joins the fragments into one trace.json.
// Read next: run_ddp.cpp (the timed comm hook).
#pragma once
#include <mutex>
#include <string>
#include <vector>

namespace dplab::compare {

struct TraceEvent {
  std::string name;  // "forward", "allreduce bucket 2", ...
  int track = 0;     // rank or device index
  double start_us = 0, end_us = 0;
};

class TraceRecorder {
 public:
  // enabled = false: add() does nothing, so the timing code needs no if around it.
  explicit TraceRecorder(bool enabled = false) : enabled_(enabled) {}
  bool enabled() const { return enabled_; }
  void add(std::string name, int track, double start_us, double end_us);
  // Writes the events as a JSON array fragment (no brackets' partner needed by the merge).
  void write_fragment(const std::string& path) const;

 private:
  bool enabled_;
  mutable std::mutex mu_;
  std::vector<TraceEvent> events_;
};

// One run's fragments: the process label shown in the viewer and its fragment files.
struct TraceRun {
  std::string label;  // "ring N=2"
  std::vector<std::string> fragments{};
  std::vector<std::string> track_names{};  // "rank 0", "cpu:1 (master)", ...
};
// Writes {"traceEvents": [...]} to path; returns the number of events written.
// Missing fragments are skipped (a run that failed leaves none) and named on stderr.
int64_t merge_traces(const std::vector<TraceRun>& runs, const std::string& path);

}  // namespace dplab::compare
