// cost.h: what each collective moves per rank, as formulas: the one place they are written.
// ring.cpp, star.cpp and p2p.cpp count the same bytes as they move them (Ctx::traffic), and
// tests/parallel/test_collectives_threads.cpp checks that every count equals its formula
// here, for N = 1..4 and sizes N does not divide. Engines that cannot see their wire (MPI,
// NCCL) report these formulas as their counters (ProcessGroup, process_group.cpp).
// S is the tensor's bytes (for all_gather / reduce_scatter: one rank's block).
// Read next: cost.cpp, then ring.cpp.
#pragma once
#include <cstdint>

#include "parallel/comm/collective_types.h"

namespace dplab::parallel {

// Ring reduce-scatter + all-gather over N chunks: 2(N-1)/N * S per rank when N divides S.
Traffic ring_all_reduce_cost(int64_t bytes, int64_t elem_size, int rank, int size);
// Ring all-gather or reduce-scatter of N blocks of S bytes: N-1 blocks out and N-1 in.
Traffic ring_all_gather_cost(int64_t block_bytes, int size);
// Chain root -> root+1 -> ...: all but the last send S, all but the root receive S.
Traffic chain_broadcast_cost(int64_t bytes, int rank, int size, int root);
// Star: a leaf sends S and receives S; rank 0 receives (N-1)S and sends (N-1)S.
Traffic star_all_reduce_cost(int64_t bytes, int rank, int size);
// Star into root (reduce, gather): each leaf sends S, the root receives (N-1)S.
Traffic star_reduce_cost(int64_t bytes, int rank, int size, int root);
// Star out of root (scatter): the root sends (N-1)S, each leaf receives S.
Traffic star_scatter_cost(int64_t bytes, int rank, int size, int root);
// One message of S bytes.
Traffic send_cost(int64_t bytes);
Traffic recv_cost(int64_t bytes);

}  // namespace dplab::parallel
