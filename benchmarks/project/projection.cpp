// projection.cpp: every (N, algorithm) of projection.h through simulate_step, and the
// table and CSVs the rows become.
// Read next: cli.cpp.
#include "benchmarks/project/projection.h"

#include <fmt/core.h>

#include <algorithm>
#include <fstream>

#include "framework/error.h"

namespace dplab::projection {

using parallel::ClusterAlgorithm;

parallel::Cluster cluster_for(int n, const ProjectionInputs& in) {
  DPLAB_CHECK(n >= 1, "expected device counts >= 1, got {}", n);
  DPLAB_CHECK(in.devices_per_node >= 1, "expected devices per node >= 1, got {}", in.devices_per_node);
  const int g = std::min(n, in.devices_per_node);
  DPLAB_CHECK(n % g == 0, "N = {} devices do not fill nodes of {} devices: expected N < {} or a multiple of {}", n, g,
              g, g);
  return {.nodes = n / g, .devices_per_node = g, .nics_per_node = in.nics_per_node, .intra = in.intra,
          .inter = in.inter};
}

std::vector<ProjectionRow> run_projection(const ProjectionInputs& in) {
  DPLAB_CHECK(!in.ns.empty(), "expected at least one device count");
  DPLAB_CHECK(!in.algorithms.empty(), "expected at least one algorithm");
  const std::vector<double> buckets = bucket_bytes(in.gradient_bytes, in.bucket_cap_bytes);
  std::vector<ProjectionRow> rows;
  for (ClusterAlgorithm a : in.algorithms)
    for (int n : in.ns) {
      const parallel::Cluster c = cluster_for(n, in);
      const bool ps = a == ClusterAlgorithm::ParameterServer, star = a == ClusterAlgorithm::Star;
      parallel::Servers servers{.count = star ? 1 : in.servers > 0 ? in.servers : c.nodes,
                                .colocated = star || in.colocated};
      ProjectionRow row{.n = n, .nodes = c.nodes, .per_node = c.devices_per_node, .algorithm = a,
                        .buckets = static_cast<int>(buckets.size())};
      if (ps || star) row.servers = servers.colocated ? std::min(servers.count, c.nodes) : servers.count;
      // whole tensors on each server: the one holding the largest holds at least that much
      if (ps && in.largest_tensor_bytes > 0 && in.gradient_bytes > 0)
        servers.imbalance = std::max(1.0, in.largest_tensor_bytes * row.servers / in.gradient_bytes);
      row.imbalance = servers.imbalance;
      auto stages = [&](double bytes) { return parallel::all_reduce_stages(a, c, servers, bytes); };
      row.step = simulate_step(in.compute, in.profile, buckets, stages, ps && in.ps_barrier);
      row.pipelined_step_s = row.step.step_s;
      row.one_master = n > 1 && (star || (ps && servers.colocated && row.servers == 1));
      if (row.one_master) {  // its other bound: the link serves the leaves one after another
        parallel::Servers fifo = servers;
        fifo.pipelined = true;
        auto best = [&](double bytes) { return parallel::all_reduce_stages(a, c, fifo, bytes); };
        row.pipelined_step_s = simulate_step(in.compute, in.profile, buckets, best, ps && in.ps_barrier).step_s;
      }
      row.load = parallel::link_load(a, c, servers, in.gradient_bytes);
      rows.push_back(std::move(row));
    }
  return rows;
}

namespace {
std::string servers_cell(const ProjectionRow& r) { return r.servers ? std::to_string(r.servers) : "-"; }
constexpr double kMiB = 1 << 20;
}  // namespace

std::string format_table(const std::vector<ProjectionRow>& rows) {
  bool any_master = false;
  for (const ProjectionRow& r : rows) any_master = any_master || r.one_master;
  std::string out = fmt::format("{:>6} {:>9} {:<17} {:>4} {:>10} {:>10} {:>10} {:>10} {:>8} {:>6} {:>11} {:>11}{}\n", "N",
                                "nodes x G", "algorithm", "S", "compute ms", "comm ms", "exposed ms", "step ms",
                                "overlap%", "eff%", "NIC MiB", "server MiB", any_master ? "  pipelined ms" : "");
  for (const ProjectionRow& r : rows)
    out += fmt::format("{:>6} {:>9} {:<17} {:>4} {:>10.2f} {:>10.2f} {:>10.2f} {:>10.2f} {:>8.1f} {:>6.1f} {:>11.1f} "
                       "{:>11}{}\n",
                       r.n, fmt::format("{}x{}", r.nodes, r.per_node), parallel::cluster_algorithm_name(r.algorithm),
                       servers_cell(r), 1e3 * r.step.compute.total(), 1e3 * r.step.comm_s, 1e3 * r.step.exposed_s,
                       1e3 * r.step.step_s, 100 * r.step.overlap(), 100 * r.step.efficiency(), r.load.nic / kMiB,
                       r.servers ? fmt::format("{:.1f}", r.load.server / kMiB) : "-",
                       !any_master ? "" : r.one_master ? fmt::format(" {:>13.2f}", 1e3 * r.pipelined_step_s)
                                                         : fmt::format(" {:>13}", "-"));
  if (any_master)
    out += "pipelined ms: one master (star, ps S=1) whose link serves its leaves one after another, so all pushes but "
           "the last leaf's hide behind the previous pulls: the fastest it gets; step ms shares the link fairly\n";
  return out;
}

void write_projection_csv(const std::string& path, const std::vector<ProjectionRow>& rows) {
  std::ofstream f(path);
  f << "N,nodes,devices_per_node,algorithm,servers,buckets,forward_ms,backward_ms,optimizer_ms,compute_ms,comm_ms,"
       "exposed_ms,step_ms,overlap,efficiency,device_link_mib,nic_mib,server_mib,server_imbalance,step_pipelined_ms\n";
  for (const ProjectionRow& r : rows) {
    const StepTimeline& s = r.step;
    f << fmt::format("{},{},{},{},{},{},{:.6f},{:.6f},{:.6f},{:.6f},{:.6f},{:.6f},{:.6f},{:.6f},{:.6f},{:.4f},{:.4f},"
                     "{:.4f},{:.4f},{:.6f}\n",
                     r.n, r.nodes, r.per_node, parallel::cluster_algorithm_name(r.algorithm), r.servers, r.buckets,
                     1e3 * s.compute.forward_s, 1e3 * s.compute.backward_s, 1e3 * s.compute.optimizer_s,
                     1e3 * s.compute.total(), 1e3 * s.comm_s, 1e3 * s.exposed_s, 1e3 * s.step_s, s.overlap(),
                     s.efficiency(), r.load.device / kMiB, r.load.nic / kMiB, r.load.server / kMiB, r.imbalance,
                     1e3 * r.pipelined_step_s);
  }
  DPLAB_CHECK(f.good(), "could not write {}", path);
}

void write_timeline_csv(const std::string& path, const std::vector<ProjectionRow>& rows) {
  int largest = 0;
  for (const ProjectionRow& r : rows) largest = std::max(largest, r.n);
  std::ofstream f(path);
  f << "N,algorithm,bucket,what,start_ms,end_ms\n";
  for (const ProjectionRow& r : rows) {
    if (r.n != largest) continue;
    const std::string a = parallel::cluster_algorithm_name(r.algorithm);
    const Compute& c = r.step.compute;
    auto line = [&](int bucket, const std::string& what, double s, double e) {
      f << fmt::format("{},{},{},{},{:.6f},{:.6f}\n", r.n, a, bucket, what, 1e3 * s, 1e3 * e);
    };
    line(-1, "forward", 0, c.forward_s);
    line(-1, "backward", c.forward_s, c.forward_s + c.backward_s);
    for (const TimedStage& st : r.step.stages) line(st.bucket, st.stage, st.start_s, st.end_s);
    line(-1, "optimizer", r.step.step_s - c.optimizer_s, r.step.step_s);
  }
  DPLAB_CHECK(f.good(), "could not write {}", path);
}

}  // namespace dplab::projection
