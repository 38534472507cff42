// collective_types.h: the small words every layer of the collectives shares: the reduction
// a collective applies (ReduceOp), the all-reduce pattern (Algorithm), the bytes a rank moved
// (Traffic) and how a buffer is cut into one chunk per rank (chunk_elems / chunk_offset).
// Included by the ProcessGroup API (process_group.h), the engine seam
// (engines/collective_engine.h) and the algorithms (collectives.h), so none of them has to
// include another to name these.
// Read next: process_group.h.
#pragma once
#include <cstdint>
#include <string>

namespace dplab::parallel {

// The collective's reduction. Avg is Sum followed by a scale by 1/N (float32 only); the
// elementwise kernel underneath (Backend::reduce_into) only ever sees Sum, Max or Min.
enum class ReduceOp { Sum, Avg, Max, Min };
// The all-reduce pattern of dplab's own engine (MPI and NCCL pick their own and ignore it):
//   Ring               reduce-scatter + all-gather around a ring (ring.cpp): bandwidth-optimal
//   Star               parameter server: all to rank 0, rank 0 reduces, sends back (star.cpp)
//   RecursiveDoubling  log2 N exchanges of the whole buffer (recursive_doubling.cpp): latency
//   HalvingDoubling    Rabenseifner: recursive halving + doubling (halving_doubling.cpp): both
//   OneShot            every rank sends its buffer to every other and sums all N itself
//                      (one_shot.cpp): one step, for small messages on ranks that share cores
//   Hierarchical       reduce-scatter inside each node, a ring per local rank across the
//                      nodes, all-gather inside the node (hierarchical.cpp): Horovod's and
//                      NCCL's two levels; on one node it is the ring
//   Auto               per call, the one the alpha-beta model of cost.h says is fastest for
//                      this size and N (choose_all_reduce), as MPI picks by message size and
//                      NCCL picks tree or ring
enum class Algorithm {
  Ring,
  Star,
  RecursiveDoubling,
  HalvingDoubling,
  OneShot,
  Hierarchical,
  Auto
};
inline constexpr Algorithm kAlgorithms[] = {
    Algorithm::Ring,
    Algorithm::Star,
    Algorithm::RecursiveDoubling,
    Algorithm::HalvingDoubling,
    Algorithm::OneShot,
    Algorithm::Hierarchical,
    Algorithm::Auto,
};

std::string reduce_op_name(ReduceOp op);
// "ring", "star", "recursive_doubling", "halving_doubling", "one_shot", "hierarchical", "auto"
std::string algorithm_name(Algorithm a);
// The inverse of algorithm_name; throws Error listing the names for anything else.
Algorithm algorithm_from_name(const std::string& name);

// Bytes of one rank in one collective: payload it copied into a peer's slot (sent) or
// consumed from a slot a peer filled (received); and the part of each that went to or came
// from a rank on another node (NodeLayout below): the bytes that cross a machine's link.
struct Traffic {
  int64_t sent = 0;
  int64_t received = 0;
  int64_t sent_inter_node = 0;
  int64_t received_inter_node = 0;
};

// How the ranks sit on machines, torchrun's way (ProcessGroupOptions::ranks_per_node):
// node k holds ranks [k·L, (k+1)·L), L = ranks_per_node; 0 means every rank on one node.
struct NodeLayout {
  int world = 1;
  int ranks_per_node = 0;
  int per_node() const { return ranks_per_node > 0 ? ranks_per_node : world; }  // L
  int nodes() const { return world / per_node(); }                              // K
  int node_of(int rank) const { return rank / per_node(); }
  int local_rank(int rank) const { return rank % per_node(); }
};
// Throws Error unless ranks_per_node is 0 or divides world (every node runs as many ranks).
void check_node_layout(const NodeLayout& layout, const char* who);

// How a buffer of n elements is cut into `parts` chunks: the first n % parts chunks get
// one element more than the others (n = 10, parts = 4 -> 3, 3, 2, 2). Ring and
// reduce_scatter use it; the counters' exact values follow from it.
int64_t chunk_elems(int64_t n, int parts, int index);
int64_t chunk_offset(int64_t n, int parts, int index);

}  // namespace dplab::parallel
