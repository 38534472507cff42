// cost.h: what each collective moves per rank, as formulas: the one place they are written.
// ring.cpp, star.cpp and p2p.cpp count the same bytes as they move them (Exchange::traffic), and
// tests/parallel/test_collectives_threads.cpp checks that every count equals its formula
// here, for N = 1..4 and sizes N does not divide. Engines that cannot see their wire (MPI,
// NCCL, gloo) report these formulas as their traffic (engines/textbook_traffic.h).
// S is the tensor's bytes (for all_gather / reduce_scatter: one rank's block).
// With ranks on several nodes (NodeLayout: ranks_per_node L > 0), the all-reduce formulas
// also give the part that crosses nodes (Traffic::sent_inter_node, received_inter_node):
// the bytes exchanged with each peer, counted across when the peer's node is not ours, as
// p2p.cpp counts them. The other collectives' formulas give totals only.
// Read next: cost.cpp, then ring.cpp.
#pragma once
#include <cstdint>

#include "parallel/algorithms/collective_types.h"
#include "parallel/algorithms/server_plan.h"
#include "parallel/transport/transport.h"  // kSegmentBytes

namespace dplab::parallel {

// Ring reduce-scatter + all-gather over N chunks: 2(N-1)/N * S per rank when N divides S.
// Across nodes: the last rank of a node sends all of its bytes to the next node, the first
// receives all of its from the previous one (with L = 1, every rank does both).
Traffic ring_all_reduce_cost(int64_t bytes, int64_t elem_size, int rank, int size,
                             int ranks_per_node = 0);
// Recursive doubling over P = 2^floor(log2 N) ranks: log2(P)·S each way per rank; with
// E = N - P extra ranks folded in, ranks 2i < 2E move S each way and ranks 2i+1 < 2E
// (log2(P) + 1)·S (recursive_doubling.cpp).
// Across nodes: each swap, fold and unfold whose partner sits on another node.
Traffic recursive_doubling_cost(int64_t bytes, int rank, int size, int ranks_per_node = 0);
// Rabenseifner: 2(P-1)/P·S each way per rank when P divides S (the exact sum of the halves
// it sends, for any S); the fold adds S each way for the 2E paired ranks, as above.
Traffic halving_doubling_cost(int64_t bytes, int64_t elem_size, int rank, int size,
                              int ranks_per_node = 0);
// One-shot: every rank sends S to each of the N-1 others and receives theirs: (N-1)·S each way,
// (N-L)·S of it to and from other nodes.
Traffic one_shot_cost(int64_t bytes, int size, int ranks_per_node = 0);
// Hierarchical (hierarchical.cpp), K nodes of L ranks, local rank l on node k, shards c(i)
// of S cut in L: inside the node a reduce-scatter and an all-gather on the ring of L,
// 2S - c(l) - c(l+1) out and 2S - c(l-1) - c(l) in (2(L-1)/L·S when L divides S); across
// the nodes the ring of K on shard c(l): ring_all_reduce_cost(c(l), ..., k, K), all of it
// inter-node (2(K-1)/K·S/L). On one node (L = 0 or L = N) it is ring_all_reduce_cost.
Traffic hierarchical_all_reduce_cost(int64_t bytes, int64_t elem_size, int rank, int size,
                                     int ranks_per_node);
// What `algo` moves (Ring, Star, RecursiveDoubling, HalvingDoubling, OneShot, Hierarchical;
// not Auto), with the inter-node part where the header says.
Traffic all_reduce_cost(Algorithm algo, int64_t bytes, int64_t elem_size, int rank, int size,
                        int ranks_per_node = 0);
// Ring all-gather or reduce-scatter of N blocks of S bytes: N-1 blocks out and N-1 in.
Traffic ring_all_gather_cost(int64_t block_bytes, int size);
// Chain root -> root+1 -> ...: all but the last send S, all but the root receive S.
Traffic chain_broadcast_cost(int64_t bytes, int rank, int size, int root);
// Star: a leaf sends S and receives S; rank 0 receives (N-1)S and sends (N-1)S. Across
// nodes: a leaf off node 0 moves its S each way over its node's link, and rank 0 the
// (N-L)·S of those leaves.
Traffic star_all_reduce_cost(int64_t bytes, int rank, int size, int ranks_per_node = 0);
// Star into root (reduce, gather): each leaf sends S, the root receives (N-1)S.
Traffic star_reduce_cost(int64_t bytes, int rank, int size, int root);
// Star out of root (scatter): the root sends (N-1)S, each leaf receives S.
Traffic star_scatter_cost(int64_t bytes, int rank, int size, int root);
// Sharded parameter server (ps.cpp): P bytes cut into S shards, shard s of b_s bytes on
// server rank v_s, W workers (N co-located, N - S separate). Derivation, push: a worker
// holds a copy of every shard and must deliver each to its server, except the one it serves
// itself: it sends P - b_mine (P on a worker that serves nothing). Server s must gather b_s
// from every worker, its own copy aside: it receives (W - 1)·b_s co-located, W·b_s separate.
// Pull is push backwards (every server sends its shard to every other worker): sent and
// received swap. Per rank per step, push + pull:
//   co-located S = N, b_s = P/N: sends and receives 2(N-1)/N·P, the ring all-reduce's bytes;
//   co-located S = 1: the server sends and receives (N-1)·P, a worker P: the star's;
//   separate: a worker moves P each way, server s 2·W·b_s = 2·W·P/S in all (its link is the
//   bottleneck unless S is about W).
Traffic ps_push_cost(const ServerPlan& plan, int64_t elem_size, int rank, int size);
Traffic ps_pull_cost(const ServerPlan& plan, int64_t elem_size, int rank, int size);
// One message of S bytes.
Traffic send_cost(int64_t bytes);
Traffic recv_cost(int64_t bytes);

// ---- time: the alpha-beta(-gamma) model, and the choice `auto` makes with it ----
// A step in which a rank sends m bytes to a peer and takes m in costs alpha + m·beta: alpha
// the latency of one hand-off (the flag, the wake-up), beta the seconds per byte of moving
// it (the copy into a slot and out of it); adding r received bytes into the buffer costs
// r·gamma more (Thakur, Rabenseifner and Gropp's gamma: the reduction's arithmetic and
// memory traffic). `cores` is how many ranks can run at once; with more ranks than cores
// they take turns (below), and a hand-off then often waits for the scheduler: `wake`.
struct LinkCost {
  double alpha = 0;  // seconds per step
  double beta = 0;   // seconds per byte sent
  double gamma = 0;  // seconds per byte reduced
  int cores = 1;     // CPUs the ranks share (transport/mailbox_transport.h's cpu_cores())
  double wake = 0;   // seconds a hand-off takes when the rank it waits for has no core
  double segment = kSegmentBytes;  // bytes per hand-off: the transport's slot
  // true: the bytes cross a wire (a NIC, an emulated link's sleep), which moves them while
  // the cores do other work, so bytes·beta is on the critical path but not in the cores'
  // bound; false: the cores copy them (shared memory)
  bool wire = false;
};
// dplab's shm transport on the 2-core machines of this project (cost.cpp has the values):
// bench_allreduce fits alpha and beta + gamma from its recursive-doubling rows at N = 2, and
// estimates wake, the time for a rank to be woken and get a core back, from the one-shot rows
// where ranks outnumber cores (its fits: docs/measurements/allreduce_cpu.md). Only their
// ratios decide the choice, and only near the crossover sizes.
LinkCost shm_link_cost(int cores);

// Seconds of one all-reduce of `bytes` over n ranks with `algo` (not Auto, not
// Hierarchical: that is the two-level model's below; on one level it is the ring): the larger of
// two bounds, plus the wake-ups:
//   the critical path: the busiest rank's steps·alpha + bytes·beta + reduced·gamma, as if
//     every rank had a core of its own (ring 2(N-1)·alpha + 2(N-1)/N·S·beta + (N-1)/N·S·gamma;
//     recursive doubling log2(P)·(alpha + S·beta + S·gamma); halving-doubling
//     2·log2(P)·alpha + 2(P-1)/P·S·beta + (P-1)/P·S·gamma; the fold adds 2·alpha + 2·S·beta
//     + S·gamma; star 2(N-1)·(alpha + S·beta) + (N-1)·S·gamma through rank 0; one-shot
//     (N-1)·alpha + (N-1)·S·(beta + gamma): one step, but a wait on each of N-1 peers);
//   the cores: the work of all ranks together divided by `cores`: N ranks on C < N cores
//     time-share, so an algorithm in which every rank is busy every step (the ring) slows
//     by N/C, while one whose ranks idle (the star's leaves, the fold's waiting ranks)
//     leaves its cores to the others (on a `wire` link the bytes' time is the wire's, not
//     the cores': only the hand-offs and the reduction count here);
//   the wake-ups: a hand-off (one segment of a step) in which more ranks must run than
//     there are cores waits, in the measured cases, for the scheduler to bring back a rank
//     that has no core: `wake` each. The ring at N = 3 on 2 cores pays it 4 times per
//     segment of S/3, recursive doubling's fold keeps its core steps to P = 2 ranks and pays
//     nothing there, the one-shot pays N-1 per segment (a wait on each peer); and whenever
//     N > C every rank must get a core at least once per call: one wake-up at least.
double all_reduce_seconds(Algorithm algo, int n, double bytes, const LinkCost& link);
// The fastest of ring, recursive doubling, halving-doubling and one-shot by
// all_reduce_seconds (ties: the first in that order). The star is never chosen: it is the
// parameter-server example.
Algorithm choose_all_reduce(int n, double bytes, const LinkCost& link);

// ---- two levels: ranks on nodes ----
// Ranks of one node reach each other over `intra` (shared memory, NVLink), ranks of two
// nodes over `inter` (the NIC). On one machine with pretend nodes both are the same link.
struct NodeLinks {
  int ranks_per_node = 0;  // L (NodeLayout); 0: one node
  LinkCost intra, inter;
};
// The three stages of the hierarchical all-reduce of S bytes on K nodes of L ranks, each
// the larger of its critical path and its work over the cores (as all_reduce_seconds):
//   reduce-scatter  (L-1)·(alpha_1 + S/L·beta_1 + S/L·gamma)        on the intra link
//   between nodes   all_reduce_seconds(between, K, S/L, inter)      L rings at once
//   all-gather      (L-1)·(alpha_1 + S/L·beta_1)                    on the intra link
// so 2(L-1)·alpha_1 + 2(L-1)/L·S·beta_1 inside and, with a ring between the nodes,
// 2(K-1)·alpha_2 + 2(K-1)/K·S/L·beta_2 across: per rank S/L of the node's S crosses, and
// the node's L ranks together put 2(K-1)/K·S through its link. Time-sharing: every stage
// keeps all N ranks busy, so with C < N cores each takes N/C times its path; a crowded
// hand-off costs `wake` as in all_reduce_seconds. cost_topology.cpp's cluster model calls
// this with a core per rank and the NIC share folded into inter.beta.
struct HierarchicalSeconds {
  double reduce_scatter = 0, between_nodes = 0, all_gather = 0;
  double total() const { return reduce_scatter + between_nodes + all_gather; }
};
HierarchicalSeconds hierarchical_all_reduce_seconds(int nodes, int per_node, double bytes,
                                                    const LinkCost& intra, const LinkCost& inter,
                                                    Algorithm between = Algorithm::Ring);
// An all-reduce over n ranks on nodes of links.ranks_per_node: hierarchical by its stages;
// a flat algorithm across more than one node is paced by its slower link, the larger of its
// time on each (exact for the ring and the one-shot, whose every step crosses a node; an
// upper bound for recursive doubling and halving-doubling, whose short steps stay inside).
double all_reduce_seconds(Algorithm algo, int n, double bytes, const NodeLinks& links);
// As choose_all_reduce on one node (intra); with more than one node of more than one rank,
// hierarchical joins the candidates (after the others: it wins ties last).
Algorithm choose_all_reduce(int n, double bytes, const NodeLinks& links);

}  // namespace dplab::parallel
