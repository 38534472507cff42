// projection.h: the step timeline (timeline.h) for every N of a list and every algorithm,
// on the cluster a user describes: N devices fill nodes of G (N < G: one node of N), each
// node with K NICs; weak scaling, so every device keeps its batch and its compute per step.
// Efficiency = compute / step: 1 at N = 1, and what a projection is read for.
// The rows go to the printed table, projection.csv, and (at the largest N) timeline.csv,
// which plot_projection.py draws.
// Read next: projection.cpp, then cli.cpp (where the inputs come from).
#pragma once
#include <string>
#include <vector>

#include "benchmarks/project/timeline.h"
#include "parallel/algorithms/cost_topology.h"

namespace dplab::projection {

struct ProjectionInputs {
  int devices_per_node = 1;  // G
  int nics_per_node = 1;     // K
  parallel::LevelLink intra{}, inter{};
  std::vector<int> ns{};
  double gradient_bytes = 0;
  double bucket_cap_bytes = 25.0 * (1 << 20);
  Compute compute{};
  ReadinessProfile profile{};
  std::vector<parallel::ClusterAlgorithm> algorithms{parallel::ClusterAlgorithm::Ring};
  int servers = 0;         // ps: 0 = one per node
  bool colocated = true;   // ps: servers on the worker nodes, or machines of their own
  bool ps_barrier = true;  // ps: pulls wait for every push (a synchronous parameter server)
  double largest_tensor_bytes = 0;  // ps: > 0: servers hold whole tensors, so one holds this
};

// N devices laid out as nodes of G: throws Error when N > G and G does not divide N.
parallel::Cluster cluster_for(int n, const ProjectionInputs& in);

struct ProjectionRow {
  int n = 1, nodes = 1, per_node = 1;
  parallel::ClusterAlgorithm algorithm = parallel::ClusterAlgorithm::Ring;
  int servers = 0;  // ps and star; 0 for the all-reduces
  double imbalance = 1;  // ps: the busiest server's share over the even one
  int buckets = 0;
  StepTimeline step{};
  // One master (the star, a ps with one co-located server): the step when its link serves
  // the leaves one after another instead of fairly (Servers::pipelined), the fastest this
  // algorithm gets; the step itself otherwise.
  bool one_master = false;
  double pipelined_step_s = 0;
  parallel::LinkLoad load{};  // bytes per step through the busiest link of each kind
};

std::vector<ProjectionRow> run_projection(const ProjectionInputs& in);

std::string format_table(const std::vector<ProjectionRow>& rows);
void write_projection_csv(const std::string& path, const std::vector<ProjectionRow>& rows);
// Compute and every stage of every bucket, for the rows of the largest N.
void write_timeline_csv(const std::string& path, const std::vector<ProjectionRow>& rows);

}  // namespace dplab::projection
