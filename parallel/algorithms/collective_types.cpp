// collective_types.cpp: the names of collective_types.h's words, and how a buffer is cut
// into one chunk per rank (the counters' exact values follow from that cut).
// Read next: collectives.h, ring.cpp.
#include "parallel/algorithms/collective_types.h"

#include <algorithm>

#include "framework/error.h"

namespace dplab::parallel {

std::string reduce_op_name(ReduceOp op) {
  switch (op) {
    case ReduceOp::Sum: return "sum";
    case ReduceOp::Avg: return "avg";
    case ReduceOp::Max: return "max";
    case ReduceOp::Min: return "min";
  }
  return "?";
}
std::string algorithm_name(Algorithm a) {
  switch (a) {
    case Algorithm::Ring: return "ring";
    case Algorithm::Star: return "star";
    case Algorithm::RecursiveDoubling: return "recursive_doubling";
    case Algorithm::HalvingDoubling: return "halving_doubling";
    case Algorithm::OneShot: return "one_shot";
    case Algorithm::Hierarchical: return "hierarchical";
    case Algorithm::Auto: return "auto";
  }
  return "?";
}

Algorithm algorithm_from_name(const std::string& name) {
  for (Algorithm a : kAlgorithms)
    if (algorithm_name(a) == name) return a;
  DPLAB_FAIL("all_reduce algorithm: expected ring, star, recursive_doubling, halving_doubling, "
             "one_shot, hierarchical or auto, got \"{}\"",
             name);
}

void check_node_layout(const NodeLayout& layout, const char* who) {
  DPLAB_CHECK(layout.ranks_per_node == 0 ||
                  (layout.ranks_per_node > 0 && layout.world % layout.ranks_per_node == 0),
              "{}: ranks_per_node must be 0 (one node) or divide the world size {} (every node "
              "runs as many ranks), got {}",
              who, layout.world, layout.ranks_per_node);
}

int64_t chunk_elems(int64_t n, int parts, int index) {
  return n / parts + (index < n % parts ? 1 : 0);
}
int64_t chunk_offset(int64_t n, int parts, int index) {
  // the first n % parts chunks are one longer, so they end at index * (base + 1)
  int64_t base = n / parts, extra = n % parts;
  return index * base + std::min<int64_t>(index, extra);
}

}  // namespace dplab::parallel
