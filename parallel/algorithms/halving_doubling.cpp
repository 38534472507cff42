/*
 * halving_doubling.cpp: Rabenseifner's all-reduce, recursive halving then recursive
 * doubling: the ring's bandwidth in 2 log2 N steps instead of 2(N-1).
 *
 * N = P, a power of two. The buffer is cut into P *chunks* (chunk_elems, as the ring does);
 * a *range* [lo, hi) of chunks is one contiguous block of the buffer.
 * Reduce-scatter by recursive halving, log2 P steps, distance d = P/2, P/4, ..., 1: rank v
 * and its partner v XOR d hold the same range of 2d chunks, and split it: the one whose
 * bit d is 0 keeps the lower half, the other the upper half. Each sends the half it gives
 * away and adds the partner's copy of the half it keeps into its own. After the last step
 * rank v holds chunk v, reduced over all ranks.
 * All-gather by recursive doubling, the same partners in reverse, d = 1, 2, ..., P/2: rank
 * v sends the range it holds (d chunks) and copies in the partner's, the adjacent d chunks;
 * its range doubles, until it is the whole buffer.
 *
 *   P = 4, chunks c0..c3:  d=2: 0,1 keep c0c1, 2,3 keep c2c3   d=1: rank v keeps cv
 *                          then d=1: pairs swap chunks, d=2: pairs swap halves
 *
 * A chunk is reduced on one rank only and then copied, so every rank ends with the same bits.
 * Any N: the fold of recursive_doubling.cpp (2E ranks pair up, the even ones wait).
 * Cost: 2 log2 P steps; rank v sends S/2 + S/4 + ... + S/P = (P-1)/P·S in each half:
 * 2(P-1)/P·S per rank, the ring's volume (exactly, when P divides S; cost.cpp has the
 * formula for any S), received the same. With a fold, a paired even rank sends and
 * receives S, a paired odd rank S more than that each way, in 2 more steps.
 * Read next: one_shot.cpp (the whole all-reduce in one step), cost.cpp (what each algorithm
 * moves, and which one `auto` picks).
 */
#include "framework/error.h"
#include "parallel/algorithms/collectives.h"

namespace dplab::parallel {

namespace {

// Chunks [lo, hi) of `buffer` cut into `parts` chunks: one contiguous block.
Block chunk_range(const Exchange& ex, const Block& buffer, int parts, int lo, int hi) {
  const int64_t first = chunk_offset(buffer.elems, parts, lo);
  return {buffer.data + first * ex.elem(), chunk_offset(buffer.elems, parts, hi) - first};
}

}  // namespace

void halving_doubling_all_reduce(Exchange& ex, Block buffer) {
  const int n = ex.tr.size();
  if (n == 1 || buffer.elems == 0) return;
  with_fold(ex, buffer, [&](int v, int p) {
    // reduce-scatter: halve my range each step, keeping the half my bit d points to
    for (int d = p / 2; d >= 1; d /= 2) {
      const int partner = unfolded_rank(v ^ d, n);
      const int lo = v & ~(2 * d - 1), mid = lo + d, hi = lo + 2 * d;  // the range we share
      const bool keep_lower = (v & d) == 0;
      Block keep =
          keep_lower ? chunk_range(ex, buffer, p, lo, mid) : chunk_range(ex, buffer, p, mid, hi);
      Block give =
          keep_lower ? chunk_range(ex, buffer, p, mid, hi) : chunk_range(ex, buffer, p, lo, mid);
      send_recv(ex, partner, give, partner, keep, Into::Reduce);
    }
    // all-gather: my range (d chunks, starting at v's multiple of d) to the partner, theirs in
    for (int d = 1; d < p; d *= 2) {
      const int pv = v ^ d, partner = unfolded_rank(pv, n);
      const int mine = v & ~(d - 1), theirs = pv & ~(d - 1);
      send_recv(ex, partner, chunk_range(ex, buffer, p, mine, mine + d), partner,
                chunk_range(ex, buffer, p, theirs, theirs + d), Into::Copy);
    }
  });
}

}  // namespace dplab::parallel
