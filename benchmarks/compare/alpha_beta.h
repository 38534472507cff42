// alpha_beta.h: the alpha-beta cost model of dplab-compare (tutorials/16_ps_vs_ring.md).
// Sending m bytes between two ranks costs alpha + m * beta (alpha: latency, s; beta:
// inverse bandwidth, s/byte). A ping-pong over the shm process group measures both; then
// an all-reduce of S bytes over N ranks costs
//   ring  T = 2(N-1)·alpha + 2(N-1)/N · S·beta   (reduce-scatter + all-gather, every rank busy)
//   star  T = 2(N-1)·alpha + 2(N-1)   · S·beta   (the master receives N-1 copies, then sends
//                                                  N-1 copies back, one after the other)
// (parallel/algorithms/cost.h writes these, for every algorithm, in one place: this calls it) and
// with more ranks than cores (N > C) the ranks take turns: the ring, whose N ranks all work
// in every step, takes N/C times as long; the star's leaves sit idle while rank 0 works, so
// its time stays rank 0's (all_reduce_seconds' two bounds, cost.h);
// and a DDP step with compute time C and buckets b_1..b_k (b_k the last launched) costs
//   no overlap   C + sum_i T(b_i)
//   overlap      max(C, sum_i T(b_i) - T(b_k)) + T(b_k)   (all but the last bucket can hide
//                                                          under backward; the last cannot)
// Read next: alpha_beta.cpp.
#pragma once
#include <cstdint>
#include <string>
#include <vector>

#include "benchmarks/compare/compare.h"

namespace dplab::compare {

struct PingPongSample {
  int64_t bytes = 0;
  double seconds = 0;  // one way: round trip / 2
};

struct AlphaBeta {
  double alpha = 0;  // seconds
  double beta = 0;   // seconds per byte
  double bandwidth_gbs() const { return beta > 0 ? 1e-9 / beta : 0; }
};

// Weighted least squares of seconds = alpha + beta * bytes, each sample weighted by
// 1/seconds^2 (relative error), so the small sizes fix alpha and the large ones beta.
// alpha is clamped at >= 0. Throws with fewer than two distinct sizes.
AlphaBeta fit_alpha_beta(const std::vector<PingPongSample>& samples);

// The body of `dplab-compare --worker pingpong`: two ranks over shm; rank 0 writes
// runs/pingpong.txt ("bytes seconds" lines). The parent's side: run it and read the file.
// With a netns bed (--links netns), ranks 0 and 1 sit on nodes 0 and 1 of the bed and the
// ping-pong crosses the real link between them (runs/pingpong_netns.txt): the calibration
// of the real links.
void pingpong_worker_main(const Config& cfg);
std::vector<PingPongSample> run_pingpong(const Config& cfg, const std::string& self_exe,
                                         const std::vector<std::string>& worker_args,
                                         const std::string& netns_bed = "");

enum class Pattern { Ring, Star };
// Seconds of one all-reduce of `bytes` over n ranks sharing `cores` CPUs (a cluster: cores = n).
// wire: the bytes cross a link (the emulated one sleeps for them) rather than the cores
// copying them (shm): cost.h's LinkCost::wire.
double allreduce_seconds(const AlphaBeta& ab, Pattern p, int n, double bytes, int cores,
                         bool wire = false);
// Seconds of one DDP step: `compute_s`, gradients of `grad_bytes` in buckets of `bucket_bytes`.
// The star behind links (wire) is pipelined: its leaves push while the master still answers
// the others, N leaf transfers a step, not 2(N-1).
double step_seconds(const AlphaBeta& ab, Pattern p, int n, double compute_s, double grad_bytes,
                    double bucket_bytes, bool overlap, int cores, bool wire = false);

struct ProjectionRow {
  std::string model;
  double params = 0;
  int n = 1;
  std::string pattern;  // ring | star
  bool overlap = false;
  double compute_s = 0, comm_s = 0, step_s = 0;
  double efficiency() const { return step_s > 0 ? compute_s / step_s : 0; }
};
// Weak scaling (every device keeps its batch, so compute per step stays compute_s) for
// N = 1, 2, 4, ..., 1024, for the named models; compute time scales with parameter count.
std::vector<ProjectionRow> project(const AlphaBeta& ab,
                                   const std::vector<std::pair<std::string, double>>& models,
                                   double base_params, double base_compute_s, double bucket_bytes);
void write_projection_csv(const std::string& path, const std::vector<ProjectionRow>& rows);

}  // namespace dplab::compare
