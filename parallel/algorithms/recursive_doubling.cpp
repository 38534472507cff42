/*
 * recursive_doubling.cpp: the latency-optimal all-reduce, and the fold that lets it (and
 * halving_doubling.cpp) run on any number of ranks.
 *
 * N = P, a power of two. log2 P steps; at step k rank r and its *partner* r XOR 2^k swap
 * their whole buffers and each adds the other's into its own. After step k, r holds the
 * reduction over the 2^(k+1) ranks that differ from it only in bits 0..k; after the last
 * step, over all. Both partners compute a + b (one as a + b, the other as b + a: the same
 * float), so every rank ends with the same bits.
 *
 *   P = 4:  step 0: 0<->1  2<->3     step 1: 0<->2  1<->3
 *
 * Any N: the *fold*. Let P be the largest power of two <= N and E = N - P the extra ranks.
 * The first 2E ranks pair up, (0,1), (2,3), ...: the even one of a pair sends its buffer to
 * the odd one, which adds it in, and the even one waits. The P ranks left (the odd ones of
 * the pairs, then 2E..N-1) are virtual ranks 0..P-1 and run the algorithm; at the end each
 * odd rank of a pair sends the result back to its even one (the *unfold*).
 *
 *   N = 3 (P = 2, E = 1):  fold 0 -> 1;  1<->2 (virtual 0<->1);  unfold 1 -> 0
 *
 * Cost: log2 P steps of S bytes each way: log2(P)·S sent and received per rank, against
 * the ring's 2(N-1)/N·S, but log2 P latencies against 2(N-1): the choice for small
 * messages, where a step's latency costs more than its bytes. With a fold, a paired even
 * rank sends S and receives S (2 steps), a paired odd rank moves (log2 P + 1)·S each way
 * in log2 P + 2 steps, and the others log2(P)·S. (Formulas: cost.cpp.)
 * Read next: halving_doubling.cpp, the same steps with halves of the buffer.
 */
#include "framework/error.h"
#include "parallel/algorithms/collectives.h"

namespace dplab::parallel {

int power_of_two_below(int n) {
  int p = 1;
  while (p * 2 <= n) p *= 2;
  return p;
}

int folded_rank(int r, int n) {
  const int extra = n - power_of_two_below(n);
  if (r < 2 * extra) return r % 2 == 1 ? r / 2 : -1;  // odd of a pair: on; even: folded away
  return r - extra;
}

int unfolded_rank(int v, int n) {
  const int extra = n - power_of_two_below(n);
  return v < extra ? 2 * v + 1 : v + extra;
}

void with_fold(Exchange& ex, Block buffer, const std::function<void(int v, int p)>& core) {
  const int n = ex.tr.size(), r = ex.tr.rank();
  const int p = power_of_two_below(n), v = folded_rank(r, n);
  if (v < 0) {
    // an even rank of a pair: hand my buffer to r+1, take the result back from it
    send_block(ex, r + 1, buffer);
    recv_copy(ex, r + 1, buffer);
    return;
  }
  const bool paired = r < 2 * (n - p);
  if (paired) recv_reduce(ex, r - 1, buffer);  // fold: my pair's buffer into mine
  core(v, p);
  if (paired) send_block(ex, r - 1, buffer);  // unfold: the result to my pair
}

void recursive_doubling_all_reduce(Exchange& ex, Block buffer) {
  const int n = ex.tr.size();
  if (n == 1 || buffer.elems == 0) return;
  with_fold(ex, buffer, [&](int v, int p) {
    for (int d = 1; d < p; d *= 2) {
      // step log2 d: swap whole buffers with virtual rank v XOR d, add theirs into mine
      const int partner = unfolded_rank(v ^ d, n);
      send_recv(ex, partner, buffer, partner, buffer, Into::Reduce);
    }
  });
}

}  // namespace dplab::parallel
