// collectives.h: the algorithms, on raw host buffers, over a Transport (internal header).
// process_group.cpp turns tensors into Blocks, calls these, and records the Traffic.
// ring.cpp: all-reduce, reduce-scatter, all-gather, broadcast (a chain).
// star.cpp: the parameter-server all-reduce, reduce, gather, scatter, barrier, send/recv.
// Read next: ring.cpp.
#pragma once
#include <cstddef>
#include <cstdint>
#include <vector>

#include "framework/backend/backend.h"
#include "framework/tensor/dtype.h"
#include "parallel/transport/transport.h"

namespace dplab::parallel {

struct Traffic {
  int64_t sent = 0;      // bytes this rank copied into peers' slots
  int64_t received = 0;  // bytes this rank read out of slots peers filled
};

// A contiguous run of elements in host memory.
struct Block {
  std::byte* data = nullptr;
  int64_t elems = 0;
};

// What a collective needs besides its buffers: the link, the element type, the reduction
// (dplab::ReduceOp: Sum, Max or Min; Avg is a Sum followed by a scale) and the counters.
struct Ctx {
  Transport& tr;
  DType dtype;
  dplab::ReduceOp op;
  Traffic& traffic;
  std::size_t elem() const { return element_size(dtype); }
  int64_t segment_elems() const { return static_cast<int64_t>(tr.segment_bytes() / elem()); }
};

// ---- point to point, segment by segment (star.cpp) ----
void send_block(Ctx& c, int peer, const Block& b);
void recv_copy(Ctx& c, int peer, const Block& b);
void recv_reduce(Ctx& c, int peer, const Block& b);

// ---- ring.cpp ----
// blocks[i] is chunk i; all ranks pass the same chunk sizes. After it, rank r holds the
// reduced chunk (r + 1 + shift) mod N.
void ring_reduce_scatter(Ctx& c, std::vector<Block>& blocks, int shift);
// Rank r starts holding chunk `owned(r)` = (r + 1 + shift) mod N; all ranks end with all.
void ring_all_gather(Ctx& c, std::vector<Block>& blocks, int shift);
void ring_all_reduce(Ctx& c, Block buffer);
void chain_broadcast(Ctx& c, Block buffer, int root);

// ---- star.cpp ----
void star_all_reduce(Ctx& c, Block buffer);
void star_reduce(Ctx& c, Block buffer, int root);
void star_gather(Ctx& c, std::vector<Block>& outputs, int root);   // outputs[root] filled
void star_scatter(Ctx& c, std::vector<Block>& inputs, Block output, int root);
void star_barrier(Ctx& c);

}  // namespace dplab::parallel
