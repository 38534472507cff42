// star.cpp: the parameter-server patterns, on the same transport as the ring.
// All-reduce as a star: every rank streams its buffer to rank 0, which reduces the N-1
// copies into its own, then streams the result back to each. Rank 0 takes the leaves one
// after another, in the order it answers them (1, 2, ...), as a server serves requests:
// the leaf answered first starts its next step first, and its next push comes in while
// rank 0 still sends to the others (over links: tutorials/23_will_it_scale.md, "one master").
// Cost: 2 phases of (N-1) transfers of S bytes through rank 0. A leaf rank sends S and
// receives S; rank 0 receives (N-1)S and sends (N-1)S: (N-1)x a leaf's traffic, all through
// one link-end, which is why the ring scales and the star does not.
// Also here: reduce, gather, scatter (the star to or from any root), barrier; the blocks
// move by p2p.cpp. The formulas: cost.cpp.
// Read next: engines/dplab_engine.cpp.
#include "framework/error.h"
#include "parallel/algorithms/collectives.h"

namespace dplab::parallel {

void star_reduce(Exchange& ex, Block buffer, int root) {
  const int n = ex.tr.size(), r = ex.tr.rank();
  if (r != root) {
    send_block(ex, root, buffer);  // leaf: my whole buffer to the root
    return;
  }
  // root: each leaf's copy into mine, one leaf after another, as a server takes requests
  for (int p = 0; p < n; ++p)
    if (p != root) recv_reduce(ex, p, buffer);
}

void star_all_reduce(Exchange& ex, Block buffer) {
  const int n = ex.tr.size(), r = ex.tr.rank();
  if (n == 1 || buffer.elems == 0) return;
  star_reduce(ex, buffer, 0);  // phase 1: everything to rank 0, reduced there
  if (r != 0) {
    recv_copy(ex, 0, buffer);  // phase 2: the result back from rank 0
    return;
  }
  for (int p = 1; p < n; ++p) send_block(ex, p, buffer);
}

void star_gather(Exchange& ex, std::vector<Block>& outputs, int root) {
  const int n = ex.tr.size(), r = ex.tr.rank();
  if (r != root) {
    send_block(ex, root, outputs[r]);
    return;
  }
  for (int p = 0; p < n; ++p)
    if (p != root) recv_copy(ex, p, outputs[p]);
}

void star_scatter(Exchange& ex, std::vector<Block>& inputs, Block output, int root) {
  const int n = ex.tr.size(), r = ex.tr.rank();
  if (r != root) {
    recv_copy(ex, root, output);
    return;
  }
  for (int p = 0; p < n; ++p)
    if (p != root) send_block(ex, p, inputs[p]);
  ex.copy(output.data, inputs[root].data, output.elems * ex.elem());
}

// Every rank sends an empty token to rank 0; rank 0 answers each once all have arrived.
void star_barrier(Exchange& ex) {
  const int n = ex.tr.size(), r = ex.tr.rank();
  auto ignore = [](const void*, std::size_t) {};
  if (r != 0) {
    ex.tr.send_segment(0, nullptr, 0);
    ex.tr.recv_segment(0, ignore);
    return;
  }
  for (int p = 1; p < n; ++p) ex.tr.recv_segment(p, ignore);
  for (int p = 1; p < n; ++p) ex.tr.send_segment(p, nullptr, 0);
}

}  // namespace dplab::parallel
