// trace_profile.cpp: trace.json -> TraceProfile. merge_traces writes one event per line,
// so each line is read on its own: a metadata line names a run (process), an "X" line is
// one event. Per step (a "forward" starts one) of rank 0:
//   backward's compute ends at its first "wait bucket" (DDP waits for the all-reduces after
//   the last gradient), or at backward's end when nothing was waited for;
//   bucket i is ready at t_i = (ready_i - backward start) / backward's compute, and holds
//   the fraction of the gradient its "(x MiB)" says.
// The medians over the steps give the profile; t_i is made non-decreasing.
// Read next: projection.h.
#include "benchmarks/project/trace_profile.h"

#include <algorithm>
#include <cmath>
#include <fstream>
#include <map>
#include <optional>

#include "framework/error.h"

namespace dplab::projection {

namespace {

struct Event {
  std::string name;
  double ts = 0, dur = 0;
};

// The JSON string after `"key": ` (no escapes in dplab's names but \" and \\), or nothing.
std::optional<std::string> string_field(const std::string& line, const std::string& key, size_t from = 0) {
  const std::string tag = "\"" + key + "\": \"";
  size_t p = line.find(tag, from);
  if (p == std::string::npos) return std::nullopt;
  std::string out;
  for (p += tag.size(); p < line.size() && line[p] != '"'; ++p) {
    if (line[p] == '\\' && p + 1 < line.size()) ++p;
    out += line[p];
  }
  return out;
}

std::optional<double> number_field(const std::string& line, const std::string& key) {
  const std::string tag = "\"" + key + "\": ";
  const size_t p = line.find(tag);
  if (p == std::string::npos) return std::nullopt;
  char* end = nullptr;
  const double v = std::strtod(line.c_str() + p + tag.size(), &end);
  if (end == line.c_str() + p + tag.size() || !std::isfinite(v)) return std::nullopt;
  return v;
}

// "allreduce bucket 3 (0.25 MiB)" -> 3 and 0.25; "ready bucket 3" -> 3.
int bucket_index(const std::string& name, const std::string& prefix) {
  return std::atoi(name.c_str() + prefix.size());
}
// "(0.25 MiB)" or "(262144 bytes)" -> MiB; 0 when the name has neither.
double bucket_mib(const std::string& name) {
  const size_t p = name.find('(');
  if (p == std::string::npos) return 0;
  const double v = std::atof(name.c_str() + p + 1);
  return name.find(" bytes)", p) != std::string::npos ? v / (1 << 20) : v;
}

double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  const size_t n = v.size();
  return n == 0 ? 0 : n % 2 ? v[n / 2] : 0.5 * (v[n / 2 - 1] + v[n / 2]);
}

int ranks_in(const std::string& label) {
  const size_t p = label.find("N=");
  return p == std::string::npos ? 0 : std::atoi(label.c_str() + p + 2);
}

}  // namespace

TraceProfile read_trace_profile(const std::string& path, const std::string& run) {
  std::ifstream f(path);
  DPLAB_CHECK(f.good(), "--trace: cannot open '{}'", path);
  std::map<int, std::string> labels;           // pid -> run label
  std::map<int, std::vector<Event>> rank0;     // pid -> rank 0's events
  bool any = false;
  for (std::string line; std::getline(f, line);) {
    const auto ph = string_field(line, "ph");
    if (!ph) continue;
    any = true;
    const auto pid = number_field(line, "pid");
    if (!pid) continue;
    if (*ph == "M" && string_field(line, "name") == "process_name") {
      if (auto label = string_field(line, "name", line.find("\"args\""))) labels[int(*pid)] = *label;
    } else if (*ph == "X" && number_field(line, "tid") == 0.0) {
      auto name = string_field(line, "name");
      auto ts = number_field(line, "ts"), dur = number_field(line, "dur");
      if (name && ts && dur) rank0[int(*pid)].push_back({*name, *ts, *dur});
    }
  }
  DPLAB_CHECK(any, "--trace: '{}' has no trace events (expected the trace.json of dplab-compare --trace)", path);
  // the run: as named, or the DDP run with the most ranks (ring before star)
  int pid = -1;
  std::string names;
  for (const auto& [p, label] : labels) {
    names += (names.empty() ? "" : ", ") + label;
    const bool has_buckets = std::any_of(rank0[p].begin(), rank0[p].end(), [](const Event& e) {
      return e.name.rfind("allreduce bucket", 0) == 0;
    });
    if (!run.empty()) {
      if (label == run) pid = p;
      continue;
    }
    if (!has_buckets) continue;
    if (pid < 0) { pid = p; continue; }
    const std::string& best = labels[pid];
    const bool ring = label.rfind("ring", 0) == 0, best_ring = best.rfind("ring", 0) == 0;
    if ((ring && !best_ring) || (ring == best_ring && ranks_in(label) > ranks_in(best))) pid = p;
  }
  DPLAB_CHECK(pid >= 0, "--trace: '{}' has {}; expected {} with gradient buckets (a DDP run: ring or star)", path,
              names.empty() ? "no runs" : "the runs " + names, run.empty() ? "a run" : "the run '" + run + "'");
  std::vector<Event> events = rank0[pid];
  std::sort(events.begin(), events.end(), [](const Event& a, const Event& b) { return a.ts < b.ts; });

  TraceProfile out{.run = labels[pid]};
  std::vector<double> fwd, bwd, opt;
  std::vector<std::vector<double>> times;  // per step: each bucket's t_i
  std::vector<double> mib;                 // per bucket, from the names
  for (size_t i = 0; i < events.size(); ++i) {
    if (events[i].name != "forward") continue;
    size_t end = i + 1;
    while (end < events.size() && events[end].name != "forward") ++end;
    const Event* backward = nullptr;
    const Event* step = nullptr;
    double first_wait = INFINITY;
    std::map<int, double> ready, started, size, exact;
    for (size_t k = i + 1; k < end; ++k) {
      const Event& e = events[k];
      if (e.name == "backward") backward = &e;
      else if (e.name == "optimizer step") step = &e;
      else if (e.name.rfind("wait bucket", 0) == 0) first_wait = std::min(first_wait, e.ts);
      else if (e.name.rfind("ready bucket ", 0) == 0) {  // exact bytes, where the name has them
        const int b = bucket_index(e.name, "ready bucket ");
        ready[b] = e.ts;
        if (bucket_mib(e.name) > 0) exact[b] = bucket_mib(e.name);
      } else if (e.name.rfind("allreduce bucket ", 0) == 0) {
        const int b = bucket_index(e.name, "allreduce bucket ");
        started[b] = e.ts, size[b] = bucket_mib(e.name);
      }
    }
    for (const auto& [b, mb] : exact) size[b] = mb;
    if (!backward || size.empty()) continue;
    const double b0 = backward->ts, b1 = std::min(backward->ts + backward->dur, first_wait);
    if (b1 <= b0) continue;
    out.ready_events = !ready.empty();
    std::vector<double> t;
    for (const auto& [b, mb] : size) {
      const double at = ready.count(b) ? ready[b] : started[b];
      t.push_back(std::clamp((at - b0) / (b1 - b0), 0.0, 1.0));
    }
    if (mib.empty()) for (const auto& [b, mb] : size) mib.push_back(mb);
    if (t.size() != mib.size()) continue;  // a step cut short
    times.push_back(t);
    fwd.push_back(1e-6 * events[i].dur);
    bwd.push_back(1e-6 * (b1 - b0));
    opt.push_back(step ? 1e-6 * step->dur : 0);
  }
  if (times.size() > 1) {  // the first step pays for first touches and set-up
    times.erase(times.begin()), fwd.erase(fwd.begin()), bwd.erase(bwd.begin()), opt.erase(opt.begin());
  }
  DPLAB_CHECK(!times.empty(), "--trace: run '{}' in '{}' has no step with a backward and bucket events", out.run, path);
  out.steps = static_cast<int>(times.size());
  out.buckets = static_cast<int>(mib.size());
  out.compute = {.forward_s = median(fwd), .backward_s = median(bwd), .optimizer_s = median(opt)};
  double total = 0;
  for (double m : mib) total += m;
  DPLAB_CHECK(total > 0, "--trace: run '{}' names no bucket sizes ('allreduce bucket i (x MiB)')", out.run);
  out.profile.bytes.clear(), out.profile.time.clear();
  double done = 0, last_t = 0;
  for (size_t b = 0; b < mib.size(); ++b) {
    std::vector<double> tb;
    for (const auto& t : times) tb.push_back(t[b]);
    done += mib[b];
    last_t = std::max(last_t, median(tb));
    if (mib[b] <= 0) continue;
    out.profile.bytes.push_back(std::min(1.0, done / total));
    out.profile.time.push_back(last_t);
  }
  out.profile.bytes.back() = 1.0;
  out.profile.check();
  return out;
}

}  // namespace dplab::projection
