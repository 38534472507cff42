// cost_topology.h: what one all-reduce costs on a cluster, not on one ring of equal links.
// A cluster is M nodes of G devices. A device reaches the others of its node over its own
// intra-node link (PCIe, NVLink); a node reaches other nodes through K NICs that its G
// devices share. Each level has an alpha (seconds per message) and a beta (seconds per byte,
// one direction; links are full duplex). On it: the flat ring, the hierarchical all-reduce
// (ring or halving-doubling between nodes), and the parameter server with S servers,
// separate or co-located (S = 1 is the star). Formulas per algorithm in cost_topology.cpp;
// the single-level ones come from cost.h, which this file calls and does not repeat.
// Read next: cost_topology.cpp, then benchmarks/project/timeline.h (the step they go into).
#pragma once
#include <string>
#include <vector>

namespace dplab::parallel {

struct LevelLink {
  double alpha = 0;  // seconds per message (the software's and the wire's fixed cost)
  double beta = 0;   // seconds per byte, one direction
};

struct Cluster {
  int nodes = 1;             // M
  int devices_per_node = 1;  // G
  int nics_per_node = 1;     // K: shared by the node's G devices
  LevelLink intra, inter;
  int devices() const { return nodes * devices_per_node; }
};
// The most devices a Cluster may have: 2^24, some hundred times the largest clusters built,
// and small enough that every count the formulas form from N (2N, the power of two above
// N/2) stays an int. The model costs the same at any N: it counts the kinds of rank of each
// algorithm (cost.cpp), never lists the ranks.
constexpr int kMaxClusterDevices = 1 << 24;
// Checks M, G, K >= 1, M·G <= kMaxClusterDevices and non-negative alphas and betas; throws
// Error naming the field.
void check_cluster(const Cluster& c);

//   Ring             one ring over all N = M·G devices, node by node: G-1 hops inside each
//                    node and one hop out of it through the NIC
//   Hierarchical     reduce-scatter inside each node (ring), then G all-reduces of one shard
//                    S/G each between the M nodes (ring), all G through the node's NICs at
//                    once, then an all-gather inside each node (Horovod's and NCCL's 2-level)
//   HalvingDoubling  the same with Rabenseifner's halving-doubling between the nodes
//   Star             a parameter server with one server: ParameterServer with S = 1
//   ParameterServer  each of S servers holds 1/S of every bucket; every device pushes its
//                    gradient shard to each server and pulls the result back
enum class ClusterAlgorithm { Ring, Hierarchical, HalvingDoubling, Star, ParameterServer };
std::string cluster_algorithm_name(ClusterAlgorithm a);  // "ring", "hierarchical", ...
// The inverse; throws Error listing the names for anything else.
ClusterAlgorithm cluster_algorithm_from_name(const std::string& name);

// Where the parameter servers run. Separate: S machines of their own, each behind one NIC
// of the inter-node speed. Co-located: one server on each of S nodes (S <= M), on one of
// its devices (as dplab's star makes rank 0 the master): its own node's devices reach it
// over their intra links, the others through the NICs.
// Shards: the busiest server takes `imbalance` times the even share S/S_v of every bucket
// (1: perfectly even). A server that holds whole tensors, as TensorFlow's
// replica_device_setter places variables, holds at least the largest one: imbalance >=
// largest·S_v / S (projection.cpp computes it so from --largest-tensor-mb).
// One master (the star, one co-located server) shares its link fairly among its N-1 leaves
// by default, so every pull ends with the last and the next push queues behind it all.
// `pipelined`: the master serves the leaves one after another (dplab's star and ps do, and
// the namespace bed's links send in that order), and those served first push their next
// gradients while the others still pull: all pushes but the last leaf's hide, and the push
// stage costs one leaf's share of it, pipelined_push_share(N). Ignored with more than one
// server.
struct Servers {
  int count = 1;
  bool colocated = true;
  double imbalance = 1;
  bool pipelined = false;
};

// The share of one master's push stage a step still waits for when the master serves its
// n-1 leaves in turn: one leaf's, 1/(n-1) (all of it at n = 2).
inline double pipelined_push_share(int n) { return n > 2 ? 1.0 / (n - 1) : 1.0; }

// Bytes one all-reduce of S bytes puts through the busiest link of each kind, in its busier
// direction. The textbook volumes, checked against cost.h's per-rank formulas in
// tests/project/test_cost_topology.cpp:
//   ring          device 2(N-1)/N·S; NIC 2(N-1)/N·S (one ring flow crosses each node's NIC)
//   hierarchical  device 2(G-1)/G·S; NIC 2(M-1)/M·S (G shard rings of S/G over M nodes)
//   ps (S_v servers, separate)  server N·S/S_v; NIC of a worker node G·S (server terms
//                 times the imbalance)
//   ps (co-located)  server device (G-1)·S/S_v; NIC of a server node max((N-G)·S/S_v,
//                 G·S·(S_v-1)/S_v), of another node G·S; star (S_v = 1): (N-1)·S at the hub
struct LinkLoad {
  double device = 0;  // a device's intra link (a co-located server's own device not counted)
  double nic = 0;     // the busiest node's NICs together
  double server = 0;  // ps: the busiest server's own link (its NIC if separate, its intra
                      // link if co-located); 0 for the all-reduces
};
LinkLoad link_load(ClusterAlgorithm a, const Cluster& c, const Servers& s, double bytes);

// A stage of one bucket's all-reduce in the step's timeline, on a channel:
//   Both  uses both directions of its links (a ring step sends and receives at once): one
//         collective at a time, as DDP's communication stream and Horovod's thread run them
//   Up    the parameter server's push (device -> server) on separate servers: the pull
//   Down  of one bucket then runs beside the push of the next (the other direction)
enum class Channel { Both, Up, Down };
struct Stage {
  std::string name;  // "ring", "reduce-scatter (node)", "push", ...
  double seconds = 0;
  Channel channel = Channel::Both;
};
// The stages of one all-reduce of `bytes` (one bucket), in order. Empty for N = 1 or no bytes.
std::vector<Stage> all_reduce_stages(ClusterAlgorithm a, const Cluster& c, const Servers& s, double bytes);
// Their sum: the all-reduce alone, nothing to overlap with.
double cluster_all_reduce_seconds(ClusterAlgorithm a, const Cluster& c, const Servers& s, double bytes);

}  // namespace dplab::parallel
