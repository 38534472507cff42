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
// The all-reduce pattern of dplab's own engine. Star = parameter server: all to rank 0,
// rank 0 reduces, sends back. MPI and NCCL pick their own and ignore it.
enum class Algorithm { Ring, Star };

std::string reduce_op_name(ReduceOp op);
std::string algorithm_name(Algorithm a);

// Bytes of one rank in one collective: payload it copied into a peer's slot (sent) or
// consumed from a slot a peer filled (received).
struct Traffic {
  int64_t sent = 0;
  int64_t received = 0;
};

// How a buffer of n elements is cut into `parts` chunks: the first n % parts chunks get
// one element more than the others (n = 10, parts = 4 -> 3, 3, 2, 2). Ring and
// reduce_scatter use it; the counters' exact values follow from it.
int64_t chunk_elems(int64_t n, int parts, int index);
int64_t chunk_offset(int64_t n, int parts, int index);

}  // namespace dplab::parallel
