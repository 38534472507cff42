// p2p.cpp: point to point over the transport, the bricks ring.cpp and star.cpp are built of.
// A block of elements moves in segments of at most one transport slot (segment_bytes():
// 128 KiB on shm and thread, 4 MiB on cuda_ipc); the receiver checks each segment's size,
// so ranks that pass tensors of different sizes get an error, not garbage, and counts it.
// send_recv streams one block out while another streams in, segment by segment interleaved:
// the step of the ring and of the recursive algorithms.
// Cost: a block of S bytes is S sent by one rank and S received by the other (cost.h);
// when the two sit on different nodes, it is also counted as inter-node bytes on both.
// Read next: ring.cpp.
#include <algorithm>

#include "framework/error.h"
#include "parallel/algorithms/collectives.h"

namespace dplab::parallel {

int64_t segment_count(const Exchange& ex, const Block& b) {
  const int64_t seg = ex.segment_elems();
  return (b.elems + seg - 1) / seg;
}

void send_segment_of(Exchange& ex, int peer, const Block& b, int64_t k) {
  const int64_t seg = ex.segment_elems();
  const int64_t len = std::min(seg, b.elems - k * seg);
  const std::size_t es = ex.elem();
  ex.tr.send_segment(peer, b.data + k * seg * es, len * es);
  ex.traffic.sent += len * static_cast<int64_t>(es);
  if (ex.crosses_nodes(peer)) ex.traffic.sent_inter_node += len * static_cast<int64_t>(es);
}

void recv_segment_of(Exchange& ex, int peer, const Block& b, int64_t k, Into into) {
  const int64_t seg = ex.segment_elems();
  const std::size_t es = ex.elem();
  const int64_t expect = std::min(seg, b.elems - k * seg) * static_cast<int64_t>(es);
  std::byte* dst = b.data + k * seg * es;
  ex.tr.recv_segment(peer, [&](const void* data, std::size_t bytes) {
    if (static_cast<int64_t>(bytes) != expect)
      throw CommError(fmt::format("rank {}: got a {}-byte segment from rank {}, expected {}: "
                                  "do all ranks pass tensors of one size and dtype?",
                                  ex.tr.rank(), bytes, peer, expect));
    if (into == Into::Reduce) ex.reduce(dst, data, bytes);  // Eigen or a CUDA kernel
    else ex.copy(dst, data, bytes);
    ex.traffic.received += static_cast<int64_t>(bytes);
    if (ex.crosses_nodes(peer)) ex.traffic.received_inter_node += static_cast<int64_t>(bytes);
  });
}

void send_recv(Exchange& ex, int to, const Block& out, int from, const Block& in, Into into) {
  const int64_t out_segs = segment_count(ex, out), in_segs = segment_count(ex, in);
  for (int64_t k = 0; k < std::max(out_segs, in_segs); ++k) {
    // segment k out first: when out and in overlap (an exchange in place), it leaves before
    // the peer's segment k lands on it; and two ranks that send to each other never wait
    // on each other, since a link holds kSlots segments
    if (k < out_segs) send_segment_of(ex, to, out, k);
    if (k < in_segs) recv_segment_of(ex, from, in, k, into);
  }
}

void send_block(Exchange& ex, int peer, const Block& b) {
  for (int64_t k = 0; k < segment_count(ex, b); ++k) send_segment_of(ex, peer, b, k);
}
void recv_copy(Exchange& ex, int peer, const Block& b) {
  for (int64_t k = 0; k < segment_count(ex, b); ++k) recv_segment_of(ex, peer, b, k, Into::Copy);
}
void recv_reduce(Exchange& ex, int peer, const Block& b) {
  for (int64_t k = 0; k < segment_count(ex, b); ++k) recv_segment_of(ex, peer, b, k, Into::Reduce);
}

}  // namespace dplab::parallel
