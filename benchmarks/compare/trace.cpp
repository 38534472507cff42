// trace.cpp: Chrome trace fragments and their merge (trace.h). A fragment is one event per
// line, "name<TAB>track<TAB>start_us<TAB>end_us", so a fragment is trivially appendable and
// the merge owns all the JSON. Times are rebased on the earliest event of the whole trace.
// Read next: run_ddp.cpp.
#include "benchmarks/compare/trace.h"

#include <fmt/core.h>

#include <algorithm>
#include <cmath>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <limits>
#include <sstream>

#include "framework/error.h"
#include "framework/io/json.h"

namespace dplab::compare {

void TraceRecorder::add(std::string name, int track, double start_us, double end_us) {
  if (!enabled_) return;
  std::lock_guard lock(mu_);
  events_.push_back({std::move(name), track, start_us, end_us});
}

void TraceRecorder::write_fragment(const std::string& path) const {
  if (!enabled_) return;
  std::filesystem::create_directories(std::filesystem::path(path).parent_path());
  std::ofstream f(path);
  std::lock_guard lock(mu_);
  for (const TraceEvent& e : events_)
    f << fmt::format("{}\t{}\t{:.3f}\t{:.3f}\n", e.name, e.track, e.start_us, e.end_us);
  DPLAB_CHECK(f.good(), "could not write trace fragment {}", path);
}

namespace {

std::vector<TraceEvent> read_fragment(const std::string& path) {
  std::vector<TraceEvent> out;
  std::ifstream f(path);
  for (std::string line; std::getline(f, line);) {
    std::istringstream in(line);
    TraceEvent e;
    std::string track, start, end;
    if (std::getline(in, e.name, '\t') && std::getline(in, track, '\t') &&
        std::getline(in, start, '\t') && std::getline(in, end)) {
      e.track = std::stoi(track);
      e.start_us = std::stod(start);
      e.end_us = std::stod(end);
      out.push_back(std::move(e));
    }
  }
  return out;
}

// Each kind of event gets a fixed colour name from the viewer's palette, so forward is
// always the same colour and communication stands out.
const char* colour_of(const std::string& name) {
  if (name.rfind("forward", 0) == 0) return "good";
  if (name.rfind("backward", 0) == 0) return "thread_state_running";
  if (name.rfind("allreduce", 0) == 0) return "rail_response";
  if (name.rfind("wait", 0) == 0) return "terrible";
  return "generic_work";
}

}  // namespace

int64_t merge_traces(const std::vector<TraceRun>& runs, const std::string& path) {
  std::vector<std::vector<TraceEvent>> loaded(runs.size());
  double t0 = std::numeric_limits<double>::infinity();
  for (size_t i = 0; i < runs.size(); ++i)
    for (const std::string& frag : runs[i].fragments) {
      if (!std::filesystem::exists(frag)) {
        std::cerr << "trace: no fragment " << frag << " (that run or rank recorded nothing)\n";
        continue;
      }
      for (TraceEvent& e : read_fragment(frag)) {
        t0 = std::min(t0, e.start_us);
        loaded[i].push_back(std::move(e));
      }
    }
  if (!std::isfinite(t0)) t0 = 0;
  std::string json = "{\"displayTimeUnit\": \"ms\", \"traceEvents\": [\n";
  int64_t count = 0;
  auto comma = [&] { json += count++ ? ",\n" : ""; };
  for (size_t i = 0; i < runs.size(); ++i) {
    const int pid = static_cast<int>(i) + 1;
    comma();
    json +=
        fmt::format(R"({{"ph": "M", "name": "process_name", "pid": {}, "args": {{"name": )", pid);
    append_json_string(json, runs[i].label);
    json += "}}";
    comma();
    json += fmt::format(
        R"({{"ph": "M", "name": "process_sort_index", "pid": {}, "args": {{"sort_index": {}}}}})",
        pid, pid);
    for (size_t t = 0; t < runs[i].track_names.size(); ++t) {
      comma();
      json += fmt::format(
          R"({{"ph": "M", "name": "thread_name", "pid": {}, "tid": {}, "args": {{"name": )", pid,
          t);
      append_json_string(json, runs[i].track_names[t]);
      json += "}}";
    }
    for (const TraceEvent& e : loaded[i]) {
      comma();
      json += R"({"ph": "X", "name": )";
      append_json_string(json, e.name);
      json += fmt::format(R"(, "cname": "{}", "pid": {}, "tid": {}, "ts": {:.3f}, "dur": {:.3f}}})",
                          colour_of(e.name), pid, e.track, e.start_us - t0,
                          std::max(0.0, e.end_us - e.start_us));
    }
  }
  json += "\n]}\n";
  std::ofstream f(path);
  f << json;
  DPLAB_CHECK(f.good(), "could not write {}", path);
  return count;
}

}  // namespace dplab::compare
