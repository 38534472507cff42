// textbook_traffic.h: the traffic that the engines which cannot see their wire (mpi, nccl,
// gloo) report for each collective: algorithms/cost.h's formula for the algorithm their
// libraries run, chosen here once. dplab's own engine counts its bytes instead.
//   all_reduce      a ring (what MPI and NCCL run for large messages; gloo's ring)
//   broadcast       a chain from the root (NCCL's ring broadcast)
//   reduce, gather  a star into the root; scatter a star out of it
//   all_gather      a ring of blocks; reduce_scatter moves what an all_gather of its output
//                   blocks moves (a ring reduce-scatter is the all-reduce's first half)
//   send, recv      the tensor's bytes
// gloo's bcube all-reduce and its reduce_scatter (an all-reduce of the N blocks) are its own,
// counted in gloo_engine.cpp.
// Read next: algorithms/cost.h (the formulas), mpi_engine.cpp.
#pragma once
#include "framework/tensor/tensor.h"
#include "parallel/algorithms/cost.h"
#include "parallel/engines/collective_engine.h"

namespace dplab::parallel {

// The formulas for one rank of a group; each takes the tensor of its call (all_gather's
// input, reduce_scatter's and scatter's output: one rank's block).
struct TextbookTraffic {
  int rank = 0;
  int size = 1;

  Traffic all_reduce(const Tensor& t) const {
    return ring_all_reduce_cost(t.nbytes(), element_size(t.dtype()), rank, size);
  }
  Traffic broadcast(const Tensor& t, int root) const {
    return chain_broadcast_cost(t.nbytes(), rank, size, root);
  }
  Traffic reduce(const Tensor& t, int root) const {
    return star_reduce_cost(t.nbytes(), rank, size, root);
  }
  Traffic all_gather(const Tensor& input) const {
    return ring_all_gather_cost(input.nbytes(), size);
  }
  Traffic reduce_scatter(const Tensor& output) const {
    return ring_all_gather_cost(output.nbytes(), size);
  }
  Traffic gather(const Tensor& input, int root) const {
    return star_reduce_cost(input.nbytes(), rank, size, root);
  }
  Traffic scatter(const Tensor& output, int root) const {
    return star_scatter_cost(output.nbytes(), rank, size, root);
  }
  Traffic send(const Tensor& t) const { return send_cost(t.nbytes()); }
  Traffic recv(const Tensor& t) const { return recv_cost(t.nbytes()); }
};

inline TextbookTraffic textbook_traffic(const CollectiveEngine& engine) {
  return {engine.rank(), engine.size()};
}

}  // namespace dplab::parallel
