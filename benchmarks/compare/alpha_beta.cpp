// alpha_beta.cpp: the ping-pong that measures alpha and beta, the fit, and the projection
// (formulas in alpha_beta.h and tutorials/16_ps_vs_ring.md).
// Ping-pong: rank 0 sends m bytes to rank 1, which sends them back; one way = round trip / 2.
// Sizes 256 B .. 16 MiB, more repetitions for small sizes so each size takes ~10-50 ms,
// best of 3 trials.
// Read next: report.cpp, which prints the prediction beside each DDP measurement.
#include "benchmarks/compare/alpha_beta.h"

#include <fmt/core.h>

#include <algorithm>
#include <cmath>
#include <filesystem>
#include <fstream>

#include "benchmarks/compare/netns_links.h"
#include "benchmarks/compare/training.h"
#include "framework/error.h"
#include "framework/ops/ops.h"
#include "parallel/algorithms/cost.h"
#include "parallel/algorithms/cost_topology.h"  // pipelined_push_share
#include "parallel/comm/init.h"
#include "parallel/launch/spawn.h"
#include "parallel/transport/mailbox_transport.h"  // shm_segment_bytes

namespace dplab::compare {

AlphaBeta fit_alpha_beta(const std::vector<PingPongSample>& samples) {
  // Minimise sum w_i (t_i - a - b m_i)^2 with w_i = 1/t_i^2: the 2x2 normal equations.
  double sw = 0, swm = 0, swmm = 0, swt = 0, swmt = 0;
  for (const PingPongSample& s : samples) {
    DPLAB_CHECK(s.seconds > 0, "ping-pong sample of {} bytes has time {} s, expected > 0", s.bytes,
                s.seconds);
    const double w = 1.0 / (s.seconds * s.seconds), m = double(s.bytes);
    sw += w, swm += w * m, swmm += w * m * m, swt += w * s.seconds, swmt += w * m * s.seconds;
  }
  const double det = sw * swmm - swm * swm;
  DPLAB_CHECK(samples.size() >= 2 && det > 0,
              "alpha-beta fit: expected >= 2 distinct message sizes, got {} samples",
              samples.size());
  AlphaBeta ab{(swmm * swt - swm * swmt) / det, (sw * swmt - swm * swt) / det};
  if (ab.alpha < 0) {  // refit the slope through the origin
    ab.alpha = 0;
    ab.beta = swmt / swmm;
  }
  return ab;
}

void pingpong_worker_main(const Config& cfg) {
  parallel::spawn(
      [&](int rank) {
    // --links netns: ranks 0 and 1 on nodes 0 and 1 of the bed, across a real link
    const bool netns = !cfg.netns_bed.empty();
    const std::string label = netns ? "pingpong_netns" : "pingpong";
    if (netns) enter_node(cfg.netns_bed, rank);
    auto pg = parallel::init_process_group(
        {.engine = "ring",
         .init_method = netns ? netns_init_method(cfg, label, 2) : "env://",
         .link_gbps = netns ? 0.0 : link_gbps(cfg, "ring", 2)});
    std::vector<PingPongSample> out;
    const double gbps = link_gbps(cfg, "ring", 2);  // the emulated links' rate, and the real ones'
    for (int64_t bytes = 256; bytes <= (16 << 20); bytes *= 4) {
      Tensor buf = zeros({bytes / 4});
      // Behind a link (emulated or real) each size's round trips take about 30 ms, never fewer
      // than 3: a Gbit/s takes 0.13 s per 16 MiB. The largest sizes stay, since tbf lets a
      // burst through at once (fewer bytes would measure the burst, not the rate).
      int reps = bytes <= (64 << 10) ? 200 : bytes <= (1 << 20) ? 40 : 8;
      if (gbps > 0) reps = std::clamp(int(0.03 / (bytes * 8.0 / (gbps * 1e9))), 3, reps);
      const int warmups = bytes > (1 << 20) ? 1 : 3;
      for (int warm = 0; warm < warmups; ++warm) {  // first touches map the pages
        if (rank == 0) pg->send(buf, 1), pg->recv(buf, 1);
        else pg->recv(buf, 0), pg->send(buf, 0);
      }
      // Best of 3 trials: on a shared machine a descheduled rank only makes a trial slower.
      double best = 1e300;
      for (int trial = 0; trial < 3; ++trial) {
        pg->barrier();
        const auto t0 = Clock::now();
        for (int i = 0; i < reps; ++i) {
          if (rank == 0) pg->send(buf, 1), pg->recv(buf, 1);
          else pg->recv(buf, 0), pg->send(buf, 0);
        }
        best = std::min(best, seconds_between(t0, Clock::now()));
      }
      out.push_back({bytes, best / reps / 2});
    }
    if (rank == 0) {
      const std::string path = run_file(cfg, label, 2, -1, "txt");
      std::filesystem::create_directories(std::filesystem::path(path).parent_path());
      std::ofstream f(path);
      for (const PingPongSample& s : out)
        f << s.bytes << ' ' << fmt::format("{:.9g}", s.seconds) << '\n';
      DPLAB_CHECK(f.good(), "could not write {}", path);
    }
    parallel::destroy_process_group();
      },
      2);
}

std::vector<PingPongSample> run_pingpong(const Config& cfg, const std::string& self_exe,
                                         const std::vector<std::string>& worker_args,
                                         const std::string& netns_bed) {
  const bool netns = !netns_bed.empty();
  const std::string label = netns ? "pingpong_netns" : "pingpong";
  const std::string path = run_file(cfg, label, 2, -1, "txt");
  std::filesystem::remove(path);
  if (netns) std::filesystem::remove(run_file(cfg, label, 2, -1, "store"));  // its FileStore
  std::vector<std::string> args = worker_args;
  for (const char* a : {"--worker", "pingpong", "--worker-n", "2"}) args.emplace_back(a);
  if (netns) args.insert(args.end(), {"--worker-netns", netns_bed});
  const std::string what = netns ? "ping-pong on netns links" : "ping-pong";
  run_worker_process(self_exe, args, what);
  std::ifstream f(path);
  DPLAB_CHECK(f.good(), "the {} left no {}", what, path);
  std::vector<PingPongSample> out;
  PingPongSample s;
  while (f >> s.bytes >> s.seconds) out.push_back(s);
  return out;
}

double allreduce_seconds(const AlphaBeta& ab, Pattern p, int n, double bytes, int cores,
                         bool wire) {
  const parallel::Algorithm algo =
      p == Pattern::Ring ? parallel::Algorithm::Ring : parallel::Algorithm::Star;
  // the model auto uses (the reduction's gamma, the wake-ups past `cores`, the shm slots for
  // n ranks), with alpha and beta of the ping-pong over this run's links
  parallel::LinkCost link = parallel::shm_link_cost(cores);
  link.alpha = ab.alpha;
  link.beta = ab.beta;
  link.segment = double(parallel::shm_segment_bytes(n, cores));
  link.wire = wire;
  return parallel::all_reduce_seconds(algo, n, bytes, link);
}

double step_seconds(const AlphaBeta& ab, Pattern p, int n, double compute_s, double grad_bytes,
                    double bucket_bytes, bool overlap, int cores, bool wire) {
  // Buckets of bucket_bytes, the last (launched last, holding the first layers) the remainder.
  const double full = std::floor(grad_bytes / bucket_bytes);
  double last_bytes = grad_bytes - full * bucket_bytes;
  double full_buckets = full;
  if (last_bytes <= 0) last_bytes = bucket_bytes, full_buckets -= 1;
  double last = allreduce_seconds(ab, p, n, last_bytes, cores, wire);
  double comm = full_buckets * allreduce_seconds(ab, p, n, bucket_bytes, cores, wire) + last;
  // One master behind links answers its leaves one after another (star.cpp), and a leaf
  // answered early pushes its next gradient while the master still answers the others: of
  // the push half only the last leaf's share is exposed, N leaf transfers a step instead of
  // 2(N-1) (dplab-project's pipelined step, cost_topology.h's Servers::pipelined).
  if (p == Pattern::Star && wire) {
    const double exposed = (1.0 + parallel::pipelined_push_share(n)) / 2;  // of push + pull
    comm *= exposed;
    last *= exposed;
  }
  if (!overlap) return compute_s + comm;
  return std::max(compute_s, comm - last) + last;
}

std::vector<ProjectionRow> project(const AlphaBeta& ab,
                                   const std::vector<std::pair<std::string, double>>& models,
                                   double base_params, double base_compute_s, double bucket_bytes) {
  std::vector<ProjectionRow> rows;
  for (const auto& [name, params] : models) {
    const double compute = base_compute_s * params / base_params;  // FLOPs per sample ~ params
    const double bytes = 4.0 * params;                             // float32 gradients
    for (int n = 1; n <= 1024; n *= 2)
      for (Pattern p : {Pattern::Ring, Pattern::Star})
        for (bool overlap : {false, true}) {
          // a cluster: every device has its own cores
          const double step = step_seconds(ab, p, n, compute, bytes, bucket_bytes, overlap, n);
          rows.push_back({name, params, n, p == Pattern::Ring ? "ring" : "star", overlap, compute,
                          step_seconds(ab, p, n, 0, bytes, bucket_bytes, false, n), step});
        }
  }
  return rows;
}

void write_projection_csv(const std::string& path, const std::vector<ProjectionRow>& rows) {
  std::ofstream f(path);
  f << "model,params,N,pattern,overlap,compute_ms,comm_ms,step_ms,efficiency\n";
  for (const ProjectionRow& r : rows)
    f << fmt::format("{},{:.0f},{},{},{},{:.4f},{:.4f},{:.4f},{:.4f}\n", r.model, r.params, r.n,
                     r.pattern, r.overlap ? 1 : 0, 1e3 * r.compute_s, 1e3 * r.comm_s,
                     1e3 * r.step_s, r.efficiency());
  DPLAB_CHECK(f.good(), "could not write {}", path);
}

}  // namespace dplab::compare
