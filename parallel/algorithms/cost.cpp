// cost.cpp: the per-rank byte formulas of cost.h, derived step by step below; then the
// alpha-beta time of each all-reduce, and the choice `auto` makes with it.
// Read next: ring.cpp (the algorithm these count), recursive_doubling.cpp.
#include "parallel/algorithms/cost.h"

#include <algorithm>
#include <cmath>
#include <vector>

#include "framework/error.h"
#include "parallel/algorithms/collectives.h"

namespace dplab::parallel {

namespace {
int mod(int a, int n) { return ((a % n) + n) % n; }
int log2_of(int p) {
  int k = 0;
  while ((1 << k) < p) ++k;
  return k;
}
}  // namespace

Traffic ring_all_reduce_cost(int64_t bytes, int64_t elem_size, int rank, int size,
                             int ranks_per_node) {
  const int n = size, r = rank;
  const NodeLayout nodes{size, ranks_per_node};
  check_node_layout(nodes, "ring_all_reduce_cost");
  if (n == 1 || bytes == 0) return {};
  // rank r sends every chunk but r+1 (reduce-scatter) and r+2 (all-gather), and receives
  // every chunk but r and r+1: 2S - |c(r+1)| - |c(r+2)| out, 2S - |c(r)| - |c(r+1)| in
  const int64_t elems = bytes / elem_size;
  auto c = [&](int i) { return chunk_elems(elems, n, mod(i, n)) * elem_size; };
  Traffic t{2 * bytes - c(r + 1) - c(r + 2), 2 * bytes - c(r) - c(r + 1)};
  // all of it goes right and comes from the left: across a node boundary if that neighbour
  // sits on another node (the last rank of a node sends across, the first receives)
  if (nodes.node_of(mod(r + 1, n)) != nodes.node_of(r)) t.sent_inter_node = t.sent;
  if (nodes.node_of(mod(r - 1, n)) != nodes.node_of(r)) t.received_inter_node = t.received;
  return t;
}

Traffic hierarchical_all_reduce_cost(int64_t bytes, int64_t elem_size, int rank, int size,
                                     int ranks_per_node) {
  const NodeLayout nodes{size, ranks_per_node};
  check_node_layout(nodes, "hierarchical_all_reduce_cost");
  const int k_nodes = nodes.nodes(), per_node = nodes.per_node();
  if (size == 1 || bytes == 0) return {};
  if (k_nodes == 1) return ring_all_reduce_cost(bytes, elem_size, rank, size);
  const int l = nodes.local_rank(rank);
  const int64_t elems = bytes / elem_size;
  auto c = [&](int i) { return chunk_elems(elems, per_node, mod(i, per_node)) * elem_size; };
  // inside the node (ring_reduce_scatter and ring_all_gather with shift -1, L ranks): the
  // reduce-scatter sends every shard but l and receives every shard but l-1; the all-gather
  // sends every shard but l+1 and receives every shard but l
  Traffic t{2 * bytes - c(l) - c(l + 1), 2 * bytes - c(l - 1) - c(l)};
  // across: the ring of the K ranks of local rank l on shard l, every byte to another node
  const Traffic across = ring_all_reduce_cost(c(l), elem_size, nodes.node_of(rank), k_nodes);
  t.sent += across.sent;
  t.received += across.received;
  t.sent_inter_node = across.sent;
  t.received_inter_node = across.received;
  return t;
}

namespace {
// `out` bytes to `peer` and `in` bytes from it, also counted as inter-node when the peer sits
// on another node than `rank`.
void add_peer(Traffic& t, const NodeLayout& nodes, int rank, int peer, int64_t out, int64_t in) {
  t.sent += out;
  t.received += in;
  if (nodes.node_of(peer) != nodes.node_of(rank)) {
    t.sent_inter_node += out;
    t.received_inter_node += in;
  }
}
}  // namespace

Traffic recursive_doubling_cost(int64_t bytes, int rank, int size, int ranks_per_node) {
  const NodeLayout nodes{size, ranks_per_node};
  check_node_layout(nodes, "recursive_doubling_cost");
  if (size == 1 || bytes == 0) return {};
  const int p = power_of_two_below(size), v = folded_rank(rank, size);
  Traffic t;
  if (v < 0) {  // fold: out to the pair r+1; unfold: the result back in
    add_peer(t, nodes, rank, rank + 1, bytes, bytes);
    return t;
  }
  if (rank < 2 * (size - p))
    add_peer(t, nodes, rank, rank - 1, bytes, bytes);  // fold in, unfold out
  for (int d = 1; d < p; d *= 2)  // log2 P swaps of the whole buffer with virtual rank v^d
    add_peer(t, nodes, rank, unfolded_rank(v ^ d, size), bytes, bytes);
  return t;
}

Traffic halving_doubling_cost(int64_t bytes, int64_t elem_size, int rank, int size,
                              int ranks_per_node) {
  const NodeLayout nodes{size, ranks_per_node};
  check_node_layout(nodes, "halving_doubling_cost");
  if (size == 1 || bytes == 0) return {};
  const int p = power_of_two_below(size), v = folded_rank(rank, size);
  Traffic t;
  if (v < 0) {  // as in recursive doubling
    add_peer(t, nodes, rank, rank + 1, bytes, bytes);
    return t;
  }
  const int64_t elems = bytes / elem_size;
  auto range = [&](int lo, int hi) {  // bytes of chunks [lo, hi) of P
    return (chunk_offset(elems, p, hi) - chunk_offset(elems, p, lo)) * elem_size;
  };
  // halving, d = P/2 .. 1: send the half of our shared 2d chunks I give away, receive the
  // partner's copy of the half I keep
  for (int d = p / 2; d >= 1; d /= 2) {
    const int lo = v & ~(2 * d - 1), mid = lo + d;
    const bool keep_lower = (v & d) == 0;
    add_peer(t, nodes, rank, unfolded_rank(v ^ d, size),
             keep_lower ? range(mid, lo + 2 * d) : range(lo, mid),
             keep_lower ? range(lo, mid) : range(mid, lo + 2 * d));
  }
  // doubling, d = 1 .. P/2: my d chunks out, the partner's d chunks in
  for (int d = 1; d < p; d *= 2) {
    const int mine = v & ~(d - 1), theirs = (v ^ d) & ~(d - 1);
    add_peer(t, nodes, rank, unfolded_rank(v ^ d, size), range(mine, mine + d),
             range(theirs, theirs + d));
  }
  if (rank < 2 * (size - p)) add_peer(t, nodes, rank, rank - 1, bytes, bytes);  // fold, unfold
  return t;
}

Traffic one_shot_cost(int64_t bytes, int size, int ranks_per_node) {
  const NodeLayout nodes{size, ranks_per_node};
  check_node_layout(nodes, "one_shot_cost");
  // my S to each of the others, and theirs to me; the N - L of them off my node across
  const int64_t across = (size - nodes.per_node()) * bytes;
  return {(size - 1) * bytes, (size - 1) * bytes, across, across};
}

Traffic all_reduce_cost(Algorithm algo, int64_t bytes, int64_t elem_size, int rank, int size,
                        int ranks_per_node) {
  const int rpn = ranks_per_node;
  switch (algo) {
    case Algorithm::Ring: return ring_all_reduce_cost(bytes, elem_size, rank, size, rpn);
    case Algorithm::Star: return star_all_reduce_cost(bytes, rank, size, rpn);
    case Algorithm::RecursiveDoubling: return recursive_doubling_cost(bytes, rank, size, rpn);
    case Algorithm::HalvingDoubling:
      return halving_doubling_cost(bytes, elem_size, rank, size, rpn);
    case Algorithm::OneShot: return one_shot_cost(bytes, size, rpn);
    case Algorithm::Hierarchical:
      return hierarchical_all_reduce_cost(bytes, elem_size, rank, size, rpn);
    case Algorithm::Auto: break;
  }
  DPLAB_FAIL("all_reduce_cost: expected a concrete algorithm, got {} (resolve auto with "
             "choose_all_reduce first)",
             algorithm_name(algo));
}

Traffic ring_all_gather_cost(int64_t block_bytes, int size) {
  // N-1 steps, one block out and one in per step
  return {(size - 1) * block_bytes, (size - 1) * block_bytes};
}

Traffic chain_broadcast_cost(int64_t bytes, int rank, int size, int root) {
  const int pos = mod(rank - root, size);  // place in the chain
  return {pos < size - 1 ? bytes : 0, pos > 0 ? bytes : 0};
}

Traffic star_all_reduce_cost(int64_t bytes, int rank, int size, int ranks_per_node) {
  const NodeLayout nodes{size, ranks_per_node};
  check_node_layout(nodes, "star_all_reduce_cost");
  if (size == 1) return {};
  const int64_t hub = (size - 1) * bytes;  // rank 0: one copy in and one out per leaf
  const int64_t remote = (size - nodes.per_node()) * bytes;  // ... of the leaves off node 0
  if (rank == 0) return {hub, hub, remote, remote};
  const int64_t across = nodes.node_of(rank) != 0 ? bytes : 0;
  return {bytes, bytes, across, across};
}

Traffic star_reduce_cost(int64_t bytes, int rank, int size, int root) {
  return rank == root ? Traffic{0, (size - 1) * bytes} : Traffic{bytes, 0};
}

Traffic star_scatter_cost(int64_t bytes, int rank, int size, int root) {
  return rank == root ? Traffic{(size - 1) * bytes, 0} : Traffic{0, bytes};
}

Traffic ps_push_cost(const ServerPlan& plan, int64_t elem_size, int rank, int size) {
  Traffic t;
  const int mine = plan.shard_of(rank);
  for (int s = 0; s < plan.count() && plan.is_worker(rank); ++s)
    if (s != mine) t.sent += plan.shard_elems(s) * elem_size;  // my copy of shard s, to its server
  if (mine >= 0) {
    const int others = plan.workers(size) - (plan.is_worker(rank) ? 1 : 0);
    t.received = others * plan.shard_elems(mine) * elem_size;  // every other worker's copy
  }
  return t;
}

Traffic ps_pull_cost(const ServerPlan& plan, int64_t elem_size, int rank, int size) {
  const Traffic push = ps_push_cost(plan, elem_size, rank, size);
  return {push.received, push.sent};
}

Traffic send_cost(int64_t bytes) { return {bytes, 0}; }
Traffic recv_cost(int64_t bytes) { return {0, bytes}; }

// ---- time ----

LinkCost shm_link_cost(int cores) {
  return {.alpha = 1.2e-6, .beta = 1.0 / 30e9, .gamma = 1.0 / 30e9, .cores = cores, .wake = 30e-6};
}

namespace {

// One rank's part of an all-reduce: its steps, the bytes of the larger direction of each (a
// step that sends m and receives m costs alpha + m·beta: both directions at once), and the
// bytes it adds into its buffer.
struct RankWork {
  double steps = 0, bytes = 0, reduced = 0;
  double seconds(const LinkCost& l) const {
    return steps * l.alpha + bytes * l.beta + reduced * l.gamma;
  }
};

// The ranks of each algorithm, as the few kinds there are (ring: one; star: the hub and its
// leaves; the fold: ranks folded away, their partners, the rest) with how many of each, from
// the step structure of its file: a count, not a list, so pricing N ranks costs the same for
// 4 as for a cluster of millions (cost_topology.cpp).
struct RankKind {
  RankWork work;
  int ranks;
};

std::vector<RankKind> work_of(Algorithm algo, int n, double s) {
  switch (algo) {
    case Algorithm::Hierarchical:  // on one level: the ring
    case Algorithm::Ring:  // 2(N-1) steps of one chunk, S/N; N-1 of them reduce
      return {{{2.0 * (n - 1), 2.0 * (n - 1) / n * s, double(n - 1) / n * s}, n}};
    case Algorithm::Star:  // leaves: S out, S in; rank 0: N-1 copies in (reduced), N-1 out
      return {{{2.0 * (n - 1), 2.0 * (n - 1) * s, (n - 1) * s}, 1}, {{2, 2 * s, 0}, n - 1}};
    case Algorithm::RecursiveDoubling:
    case Algorithm::HalvingDoubling: {
      const int p = power_of_two_below(n), k = log2_of(p), extra = n - p;
      const bool rd = algo == Algorithm::RecursiveDoubling;
      // the core on P ranks: log2 P whole buffers, or 2 log2 P halving/doubling steps
      const RankWork core = rd ? RankWork{double(k), k * s, k * s}
                               : RankWork{2.0 * k, 2.0 * (p - 1) / p * s, double(p - 1) / p * s};
      return {{{2, 2 * s, 0}, extra},  // folded away: S out, the result S in
              {{core.steps + 2, core.bytes + 2 * s, core.reduced + s}, extra},  // + fold, unfold
              {core, n - 2 * extra}};  // the core alone
    }
    case Algorithm::OneShot:  // one step, but N-1 waits: S to each peer, N-1 buffers added
      return {{{double(n - 1), (n - 1) * s, (n - 1) * s}, n}};
    case Algorithm::Auto: break;
  }
  DPLAB_FAIL("all_reduce_seconds: resolve auto first");
}

// A stretch of an algorithm's critical path: `handoffs` segment hand-offs one after another,
// in each of which `ranks` ranks must run.
struct Phase {
  double handoffs;
  int ranks;
};

// The phases of each algorithm, from the step structure of its file.
std::vector<Phase> phases_of(Algorithm algo, int n, double s, double segment) {
  auto segs = [&](double bytes) { return std::max(1.0, std::ceil(bytes / segment)); };
  const int p = power_of_two_below(n), k = log2_of(p), pairs = 2 * (n - p);
  switch (algo) {
    case Algorithm::Hierarchical:                                     // on one level: the ring
    case Algorithm::Ring: return {{2.0 * (n - 1) * segs(s / n), n}};  // 2(N-1) steps of S/N
    case Algorithm::Star: return {{2 * segs(s), n}};           // the leaves in, then out again
    case Algorithm::OneShot: return {{(n - 1) * segs(s), n}};  // a wait on each peer per slot
    case Algorithm::RecursiveDoubling:
    case Algorithm::HalvingDoubling: {
      double core = k * segs(s);                 // log2 P swaps of S
      if (algo == Algorithm::HalvingDoubling) {  // halves S/2, S/4, ..., S/P, there and back
        core = 0;
        for (int j = 1; j <= k; ++j) core += 2 * segs(s / (1 << j));
      }
      std::vector<Phase> ph{{core, p}};
      if (pairs > 0) ph.push_back({2 * segs(s), pairs});  // the fold and the unfold
      return ph;
    }
    case Algorithm::Auto: break;
  }
  DPLAB_FAIL("all_reduce_seconds: resolve auto first");
}

// Wake-ups on the critical path: every hand-off of a phase that needs more ranks than cores;
// and with more ranks than cores, at least one per call.
double wakeups(Algorithm algo, int n, double bytes, const LinkCost& link) {
  if (n <= link.cores) return 0;
  double count = 0;
  for (const Phase& ph : phases_of(algo, n, bytes, link.segment))
    if (ph.ranks > link.cores) count += ph.handoffs;
  return std::max(1.0, count);
}

}  // namespace

double all_reduce_seconds(Algorithm algo, int n, double bytes, const LinkCost& link) {
  if (n <= 1 || bytes <= 0) return 0;
  double busiest = 0, all = 0;
  LinkCost cpu = link;  // what the cores must do themselves
  if (link.wire) cpu.beta = 0;
  for (const RankKind& kind : work_of(algo, n, bytes)) {
    if (kind.ranks == 0) continue;
    busiest = std::max(busiest, kind.work.seconds(link));
    all += kind.ranks * kind.work.seconds(cpu);
  }
  // with more ranks than cores, the cores must do everyone's work: at best all / cores; and
  // each crowded hand-off waits for the scheduler
  return std::max(busiest, all / std::max(1, link.cores)) +
         wakeups(algo, n, bytes, link) * link.wake;
}

Algorithm choose_all_reduce(int n, double bytes, const LinkCost& link) {
  Algorithm best = Algorithm::Ring;
  double best_s = all_reduce_seconds(best, n, bytes, link);
  for (Algorithm a :
       {Algorithm::RecursiveDoubling, Algorithm::HalvingDoubling, Algorithm::OneShot}) {
    const double t = all_reduce_seconds(a, n, bytes, link);
    if (t < best_s) best = a, best_s = t;
  }
  return best;
}

// ---- two levels ----

HierarchicalSeconds hierarchical_all_reduce_seconds(int nodes, int per_node, double bytes,
                                                    const LinkCost& intra, const LinkCost& inter,
                                                    Algorithm between) {
  DPLAB_CHECK(nodes >= 1 && per_node >= 1,
              "hierarchical_all_reduce_seconds: expected nodes and ranks per node >= 1, got {} "
              "and {}",
              nodes, per_node);
  const int n = nodes * per_node;
  HierarchicalSeconds t;
  if (n == 1 || bytes <= 0) return t;
  // every stage keeps all N ranks busy (K rings inside the nodes, then L rings across): with
  // fewer cores than ranks each stage takes N/C times its critical path, and each of its
  // hand-offs (a segment of a step) waits for the scheduler: `wake` each
  const bool crowded = n > intra.cores;
  const double slower = crowded ? double(n) / std::max(1, intra.cores) : 1.0;
  const double wake = crowded ? intra.wake : 0.0;
  auto segs = [&](double b) { return std::max(1.0, std::ceil(b / intra.segment)); };
  const double shard = bytes / per_node;
  if (per_node > 1) {
    // L-1 steps of one shard each way, the reduce-scatter adding what it receives
    const double handoffs = (per_node - 1) * segs(shard);
    t.reduce_scatter =
        (per_node - 1) * (intra.alpha + shard * intra.beta + shard * intra.gamma) * slower +
        handoffs * wake;
    t.all_gather = (per_node - 1) * (intra.alpha + shard * intra.beta) * slower + handoffs * wake;
  }
  if (nodes > 1) {
    // one ring of K on S/L, with a core per rank; the L rings run side by side
    LinkCost ring = inter;
    ring.cores = nodes;
    ring.wake = 0;
    double handoffs = 0;
    for (const Phase& ph : phases_of(between, nodes, shard, inter.segment)) handoffs += ph.handoffs;
    t.between_nodes = all_reduce_seconds(between, nodes, shard, ring) * slower + handoffs * wake;
  }
  return t;
}

double all_reduce_seconds(Algorithm algo, int n, double bytes, const NodeLinks& links) {
  const NodeLayout nodes{n, links.ranks_per_node};
  check_node_layout(nodes, "all_reduce_seconds");
  if (n <= 1 || bytes <= 0) return 0;
  if (nodes.nodes() == 1) return all_reduce_seconds(algo, n, bytes, links.intra);
  if (algo == Algorithm::Hierarchical && nodes.per_node() > 1)
    return hierarchical_all_reduce_seconds(nodes.nodes(), nodes.per_node(), bytes, links.intra,
                                           links.inter)
        .total();
  // a flat algorithm's steps wait for their slowest hop: across a node boundary
  return std::max(all_reduce_seconds(algo, n, bytes, links.intra),
                  all_reduce_seconds(algo, n, bytes, links.inter));
}

Algorithm choose_all_reduce(int n, double bytes, const NodeLinks& links) {
  const NodeLayout nodes{n, links.ranks_per_node};
  check_node_layout(nodes, "choose_all_reduce");
  if (nodes.nodes() == 1) return choose_all_reduce(n, bytes, links.intra);
  Algorithm best = Algorithm::Ring;
  double best_s = all_reduce_seconds(best, n, bytes, links);
  std::vector<Algorithm> others{Algorithm::RecursiveDoubling, Algorithm::HalvingDoubling,
                                Algorithm::OneShot};
  if (nodes.per_node() > 1) others.push_back(Algorithm::Hierarchical);
  for (Algorithm a : others) {
    const double t = all_reduce_seconds(a, n, bytes, links);
    if (t < best_s) best = a, best_s = t;
  }
  return best;
}

}  // namespace dplab::parallel
