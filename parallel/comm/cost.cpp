// cost.cpp: the per-rank byte formulas of cost.h, derived step by step below.
// Read next: ring.cpp (the algorithm these count).
#include "parallel/comm/cost.h"

namespace dplab::parallel {

namespace {
int mod(int a, int n) { return ((a % n) + n) % n; }
}  // namespace

Traffic ring_all_reduce_cost(int64_t bytes, int64_t elem_size, int rank, int size) {
  const int n = size, r = rank;
  if (n == 1 || bytes == 0) return {};
  // rank r sends every chunk but r+1 (reduce-scatter) and r+2 (all-gather), and receives
  // every chunk but r and r+1: 2S - |c(r+1)| - |c(r+2)| out, 2S - |c(r)| - |c(r+1)| in
  const int64_t elems = bytes / elem_size;
  auto c = [&](int i) { return chunk_elems(elems, n, mod(i, n)) * elem_size; };
  return {2 * bytes - c(r + 1) - c(r + 2), 2 * bytes - c(r) - c(r + 1)};
}

Traffic ring_all_gather_cost(int64_t block_bytes, int size) {
  // N-1 steps, one block out and one in per step
  return {(size - 1) * block_bytes, (size - 1) * block_bytes};
}

Traffic chain_broadcast_cost(int64_t bytes, int rank, int size, int root) {
  const int pos = mod(rank - root, size);  // place in the chain
  return {pos < size - 1 ? bytes : 0, pos > 0 ? bytes : 0};
}

Traffic star_all_reduce_cost(int64_t bytes, int rank, int size) {
  if (size == 1) return {};
  const int64_t hub = (size - 1) * bytes;  // rank 0: one copy in and one out per leaf
  return rank == 0 ? Traffic{hub, hub} : Traffic{bytes, bytes};
}

Traffic star_reduce_cost(int64_t bytes, int rank, int size, int root) {
  return rank == root ? Traffic{0, (size - 1) * bytes} : Traffic{bytes, 0};
}

Traffic star_scatter_cost(int64_t bytes, int rank, int size, int root) {
  return rank == root ? Traffic{(size - 1) * bytes, 0} : Traffic{0, bytes};
}

Traffic send_cost(int64_t bytes) { return {bytes, 0}; }
Traffic recv_cost(int64_t bytes) { return {0, bytes}; }

}  // namespace dplab::parallel
