/*
 * one_shot.cpp: the all-reduce in one step: every rank sends its whole buffer to every other
 * rank, and every rank adds up all N buffers itself. NCCL calls it the one-shot all-reduce;
 * OpenMPI's shared-memory collectives do the same for small messages.
 *
 * The buffer moves in *segments* of one transport slot (p2p.cpp). For each segment k, rank r
 * sends its segment k to each peer, then takes segment k of every rank in rank order
 * 0, 1, ..., N-1 and adds them into a *scratch* segment: x0 + x1 + ... + x(N-1), one order
 * that every rank shares, so every rank ends with the same bits. Then the scratch goes back
 * into r's buffer. Each link holds several segments (4 on shm), so a rank can send its
 * segment k+1 before a slow peer has taken k.
 *
 *   N = 3:  0 -> 1, 0 -> 2, 1 -> 0, 1 -> 2, 2 -> 0, 2 -> 1, all at once; then each adds 3
 *
 * Cost: one step: (N-1)·S sent and (N-1)·S received per rank, (N-1)·S reduced. That is
 * (N-1)/2 times the ring's bytes, so it only pays for small messages. Its one step still
 * holds N-1 waits, one on each peer, against the ring's 2(N-1) steps and recursive
 * doubling's log2 P. It wins where N is not a power of two and every rank has a core: at
 * N = 3, 2 waits against the fold's 3 steps. When ranks outnumber cores each wait may be a
 * trip through the scheduler, and recursive doubling's log2 P waits are fewer from N = 4 on.
 * (The formulas: cost.cpp.)
 * Read next: cost.cpp (when `auto` picks which algorithm).
 */
#include <algorithm>

#include "framework/error.h"
#include "parallel/algorithms/collectives.h"

namespace dplab::parallel {

namespace {

// One segment of scratch memory on the exchange's device (host or GPU), freed at scope end.
class Scratch {
 public:
  Scratch(const Exchange& ex, std::size_t bytes)
      : ex_(ex), bytes_(bytes),
        data_(static_cast<std::byte*>(ex.backend().allocate(ex.device, bytes))) {}
  ~Scratch() { ex_.backend().deallocate(ex_.device, data_, bytes_); }
  Scratch(const Scratch&) = delete;
  Scratch& operator=(const Scratch&) = delete;
  std::byte* data() const { return data_; }

 private:
  const Exchange& ex_;
  std::size_t bytes_;
  std::byte* data_;
};

}  // namespace

void one_shot_all_reduce(Exchange& ex, Block buffer) {
  const int n = ex.tr.size(), r = ex.tr.rank();
  if (n == 1 || buffer.elems == 0) return;
  const int64_t segments = segment_count(ex, buffer), seg = ex.segment_elems();
  Scratch sum(ex, static_cast<std::size_t>(std::min(seg, buffer.elems)) * ex.elem());
  for (int64_t k = 0; k < segments; ++k) {
    // segment k of my buffer out to every peer
    for (int p = 1; p < n; ++p) send_segment_of(ex, (r + p) % n, buffer, k);
    // sum = x0 + x1 + ... + x(N-1), segment k, in rank order (mine from my own buffer)
    const int64_t len = std::min(seg, buffer.elems - k * seg);
    const std::size_t bytes = static_cast<std::size_t>(len) * ex.elem();
    Block mine{buffer.data + k * seg * ex.elem(), len};
    Block one_segment{sum.data(), len};  // a peer's segment k is segment 0 of this block
    for (int q = 0; q < n; ++q) {
      if (q == r && q == 0) ex.copy(sum.data(), mine.data, bytes);
      else if (q == r) ex.reduce(sum.data(), mine.data, bytes);
      else recv_segment_of(ex, q, one_segment, 0, q == 0 ? Into::Copy : Into::Reduce);
    }
    ex.copy(mine.data, sum.data(), bytes);  // the result of segment k, the same on every rank
  }
}

}  // namespace dplab::parallel
