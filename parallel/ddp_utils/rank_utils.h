// rank_utils.h: the small habits that keep N copies of one program civil.
//   setup_rank_logging(rank);          // info on rank 0 only; warnings/errors on every rank
//   { ZeroFirst z(pg); prepare(); }    // rank 0 prepares first, the others wait, then reuse
//   manual_seed(per_rank_seed(seed, rank));   // augmentation/dropout differ per rank
//   broadcast_tensors(pg, model.parameters(), 0);  // everyone starts from root's values
// Model initialisation needs no per-rank care: DDP broadcasts rank 0's parameters at
// construction, so each rank may seed however it likes for its own randomness.
// Read next: ddp_checkpoint.h; tutorials/13_seeds_logging_barriers.cpp shows all three.
#pragma once
#include <cstdint>
#include <vector>

#include "parallel/comm/process_group.h"

namespace dplab::parallel {

// set_log_prefix("[rank r] ") and set_log_rank(r) (io/log.h): debug and info lines print
// on rank 0 only, warnings and errors on every rank, each tagged with its rank.
void setup_rank_logging(int rank);
// Back to one process: no prefix, no rank filter.
void reset_rank_logging();

// The seed a rank should use for its OWN randomness (data augmentation, dropout masks):
// base + rank. With one seed everywhere every rank draws the same "random" crops and noise,
// so R ranks see R copies of one augmented batch instead of R different ones.
uint64_t per_rank_seed(uint64_t base, int rank);
// manual_seed(per_rank_seed(base, pg.rank())) on the global generator.
void seed_per_rank(ProcessGroup& pg, uint64_t base);

// Root's values into every rank's tensors, in place (each is broadcast through a detached
// view of its storage, under no_grad), skipping empty ones. DDP's construction and
// buffer sync and hvd::broadcast_parameters use it. Cost: one broadcast per tensor.
void broadcast_tensors(ProcessGroup& pg, const std::vector<Tensor>& tensors, int root);

// torch_distributed_zero_first: inside the scope rank 0 runs first, alone; the others wait
// at a barrier and run the scope's body after rank 0 has left it (e.g. rank 0 downloads or
// preprocesses a dataset into a cache, the others then find it there).
//   constructor: ranks != 0 wait at a barrier;  destructor: rank 0 joins that barrier.
// Cost: one barrier. If rank 0's body throws, its destructor does NOT release the others
// (they would run on a half-prepared cache): they end in CommError at the group's timeout.
class ZeroFirst {
 public:
  explicit ZeroFirst(ProcessGroup& pg);
  ~ZeroFirst() noexcept(false);
  ZeroFirst(const ZeroFirst&) = delete;
  ZeroFirst& operator=(const ZeroFirst&) = delete;

 private:
  ProcessGroup& pg_;
  int uncaught_at_entry_;
};

}  // namespace dplab::parallel
