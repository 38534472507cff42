// collectives.h: the algorithms, on raw buffers of one device, over a Transport (internal
// header). dplab's own engine (engines/dplab_engine.cpp) turns tensors into Blocks, calls
// these, and reports the Traffic they count to the ProcessGroup's counters.
// The buffers and the slots a transport hands to recv_segment's use() are host memory (shm,
// thread) or GPU memory (cuda_ipc); the algorithms never look: they add and copy with the
// Exchange's device backend, so the ring and the star are written once for both.
// p2p.cpp: one block to or from one peer, segment by segment (the size check and the
//           traffic count live there, once).
// ring.cpp: all-reduce, reduce-scatter, all-gather, broadcast (a chain).
// recursive_doubling.cpp: all-reduce in log2 N exchanges (small messages), and the fold
//           that takes any N to a power of two.
// halving_doubling.cpp: Rabenseifner's all-reduce, recursive halving + doubling (medium).
// one_shot.cpp: all-reduce in one step, every rank to every rank (small messages).
// hierarchical.cpp: all-reduce in two levels, inside the nodes and across them, with the
//           ring's pieces on sub-rings (a SubTransport: some ranks of a transport).
// star.cpp: the parameter-server all-reduce, reduce, gather, scatter, barrier.
// ps.cpp: the sharded parameter server's push (gradients to their shard's server) and pull
//           (updated shards back to every worker).
// What each moves per rank: cost.h.
// Read next: ring.cpp.
#pragma once
#include <cstddef>
#include <cstdint>
#include <functional>
#include <span>
#include <vector>

#include "framework/backend/backend.h"
#include "framework/tensor/dtype.h"
#include "parallel/algorithms/collective_types.h"
#include "parallel/algorithms/server_plan.h"
#include "parallel/transport/transport.h"

namespace dplab::parallel {

// A contiguous run of elements in the memory of the Exchange's device.
struct Block {
  std::byte* data = nullptr;
  int64_t elems = 0;
};

// One exchange among the ranks: what an algorithm needs besides its buffers. The transport
// that links the ranks, the element type, the reduction (the kernel's dplab::ReduceKind:
// Sum, Max or Min; Avg is a Sum followed by a scale), the counters, and the device the
// buffers live on, whose backend adds a received slot into a buffer (the reduce_into kernel:
// Eigen on the CPU, a CUDA kernel on the GPU) or copies it out. node_of[i] is the node of
// the exchange's rank i (empty: all on one node): p2p.cpp counts the bytes to and from a
// peer on another node apart, and hierarchical.cpp reads the layout from it.
struct Exchange {
  Transport& tr;
  DType dtype;
  dplab::ReduceKind op;
  Traffic& traffic;
  Device device = Device(DeviceKind::CPU);
  std::span<const int> node_of = {};
  std::size_t elem() const { return element_size(dtype); }
  bool crosses_nodes(int peer) const {
    return !node_of.empty() && node_of[peer] != node_of[tr.rank()];
  }
  int64_t segment_elems() const { return static_cast<int64_t>(tr.segment_bytes() / elem()); }
  Backend& backend() const { return backend_for(device); }
  // dst <- src, n bytes, both on `device` (memmove on the CPU, an async D2D copy on CUDA)
  void copy(void* dst, const void* src, std::size_t n) const {
    if (n) backend().copy_device(device, dst, device, src, n);
  }
  // dst[i] = dst[i] op src[i] over n bytes of dtype
  void reduce(void* dst, const void* src, std::size_t n) const {
    backend().reduce_into(op, dtype, dst, src, static_cast<int64_t>(n / elem()));
  }
};

// ---- p2p.cpp: point to point, in segments of at most one transport slot ----
int64_t segment_count(const Exchange& ex, const Block& b);
// Segment k of b into a slot of the link to peer (counted as sent).
void send_segment_of(Exchange& ex, int peer, const Block& b, int64_t k);
// Waits for peer's next segment, checks it is segment k of b in size, and copies it into b
// or reduces it into b (counted as received).
enum class Into { Copy, Reduce };
void recv_segment_of(Exchange& ex, int peer, const Block& b, int64_t k, Into into);
// Whole blocks: every segment in order.
void send_block(Exchange& ex, int peer, const Block& b);
void recv_copy(Exchange& ex, int peer, const Block& b);
void recv_reduce(Exchange& ex, int peer, const Block& b);
// out to peer `to` while in arrives from peer `from` (the same peer in an exchange), segment
// by segment interleaved; in is reduced into or overwritten.
void send_recv(Exchange& ex, int to, const Block& out, int from, const Block& in, Into into);

// ---- ring.cpp ----
// blocks[i] is chunk i; all ranks pass the same chunk sizes. After it, rank r holds the
// reduced chunk (r + 1 + shift) mod N.
void ring_reduce_scatter(Exchange& ex, std::vector<Block>& blocks, int shift);
// Rank r starts holding chunk `owned(r)` = (r + 1 + shift) mod N; all ranks end with all.
void ring_all_gather(Exchange& ex, std::vector<Block>& blocks, int shift);
void ring_all_reduce(Exchange& ex, Block buffer);
void chain_broadcast(Exchange& ex, Block buffer, int root);

// ---- recursive_doubling.cpp, halving_doubling.cpp: log2 N steps, any N ----
// The largest power of two <= n: the ranks the recursive algorithms run on after the fold.
int power_of_two_below(int n);
// Where rank r sits after the fold of the non-power-of-two ranks: its virtual rank in
// [0, P), or -1 for a rank that handed its buffer over and waits for the result.
int folded_rank(int r, int n);
int unfolded_rank(int v, int n);  // the real rank of virtual rank v
// The fold around a power-of-two algorithm: pairs fold in, `core(v, p)` runs on the P ranks
// left (v = this rank's virtual rank), pairs unfold; a folded-away rank just waits.
void with_fold(Exchange& ex, Block buffer, const std::function<void(int v, int p)>& core);
void recursive_doubling_all_reduce(Exchange& ex, Block buffer);
void halving_doubling_all_reduce(Exchange& ex, Block buffer);

// ---- one_shot.cpp ----
void one_shot_all_reduce(Exchange& ex, Block buffer);

// ---- hierarchical.cpp ----
// Reduce-scatter inside each node, all-reduce of each local shard across the nodes (a ring
// of the ranks with one local rank), all-gather inside the node; ex.node_of says where each
// rank sits (every node must hold as many ranks). On one node it is ring_all_reduce.
void hierarchical_all_reduce(Exchange& ex, Block buffer);

// ---- star.cpp ----
void star_all_reduce(Exchange& ex, Block buffer);
void star_reduce(Exchange& ex, Block buffer, int root);
void star_gather(Exchange& ex, std::vector<Block>& outputs, int root);  // outputs[root] filled
void star_scatter(Exchange& ex, std::vector<Block>& inputs, Block output, int root);
void star_barrier(Exchange& ex);

// ---- ps.cpp: buffer holds plan.buffer_elems(rank) elements (all P on a worker) ----
// Each server's shard becomes the sum of the workers' copies of it (the others' buffers are
// only read).
void ps_push(Exchange& ex, Block buffer, const ServerPlan& plan);
// Every worker's copy of each shard becomes its server's (the servers' buffers are only read).
void ps_pull(Exchange& ex, Block buffer, const ServerPlan& plan);

}  // namespace dplab::parallel
