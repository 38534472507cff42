// ps_report.cpp: the report's sentences on mode ps (report.h: ps_findings): per run, where the
// sharded parameter server matches the ring and where it still loses, from the measured
// figures. Three things decide it:
//   bytes    the busiest rank's push + pull bytes against a ring rank's 2(N-1)/N·P each way
//            (cost.h): S = N co-located matches it, S = 1 puts (N-1)·P on the server's link;
//   balance  max/min bytes over the ranks: 1 for the ring; the servers' links carry more
//            whenever S < N (or the S separate servers serve more workers than they are);
//   time     the step against the ring's at the same N: the push waits for the whole
//            backward, where DDP's ring buckets run under it; and unless S = N co-located,
//            a link carries its bytes one way at a time (push in, pull out, or the reverse),
//            where the ring sends and receives at once.
// Read next: report.cpp, docs/parameter_server.md.
#include <fmt/core.h>

#include <algorithm>

#include "benchmarks/compare/report.h"

namespace dplab::compare {

namespace {

double mib(double bytes) { return bytes / (1 << 20); }

const RunResult* ring_at(const std::vector<RunResult>& runs, int n) {
  for (const RunResult& r : runs)
    if (r.mode == "ring" && r.n == n && r.link != "netns") return &r;
  return nullptr;
}

}  // namespace

std::vector<std::string> ps_findings(const std::vector<RunResult>& runs) {
  std::vector<std::string> lines;
  for (const RunResult& r : runs) {
    // the real-link twins (--links netns) have their own section (netns_links.cpp)
    if (!is_ps_label(r.mode) || r.link == "netns" || r.devices.empty() || r.n < 2) continue;
    const double steps = std::max<double>(1, double(r.timed_steps));
    // the busiest and the quietest rank's weight bytes per step, sent and received apart
    double max_out = 0, max_in = 0, min_total = 1e300, max_total = 0;
    size_t busiest = 0;
    for (size_t i = 0; i < r.devices.size(); ++i) {
      const DeviceFigures& d = r.devices[i];
      const double out = mib(double(d.weight_bytes_sent)) / steps,
                   in = mib(double(d.weight_bytes_received)) / steps;
      if (out + in > max_total) busiest = i;
      max_out = std::max(max_out, out);
      max_in = std::max(max_in, in);
      max_total = std::max(max_total, out + in);
      min_total = std::min(min_total, out + in);
    }
    const double ring_each_way = 2.0 * (r.n - 1) / r.n * mib(4.0 * double(r.param_count));
    const double ratio = std::max(max_out, max_in) / ring_each_way;
    const double balance = min_total > 0 ? max_total / min_total : 0;
    const bool balanced = balance<1.02, bytes_match = ratio> 0.98 && ratio < 1.02;
    std::string l = fmt::format(
        "{} N={}: the busiest link (rank {}) moves {:.2f} out / {:.2f} in MiB per step, {:.2f}x "
        "a ring rank's {:.2f} each way; max/min over the {} ranks {:.2f}",
        r.mode, r.n, busiest, max_out, max_in, ratio, ring_each_way, r.devices.size(), balance);
    if (bytes_match && balanced) l += ": matches the ring (every link carries the ring's bytes)";
    else if (ratio > 1.02)
      l += fmt::format(": loses on the server's link ({:.2f}x the ring's bytes through one link)",
                       ratio);
    else if (balanced)
      l += fmt::format(": every link carries less than a ring rank's, with {} more processes "
                       "(links) than the ring",
                       r.devices.size() - static_cast<size_t>(r.n));
    else l += ": no link carries more than a ring rank's, but the bytes are unbalanced";
    // the optimizer state: on the servers only, as ZeRO's is on its shards' owners
    int64_t state_max = 0, state_sum = 0;
    for (const DeviceFigures& d : r.devices) {
      state_max = std::max(state_max, d.optim_state_bytes);
      state_sum += d.optim_state_bytes;
    }
    l += fmt::format("; optimizer state {:.2f} MiB on the busiest server ({:.2f} in all)",
                     mib(double(state_max)), mib(double(state_sum)));
    if (const RunResult* ring = ring_at(runs, r.n); ring && ring->step_s() > 0) {
      const double pct = 100.0 * (r.step_s() / ring->step_s() - 1);
      std::string why;  // the reasons that apply to this placement, biggest first
      if (ratio > 1.02) why += fmt::format("the busiest link carries {:.2f}x the bytes; ", ratio);
      // a worker sends only during the push and receives only during the pull, a server the
      // other way round, unless every rank is both (S = N co-located): then one direction of
      // a link idles while the other works, where the ring keeps both busy
      if (r.separate_servers || r.servers < r.n)
        why += "links carry their bytes one way at a time (in during the push, out during the "
               "pull); ";
      why += "the push waits for the whole backward (the ring's buckets run under it)";
      l += fmt::format("; step {:.1f} ms against the ring's {:.1f} ms ({:+.0f}%{})",
                       1e3 * r.step_s(), 1e3 * ring->step_s(), pct, pct > 5 ? ": " + why : "");
    }
    lines.push_back(l);
  }
  return lines;
}

}  // namespace dplab::compare
