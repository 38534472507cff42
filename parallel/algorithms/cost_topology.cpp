// cost_topology.cpp: the stages and link loads of cost_topology.h, one algorithm at a time.
// Words: N = M·G devices, M nodes of G devices, K NICs per node, S bytes (one bucket);
// alpha_1, beta_1 the intra-node link, alpha_2, beta_2 the inter-node one. A single-level
// all-reduce's time is cost.h's all_reduce_seconds (every rank with a core of its own, no
// reduction term: a GPU adds far faster than a link moves), and the hierarchical one's is
// cost.h's hierarchical_all_reduce_seconds; only the topology is new here.
// Read next: benchmarks/project/timeline.cpp.
#include "parallel/algorithms/cost_topology.h"

#include <algorithm>
#include <cmath>
#include <cstdint>

#include "framework/error.h"
#include "parallel/algorithms/collectives.h"  // power_of_two_below
#include "parallel/algorithms/cost.h"

namespace dplab::parallel {

void check_cluster(const Cluster& c) {
  DPLAB_CHECK(c.nodes >= 1 && c.devices_per_node >= 1 && c.nics_per_node >= 1,
              "cluster: expected nodes, devices per node and NICs per node >= 1, got {}, {} and {}", c.nodes,
              c.devices_per_node, c.nics_per_node);
  const int64_t devices = int64_t{c.nodes} * c.devices_per_node;  // before devices() can overflow
  DPLAB_CHECK(devices <= kMaxClusterDevices, "cluster: expected at most {} devices, got {} nodes x {} = {}",
              kMaxClusterDevices, c.nodes, c.devices_per_node, devices);
  for (const LevelLink* l : {&c.intra, &c.inter})
    DPLAB_CHECK(l->alpha >= 0 && l->beta >= 0 && std::isfinite(l->alpha) && std::isfinite(l->beta),
                "cluster: expected alpha >= 0 s and beta >= 0 s/byte, got alpha {} and beta {} ({} level)", l->alpha,
                l->beta, l == &c.intra ? "intra" : "inter");
}

std::string cluster_algorithm_name(ClusterAlgorithm a) {
  switch (a) {
    case ClusterAlgorithm::Ring: return "ring";
    case ClusterAlgorithm::Hierarchical: return "hierarchical";
    case ClusterAlgorithm::HalvingDoubling: return "halving-doubling";
    case ClusterAlgorithm::Star: return "star";
    case ClusterAlgorithm::ParameterServer: return "ps";
  }
  return "?";
}

ClusterAlgorithm cluster_algorithm_from_name(const std::string& name) {
  for (ClusterAlgorithm a : {ClusterAlgorithm::Ring, ClusterAlgorithm::Hierarchical, ClusterAlgorithm::HalvingDoubling,
                             ClusterAlgorithm::Star, ClusterAlgorithm::ParameterServer})
    if (cluster_algorithm_name(a) == name) return a;
  DPLAB_FAIL("expected an algorithm ring, hierarchical, halving-doubling, star or ps, got '{}'", name);
}

namespace {

// cost.h's alpha-beta link for one level, with a core per rank and no reduction cost.
LinkCost level_cost(const LevelLink& l, int ranks) {
  return {.alpha = l.alpha, .beta = l.beta, .gamma = 0, .cores = ranks, .wake = 0};
}

// The servers a placement can have: co-located, at most one per node.
int server_count(ClusterAlgorithm a, const Cluster& c, const Servers& s) {
  if (a == ClusterAlgorithm::Star) return 1;
  DPLAB_CHECK(s.count >= 1, "ps: expected at least 1 server, got {}", s.count);
  return s.colocated ? std::min(s.count, c.nodes) : s.count;
}

// A parameter server's push (or pull: the same bytes the other way). Each of the S_v
// servers takes a share S/S_v of the bucket from each of the N devices. The push ends when
// the busiest endpoint is done: a server (its messages one after another, its bytes through
// its own link and, co-located, its node's NICs) or a node whose G devices send all of S
// each through the K NICs.
double ps_push_seconds(const Cluster& c, int servers, bool colocated, double imbalance, double bytes) {
  const int m = c.nodes, g = c.devices_per_node, n = c.devices(), k = c.nics_per_node;
  const double mean = bytes / servers, share = mean * imbalance;  // the busiest server's share
  const LevelLink &l1 = c.intra, &l2 = c.inter;
  if (!colocated) {
    const double server = n * l2.alpha + n * share * l2.beta;                 // N messages in
    const double node = servers * l2.alpha + g * bytes * l2.beta / k;       // G·S out of a node
    return std::max(server, node);
  }
  // co-located: G-1 local devices over the server device's intra link, N-G remote ones
  // through its node's NICs, which also carry its own devices' shares for the other servers
  const double messages = (g - 1) * l1.alpha + (n - g) * l2.alpha;
  const double nic_bytes = std::max((n - g) * share, g * mean * (servers - 1));
  const double server = messages + std::max((g - 1) * share * l1.beta, nic_bytes * l2.beta / k);
  // a node without a server sends all of S per device through its NICs
  const double plain_node = servers < m ? servers * l2.alpha + g * bytes * l2.beta / k : 0;
  return std::max(server, plain_node);
}

}  // namespace

LinkLoad link_load(ClusterAlgorithm a, const Cluster& c, const Servers& s, double bytes) {
  check_cluster(c);
  const int m = c.nodes, g = c.devices_per_node, n = c.devices();
  if (n == 1 || bytes <= 0) return {};
  switch (a) {
    case ClusterAlgorithm::Ring: {
      const double per_rank = 2.0 * (n - 1) / n * bytes;
      return {.device = g > 1 ? per_rank : 0, .nic = m > 1 ? per_rank : 0};
    }
    case ClusterAlgorithm::Hierarchical:
    case ClusterAlgorithm::HalvingDoubling: {
      LinkLoad l{.device = 2.0 * (g - 1) / g * bytes};
      if (m > 1) {
        // G shards of S/G, each all-reduced over the M nodes; each node's NICs carry all G
        const double shard = bytes / g;
        double per_node = 2.0 * (m - 1) / m * shard;  // ring
        if (a == ClusterAlgorithm::HalvingDoubling) {
          const int p = power_of_two_below(m);
          per_node = 2.0 * (p - 1) / p * shard + (p < m ? shard : 0);  // + the fold, on the folding nodes
        }
        l.nic = g * per_node;
      }
      return l;
    }
    case ClusterAlgorithm::Star:
    case ClusterAlgorithm::ParameterServer: {
      const int sv = server_count(a, c, s);
      const bool colocated = a == ClusterAlgorithm::Star || s.colocated;
      const double mean = bytes / sv, share = mean * (a == ClusterAlgorithm::Star ? 1 : s.imbalance);
      if (!colocated) return {.device = g > 1 ? bytes : 0, .nic = g * bytes, .server = n * share};
      double nic = m > 1 ? std::max((n - g) * share, g * mean * (sv - 1)) : 0;
      if (sv < m) nic = std::max(nic, g * bytes);
      return {.device = g > 1 ? bytes : 0, .nic = nic, .server = (g - 1) * share};
    }
  }
  return {};
}

std::vector<Stage> all_reduce_stages(ClusterAlgorithm a, const Cluster& c, const Servers& s, double bytes) {
  check_cluster(c);
  const int m = c.nodes, g = c.devices_per_node, n = c.devices();
  if (n == 1 || bytes <= 0) return {};
  switch (a) {
    case ClusterAlgorithm::Ring: {
      // every step moves S/N across every hop at once: the slowest kind of hop sets the pace
      double t = 0;
      if (g > 1) t = std::max(t, all_reduce_seconds(Algorithm::Ring, n, bytes, level_cost(c.intra, n)));
      if (m > 1) t = std::max(t, all_reduce_seconds(Algorithm::Ring, n, bytes, level_cost(c.inter, n)));
      return {{"ring", t, Channel::Both}};
    }
    case ClusterAlgorithm::Hierarchical:
    case ClusterAlgorithm::HalvingDoubling: {
      // cost.h's two-level formula (hierarchical_all_reduce_seconds), with a core per device
      // and the NIC share: G shard all-reduces at once through K NICs, so each flow sees K/G
      // of a NIC (all of one when K >= G): its beta is beta_2·G/K
      LevelLink shared = c.inter;
      shared.beta *= std::max(1.0, double(g) / c.nics_per_node);
      const bool ring = a == ClusterAlgorithm::Hierarchical;
      const HierarchicalSeconds h = hierarchical_all_reduce_seconds(
          m, g, bytes, level_cost(c.intra, n), level_cost(shared, n),
          ring ? Algorithm::Ring : Algorithm::HalvingDoubling);
      std::vector<Stage> out;
      if (g > 1) out.push_back({"reduce-scatter (node)", h.reduce_scatter, Channel::Both});
      if (m > 1)
        out.push_back(
            {ring ? "ring (nodes)" : "halving-doubling (nodes)", h.between_nodes, Channel::Both});
      if (g > 1) out.push_back({"all-gather (node)", h.all_gather, Channel::Both});
      return out;
    }
    case ClusterAlgorithm::Star:
    case ClusterAlgorithm::ParameterServer: {
      const bool colocated = a == ClusterAlgorithm::Star || s.colocated;
      const double imbalance = a == ClusterAlgorithm::Star ? 1 : s.imbalance;
      DPLAB_CHECK(imbalance >= 1, "ps: expected the busiest server's share over the even one >= 1, got {}", imbalance);
      const double t = ps_push_seconds(c, server_count(a, c, s), colocated, imbalance, bytes);
      // co-located, push and pull each use both directions of the servers' NICs (shares in
      // and the node's own shares out): one after the other. Separate: opposite directions.
      if (colocated) {
        const bool one_master = server_count(a, c, s) == 1;
        const double push = one_master && s.pipelined ? t * pipelined_push_share(c.devices()) : t;
        return {{"push", push, Channel::Both}, {"pull", t, Channel::Both}};
      }
      return {{"push", t, Channel::Up}, {"pull", t, Channel::Down}};
    }
  }
  return {};
}

double cluster_all_reduce_seconds(ClusterAlgorithm a, const Cluster& c, const Servers& s, double bytes) {
  double t = 0;
  for (const Stage& st : all_reduce_stages(a, c, s, bytes)) t += st.seconds;
  return t;
}

}  // namespace dplab::parallel
