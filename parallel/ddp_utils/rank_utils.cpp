// rank_utils.cpp: rank-aware logging setup, per-rank seeds and the zero_first barrier.
// Read next: ddp_checkpoint.cpp (rank 0 writes, then a barrier: the same pattern).
#include "parallel/ddp_utils/rank_utils.h"

#include <exception>
#include <string>

#include "framework/autograd/grad_mode.h"
#include "framework/error.h"
#include "framework/io/log.h"
#include "framework/tensor/random.h"

namespace dplab::parallel {

void setup_rank_logging(int rank) {
  DPLAB_CHECK(rank >= 0, "setup_rank_logging: expected a rank >= 0, got {}", rank);
  set_log_prefix("[rank " + std::to_string(rank) + "] ");
  set_log_rank(rank);
}

void reset_rank_logging() {
  set_log_prefix("");
  set_log_rank(-1);
}

uint64_t per_rank_seed(uint64_t base, int rank) {
  DPLAB_CHECK(rank >= 0, "per_rank_seed: expected a rank >= 0, got {}", rank);
  return base + static_cast<uint64_t>(rank);
}

void seed_per_rank(ProcessGroup& pg, uint64_t base) { manual_seed(per_rank_seed(base, pg.rank())); }

void broadcast_tensors(ProcessGroup& pg, const std::vector<Tensor>& tensors, int root) {
  NoGradGuard no_grad;
  for (const Tensor& t : tensors) {
    if (t.numel() == 0) continue;
    Tensor d = t.detach();  // shares storage: the broadcast writes into the caller's tensor
    pg.broadcast(d, root);
  }
}

ZeroFirst::ZeroFirst(ProcessGroup& pg) : pg_(pg), uncaught_at_entry_(std::uncaught_exceptions()) {
  if (pg_.rank() != 0) pg_.barrier();  // wait here until rank 0 has finished the body
}

ZeroFirst::~ZeroFirst() noexcept(false) {
  if (pg_.rank() != 0) return;
  // Unwinding from a failed body: throwing again would terminate, and releasing the others
  // would let them read what rank 0 failed to prepare. Leave them to time out instead.
  if (std::uncaught_exceptions() > uncaught_at_entry_) return;
  pg_.barrier();
}

}  // namespace dplab::parallel
