/*
 * ps.cpp: the sharded parameter server's two halves, over the same transport as the ring.
 *
 * Words (server_plan.h): the flat buffer of P elements is cut into S *shards*, shard s held by
 * *server* rank servers[s]; *workers* compute gradients (every rank when the servers are
 * co-located, the others when they are separate). A worker's buffer holds all P elements; a
 * separate server's holds only its shard.
 *   push: every worker sends shard s of its gradient to server s, which sums the W copies
 *         (its own too, when it works). The server then steps its shard (the optimizer:
 *         ps/parameter_server.cpp), between the halves.
 *   pull: every server sends its updated shard to every worker, which copies it in place.
 *
 * The schedule: N-1 steps; in the pull, at step t rank r sends to r+t and receives from r-t
 * (mod N), wherever the roles say a message goes (server -> worker); in the push the other
 * way round, r sends to r-t and receives from r+t (worker -> server). Rank r's send at step
 * t is what its receiver takes at step t, so the pairs match, and one step streams out while
 * the other streams in, segment by segment (p2p.cpp's send_recv): no cycle of waits, and
 * every server's link busy at once. The mirror makes a server take the pushes in the order
 * it served the pulls (server 0: workers 1, 2, ...): the worker it answered first computes
 * first and pushes first, while the server's link still sends to the others, as a real
 * server's replies and requests overlap on its full-duplex NIC.
 *
 * Cost per half (b_s: shard s in bytes): a worker sends (push) or receives (pull) every shard
 * it does not hold itself; server s takes in (push) or sends (pull) b_s per worker other than
 * itself. S = 1 co-located is the star: the server moves (N-1)·P each way, the others P.
 * S = N co-located moves the ring's bytes: (N-1)/N·P per half, 2(N-1)/N·P in all, per rank.
 * Separate servers: a worker moves P each way, a server W·b_s = W·P/S. (cost.cpp: ps_push_cost)
 * Read next: ps/parameter_server.h (the optimizer step between push and pull), star.cpp.
 */
#include "framework/error.h"
#include "parallel/algorithms/collectives.h"

namespace dplab::parallel {

namespace {

int mod(int a, int n) { return ((a % n) + n) % n; }

// Shard s of the buffer `rank` holds (all of it on a separate server).
Block shard_block(const Exchange& ex, const Block& buffer, const ServerPlan& plan, int rank,
                  int s) {
  return {buffer.data + plan.local_offset(rank, s) * ex.elem(), plan.shard_elems(s)};
}

void check_buffer(const Exchange& ex, const Block& buffer, const ServerPlan& plan,
                  const char* half) {
  const int r = ex.tr.rank();
  DPLAB_CHECK(buffer.elems == plan.buffer_elems(r),
              "{}: rank {} passed {} elements, expected {} ({} of a {}-element buffer over {})",
              half, r, buffer.elems, plan.buffer_elems(r), plan.is_worker(r) ? "all" : "its shard",
              plan.elems, describe(plan));
}

}  // namespace

void ps_push(Exchange& ex, Block buffer, const ServerPlan& plan) {
  const int n = ex.tr.size(), r = ex.tr.rank();
  check_buffer(ex, buffer, plan, "ps_push");
  const int mine = plan.shard_of(r);  // the shard I serve, -1 if none
  // a working server starts from its own gradient; a separate one from the first it receives
  bool have_first = plan.is_worker(r);
  for (int t = 1; t < n; ++t) {
    const int to = mod(r - t, n), from = mod(r + t, n);
    // step t: my shard of `to` out, if I work and it serves; `from`'s copy of my shard in
    const bool out = plan.is_worker(r) && plan.is_server(to);
    const bool in = mine >= 0 && plan.is_worker(from);
    const Block none{buffer.data, 0};
    send_recv(ex, to, out ? shard_block(ex, buffer, plan, r, plan.shard_of(to)) : none, from,
              in ? shard_block(ex, buffer, plan, r, mine) : none,
              have_first ? Into::Reduce : Into::Copy);
    have_first = have_first || in;
  }
}

void ps_pull(Exchange& ex, Block buffer, const ServerPlan& plan) {
  const int n = ex.tr.size(), r = ex.tr.rank();
  check_buffer(ex, buffer, plan, "ps_pull");
  const int mine = plan.shard_of(r);
  for (int t = 1; t < n; ++t) {
    const int to = mod(r + t, n), from = mod(r - t, n);
    // step t: my updated shard out to `to` if it works; `from`'s shard in if it serves
    const bool out = mine >= 0 && plan.is_worker(to);
    const bool in = plan.is_worker(r) && plan.is_server(from);
    const Block none{buffer.data, 0};
    send_recv(ex, to, out ? shard_block(ex, buffer, plan, r, mine) : none, from,
              in ? shard_block(ex, buffer, plan, r, plan.shard_of(from)) : none, Into::Copy);
  }
}

}  // namespace dplab::parallel
