// star.cpp: the parameter-server patterns, on the same transport as the ring.
// All-reduce as a star: every rank streams its buffer to rank 0, which reduces the N-1
// copies into its own, then streams the result back to each.
// Cost: 2 phases of (N-1) transfers of S bytes through rank 0. A leaf rank sends S and
// receives S; rank 0 receives (N-1)S and sends (N-1)S: (N-1)x a leaf's traffic, all through
// one link-end, which is why the ring scales and the star does not.
// Also here: reduce, gather, scatter (the star to or from any root), barrier; the blocks
// move by p2p.cpp. The formulas: cost.cpp.
// Read next: engines/dplab_engine.cpp.
#include "framework/error.h"
#include "parallel/algorithms/collectives.h"

namespace dplab::parallel {

void star_reduce(Ctx& c, Block buffer, int root) {
  const int n = c.tr.size(), r = c.tr.rank();
  if (r != root) {
    send_block(c, root, buffer);  // leaf: my whole buffer to the root
    return;
  }
  // root: segment by segment, reduce each leaf's copy into mine (leaves stream in parallel)
  const int64_t seg = c.segment_elems();
  for (int64_t off = 0; off < buffer.elems; off += seg) {
    Block part{buffer.data + off * c.elem(), std::min(seg, buffer.elems - off)};
    for (int p = 0; p < n; ++p)
      if (p != root) recv_reduce(c, p, part);
  }
}

void star_all_reduce(Ctx& c, Block buffer) {
  const int n = c.tr.size(), r = c.tr.rank();
  if (n == 1 || buffer.elems == 0) return;
  star_reduce(c, buffer, 0);  // phase 1: everything to rank 0, reduced there
  if (r != 0) {
    recv_copy(c, 0, buffer);  // phase 2: the result back from rank 0
    return;
  }
  const int64_t seg = c.segment_elems();
  for (int64_t off = 0; off < buffer.elems; off += seg) {
    Block part{buffer.data + off * c.elem(), std::min(seg, buffer.elems - off)};
    for (int p = 1; p < n; ++p) send_block(c, p, part);
  }
}

void star_gather(Ctx& c, std::vector<Block>& outputs, int root) {
  const int n = c.tr.size(), r = c.tr.rank();
  if (r != root) {
    send_block(c, root, outputs[r]);
    return;
  }
  for (int p = 0; p < n; ++p)
    if (p != root) recv_copy(c, p, outputs[p]);
}

void star_scatter(Ctx& c, std::vector<Block>& inputs, Block output, int root) {
  const int n = c.tr.size(), r = c.tr.rank();
  if (r != root) {
    recv_copy(c, root, output);
    return;
  }
  for (int p = 0; p < n; ++p)
    if (p != root) send_block(c, p, inputs[p]);
  c.copy(output.data, inputs[root].data, output.elems * c.elem());
}

// Every rank sends an empty token to rank 0; rank 0 answers each once all have arrived.
void star_barrier(Ctx& c) {
  const int n = c.tr.size(), r = c.tr.rank();
  auto ignore = [](const void*, std::size_t) {};
  if (r != 0) {
    c.tr.send_segment(0, nullptr, 0);
    c.tr.recv_segment(0, ignore);
    return;
  }
  for (int p = 1; p < n; ++p) c.tr.recv_segment(p, ignore);
  for (int p = 1; p < n; ++p) c.tr.send_segment(p, nullptr, 0);
}

}  // namespace dplab::parallel
