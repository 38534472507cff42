/*
 * ring.cpp: the ring all-reduce, written once over the Transport interface.
 *
 * N ranks sit on a ring: rank r sends to right = r+1 and receives from left = r-1 (mod N).
 * The buffer of S elements is cut into N *chunks* (chunk_elems: the first S mod N chunks
 * are one element longer). A chunk is moved in *segments* of at most one transport slot
 * (128 KiB on shm and thread, 4 MiB on cuda_ipc: p2p.cpp); each link has 4 slots, so while rank r reduces segment k from its left, the
 * left rank is already copying segment k+1 in: copying and reducing overlap.
 *
 * Reduce-scatter, N-1 steps: at step s rank r sends chunk r-s and receives chunk r-s-1,
 * reducing it into its own copy. After N-1 steps rank r holds chunk r+1 reduced over all.
 * All-gather, N-1 steps: at step s rank r sends chunk r+1-s (reduced) and receives chunk
 * r-s, overwriting its copy. After them every rank holds every reduced chunk.
 *
 * Cost: 2(N-1) steps; rank r sends every chunk except r+1 (in reduce-scatter) and except
 * r+2 (in all-gather): 2S - |c(r+1)| - |c(r+2)| elements, which is 2(N-1)/N * S when N
 * divides S. It receives 2S - |c(r)| - |c(r+1)|. No rank moves more than any other.
 * (The formulas, in one place: cost.cpp.)
 * Read next: recursive_doubling.cpp and halving_doubling.cpp (fewer steps), star.cpp (the
 * same collective as a parameter server).
 */
#include <algorithm>

#include "framework/error.h"
#include "parallel/algorithms/collectives.h"

namespace dplab::parallel {

namespace {

int mod(int a, int n) { return ((a % n) + n) % n; }

// One ring step: stream `out` to the right while `in` streams in from the left, segment by
// segment, interleaved so neither side waits for a whole chunk (p2p.cpp's send_recv).
// reduce: add into `in` (reduce-scatter) instead of overwriting it (all-gather).
void ring_step(Exchange& ex, const Block& out, const Block& in, bool reduce) {
  const int n = ex.tr.size(), r = ex.tr.rank();
  send_recv(ex, mod(r + 1, n), out, mod(r - 1, n), in, reduce ? Into::Reduce : Into::Copy);
}

}  // namespace

void ring_reduce_scatter(Exchange& ex, std::vector<Block>& blocks, int shift) {
  const int n = ex.tr.size(), r = ex.tr.rank();
  for (int s = 0; s < n - 1; ++s) {
    // step s: send chunk r-s (+shift) right, reduce chunk r-s-1 (+shift) from the left
    ring_step(ex, blocks[mod(r - s + shift, n)], blocks[mod(r - s - 1 + shift, n)], true);
  }
}

void ring_all_gather(Exchange& ex, std::vector<Block>& blocks, int shift) {
  const int n = ex.tr.size(), r = ex.tr.rank();
  const int owned = r + 1 + shift;
  for (int s = 0; s < n - 1; ++s) {
    // step s: pass on the chunk received last step (my own at s = 0), take the next one
    ring_step(ex, blocks[mod(owned - s, n)], blocks[mod(owned - s - 1, n)], false);
  }
}

void ring_all_reduce(Exchange& ex, Block buffer) {
  const int n = ex.tr.size();
  if (n == 1 || buffer.elems == 0) return;
  std::vector<Block> chunks(n);
  for (int i = 0; i < n; ++i)
    chunks[i] = {buffer.data + chunk_offset(buffer.elems, n, i) * ex.elem(),
                 chunk_elems(buffer.elems, n, i)};
  ring_reduce_scatter(ex, chunks, 0);  // rank r now holds reduced chunk r+1
  ring_all_gather(ex, chunks, 0);      // ... and now every reduced chunk
}

// Broadcast as a pipelined chain root -> root+1 -> ... -> root-1: each rank forwards
// segment k while its right neighbour is still receiving segment k-1. Every rank but the
// last of the chain sends S bytes; every rank but the root receives S.
void chain_broadcast(Exchange& ex, Block buffer, int root) {
  const int n = ex.tr.size(), r = ex.tr.rank();
  const int pos = mod(r - root, n);  // my place in the chain
  const int left = mod(r - 1, n), right = mod(r + 1, n);
  for (int64_t k = 0; k < segment_count(ex, buffer) && n > 1; ++k) {
    if (pos > 0)
      recv_segment_of(ex, left, buffer, k, Into::Copy);  // from the previous in the chain
    if (pos < n - 1) send_segment_of(ex, right, buffer, k);
  }
}

}  // namespace dplab::parallel
