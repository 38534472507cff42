// timeline.cpp: the step of timeline.h, simulated bucket by bucket.
//   ready_j  = forward + backward · profile.time_at(bytes of buckets 1..j / all bytes)
//   a stage  starts at max(the bucket's previous stage's end (or ready_j), its channel free)
//            and holds the channel for its seconds
//   step     = max(forward + backward, the last stage's end) + optimizer
// With one bucket nothing can hide: it is ready when backward ends. With many small ones
// all but the last can hide, if the channel keeps up with backward.
// Read next: projection.h.
#include "benchmarks/project/timeline.h"

#include <cmath>

#include "framework/error.h"

namespace dplab::projection {

void ReadinessProfile::check() const {
  DPLAB_CHECK(!bytes.empty() && bytes.size() == time.size(),
              "readiness profile: expected as many byte fractions as time fractions (at least one), got {} and {}",
              bytes.size(), time.size());
  double pb = 0, pt = 0;
  for (size_t i = 0; i < bytes.size(); ++i) {
    DPLAB_CHECK(bytes[i] > pb && bytes[i] <= 1 && time[i] >= pt && time[i] <= 1,
                "readiness profile: point {} is ({}, {}); expected byte fractions increasing in (0, 1] and time "
                "fractions non-decreasing in [0, 1]", i, bytes[i], time[i]);
    pb = bytes[i], pt = time[i];
  }
  DPLAB_CHECK(std::abs(bytes.back() - 1) < 1e-9, "readiness profile: the last point must hold all bytes (1), got {}",
              bytes.back());
}

double ReadinessProfile::time_at(double byte_fraction) const {
  double b0 = 0, t0 = 0;
  for (size_t i = 0; i < bytes.size(); ++i) {
    if (byte_fraction <= bytes[i] + 1e-12) {
      const double f = (byte_fraction - b0) / (bytes[i] - b0);
      return t0 + std::clamp(f, 0.0, 1.0) * (time[i] - t0);
    }
    b0 = bytes[i], t0 = time[i];
  }
  return time.back();
}

std::vector<double> bucket_bytes(double gradient_bytes, double cap_bytes) {
  DPLAB_CHECK(gradient_bytes >= 0 && std::isfinite(gradient_bytes), "expected gradient bytes >= 0, got {}",
              gradient_bytes);
  DPLAB_CHECK(cap_bytes > 0, "expected a bucket cap > 0 bytes, got {}", cap_bytes);
  std::vector<double> out;
  if (gradient_bytes == 0) return out;
  const double full = std::floor(gradient_bytes / cap_bytes);
  DPLAB_CHECK(full < 1e6, "{} bytes in buckets of {} bytes make {} buckets: expected at most a million (raise "
              "--bucket-cap-mb)", gradient_bytes, cap_bytes, full);
  out.assign(static_cast<size_t>(full), cap_bytes);
  const double rest = gradient_bytes - full * cap_bytes;
  if (rest > 1e-9 * gradient_bytes) out.push_back(rest);
  return out;
}

StepTimeline simulate_step(const Compute& compute, const ReadinessProfile& profile, const std::vector<double>& buckets,
                           const StagesOf& stages_of, bool barrier) {
  DPLAB_CHECK(compute.forward_s >= 0 && compute.backward_s >= 0 && compute.optimizer_s >= 0,
              "step: expected forward, backward and optimizer times >= 0, got {}, {} and {} s", compute.forward_s,
              compute.backward_s, compute.optimizer_s);
  profile.check();
  StepTimeline tl{.compute = compute};
  const double backward_end = compute.forward_s + compute.backward_s;
  double total = 0;
  for (double b : buckets) total += b;
  std::vector<std::vector<parallel::Stage>> stages;
  double done = 0;
  size_t most = 0;
  for (double b : buckets) {
    done += b;
    tl.ready_s.push_back(compute.forward_s + compute.backward_s * profile.time_at(done / total));
    stages.push_back(stages_of(b));
    most = std::max(most, stages.back().size());
  }
  double free[3] = {0, 0, 0};  // when each channel (Both, Up, Down) is next free
  std::vector<double> at = tl.ready_s;  // when each bucket's next stage may start
  double comm_end = 0;
  auto run = [&](size_t j, const parallel::Stage& st, double gate) {
    double& channel = free[static_cast<int>(st.channel)];
    const double start = std::max({at[j], gate, channel});
    channel = at[j] = start + st.seconds;
    comm_end = std::max(comm_end, at[j]);
    tl.comm_s += st.seconds;
    tl.stages.push_back({static_cast<int>(j), st.name, start, at[j]});
  };
  if (!barrier) {
    for (size_t j = 0; j < stages.size(); ++j)
      for (const parallel::Stage& st : stages[j]) run(j, st, 0);
  } else {
    for (size_t k = 0; k < most; ++k) {  // stage k of every bucket, after stage k-1 of all
      const double gate = k == 0 ? 0 : *std::max_element(at.begin(), at.end());
      for (size_t j = 0; j < stages.size(); ++j)
        if (k < stages[j].size()) run(j, stages[j][k], gate);
    }
  }
  tl.step_s = std::max(backward_end, comm_end) + compute.optimizer_s;
  tl.exposed_s = tl.step_s - compute.total();
  return tl;
}

}  // namespace dplab::projection
